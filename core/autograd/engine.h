/// @file
/// core/autograd/engine.h: runs a backward pass over the graph recorded by the ops.
///
/// The engine first counts, for every node reachable from the roots, how many edges lead into it
/// (its dependencies). A node is ready once all of them delivered their gradient; gradients arriving
/// at the same input are summed. Ready nodes run in reverse creation order. When the graph spans more
/// than one device, each node runs on its device's worker thread, so the backward passes of
/// DataParallel replicas proceed in parallel; the caller waits until everything is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include <ringgrad/core/tensor.h>

namespace ringgrad {

/// Computes gradients of `roots` (with the given gradients; undefined ones mean 1 for one-element
/// roots) and accumulates them into the leaves. `final_callbacks` run on the calling thread after the
/// whole graph is done, followed by any queued with queue_callback() during the pass.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads, bool retain_graph,
                  const std::vector<std::function<void()>>& final_callbacks = {});

/// Called from a hook during backward: runs `callback` once the current backward has finished
/// (DDP waits for its last all-reduce there). Throws when no backward is running on this thread.
void queue_callback(std::function<void()> callback);

/// What one device's worker did during a backward: the span from the start of its first node to the
/// end of its last, and the time spent inside node apply() calls. Two devices computed at the same
/// time exactly when the sum of their busy times exceeds the span of the union of their intervals --
/// DataParallel's tests and timers read it to show that replicas' backward passes overlap.
struct DeviceActivity {
  Device device;  ///< the device whose worker this is
  ///@{
  /// the start of its first node and the end of its last
  std::chrono::steady_clock::time_point first_start, last_end;
  ///@}
  std::chrono::nanoseconds busy{0};  ///< time inside node apply() calls
  int64_t nodes = 0;                 ///< nodes it ran
};

/// The activity of the backward running on this thread so far, one entry per device in device
/// order. Call it from a hook or a queued/final callback (in a final callback it is complete).
/// Throws when no backward is running on this thread.
std::vector<DeviceActivity> current_backward_activity();

}  // namespace ringgrad
