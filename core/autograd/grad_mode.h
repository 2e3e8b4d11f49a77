/// @file
/// core/autograd/grad_mode.h: whether ops record backward nodes on this thread.
#pragma once

namespace ringgrad {

/// Whether ops record the autograd graph, per thread (on by default; PyTorch's grad mode).
struct GradMode {
  static bool is_enabled();               ///< on this thread
  static void set_enabled(bool enabled);  ///< on this thread; prefer NoGradGuard
};

/// Turns recording off for a scope (inference, optimizer updates), then restores the previous mode:
/// @code
///   { NoGradGuard no_grad; y = model(x); }   // y.requires_grad() == false
/// @endcode
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
