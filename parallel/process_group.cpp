// parallel/process_group.cpp: Work, ProcessGroup, the backend registry, and init_process_group()
// (launch variables: launch_info.cpp).
#include <ringgrad/parallel/process_group.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include <ringgrad/core/base/error.h>
#include "parallel/gloo/gloo_process_group.h"
#include "parallel/nccl/nccl_process_group.h"
#include "parallel/ring/hierarchical.h"
#include <ringgrad/parallel/rendezvous.h>
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

// --- init_process_group ---------------------------------------------------------------------------------
// "nccl" and "gloo" live in libraries of their own (ringgrad::nccl, ringgrad::gloo), which need NCCL
// and CUDA, or Gloo. A program has them when it links them: each installs its maker from a static
// initialiser (install_nccl, install_gloo), and this file, which every program has, only forwards.
constexpr const char* kNoNccl =
    "backend \"nccl\" is not in this build of the program: it needs ringgrad configured with CUDA and NCCL, and "
    "the program linked with ringgrad::nccl (from find_package(ringgrad COMPONENTS nccl), or add_subdirectory); use "
    "backend \"ring\"";
constexpr const char* kNoGloo =
    "backend \"gloo\" is not in this build of the program: it needs ringgrad configured with Gloo (apt-get "
    "install libgloo-dev), and the program linked with ringgrad::gloo (from find_package(ringgrad COMPONENTS gloo), "
    "or add_subdirectory); use backend \"ring\"";

namespace {
std::atomic<NcclGroupMaker> g_nccl_maker{nullptr};
std::atomic<GlooGroupMaker> g_gloo_maker{nullptr};
}  // namespace

bool nccl_available() { return g_nccl_maker.load() != nullptr; }
bool gloo_available() { return g_gloo_maker.load() != nullptr; }

std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank, int size, int local_rank,
                                                      std::chrono::milliseconds timeout) {
  const NcclGroupMaker make = g_nccl_maker.load();
  if (make == nullptr) throw Error(detail::str("make_nccl_process_group: ", kNoNccl));
  return make(std::move(store), rank, size, local_rank, timeout);
}

std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const GlooOptions& options) {
  const GlooGroupMaker make = g_gloo_maker.load();
  if (make == nullptr) throw Error(detail::str("make_gloo_process_group: ", kNoGloo));
  return make(std::move(store), rank, size, options);
}

void install_nccl(NcclGroupMaker make) {
  if (g_nccl_maker.exchange(make) != nullptr) return;  // a second copy of the library: installed already
  register_process_group_backend("nccl", [](const BackendContext& context) {
    return make_nccl_process_group(context.store, context.info.rank, context.info.world_size, context.info.local_rank,
                                   context.info.timeout);
  });
}

void install_gloo(GlooGroupMaker make) {
  if (g_gloo_maker.exchange(make) != nullptr) return;
  register_process_group_backend("gloo", [](const BackendContext& context) {
    GlooOptions gloo;
    gloo.timeout() = context.info.timeout;
    gloo.setup_timeout() = context.info.setup_timeout;
    gloo.master_addr() = context.info.master_addr;
    return make_gloo_process_group(context.store, context.info.rank, context.info.world_size, gloo);
  });
}

namespace {
std::mutex g_default_mutex;
std::shared_ptr<ProcessGroup> g_default_group;

// --- the backend registry -------------------------------------------------------------------------
// A function-local static, made on first use with "ring" in it: "nccl" and "gloo" are added from
// their libraries' static initialisers (install_nccl, install_gloo), whose order against this
// file's is unspecified, and users add theirs at any time.
struct BackendRegistry {
  BackendRegistry();  // installs "ring"
  std::mutex mutex;
  std::map<std::string, ProcessGroupFactory> factories;  // sorted, so messages list names in order
};

std::shared_ptr<ProcessGroup> make_ring(const BackendContext& context) {
  RingOptions ring;
  ring.timeout() = context.info.timeout;
  ring.setup_timeout() = context.info.setup_timeout;
  ring.transport() = context.options.transport();
  ring.algorithm() = context.options.ring_algorithm();
  ring.master_addr() = context.info.master_addr;
  return std::make_shared<RingProcessGroup>(context.store, context.info.rank, context.info.world_size, ring);
}

BackendRegistry::BackendRegistry() { factories.emplace("ring", make_ring); }

BackendRegistry& backend_registry() {
  static BackendRegistry registry;  // thread-safe initialisation, on the first call
  return registry;
}

// "a", "b" or "c": the registered names, for messages.
std::string quoted_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += "\"" + names[i] + "\"";
  }
  return out;
}

// The factory registered under `backend`; throws, listing the registered names, for any other.
ProcessGroupFactory find_backend(const std::string& backend) {
  {
    BackendRegistry& registry = backend_registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    const auto it = registry.factories.find(backend);
    if (it != registry.factories.end()) return it->second;
  }
  if (backend == "nccl" && !nccl_available()) throw Error(detail::str("init_process_group: ", kNoNccl));
  if (backend == "gloo" && !gloo_available()) throw Error(detail::str("init_process_group: ", kNoGloo));
  std::string no_nccl = nccl_available() ? "" : "; \"nccl\" needs ringgrad::nccl";
  if (!gloo_available()) no_nccl += "; \"gloo\" needs ringgrad::gloo";
  throw Error(detail::str("init_process_group: expected backend ", quoted_names(registered_process_group_backends()),
                          " (the registered backends", no_nccl, "; register_process_group_backend adds more), got \"",
                          backend, "\""));
}

// Where ringgrad's store listens. torchrun's agent already serves a TCPStore of its own on
// MASTER_PORT (and says so: TORCHELASTIC_USE_AGENT_STORE), so under torchrun ringgrad's store takes
// the next port -- the same on every rank, with no flag needed -- unless RINGGRAD_STORE_PORT says.
int store_port(const LaunchInfo& info) {
  if (const char* text = std::getenv("RINGGRAD_STORE_PORT"); text != nullptr && *text != '\0') {
    char* end = nullptr;
    const long port = std::strtol(text, &end, 10);
    RINGGRAD_CHECK(*end == '\0' && port >= 1 && port <= 65535,
                   "init_process_group: expected RINGGRAD_STORE_PORT in 1..65535, got '", text, "'");
    return static_cast<int>(port);
  }
  if (!info.torchrun_agent_store) return info.master_port;
  RINGGRAD_CHECK(info.master_port < 65535,
                 "init_process_group: under torchrun ringgrad's store uses MASTER_PORT + 1, "
                 "and MASTER_PORT is 65535; set RINGGRAD_STORE_PORT");
  return info.master_port + 1;
}

// Once per process, on rank 0: a job without a token accepts any process that reaches its ports.
void warn_if_unauthenticated(const LaunchInfo& info, int port) {
  static std::once_flag once;
  if (info.rank != 0 || info.world_size == 1 || !job_token().empty()) return;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "init_process_group: warning: RINGGRAD_JOB_TOKEN is not set, so connections to this job (store at "
                 "%s:%d, ring links) are not authenticated: any process that reaches them can join or disturb "
                 "the job. ringrun sets a random token; with another launcher, export the same secret to every "
                 "rank, e.g. RINGGRAD_JOB_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')\n",
                 info.master_addr.c_str(), port);
  });
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend, const InitOptions& options) {
  const LaunchInfo info = read_launch_info(options);
  const ProcessGroupFactory make_group = find_backend(backend);  // before meeting anyone: fail alone, at once
  if (backend == "ring") (void)requested_algorithm(options.ring_algorithm());  // so does a bad ring algorithm
  // Rank 0 serves the store; everyone (rank 0 too) is a client. A job of one needs no store.
  std::shared_ptr<Store> store;
  if (info.world_size > 1) {
    const int port = store_port(info);
    if (info.rank == 0 && port != info.master_port) {
      std::fprintf(stderr,
                   "init_process_group: torchrun's agent serves its own store on MASTER_PORT %d, so ringgrad's "
                   "store uses port %d (RINGGRAD_STORE_PORT chooses another)\n",
                   info.master_port, port);
    }
    warn_if_unauthenticated(info, port);
    const std::string address = info.master_addr + ":" + std::to_string(port);
    try {
      store = std::make_shared<TCPStore>(TCPStoreOptions()
                                             .host(info.master_addr)
                                             .port(port)
                                             .is_server(info.rank == 0)
                                             .timeout(info.setup_timeout)
                                             .token(job_token())
                                             .report_waiting(true));
    } catch (const Error& e) {
      // The one case whose cause the socket layer cannot know: torchrun holding the port.
      const bool in_use = std::string(e.what()).find("in use") != std::string::npos;
      if (in_use && std::getenv("TORCHELASTIC_RUN_ID") != nullptr) {
        throw Error(detail::str(e.what(),
                                " -- this process runs under torchrun, whose agent may hold that port; set "
                                "RINGGRAD_STORE_PORT to a free port, the same on every rank"));
      }
      if (info.rank == 0) throw;
      throw Error(detail::str("init_process_group: rank ", info.rank, " of ", info.world_size, " (launched by ",
                              info.launcher, ") cannot meet rank 0's store at ", address, ": ", e.what()));
    }
    rendezvous(*store, {info.rank, info.world_size, address, info.job_id}, info.setup_timeout);
  }
  std::shared_ptr<ProcessGroup> group = make_group(BackendContext{info, options, store});
  RINGGRAD_CHECK(group != nullptr, "init_process_group: the factory of backend \"", backend,
                 "\" returned no process group");
  std::lock_guard<std::mutex> lock(g_default_mutex);
  g_default_group = group;
  return group;
}

void register_process_group_backend(const std::string& name, ProcessGroupFactory factory) {
  RINGGRAD_CHECK(!name.empty(), "register_process_group_backend: expected a backend name, got \"\"");
  RINGGRAD_CHECK(factory != nullptr, "register_process_group_backend(\"", name,
                 "\"): expected a factory, got an empty function");
  BackendRegistry& registry = backend_registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  const bool added = registry.factories.emplace(name, std::move(factory)).second;
  RINGGRAD_CHECK(added, "register_process_group_backend: backend \"", name,
                 "\" is already registered; each name can be registered once");
}

std::vector<std::string> registered_process_group_backends() {
  BackendRegistry& registry = backend_registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry.factories) names.push_back(name);
  return names;
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
