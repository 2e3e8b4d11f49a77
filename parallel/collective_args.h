// parallel/collective_args.h: the argument checks and descriptions that every backend's collectives
// share (ring, gloo, nccl), so that a wrong argument fails at the call, on the caller's thread, with
// the same message whichever backend would have run it. Only where a backend takes its tensors
// differs (gloo: the host; nccl: this rank's GPU; ring: either), and the backend says that.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ringgrad/core/tensor.h>
#include <ringgrad/parallel/process_group.h>

namespace ringgrad {
namespace parallel {

class CollectiveArgs {
 public:
  /// Throws, naming `op` and `what`, when `t` is not on a device the backend takes.
  using DeviceRule = std::function<void(const std::string& op, const Tensor& t, const std::string& what)>;
  /// `prefix` starts every message ("gloo " for Gloo's, "" for the others); `size` is the group's.
  /// A null `device_rule` takes tensors on any device.
  CollectiveArgs(std::string prefix, int size, DeviceRule device_rule = nullptr);

  /// A defined, contiguous tensor on a device the backend takes.
  void tensor(const char* op, const Tensor& t, const std::string& what) const;
  /// As tensor(), of a dtype that all_reduce and reduce_scatter can combine: float32, float64,
  /// bfloat16 or float16.
  void reducible(const char* op, const Tensor& t, const std::string& what) const;
  /// A rank of the group.
  void root(const char* op, int root) const;
  /// One tensor per rank (all_gather's outputs, reduce_scatter's inputs), each as tensor() and of
  /// `reference`'s shape, dtype and device; `each` names them ("output", "input"), `reference_name`
  /// the reference ("the input").
  void one_per_rank(const char* op, const std::vector<Tensor>& tensors, const char* each, const Tensor& reference,
                    const char* reference_name) const;

 private:
  std::string prefix_;
  int size_;
  DeviceRule device_rule_;
};

/// How a collective is named in messages, traces and Work::description():
/// "all_reduce(sum, 1048576 x float32 on cuda:0)".
std::string describe_collective(const char* op, const Tensor& t, const std::string& extra = "");

/// The error every collective of a broken group fails with, at once: "<description> on rank <rank>:
/// the process group is broken by an earlier failure: <first failure>".
std::string broken_group_message(const std::string& description, int rank, const std::string& first_failure);

}  // namespace parallel
}  // namespace ringgrad
