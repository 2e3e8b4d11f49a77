// parallel/nccl/nccl_process_group.cpp: ProcessGroup backend "nccl" -- NVIDIA's collectives on the GPU.
//
// Built, as the library ringgrad::nccl, when CUDA and NCCL are found at configure time
// (cmake/RinggradCuda.cmake); a program without it gets "not in this build" from process_group.cpp.
//
// Meeting. Rank 0 asks NCCL for a unique id (128 opaque bytes naming the job's communicator) and
// puts it in the store under "nccl/unique_id"; the others get() it, which waits for rank 0. Every
// rank then joins the communicator on GPU cuda:LOCAL_RANK -- one process per GPU, as NCCL requires.
//
// A separate stream. The collectives do not run on the device's compute stream (the one ringgrad
// stream every kernel goes to, kernels/cuda/runtime.h) but on a stream of the group's own. On the
// compute stream, an all-reduce would sit between backward kernels and hold them up while it waits
// for the slowest rank; on its own stream it runs while backward goes on, which is what DDP's
// bucketing is for: communication overlapping computation.
//
// One event orders the collective after the kernels that produced its input; another marks its end:
//
//   compute stream:  ... kernels writing t ... [ready] ... backward goes on ... (Work::wait) t * 2 ...
//                                                  \                             ^
//   NCCL stream:                      wait(ready) -> ncclAllReduce(t) -> [done] --'
//
// `ready` is recorded on the compute stream at launch, so NCCL reads t only after the kernels that
// wrote it. The compute stream does NOT wait for `done`: kernels queued after the launch (the rest
// of backward, in DDP) run while the collective does -- the overlap DDP's buckets exist for. As with
// PyTorch's async collectives, the result is the caller's only after Work::wait() (or once
// is_completed() says so): wait() returns when the host has seen `done`, so everything queued after
// it runs after the collective. What a collective writes besides its output (all_gather's copies out
// of its scratch buffer) runs on the NCCL stream before `done`, for the same reason.
//
// Memory: the Work holds every tensor the NCCL stream reads or writes (inputs, outputs, scratch)
// until the host has seen `done`, so the caching allocator cannot hand their blocks to other work
// meanwhile -- not to a later kernel of the compute stream (which no longer waits for the NCCL
// stream), and not to empty_cache() or the out-of-memory retry, which only see free blocks. Once
// released, a block returns to the compute stream's pool after the collective has finished: the
// same guarantee as PyTorch's record_stream, kept by ownership instead of by events. A caller that
// drops its handles right after the launch is therefore safe, and so is a Work nobody waits for
// (the watchdog releases it).
//
// Non-blocking communicators, so that nothing hangs. With the default (blocking) communicator, a
// call into NCCL can block inside NCCL -- creating the communicator waits for every rank, and a
// collective's first run connects to the peers -- and a dead peer turns that into a hang nobody can
// interrupt. Created with `blocking = 0`, NCCL returns ncclInProgress at once and goes on in the
// background; ringgrad polls ncclCommGetAsyncError with the group's deadline, and when the deadline
// passes (or NCCL reports an error) calls ncclCommAbort, which stops NCCL's kernels and frees the
// communicator. The same polling watches every collective until its `done` event has happened: in
// wait(), and in a watchdog thread for collectives nobody waits for (a stuck one would otherwise hold
// its tensors, and the NCCL stream, for ever). After an abort the group is
// broken: every later collective fails at once with the first failure -- its Work has already
// failed, and wait() rethrows -- as on the ring and gloo (collective_queue.h).
// The failed Works release their tensors only once the NCCL stream has drained: until the aborted
// kernels have exited, a released block could go to a compute-stream kernel that nothing orders
// after them. A stream that does not drain within kAbortDrainLimit keeps them for the life of the
// process -- memory lost, never memory shared.
#include "parallel/nccl/nccl_process_group.h"

#include <algorithm>
#include <cstring>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/base/error.h>
#include "core/base/cuda_check.h"
#include <ringgrad/core/cuda.h>
#include "parallel/nccl/nccl_group.h"

namespace ringgrad {
namespace detail {
namespace {

const char* nccl_result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult?";
  }
}

// "ncclRemoteError (remote process exited or there was a network error): <NCCL's last message>"
std::string nccl_error_text(ncclResult_t result, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return str(nccl_result_name(result), " (", ncclGetErrorString(result), ")",
             last != nullptr && *last != '\0' ? str(": ", last) : std::string());
}

}  // namespace

ncclResult_t nccl_check(ncclResult_t result, const char* call, const char* file, int line, const NcclPlace& place) {
  if (result == ncclSuccess || result == ncclInProgress) return result;
  throw Error(str(call, " failed: ", nccl_error_text(result, place.comm), " at ", file, ":", line, " on rank ",
                  place.rank, " (cuda:", place.device, ")"));
}

}  // namespace detail

namespace parallel {

namespace {
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size, int local_rank,
                                              std::chrono::milliseconds timeout) {
  return std::make_shared<NcclProcessGroup>(store, rank, size, local_rank, timeout);
}
// Joins the program before main() (nccl_process_group.h). The library is linked whole (ringgrad::nccl).
const bool kInstalled = (install_nccl(&make_nccl_group), true);
}  // namespace

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kUniqueIdKey = "nccl/unique_id";
// Tearing down: how long the destructor lets collectives in flight, and NCCL's finalize, take.
constexpr std::chrono::milliseconds kTeardownGraceMs{10000};
constexpr std::chrono::milliseconds kWatchdogPeriodMs{100};
// After ncclCommAbort: how long the NCCL stream may take to drain (the aborted kernels exit in
// microseconds to milliseconds).
constexpr std::chrono::milliseconds kAbortDrainLimit{5000};

// Whether `stream` drained within `limit`; any error counts as not drained.
bool drained_within(cudaStream_t stream, std::chrono::milliseconds limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  for (;;) {
    const cudaError_t status = cudaStreamQuery(stream);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// A collective of a group that is already broken: a Work that has failed, whose wait() rethrows.
std::shared_ptr<Work> failed_work(const std::string& description, const std::string& message) {
  auto work = std::make_shared<Work>(description);
  work->mark_started();
  work->mark_done(std::make_exception_ptr(Error(message)));
  return work;
}

// Tensors an aborted collective may still touch: never freed (see the top of this file).
void keep_for_ever(std::vector<Tensor> tensors) {
  static std::mutex mutex;
  static auto* kept = new std::vector<Tensor>();
  std::lock_guard<std::mutex> lock(mutex);
  for (Tensor& t : tensors) kept->push_back(std::move(t));
}

ncclDataType_t reduction_type(const char* op, DType dt, const Device& device) {
  switch (dt) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    default:
      throw Error(detail::str(op, ": expected float32, float64, bfloat16 or float16, got ", dt, " (on ", device, ")"));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

size_t bytes_of(const Tensor& t) { return static_cast<size_t>(t.numel() * t.element_size()); }

// Polls the communicator until what it does in the background (creation, enqueuing a collective,
// finalizing) is over. Returns on ncclSuccess; throws on an NCCL error, or once `deadline` passes.
// Non-blocking communicators answer ncclInProgress until then. With `poll_in_flight` (the caller holds
// the group's mutex, so the watchdog cannot poll meanwhile) it also polls the collectives in flight:
// one past its deadline still fails the group on time, and the wait ends with that failure.
void wait_until_idle(NcclShared& s, Clock::time_point deadline, std::chrono::milliseconds budget,
                     bool poll_in_flight = false) {
  for (int polls = 0;; ++polls) {
    if (poll_in_flight) {
      s.poll_all();
      RINGGRAD_CHECK(s.broken.empty(), s.broken);
    }
    ncclResult_t state = ncclSuccess;
    RINGGRAD_NCCL_CHECK(s.place(), ncclCommGetAsyncError(s.comm, &state));
    if (state == ncclSuccess) return;
    RINGGRAD_CHECK(state == ncclInProgress, "NCCL reported ", detail::nccl_error_text(state, s.comm));
    RINGGRAD_CHECK(Clock::now() < deadline, "NCCL timed out after ", budget.count(), " ms (peer dead or stuck?)");
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

}  // namespace

// --- the shared state: polling and failing --------------------------------------------------------------

bool NcclShared::poll(NcclWork& work) {
  if (work.finished_) return true;
  CudaDeviceGuard guard(device);
  const cudaError_t status = cudaEventQuery(work.done_event_);
  if (status == cudaSuccess) {
    work.finish(nullptr);
    return true;
  }
  if (status != cudaErrorNotReady) {
    (void)cudaGetLastError();
    fail(detail::str(work.description(), " on rank ", rank, ": CUDA reported ", cudaGetErrorName(status), " (",
                     cudaGetErrorString(status), ") on cuda:", device, "; communicator aborted"),
         &work);
    return true;
  }
  if (comm != nullptr) {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(comm, &async);
    if (queried != ncclSuccess) async = queried;
    if (async != ncclSuccess && async != ncclInProgress) {
      fail(detail::str(work.description(), " on rank ", rank, ": NCCL reported ", detail::nccl_error_text(async, comm),
                       "; communicator aborted"),
           &work);
      return true;
    }
  }
  if (Clock::now() >= work.deadline_) {
    fail(detail::str(work.description(), " on rank ", rank, ": NCCL timed out after ", work.timeout_.count(),
                     " ms (peer dead or stuck?); communicator aborted"),
         &work);
    return true;
  }
  return false;
}

bool NcclShared::poll_all() {
  // A copy: a failure inside poll() fails every Work in flight and clears the list.
  const std::vector<std::shared_ptr<NcclWork>> works = in_flight;
  for (const auto& w : works) poll(*w);
  in_flight.erase(std::remove_if(in_flight.begin(), in_flight.end(), [](const auto& w) { return w->finished_; }),
                  in_flight.end());
  return in_flight.empty();
}

void NcclShared::fail(const std::string& message, NcclWork* failed) {
  if (comm != nullptr) {
    // Stops NCCL's kernels, so the NCCL stream drains (the aborted collectives leave whatever they
    // left in their buffers), and frees the communicator; then waits for the drain, with the mutex
    // held (every other caller would only learn that the group is broken). Best effort: there is
    // nothing left to do if the abort itself fails. A later call (a launch whose collective was
    // queued before the abort, and fails now) finds the answer in `drained`.
    try {
      CudaDeviceGuard guard(device);
      (void)ncclCommAbort(comm);
      drained = drained_within(stream, kAbortDrainLimit);
    } catch (const std::exception&) {
      drained = false;
    }
    comm = nullptr;
  }
  if (broken.empty()) broken = message;
  const std::vector<std::shared_ptr<NcclWork>> works = std::move(in_flight);
  in_flight.clear();
  for (const auto& w : works) {
    if (w->finished_ || w.get() == failed) continue;
    w->finish(
        std::make_exception_ptr(Error(detail::str(w->description(), " on rank ", rank,
                                                  ": the process group is broken by an earlier failure: ", broken))),
        drained);
  }
  if (failed != nullptr && !failed->finished_) failed->finish(std::make_exception_ptr(Error(message)), drained);
}

// --- Work -----------------------------------------------------------------------------------------------

NcclWork::NcclWork(std::string description, std::shared_ptr<NcclShared> shared, std::chrono::milliseconds timeout,
                   std::vector<Tensor> keep_alive)
    : Work(std::move(description)),
      shared_(std::move(shared)),
      timeout_(timeout),
      deadline_(Clock::now() + timeout),
      keep_alive_(std::move(keep_alive)) {
  CudaDeviceGuard guard(shared_->device);
  RINGGRAD_CUDA_CHECK(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming));
}

NcclWork::~NcclWork() {
  // Destroying an event that streams still wait for is allowed: the driver frees it afterwards.
  if (done_event_ != nullptr) (void)cudaEventDestroy(done_event_);
}

void NcclWork::finish(std::exception_ptr error, bool release) {
  finished_ = true;
  if (release) {
    keep_alive_.clear();  // the GPU is done with them
  } else {
    keep_for_ever(std::move(keep_alive_));
    keep_alive_.clear();
  }
  mark_done(std::move(error));
}

bool NcclWork::is_completed() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  // Polling may finish the bookkeeping (mark it done, release the tensors); to a caller that is no
  // change of state, so is_completed() stays const.
  return shared_->poll(const_cast<NcclWork&>(*this));
}

void NcclWork::wait() {
  // Spin first (a small collective is done in microseconds), then nap, so a long wait costs no CPU.
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      if (shared_->poll(*this)) break;
    }
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  Work::wait();  // done by now: returns, or rethrows the collective's error
}

// --- the group ------------------------------------------------------------------------------------------

NcclProcessGroup::NcclProcessGroup(const std::shared_ptr<Store>& store, int rank, int size, int local_rank,
                                   std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size, timeout),
      shared_(std::make_shared<NcclShared>(rank, size, local_rank)),
      args_("", size, [local_rank](const std::string& op, const Tensor& t, const std::string& what) {
        const Device mine = Device::cuda(local_rank);
        RINGGRAD_CHECK(t.device() == mine, op, ": expected ", what, " on ", mine, " (this rank's GPU, LOCAL_RANK ",
                       local_rank, "), got ", t.device(), "; move it with .to(Device::cuda(", local_rank, "))");
      }) {
  const int devices = cuda_device_count();
  RINGGRAD_CHECK(devices > 0, "init_process_group(\"nccl\"): rank ", rank, " needs GPU cuda:", local_rank,
                 " (LOCAL_RANK ", local_rank,
                 "), but no CUDA GPU is visible to this process (no GPU, no driver, or "
                 "CUDA_VISIBLE_DEVICES hides them); backend \"ring\" works without one");
  RINGGRAD_CHECK(local_rank >= 0 && local_rank < devices, "init_process_group(\"nccl\"): rank ", rank,
                 " has LOCAL_RANK ", local_rank, ", but this machine shows ", devices, devices == 1 ? " GPU" : " GPUs",
                 " (cuda:0..cuda:", devices - 1, "); NCCL needs one process per GPU: set LOCAL_RANK to 0..",
                 devices - 1, " on each machine (tools/ringrun --nproc-per-node ", devices, " does) and start at most ",
                 devices, " processes per machine");
  RINGGRAD_CHECK(size == 1 || store != nullptr, "init_process_group(\"nccl\"): a group of ", size,
                 " ranks needs a store to pass NCCL's unique id through, got none");
  NcclShared& s = *shared_;
  const Clock::time_point deadline = Clock::now() + timeout;
  // This rank's GPU from here on, for NCCL's own CUDA calls too (ncclGetUniqueId initialises CUDA):
  // NCCL binds the communicator to the device current at creation, and nothing here may create a
  // context on another GPU.
  CudaDeviceGuard guard(local_rank);

  // The unique id: made by rank 0, read by the others (the store's get() waits for it). One key per
  // store: init_process_group gives every group a store of its own.
  ncclUniqueId id;
  if (rank == 0) {
    RINGGRAD_NCCL_CHECK(s.place(), ncclGetUniqueId(&id));
    if (store) {
      store->set(kUniqueIdKey, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
    }
  } else {
    const std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
    RINGGRAD_CHECK(bytes.size() == sizeof(id.internal), "init_process_group(\"nccl\"): expected a ",
                   sizeof(id.internal), "-byte NCCL unique id under \"", kUniqueIdKey, "\" in the store, got ",
                   bytes.size(), " bytes");
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  try {
    RINGGRAD_NCCL_CHECK(s.place(), ncclCommInitRankConfig(&s.comm, size, id, rank, &config));
    wait_until_idle(s, deadline, timeout);
    RINGGRAD_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    RINGGRAD_CUDA_CHECK(cudaEventCreateWithFlags(&s.compute_ready, cudaEventDisableTiming));
    barrier_buffer_ = zeros({1}, TensorOptions(DType::f32).device(Device::cuda(local_rank)));
  } catch (const std::exception& e) {
    // The destructor does not run for a constructor that throws: free what was made here.
    if (s.comm != nullptr) (void)ncclCommAbort(s.comm);
    s.comm = nullptr;
    if (s.stream != nullptr) (void)cudaStreamDestroy(s.stream);
    if (s.compute_ready != nullptr) (void)cudaEventDestroy(s.compute_ready);
    throw Error(detail::str("init_process_group(\"nccl\"): rank ", rank, " of ", size,
                            " could not create its NCCL communicator on cuda:", local_rank, ": ", e.what(),
                            "; communicator aborted (did every rank start, with the same WORLD_SIZE?)"));
  }
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

NcclProcessGroup::~NcclProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(watchdog_mutex_);
    stopping_ = true;
  }
  watchdog_wake_.notify_all();
  watchdog_.join();

  NcclShared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mutex);
  // At process exit (a default group nobody destroyed) the CUDA runtime may already be gone; then
  // there is nothing left to free, and calling NCCL could crash.
  int current = -1;
  if (cudaGetDevice(&current) == cudaErrorCudartUnloading) return;
  try {
    CudaDeviceGuard guard(s.device);
    const std::chrono::milliseconds grace = std::min(timeout(), kTeardownGraceMs);
    const Clock::time_point deadline = Clock::now() + grace;
    while (!s.poll_all() && Clock::now() < deadline) {
      s.mutex.unlock();  // let other threads' wait() see their Works finish meanwhile
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      s.mutex.lock();
    }
    if (!s.in_flight.empty()) {
      s.fail(detail::str("process group (nccl, rank ", s.rank, ") destroyed while ", s.in_flight.size(),
                         " collective(s) were still running after ", grace.count(), " ms; communicator aborted"),
             nullptr);
    }
    if (s.comm != nullptr) {
      // Finalize flushes what NCCL still has to do; it is non-blocking too, so it gets a deadline.
      bool finalized = false;
      try {
        RINGGRAD_NCCL_CHECK(s.place(), ncclCommFinalize(s.comm));
        wait_until_idle(s, Clock::now() + grace, grace);
        finalized = true;
      } catch (const std::exception&) {
      }
      (void)(finalized ? ncclCommDestroy(s.comm) : ncclCommAbort(s.comm));
      s.comm = nullptr;
    }
  } catch (const std::exception&) {
    // A destructor must not throw; whatever could not be freed goes with the process.
  }
  if (s.stream != nullptr) (void)cudaStreamDestroy(s.stream);
  if (s.compute_ready != nullptr) (void)cudaEventDestroy(s.compute_ready);
  s.stream = nullptr;
  s.compute_ready = nullptr;
}

void NcclProcessGroup::watchdog_loop() {
  CudaDeviceGuard own_device(shared_->device);  // for the thread's life: its CUDA calls are for this GPU only
  std::unique_lock<std::mutex> lock(watchdog_mutex_);
  while (!watchdog_wake_.wait_for(lock, kWatchdogPeriodMs, [this] { return stopping_; })) {
    lock.unlock();
    try {
      std::lock_guard<std::mutex> shared_lock(shared_->mutex);
      shared_->poll_all();
    } catch (const std::exception&) {
      // Reported again by the next wait() on the Work concerned.
    }
    lock.lock();
  }
}

template <typename Before, typename Call, typename After>
std::shared_ptr<Work> NcclProcessGroup::launch(const std::string& description, std::vector<Tensor> keep_alive,
                                               Before before, Call call, After after) {
  NoGradGuard no_grad;  // the copies into outputs (parameters, too) are not part of any graph
  NcclShared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.broken.empty()) return failed_work(description, broken_group_message(description, rank_, s.broken));
  CudaDeviceGuard guard(s.device);
  const auto compute = static_cast<cudaStream_t>(cuda_stream(s.device));
  auto work = std::make_shared<NcclWork>(description, shared_, timeout(), std::move(keep_alive));
  work->mark_started();

  before();  // on the compute stream
  RINGGRAD_CUDA_CHECK(cudaEventRecord(s.compute_ready, compute));
  RINGGRAD_CUDA_CHECK(cudaStreamWaitEvent(s.stream, s.compute_ready, 0));
  try {
    // A non-blocking communicator may still be enqueuing (the first collective connects to the
    // peers, and NCCL may connect lazily later too) when the call returns; the completion event may
    // be recorded only after it has. Meanwhile the collectives in flight keep their deadlines.
    if (call(s.place(), s.stream) == ncclInProgress)
      wait_until_idle(s, Clock::now() + timeout(), timeout(), /*poll_in_flight=*/true);
  } catch (const std::exception& e) {
    // Either this launch failed, or an earlier collective did while this one waited to enqueue (the
    // group is then broken already, and this one fails with that reason).
    const std::string message =
        s.broken.empty() ? detail::str(description, " on rank ", rank_, ": ", e.what(), "; communicator aborted")
                         : broken_group_message(description, rank_, s.broken);
    s.fail(message, work.get());  // fails `work` with the message: wait() rethrows it, as for any failure
    return work;
  }
  after(s.stream);  // on the NCCL stream, after the collective
  RINGGRAD_CUDA_CHECK(cudaEventRecord(work->done_event_, s.stream));
  s.in_flight.push_back(work);
  return work;
}

std::shared_ptr<Work> NcclProcessGroup::nothing_to_do(const std::string& description) {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (!shared_->broken.empty())
    return failed_work(description, broken_group_message(description, rank_, shared_->broken));
  auto work = std::make_shared<Work>(description);
  work->mark_started();
  work->mark_done();
  return work;
}

namespace {
void nothing() {}
void nothing_after(cudaStream_t) {}
}  // namespace

std::shared_ptr<Work> NcclProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  args_.reducible("all_reduce", tensor, "the tensor");
  const ncclDataType_t type = reduction_type("all_reduce", tensor.dtype(), tensor.device());
  const std::string description = describe_collective("all_reduce", tensor, reduce_op_name(op));
  if (tensor.numel() == 0) return nothing_to_do(description);
  const auto count = static_cast<size_t>(tensor.numel());
  return launch(
      description, {tensor}, nothing,
      [&](const detail::NcclPlace& place, cudaStream_t stream) {
        return RINGGRAD_NCCL_CHECK(
            place, ncclAllReduce(tensor.data(), tensor.data(), count, type, nccl_op(op), place.comm, stream));
      },
      nothing_after);
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(const Tensor& tensor, int root) {
  args_.tensor("broadcast", tensor, "the tensor");
  args_.root("broadcast", root);
  const std::string description = describe_collective("broadcast", tensor, detail::str("root ", root));
  if (tensor.numel() == 0) return nothing_to_do(description);
  // Any dtype: a broadcast copies bytes, so it moves them as ncclUint8.
  return launch(
      description, {tensor}, nothing,
      [&](const detail::NcclPlace& place, cudaStream_t stream) {
        return RINGGRAD_NCCL_CHECK(
            place, ncclBroadcast(tensor.data(), tensor.data(), bytes_of(tensor), ncclUint8, root, place.comm, stream));
      },
      nothing_after);
}

// One ncclAllGather into a scratch buffer holding the ranks' inputs one after another, then a copy
// of each block into its output. The outputs are separate tensors, and NCCL wants one buffer; the
// alternative, one ncclBroadcast per rank inside ncclGroupStart/End, avoids the copies but runs N
// broadcasts instead of NCCL's all-gather algorithms (ring, NVLS), and the extra copy is a pass over
// the result in HBM, small next to moving it between GPUs.
std::shared_ptr<Work> NcclProcessGroup::all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
  args_.tensor("all_gather", input, "the input");
  args_.one_per_rank("all_gather", outputs, "output", input, "the input");
  const std::string description = describe_collective("all_gather", input);
  if (input.numel() == 0) return nothing_to_do(description);
  const int64_t n = input.numel();
  const Tensor scratch = empty({size_ * n}, TensorOptions(input.dtype()).device(input.device()));
  std::vector<Tensor> keep_alive = outputs;
  keep_alive.push_back(input);
  keep_alive.push_back(scratch);
  return launch(
      description, std::move(keep_alive), nothing,
      [&](const detail::NcclPlace& place, cudaStream_t stream) {
        return RINGGRAD_NCCL_CHECK(
            place, ncclAllGather(input.data(), scratch.data(), bytes_of(input), ncclUint8, place.comm, stream));
      },
      [&](cudaStream_t stream) {  // the outputs are contiguous (checked): plain copies, on the NCCL stream
        const size_t bytes = bytes_of(input);
        for (int r = 0; r < size_; ++r)
          RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(outputs[static_cast<size_t>(r)].data(),
                                              static_cast<const char*>(scratch.data()) + static_cast<size_t>(r) * bytes,
                                              bytes, cudaMemcpyDeviceToDevice, stream));
      });
}

// The inputs are copied, one after another, into a scratch buffer, which ncclReduceScatter reads;
// block `rank` of the reduction lands straight in the output. The inputs are not modified.
std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                       ReduceOp op) {
  args_.reducible("reduce_scatter", output, "the output");
  args_.one_per_rank("reduce_scatter", inputs, "input", output, "the output");
  const ncclDataType_t type = reduction_type("reduce_scatter", output.dtype(), output.device());
  const std::string description = describe_collective("reduce_scatter", output, reduce_op_name(op));
  if (output.numel() == 0) return nothing_to_do(description);
  const int64_t n = output.numel();
  const Tensor scratch = empty({size_ * n}, TensorOptions(output.dtype()).device(output.device()));
  // The inputs are read only by the copies on the compute stream, before the launch: no need to keep them.
  return launch(
      description, {output, scratch},
      [&] {
        for (int r = 0; r < size_; ++r)
          scratch.narrow(0, r * n, n).view(output.shape()).copy_(inputs[static_cast<size_t>(r)]);
      },
      [&](const detail::NcclPlace& place, cudaStream_t stream) {
        return RINGGRAD_NCCL_CHECK(place, ncclReduceScatter(scratch.data(), output.data(), static_cast<size_t>(n), type,
                                                            nccl_op(op), place.comm, stream));
      },
      nothing_after);
}

// A one-element all-reduce: no rank's collective completes before every rank has joined it.
std::shared_ptr<Work> NcclProcessGroup::barrier() {
  const Tensor& buffer = barrier_buffer_;
  return launch(
      "barrier()", {buffer}, nothing,
      [&](const detail::NcclPlace& place, cudaStream_t stream) {
        return RINGGRAD_NCCL_CHECK(
            place, ncclAllReduce(buffer.data(), buffer.data(), 1, ncclFloat32, ncclSum, place.comm, stream));
      },
      nothing_after);
}

}  // namespace parallel
}  // namespace ringgrad
