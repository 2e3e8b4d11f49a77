// parallel/parallel_apply.cpp: fan out to the device workers, wait, report failures by device.
#include <ringgrad/parallel/parallel_apply.h>

#include <exception>
#include <future>

#include <ringgrad/core/autograd/grad_mode.h>

namespace ringgrad {
namespace parallel {
namespace {

// Grad mode is per thread; a replica's forward must record its graph exactly when the caller's would.
struct GradModeOnThisThread {
  explicit GradModeOnThisThread(bool enabled) : previous(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeOnThisThread() { GradMode::set_enabled(previous); }
  bool previous;
};

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

std::vector<Interval> run_on_devices(const std::vector<Device>& devices, const std::function<void(size_t)>& task,
                                     const char* op) {
  const bool grad_enabled = GradMode::is_enabled();
  std::vector<Interval> intervals(devices.size());
  std::vector<std::exception_ptr> errors(devices.size());
  std::vector<std::future<void>> done;
  for (size_t i = 0; i < devices.size(); ++i) {
    check_device(devices[i], op);
    intervals[i].device = devices[i];
    // The task catches its own exception so that every future completes normally: a failure to
    // *post* (run_on throwing) is then the only thing that can escape this loop, and it escapes
    // before any task that references this frame can outlive it -- the loop below waits for those.
    try {
      done.push_back(run_on(devices[i], [&, i] {
        GradModeOnThisThread grad_mode(grad_enabled);
        intervals[i].start = std::chrono::steady_clock::now();
        try {
          task(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
        intervals[i].end = std::chrono::steady_clock::now();
      }));
    } catch (...) {
      for (auto& f : done) f.wait();
      throw;
    }
  }
  for (auto& f : done) f.get();
  for (size_t i = 0; i < devices.size(); ++i)
    if (errors[i])
      throw Error(detail::str(op, ": replica ", i, " on ", devices[i], " failed: ", message_of(errors[i])));
  return intervals;
}

}  // namespace parallel
}  // namespace ringgrad
