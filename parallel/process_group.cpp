// parallel/process_group.cpp: Work, the launch variables, and init_process_group().
#include "parallel/process_group.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "parallel/nccl/nccl_process_group.h"
#include "parallel/ring/ring_process_group.h"
#include "parallel/socket.h"

namespace ringgrad {
namespace parallel {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

// --- Work ---------------------------------------------------------------------------------------------

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Work::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  // No deadline here: the backend enforces the group's timeout on the collective itself and then
  // marks it done with an error, so this wait always ends.
  done_cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

std::chrono::steady_clock::time_point Work::start_time() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return start_;
}

std::chrono::steady_clock::time_point Work::end_time() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return end_;
}

void Work::mark_started() {
  std::lock_guard<std::mutex> lock(mutex_);
  start_ = std::chrono::steady_clock::now();
}

void Work::mark_done(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    end_ = std::chrono::steady_clock::now();
    error_ = std::move(error);
    done_ = true;
  }
  done_cv_.notify_all();
}

ProcessGroup::ProcessGroup(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_ms_(timeout.count()) {
  RINGGRAD_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup: expected 0 <= rank < world size, got rank ",
                 rank, " of ", size);
}

// --- the launch variables ------------------------------------------------------------------------------
namespace {

constexpr const char* kHowToLaunch =
    "; launch with tools/ringrun --nproc-per-node N prog (or torchrun / srun, which set the same variables), "
    "or pass InitOptions explicitly";

// An integer environment variable: `fallback` when unset, an error when set but not an integer.
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  RINGGRAD_CHECK(errno == 0 && *end == '\0' && value >= std::numeric_limits<int>::min() &&
                     value <= std::numeric_limits<int>::max(),
                 "init_process_group: expected ", name, " to be an integer, got '", text, "'");
  return static_cast<int>(value);
}

}  // namespace

LaunchInfo read_launch_info(const InitOptions& options) {
  LaunchInfo info;
  info.world_size = options.world_size >= 0 ? options.world_size : env_int("WORLD_SIZE", -1);
  info.rank = options.rank >= 0 ? options.rank : env_int("RANK", -1);
  RINGGRAD_CHECK(info.world_size != -1, "init_process_group: WORLD_SIZE is not set", kHowToLaunch);
  RINGGRAD_CHECK(info.rank != -1, "init_process_group: RANK is not set", kHowToLaunch);
  RINGGRAD_CHECK(info.world_size >= 1, "init_process_group: expected WORLD_SIZE >= 1, got ", info.world_size);
  RINGGRAD_CHECK(info.rank >= 0 && info.rank < info.world_size, "init_process_group: expected 0 <= RANK < WORLD_SIZE (",
                 info.world_size, "), got RANK ", info.rank);
  info.local_rank = options.local_rank >= 0 ? options.local_rank : env_int("LOCAL_RANK", info.rank);
  RINGGRAD_CHECK(info.local_rank >= 0, "init_process_group: expected LOCAL_RANK >= 0, got ", info.local_rank);
  if (!options.master_addr.empty()) {
    info.master_addr = options.master_addr;
  } else if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    info.master_addr = addr;
  }
  info.master_port = options.master_port >= 0 ? options.master_port : env_int("MASTER_PORT", -1);
  if (info.world_size > 1) {
    RINGGRAD_CHECK(info.master_port != -1, "init_process_group: MASTER_PORT is not set (rank 0 serves the "
                   "rendezvous store there)", kHowToLaunch);
    RINGGRAD_CHECK(info.master_port >= 1 && info.master_port <= 65535,
                   "init_process_group: expected MASTER_PORT in 1..65535, got ", info.master_port);
  }
  return info;
}

// --- init_process_group ---------------------------------------------------------------------------------
#ifndef RINGGRAD_WITH_NCCL
bool nccl_available() { return false; }
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store>, int, int, int, std::chrono::milliseconds) {
  throw Error("init_process_group: backend \"nccl\" is not in this build (it needs CUDA and NCCL at configure "
              "time); use backend \"ring\"");
}
#endif

namespace {
std::mutex g_default_mutex;
std::shared_ptr<ProcessGroup> g_default_group;
}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend, const InitOptions& options) {
  const LaunchInfo info = read_launch_info(options);
  RINGGRAD_CHECK(backend == "ring" || backend == "nccl", "init_process_group: expected backend \"ring\" or \"nccl\", "
                 "got \"", backend, "\"");
  // Rank 0 serves the store; everyone (rank 0 too) is a client. A job of one needs no store.
  std::shared_ptr<Store> store;
  if (info.world_size > 1) {
    store = std::make_shared<TCPStore>(TCPStoreOptions()
                                           .with_host(info.master_addr)
                                           .with_port(info.master_port)
                                           .server(info.rank == 0)
                                           .with_timeout(options.timeout)
                                           .with_token(net::job_token()));
  }
  std::shared_ptr<ProcessGroup> group;
  if (backend == "ring") {
    RingOptions ring;
    ring.timeout = options.timeout;
    ring.transport = options.transport;
    ring.master_addr = info.master_addr;
    group = std::make_shared<RingProcessGroup>(store, info.rank, info.world_size, ring);
  } else {
    group = make_nccl_process_group(store, info.rank, info.world_size, info.local_rank, options.timeout);
  }
  std::lock_guard<std::mutex> lock(g_default_mutex);
  g_default_group = group;
  return group;
}

std::shared_ptr<ProcessGroup> default_process_group() {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  return g_default_group;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  g_default_group.reset();
}

}  // namespace parallel
}  // namespace ringgrad
