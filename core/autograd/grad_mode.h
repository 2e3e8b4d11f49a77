// core/autograd/grad_mode.h: whether ops record backward nodes on this thread.
#pragma once

namespace ringgrad {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Turns recording off for a scope (inference, optimizer updates), then restores the previous mode:
//   { NoGradGuard no_grad; y = model(x); }   // y.requires_grad() == false
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace ringgrad
