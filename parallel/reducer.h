/// @file
/// parallel/reducer.h: the heart of DistributedDataParallel -- averaging gradients while backward runs.
///
/// Every process holds a full replica of the model and computes gradients for its own shard of the
/// batch; before the optimizer step, every .grad must become the average over all processes. Doing
/// that after backward would leave the network idle during backward and the processors idle during
/// communication. The Reducer overlaps them:
///
/// @code
///   1. At construction, parameters are assigned to BUCKETS, in reverse registration order (backward
///      produces the last layer's gradients first), each bucket a flat buffer of about bucket_cap_mb
///      (the first one smaller, first_bucket_cap_mb, so communication starts early).
///   2. A post-accumulate hook on every parameter marks it ready (copying its fresh .grad into its
///      slot of the bucket, unless backward wrote it there: gradient_as_bucket_view, below).
///      When a bucket's last gradient arrives, its all-reduce (average) is launched -- asynchronously,
///      on the process group's communication thread, while backward continues with earlier layers.
///      Buckets are launched in index order on every rank, so the ranks' collectives always match.
///   3. A final callback of the autograd engine, run when backward is done, waits for the buckets
///      still in flight (the EXPOSED communication: the part overlap could not hide) and writes the
///      averages back into .grad (nothing to write with gradient_as_bucket_view: .grad is the slot).
/// @endcode
///
/// With gradient_as_bucket_view (the default) nothing is copied in step 2 or 3: each parameter's slot
/// is its gradient destination (Tensor::set_grad_destination, a core mechanism that knows nothing of
/// DDP), so backward writes the gradient there -- a linear layer's weight gradient is its GEMM's
/// output in the slot -- and .grad is that slot. A .grad the user replaced is copied into the slot
/// when it is marked ready, and .grad is made the slot again (as in PyTorch). With it off, .grad is
/// backward's own tensor, copied into the bucket by the hook and the average copied back.
///
/// no_sync: while sync is off the hooks do nothing and gradients accumulate in .grad locally (in the
/// slot, with the view); the next synchronised backward's hooks see the accumulated .grad, so its sum
/// is what gets averaged.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/parallel/comm_hook.h>
#include <ringgrad/parallel/process_group.h>

namespace ringgrad {
namespace parallel {

/// PyTorch's DistributedDataParallel arguments, plus `overlap` for the benchmarks, which switch
/// off what makes DDP fast to show what each part is worth.
struct DDPOptions {
  RINGGRAD_ARG(double, bucket_cap_mb) = 25;       ///< bucket size (MiB); 0: every parameter its own bucket
  RINGGRAD_ARG(double, first_bucket_cap_mb) = 1;  ///< the first bucket (the last layers), small so it is ready early
  RINGGRAD_ARG(bool, broadcast_buffers) = true;   ///< rank 0's buffers to every rank before each forward
  /// .grad is a view of its bucket, which backward writes into: no copy in or back. As in PyTorch, a
  /// .grad held across steps is then modified in place by the next backward (false: .grad is a
  /// tensor of its own, copied into the bucket and back, PyTorch's default). On by default here: it
  /// saves two copies of every gradient per step (bench_ddp_step: docs/benchmarks.md).
  RINGGRAD_ARG(bool, gradient_as_bucket_view) = true;
  RINGGRAD_ARG(bool, find_unused_parameters) = false;  ///< walk the graph after forward; unused params count as ready
  RINGGRAD_ARG(bool, overlap) = true;  ///< false: all-reduce every bucket only after backward has finished
  /// What each bucket's communication is (parallel/comm_hook.h): one all-reduce by default,
  /// bf16_compress_hook() or fp16_compress_hook() to send half the bytes, or one's own.
  RINGGRAD_ARG(CommHook, comm_hook) = allreduce_hook();
};

using SteadyTime = std::chrono::steady_clock::time_point;  ///< the timestamps of the timings below

/// One bucket in one step: when its last gradient arrived and when its all-reduce ran.
struct BucketTiming {
  int index = 0;       ///< the bucket's position in the layout
  int64_t bytes = 0;   ///< its flat buffer's size
  int parameters = 0;  ///< how many parameters it holds
  ///@{
  /// last gradient arrived; all-reduce started; finished
  SteadyTime ready, comm_start, comm_end;
  ///@}
};

/// Where the last synchronised step's time went, for the DP-vs-DDP benchmark and its traces.
struct DDPTimings {
  int64_t step = 0;            ///< synchronised backward passes so far
  double forward_us = 0;       ///< DistributedDataParallel::forward (with the buffer broadcast)
  double backward_us = 0;      ///< from the start of backward to its last node (compute)
  double exposed_comm_us = 0;  ///< waiting for all-reduces after backward: communication not hidden
  double copy_back_us = 0;     ///< writing averaged gradients into .grad
  ///@{
  /// the step's phases, for traces
  SteadyTime forward_start, backward_start, backward_end, step_end;
  ///@}
  std::vector<BucketTiming> buckets;  ///< one per bucket, in layout order
};

/// DDP's gradient synchroniser: groups the parameters into buckets (bucket_assignment.h) and, from
/// hooks that fire as each gradient is accumulated during backward, all-reduces each bucket as soon as
/// its last gradient is in, then writes the averaged gradients back into .grad. One per
/// DistributedDataParallel.
class Reducer {
 public:
  /// `parameters`: the module's named parameters in registration order (those that do not require
  /// grad are left out). All on one device.
  Reducer(const std::vector<std::pair<std::string, Tensor>>& parameters, std::shared_ptr<ProcessGroup> group,
          const DDPOptions& options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Called after each forward. When a synchronised backward will follow (sync on, grad mode on,
  /// `output` requires grad) it waits for any all-reduce of an earlier step still in flight, resets the
  /// step, marks the start of backward (a hook on `output`), and with find_unused_parameters walks the
  /// graph from `output` to find the parameters it does not reach (counted as ready when backward
  /// begins). Any other forward leaves the state untouched.
  void prepare_for_backward(const Tensor& output, SteadyTime forward_start, SteadyTime forward_end);

  /// Off inside no_sync(): hooks leave gradients to accumulate locally.
  void set_require_sync(bool on);
  bool require_sync() const;  ///< see set_require_sync()

  /// The bucket layout: bucket b holds these parameter names, in the order their gradients arrive.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  DDPTimings timings() const;  ///< of the last synchronised step

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the hooks (weakly) and the final callback
};

}  // namespace parallel
}  // namespace ringgrad
