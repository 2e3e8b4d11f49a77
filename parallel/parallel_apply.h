/// @file
/// parallel/parallel_apply.h: run each replica on its own device's worker thread, all at once.
///
/// Every device has one persistent worker thread (core/device.h), the same one the autograd engine
/// runs that device's backward nodes on. parallel_apply posts replica i's forward to the worker of
/// inputs[i]'s device, so K replicas compute at the same time, and waits for all of them. A replica
/// that throws does not hide the others' fate: every forward finishes, then the first failure (in
/// replica order) is rethrown as a ringgrad::Error that names the replica and its device.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include <ringgrad/core/tensor.h>

namespace ringgrad {
namespace parallel {

/// When a task ran, for timelines and timers.
struct Interval {
  Device device;  ///< where the task ran
  ///@{
  /// when it started and ended
  std::chrono::steady_clock::time_point start, end;
  ///@}
};

/// Runs task(i) on devices[i]'s worker for every i concurrently, with the caller's grad mode, and
/// waits for all. Rethrows the first failure as `"<op>: replica i on <device> failed: <message>"`.
/// Returns when each task started and ended.
std::vector<Interval> run_on_devices(const std::vector<Device>& devices, const std::function<void(size_t)>& task,
                                     const char* op = "parallel_apply");

/// outputs[i] = replicas[i]->forward(inputs[i]), each on inputs[i]'s device. `intervals`, when
/// given, receives when each forward ran.
template <typename M>
std::vector<Tensor> parallel_apply(const std::vector<std::shared_ptr<M>>& replicas, const std::vector<Tensor>& inputs,
                                   std::vector<Interval>* intervals = nullptr) {
  RINGGRAD_CHECK(replicas.size() == inputs.size(), "parallel_apply: expected one input per replica (", replicas.size(),
                 " replicas), got ", inputs.size(), " inputs");
  std::vector<Device> devices;
  for (size_t i = 0; i < inputs.size(); ++i) {
    RINGGRAD_CHECK(replicas[i] != nullptr && inputs[i].defined(), "parallel_apply: replica ", i,
                   " or its input is missing");
    devices.push_back(inputs[i].device());
  }
  std::vector<Tensor> outputs(inputs.size());
  std::vector<Interval> ran = run_on_devices(devices, [&](size_t i) { outputs[i] = replicas[i]->forward(inputs[i]); });
  if (intervals) *intervals = std::move(ran);
  return outputs;
}

}  // namespace parallel
}  // namespace ringgrad
