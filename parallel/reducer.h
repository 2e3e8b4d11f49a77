// parallel/reducer.h: the heart of DistributedDataParallel -- averaging gradients while backward runs.
//
// Every process holds a full replica of the model and computes gradients for its own shard of the
// batch; before the optimizer step, every .grad must become the average over all processes. Doing
// that after backward would leave the network idle during backward and the processors idle during
// communication. The Reducer overlaps them:
//
//   1. At construction, parameters are assigned to BUCKETS, in reverse registration order (backward
//      produces the last layer's gradients first), each bucket a flat buffer of about bucket_cap_mb
//      (the first one smaller, first_bucket_cap_mb, so communication starts early).
//   2. A post-accumulate hook on every parameter copies its fresh .grad into its slot of the bucket.
//      When a bucket's last gradient arrives, its all-reduce (average) is launched -- asynchronously,
//      on the process group's communication thread, while backward continues with earlier layers.
//      Buckets are launched in index order on every rank, so the ranks' collectives always match.
//   3. A final callback of the autograd engine, run when backward is done, waits for the buckets
//      still in flight (the EXPOSED communication: the part overlap could not hide) and writes the
//      averages back into .grad (or makes .grad a view of the bucket, gradient_as_bucket_view).
//
// no_sync: while sync is off the hooks do nothing and gradients accumulate in .grad locally; the next
// synchronised backward's hooks see the accumulated .grad, so its sum is what gets averaged.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ringgrad/core/tensor.h>
#include <ringgrad/parallel/process_group.h>

namespace ringgrad {
namespace parallel {

// PyTorch's DistributedDataParallel arguments, plus `overlap` for the benchmarks (7/8), which switch
// off what makes DDP fast to show what each part is worth.
struct DDPOptions {
  double bucket_cap_mb_ = 25;             // bucket size (MiB); 0: every parameter its own bucket
  double first_bucket_cap_mb_ = 1;        // the first bucket (the last layers), small so it is ready early
  bool broadcast_buffers_ = true;         // rank 0's buffers to every rank before each forward
  bool gradient_as_bucket_view_ = false;  // .grad becomes a view of its bucket: no copy back
  bool find_unused_parameters_ = false;   // walk the graph after forward; unused parameters count as ready
  bool overlap_ = true;                   // false: all-reduce every bucket only after backward has finished

  DDPOptions& bucket_cap_mb(double mb) {
    bucket_cap_mb_ = mb;
    return *this;
  }
  DDPOptions& first_bucket_cap_mb(double mb) {
    first_bucket_cap_mb_ = mb;
    return *this;
  }
  DDPOptions& broadcast_buffers(bool on) {
    broadcast_buffers_ = on;
    return *this;
  }
  DDPOptions& gradient_as_bucket_view(bool on) {
    gradient_as_bucket_view_ = on;
    return *this;
  }
  DDPOptions& find_unused_parameters(bool on) {
    find_unused_parameters_ = on;
    return *this;
  }
  DDPOptions& overlap(bool on) {
    overlap_ = on;
    return *this;
  }
};

using SteadyTime = std::chrono::steady_clock::time_point;

// One bucket in one step: when its last gradient arrived and when its all-reduce ran.
struct BucketTiming {
  int index = 0;
  int64_t bytes = 0;
  int parameters = 0;
  SteadyTime ready, comm_start, comm_end;
};

// Where the last synchronised step's time went, for the DP-vs-DDP benchmark and its traces.
struct DDPTimings {
  int64_t step = 0;            // synchronised backward passes so far
  double forward_us = 0;       // DistributedDataParallel::forward (with the buffer broadcast)
  double backward_us = 0;      // from the start of backward to its last node (compute)
  double exposed_comm_us = 0;  // waiting for all-reduces after backward: communication not hidden
  double copy_back_us = 0;     // writing averaged gradients into .grad
  SteadyTime forward_start, backward_start, backward_end, step_end;
  std::vector<BucketTiming> buckets;
};

class Reducer {
 public:
  // `parameters`: the module's named parameters in registration order (those that do not require
  // grad are left out). All on one device.
  Reducer(const std::vector<std::pair<std::string, Tensor>>& parameters, std::shared_ptr<ProcessGroup> group,
          const DDPOptions& options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called after each forward. When a synchronised backward will follow (sync on, grad mode on,
  // `output` requires grad) it waits for any all-reduce of an earlier step still in flight, resets the
  // step, marks the start of backward (a hook on `output`), and with find_unused_parameters walks the
  // graph from `output` to find the parameters it does not reach (counted as ready when backward
  // begins). Any other forward leaves the state untouched.
  void prepare_for_backward(const Tensor& output, SteadyTime forward_start, SteadyTime forward_end);

  // Off inside no_sync(): hooks leave gradients to accumulate locally.
  void set_require_sync(bool on);
  bool require_sync() const;

  // The bucket layout: bucket b holds these parameter names, in the order their gradients arrive.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  DDPTimings timings() const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the hooks (weakly) and the final callback
};

}  // namespace parallel
}  // namespace ringgrad
