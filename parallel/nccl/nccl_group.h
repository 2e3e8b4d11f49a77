// parallel/nccl/nccl_group.h: the types behind backend "nccl" -- the communicator state a group and
// its Works share, the Work that tracks one collective on the GPU, the group itself -- and
// RINGGRAD_NCCL_CHECK. nccl_process_group.cpp explains the streams, the events and the aborts.
// Private to the library: it needs NCCL's and CUDA's headers.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ringgrad/parallel/process_group.h>
#include "parallel/collective_args.h"

namespace ringgrad {
namespace detail {

// Where an NCCL call was made, for its error message.
struct NcclPlace {
  int rank;
  int device;
  ncclComm_t comm;  // null before the communicator exists (ncclGetUniqueId)
};

// Throws ringgrad::Error for any result but ncclSuccess and ncclInProgress (the answer of a
// non-blocking communicator whose operation goes on in the background); returns the result.
ncclResult_t nccl_check(ncclResult_t result, const char* call, const char* file, int line, const NcclPlace& place);

}  // namespace detail

namespace parallel {

// RINGGRAD_NCCL_CHECK(place, call): like RINGGRAD_CUDA_CHECK, plus the rank and NCCL's own words:
//   ncclAllReduce(...) failed: ncclUnhandledCudaError (unhandled cuda error ...): Cuda failure 'out of
//   memory' at parallel/nccl/nccl_process_group.cpp:412 on rank 2 (cuda:2)
// Evaluates to the result, which is ncclSuccess or ncclInProgress.
#define RINGGRAD_NCCL_CHECK(place, call) ::ringgrad::detail::nccl_check((call), #call, __FILE__, __LINE__, (place))

class NcclWork;

// What a group and its Works share. A Work may outlive its group (a caller keeps the handle), so
// the communicator lives here, behind a shared_ptr, and `comm` turns null once it is gone.
// Every NCCL call on the communicator is made with `mutex` held: a communicator is not thread-safe,
// and collectives may be launched from several threads (the autograd engine's device workers).
struct NcclShared {
  int rank = 0, size = 1, device = 0;
  std::mutex mutex;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;                     // the group's NCCL stream on `device`
  cudaEvent_t compute_ready = nullptr;               // recorded on the compute stream before every launch
  std::string broken;                                // the first failure; non-empty = every collective fails
  std::vector<std::shared_ptr<NcclWork>> in_flight;  // launched, not yet seen complete
  bool drained = true;  // false after an abort whose stream did not drain: no tensor it used is released

  NcclShared(int rank_in_group, int group_size, int cuda_device)
      : rank(rank_in_group), size(group_size), device(cuda_device) {}
  detail::NcclPlace place() const { return {rank, device, comm}; }

  // With `mutex` held. Checks one Work: done on the GPU, failed (NCCL reported an error, or its
  // deadline passed), or still running. A failure aborts the communicator and fails every Work in
  // flight. Returns whether `work` is finished, either way.
  bool poll(NcclWork& work);
  // With `mutex` held. Polls every Work in flight and forgets the finished ones; returns whether
  // none is left.
  bool poll_all();
  // With `mutex` held. Aborts the communicator (if it still exists), records `message` as the
  // group's failure, and fails every Work in flight: `failed` with `message`, the others as broken.
  void fail(const std::string& message, NcclWork* failed);
};

// One collective in flight: done when the completion event recorded after it on the NCCL stream
// has happened. Holds the tensors the GPU still reads or writes (inputs, outputs, scratch) until
// then, so a caller may drop its handles right after launching.
class NcclWork final : public Work {
 public:
  NcclWork(std::string description, std::shared_ptr<NcclShared> shared, std::chrono::milliseconds timeout,
           std::vector<Tensor> keep_alive);
  ~NcclWork() override;

  bool is_completed() const override;  // never blocks: queries the event and NCCL's async error
  void wait() override;                // polls until done, failed or past the deadline; rethrows

 private:
  friend struct NcclShared;
  friend class NcclProcessGroup;  // records the event at launch
  // With the shared mutex held. `release`: the NCCL stream is done with the tensors (false after an
  // abort whose stream did not drain: they are then kept until the process ends).
  void finish(std::exception_ptr error, bool release = true);

  std::shared_ptr<NcclShared> shared_;
  bool finished_ = false;  // guarded by the shared mutex (Work::done_ is the base class's copy)
  cudaEvent_t done_event_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<Tensor> keep_alive_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Creates the communicator: rank 0 makes the unique id and publishes it in `store` (null only for
  // a group of one), every rank joins on GPU `local_rank`, waiting at most `timeout`.
  NcclProcessGroup(const std::shared_ptr<Store>& store, int rank, int size, int local_rank,
                   std::chrono::milliseconds timeout);
  // Waits briefly for collectives in flight, then destroys the communicator (aborts it if broken
  // or stuck) and the stream. Never throws.
  ~NcclProcessGroup() override;

  const char* backend_name() const override { return "nccl"; }
  Device collective_device(Device module_device) const override { return module_device; }  // GPU memory only
  int device() const { return shared_->device; }

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> all_gather(const std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                       ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> barrier() override;

 private:
  // The one path every collective takes: ready event, NCCL call(s), completion event, Work.
  // `before` queues work on the compute stream ahead of the collective (copies into scratch);
  // `call` issues the NCCL call(s) on the NCCL stream, and `after(stream)` what follows them there
  // (copies out of scratch), before the completion event.
  template <typename Before, typename Call, typename After>
  std::shared_ptr<Work> launch(const std::string& description, std::vector<Tensor> keep_alive, Before before, Call call,
                               After after);
  // A collective with nothing to move (empty tensors): a Work already done, or already failed when
  // the group is broken, as any other collective of a broken group.
  std::shared_ptr<Work> nothing_to_do(const std::string& description);
  void watchdog_loop();

  std::shared_ptr<NcclShared> shared_;
  CollectiveArgs args_;    // the checks every backend shares, with this rank's GPU as the one device
  Tensor barrier_buffer_;  // one float on the device: barrier() all-reduces it
  // The watchdog polls the Works in flight, so a collective nobody waits for still times out, aborts
  // and releases its tensors -- otherwise a dead peer would hold them, and the NCCL stream, forever.
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_wake_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace parallel
}  // namespace ringgrad
