// tests/cuda_emu/src/nccl.cpp: NCCL for emulated GPUs, across the threads of one process and across
// processes, so that parallel/nccl runs in CI.
//
// A communicator is a POSIX shared-memory segment, named in the unique id: a header (per rank:
// joined, state, how many collectives it has posted and consumed), then one data slot per rank
// (sparse: memory is used only as far as collectives write). Every rank maps it; once all have
// joined, the name is unlinked, so the memory goes with the last process however the job ends.
//
// Collective number k of a rank is work on its stream (streams.cpp) that runs in two steps, neither
// of which ever blocks:
//   post     once every rank has consumed collective k-1 (the slots are free again): copy the input
//            into this rank's slot, and say "posted k";
//   consume  once every rank has posted k: compute this rank's output from the slots (reductions in
//            rank order, so every rank gets the same bits), and say "consumed k".
// Until both are done the stream is stuck in the collective, as on a GPU; the host is not, unless it
// synchronises. A peer that exits (its process is gone), aborts or destroys its communicator while
// another waits for it turns the wait into ncclRemoteError: ncclCommGetAsyncError reports it, and the
// collective ends without output, as an aborted NCCL kernel does.
//
// RINGGRAD_EMU_NCCL_SLOW_ENQUEUE=K:MS makes collective number K of every non-blocking communicator
// created while it is set return ncclInProgress, and ncclCommGetAsyncError answer ncclInProgress for MS
// milliseconds after: what a real NCCL does while it connects lazily to its peers, which no test can
// arrange on a GPU.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nccl.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "cuda_emu/bf16.h"
#include "cuda_emu/fp16.h"
#include "state.h"
#include "streams.h"

namespace cuda_emu {
namespace {

constexpr int kMaxRanks = 16;
constexpr size_t kSlotBytes = size_t{1} << 30;  // per rank; sparse
constexpr uint64_t kMagic = 0x72676e63636c3031ull;

enum RankState : int32_t { kLive = 0, kAborted = 1, kDestroyed = 2 };

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct RankHeader {
  std::atomic<int32_t> joined;
  std::atomic<int32_t> pid;
  std::atomic<int32_t> state;
  std::atomic<uint64_t> posted;
  std::atomic<uint64_t> consumed;
};

struct Header {
  std::atomic<uint64_t> magic;
  std::atomic<int32_t> nranks;
  RankHeader ranks[kMaxRanks];
};
constexpr size_t kHeaderBytes = (sizeof(Header) + 4095) / 4096 * 4096;
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters must be lock-free");

}  // namespace

// One rank's view of a communicator; queued collectives hold it until they have run.
struct CommState {
  std::string name;
  int rank = 0, nranks = 0, device = 0;
  bool blocking = true;
  int fd = -1;
  size_t bytes = 0;
  char* base = nullptr;
  uint64_t next_seq = 0;  // collectives queued so far
  uint64_t slow_seq = 0;  // RINGGRAD_EMU_NCCL_SLOW_ENQUEUE: this collective enqueues for slow_ms
  int64_t slow_ms = 0;
  std::atomic<int64_t> enqueuing_until_ns{0};  // steady clock; 0: not enqueuing
  std::atomic<int> async{ncclSuccess};
  std::atomic<bool> aborted{false};
  std::mutex message_mutex;
  std::string message;  // the last error, for ncclGetLastError

  Header& header() const { return *reinterpret_cast<Header*>(base); }
  char* slot(int r) const { return base + kHeaderBytes + static_cast<size_t>(r) * kSlotBytes; }

  void set_error(ncclResult_t error, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(message_mutex);
      if (async.load() == ncclSuccess || async.load() == ncclInProgress) message = why;
    }
    int expected = ncclSuccess;
    if (!async.compare_exchange_strong(expected, error)) {
      expected = ncclInProgress;
      async.compare_exchange_strong(expected, error);
    }
  }

  bool all(std::atomic<uint64_t> RankHeader::*counter, uint64_t at_least) const {
    for (int r = 0; r < nranks; ++r)
      if ((header().ranks[r].*counter).load(std::memory_order_acquire) < at_least) return false;
    return true;
  }

  bool all_joined() const {
    for (int r = 0; r < nranks; ++r)
      if (header().ranks[r].joined.load(std::memory_order_acquire) == 0) return false;
    return true;
  }

  // Whether a peer this rank may be waiting for is gone; records ncclRemoteError if so.
  bool peer_failed() {
    for (int r = 0; r < nranks; ++r) {
      if (r == rank) continue;
      const RankHeader& h = header().ranks[r];
      const int32_t state = h.state.load(std::memory_order_acquire);
      std::string why;
      if (state == kAborted) why = "aborted its communicator";
      if (state == kDestroyed) why = "destroyed its communicator";
      const int32_t pid = h.pid.load(std::memory_order_acquire);
      if (why.empty() && pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH)
        why = "(pid " + std::to_string(pid) + ") exited";
      if (!why.empty()) {
        set_error(ncclRemoteError, "NCCL emulator: rank " + std::to_string(r) + " " + why);
        return true;
      }
    }
    return false;
  }

  ~CommState() {
    if (base != nullptr) ::munmap(base, bytes);
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace cuda_emu

struct ncclComm {
  std::shared_ptr<cuda_emu::CommState> state;
};

namespace cuda_emu {
namespace {

thread_local std::string t_last_message;

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

template <typename T>
double load(const void* p, size_t i) {
  return static_cast<double>(static_cast<const T*>(p)[i]);
}

double load_any(ncclDataType_t t, const void* p, size_t i) {
  switch (t) {
    case ncclInt8: return load<int8_t>(p, i);
    case ncclUint8: return load<uint8_t>(p, i);
    case ncclInt32: return load<int32_t>(p, i);
    case ncclUint32: return load<uint32_t>(p, i);
    case ncclInt64: return load<int64_t>(p, i);
    case ncclUint64: return load<uint64_t>(p, i);
    case ncclFloat16: return __half2float(static_cast<const __half*>(p)[i]);
    case ncclBfloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case ncclFloat32: return load<float>(p, i);
    case ncclFloat64: return load<double>(p, i);
    default: return 0;
  }
}

void store_any(ncclDataType_t t, void* p, size_t i, double v) {
  switch (t) {
    case ncclInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case ncclUint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case ncclInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case ncclUint32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case ncclInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case ncclUint64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    case ncclFloat16: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case ncclBfloat16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v)); break;
    case ncclFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case ncclFloat64: static_cast<double*>(p)[i] = v; break;
    default: break;
  }
}

// Element i of the reduction over every rank's slot (at `offset` bytes into each), in rank order.
// Floating types accumulate in their own precision (float16 and bfloat16 in float, as NCCL does),
// so a sum rounds after each addition.
double reduce_element(const CommState& c, ncclDataType_t t, ncclRedOp_t op, size_t offset, size_t i) {
  const bool single = t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16;
  double acc = load_any(t, c.slot(0) + offset, i);
  for (int r = 1; r < c.nranks; ++r) {
    const double v = load_any(t, c.slot(r) + offset, i);
    switch (op) {
      case ncclSum:
      case ncclAvg: acc = acc + v; break;
      case ncclProd: acc = acc * v; break;
      case ncclMax: acc = v > acc ? v : acc; break;
      case ncclMin: acc = v < acc ? v : acc; break;
      default: break;
    }
    if (single) acc = static_cast<float>(acc);
  }
  if (op == ncclAvg) acc = single ? static_cast<float>(acc / c.nranks) : acc / c.nranks;
  return acc;
}

enum class Kind { AllReduce, Broadcast, AllGather, ReduceScatter };

struct Collective {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;  // elements: of the input (all_reduce, broadcast, all_gather) or of the output (reduce_scatter)
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce: return "ncclAllReduce";
    case Kind::Broadcast: return "ncclBroadcast";
    case Kind::AllGather: return "ncclAllGather";
    case Kind::ReduceScatter: return "ncclReduceScatter";
  }
  return "?";
}

// Bytes a rank puts in its slot.
size_t posted_bytes(const Collective& k, int nranks) {
  const size_t b = k.count * type_size(k.type);
  return k.kind == Kind::ReduceScatter ? b * static_cast<size_t>(nranks) : b;
}

void consume(const CommState& c, const Collective& k) {
  const size_t elem = type_size(k.type), n = k.count;
  switch (k.kind) {
    case Kind::AllReduce:
      for (size_t i = 0; i < n; ++i) store_any(k.type, k.recv, i, reduce_element(c, k.type, k.op, 0, i));
      break;
    case Kind::Broadcast: std::memmove(k.recv, c.slot(k.root), n * elem); break;
    case Kind::AllGather:
      for (int r = 0; r < c.nranks; ++r) std::memmove(static_cast<char*>(k.recv) + r * n * elem, c.slot(r), n * elem);
      break;
    case Kind::ReduceScatter:
      for (size_t i = 0; i < n; ++i)
        store_any(k.type, k.recv, i, reduce_element(c, k.type, k.op, static_cast<size_t>(c.rank) * n * elem, i));
      break;
  }
}

ncclResult_t invalid(ncclResult_t result, const std::string& why) {
  t_last_message = "NCCL emulator: " + why;
  std::fprintf(stderr, "%s\n", t_last_message.c_str());
  return result;
}

bool device_range(const void* p, size_t bytes, int device) {
  Region r;
  return bytes == 0 || (p != nullptr && find_region(p, bytes, &r) && r.device == device);
}

ncclResult_t queue_collective(ncclComm_t comm, cudaStream_t stream, const Collective& k) {
  if (comm == nullptr || !comm->state)
    return invalid(ncclInvalidArgument, std::string(kind_name(k.kind)) + ": null communicator");
  const std::shared_ptr<CommState> c = comm->state;
  const char* name = kind_name(k.kind);
  if (type_size(k.type) == 0) return invalid(ncclInvalidArgument, std::string(name) + ": unknown data type");
  if (k.kind != Kind::Broadcast && k.kind != Kind::AllGather && (k.op < ncclSum || k.op > ncclAvg))
    return invalid(ncclInvalidArgument, std::string(name) + ": unknown reduction");
  if (k.kind == Kind::Broadcast && (k.root < 0 || k.root >= c->nranks))
    return invalid(ncclInvalidArgument, std::string(name) + ": root " + std::to_string(k.root) + " is not a rank");
  if (c->aborted.load()) return invalid(ncclInvalidUsage, std::string(name) + ": the communicator was aborted");
  int device = -1;
  if (!stream_device(stream, &device) || device != c->device)
    return invalid(ncclInvalidArgument,
                   std::string(name) + ": the stream is not one of cuda:" + std::to_string(c->device));
  const size_t in_bytes = posted_bytes(k, c->nranks);
  const size_t out_bytes = k.kind == Kind::AllGather       ? in_bytes * static_cast<size_t>(c->nranks)
                           : k.kind == Kind::ReduceScatter ? k.count * type_size(k.type)
                                                           : in_bytes;
  const bool sends = k.kind != Kind::Broadcast || c->rank == k.root;
  if ((sends && !device_range(k.send, in_bytes, c->device)) || !device_range(k.recv, out_bytes, c->device))
    return invalid(ncclInvalidArgument,
                   std::string(name) + ": a buffer is not wholly in the memory of cuda:" + std::to_string(c->device));
  if (in_bytes > kSlotBytes)
    return invalid(ncclInvalidUsage, std::string(name) + ": " + std::to_string(in_bytes) +
                                         " bytes per rank; the emulator moves at most 1 GiB per collective");
  const uint64_t seq = ++c->next_seq;
  auto posted = std::make_shared<bool>(false);
  enqueue_steps(stream, std::string(name) + " #" + std::to_string(seq) + " of rank " + std::to_string(c->rank),
                [c, k, seq, posted, in_bytes, sends] {
                  if (c->aborted.load()) return true;  // an aborted collective ends; its output is whatever it is
                  RankHeader& me = c->header().ranks[c->rank];
                  if (!*posted) {
                    if (!c->all(&RankHeader::consumed, seq - 1)) return c->peer_failed();
                    if (sends) std::memcpy(c->slot(c->rank), k.send, in_bytes);
                    me.posted.store(seq, std::memory_order_release);
                    *posted = true;
                  }
                  if (!c->all(&RankHeader::posted, seq)) return c->peer_failed();
                  consume(*c, k);
                  me.consumed.store(seq, std::memory_order_release);
                  return true;
                },
                {{sends ? k.send : nullptr, false}, {k.recv, true}});
  if (!c->blocking && seq == c->slow_seq) {
    c->enqueuing_until_ns.store(steady_ns() + c->slow_ms * 1000000);
    int expected = ncclSuccess;
    c->async.compare_exchange_strong(expected, ncclInProgress);
    return ncclInProgress;
  }
  return ncclSuccess;
}

// RINGGRAD_EMU_NCCL_SLOW_ENQUEUE=K:MS, read when a communicator is created; {0, 0} when unset.
std::pair<uint64_t, int64_t> slow_enqueue_setting() {
  const char* text = std::getenv("RINGGRAD_EMU_NCCL_SLOW_ENQUEUE");
  if (text == nullptr || *text == '\0') return {0, 0};
  unsigned long long seq = 0;
  long long ms = 0;
  char end = 0;
  if (std::sscanf(text, "%llu:%lld%c", &seq, &ms, &end) != 2 || seq == 0 || ms < 0) {
    std::fprintf(stderr, "cuda emulator: RINGGRAD_EMU_NCCL_SLOW_ENQUEUE expects K:MS (K >= 1, MS >= 0), got '%s'\n",
                 text);
    std::abort();
  }
  return {seq, ms};
}

std::string random_name() {
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  char buf[96];
  std::snprintf(buf, sizeof buf, "/ringgrad-emu-nccl-%d-%llu-%08x", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(++counter), device());
  return buf;
}

}  // namespace
}  // namespace cuda_emu

using namespace cuda_emu;

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return invalid(ncclInvalidArgument, "ncclGetUniqueId: null id");
  std::memset(unique_id->internal, 0, sizeof unique_id->internal);
  const std::string name = random_name();
  std::memcpy(unique_id->internal, name.c_str(), name.size());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr) return invalid(ncclInvalidArgument, "ncclCommInitRank: null comm");
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks)
    return invalid(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                            std::to_string(nranks) + " (the emulator has at most 16 ranks)");
  const std::string name(comm_id.internal, strnlen(comm_id.internal, sizeof comm_id.internal));
  if (name.rfind("/ringgrad-emu-nccl-", 0) != 0)
    return invalid(ncclInvalidArgument, "ncclCommInitRank: not a unique id from ncclGetUniqueId");
  if (use_context("ncclCommInitRank") != cudaSuccess) return ncclUnhandledCudaError;
  auto c = std::make_shared<CommState>();
  c->name = name;
  c->rank = rank;
  c->nranks = nranks;
  c->device = current_device();
  c->blocking = config == nullptr || config->blocking != 0;
  c->bytes = kHeaderBytes + static_cast<size_t>(nranks) * kSlotBytes;
  c->fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (c->fd < 0) return invalid(ncclSystemError, "shm_open(" + name + "): " + std::strerror(errno));
  struct stat st {};
  if (::fstat(c->fd, &st) != 0 ||
      (static_cast<size_t>(st.st_size) < c->bytes && ::ftruncate(c->fd, static_cast<off_t>(c->bytes)) != 0))
    return invalid(ncclSystemError, "sizing " + name + ": " + std::strerror(errno));
  void* p = ::mmap(nullptr, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
  if (p == MAP_FAILED) return invalid(ncclSystemError, "mmap(" + name + "): " + std::strerror(errno));
  c->base = static_cast<char*>(p);
  Header& h = c->header();
  uint64_t expected = 0;
  if (h.magic.compare_exchange_strong(expected, kMagic)) h.nranks.store(nranks);
  while (h.nranks.load() == 0) std::this_thread::yield();  // the first rank is storing it
  if (h.nranks.load() != nranks)
    return invalid(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " says " +
                                         std::to_string(nranks) + " ranks, another said " +
                                         std::to_string(h.nranks.load()));
  RankHeader& me = h.ranks[rank];
  me.pid.store(static_cast<int32_t>(::getpid()));
  if (me.joined.exchange(1) != 0)
    return invalid(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " joined twice");
  c->async.store(ncclInProgress);
  std::tie(c->slow_seq, c->slow_ms) = slow_enqueue_setting();
  *comm = new ncclComm{c};
  if (!c->blocking) {
    ncclResult_t state = ncclInProgress;
    ncclCommGetAsyncError(*comm, &state);
    return state == ncclSuccess ? ncclSuccess : ncclInProgress;
  }
  for (;;) {  // blocking: every rank joins, or one fails
    ncclResult_t state = ncclInProgress;
    ncclCommGetAsyncError(*comm, &state);
    if (state != ncclInProgress) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, comm_id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) return ncclInvalidArgument;
  CommState& c = *comm->state;
  if (const int64_t until = c.enqueuing_until_ns.load(); until != 0) {
    if (steady_ns() < until && c.async.load() == ncclInProgress) {
      *async_error = ncclInProgress;  // still "connecting" (RINGGRAD_EMU_NCCL_SLOW_ENQUEUE)
      return ncclSuccess;
    }
    c.enqueuing_until_ns.store(0);
  }
  if (c.async.load() == ncclInProgress) {
    if (c.all_joined()) {
      int expected = ncclInProgress;
      c.async.compare_exchange_strong(expected, ncclSuccess);
      (void)::shm_unlink(c.name.c_str());  // every rank has it mapped: the name is no longer needed
    } else {
      c.peer_failed();
    }
  }
  *async_error = static_cast<ncclResult_t>(c.async.load());
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm == nullptr ? ncclInvalidArgument : ncclSuccess; }

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  comm->state->header().ranks[comm->state->rank].state.store(kDestroyed, std::memory_order_release);
  if (!comm->state->all_joined()) (void)::shm_unlink(comm->state->name.c_str());
  delete comm;  // queued collectives keep the mapping until they have run
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  comm->state->aborted.store(true);
  comm->state->header().ranks[comm->state->rank].state.store(kAborted, std::memory_order_release);
  if (!comm->state->all_joined()) (void)::shm_unlink(comm->state->name.c_str());
  delete comm;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(comm->state->message_mutex);
    if (!comm->state->message.empty()) t_last_message = comm->state->message;
  }
  return t_last_message.c_str();
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return queue_collective(comm, stream, {Kind::AllReduce, sendbuff, recvbuff, count, datatype, op, 0});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return queue_collective(comm, stream, {Kind::Broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return queue_collective(comm, stream, {Kind::AllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return queue_collective(comm, stream, {Kind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0});
}
