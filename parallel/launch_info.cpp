// parallel/launch_info.cpp: where this process stands in the job, read from whichever launcher
// started it.
//
// Every launcher tells a process its rank, but each in its own words: ringrun and torchrun set
// RANK/WORLD_SIZE (PyTorch's convention), Open MPI sets OMPI_COMM_WORLD_*, MPICH and Intel MPI set
// PMI_*, Slurm's srun sets SLURM_*. A job started by srun running mpirun has several of these at
// once, so the order is explicit (process_group.h) and rank and world size always come from the same
// family: mixing one launcher's rank with another's world size would build a job nobody started.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

#include <ringgrad/core/base/error.h>
#include <ringgrad/parallel/process_group.h>

namespace ringgrad {
namespace parallel {
namespace {

constexpr const char* kHowToLaunch =
    "; launch with tools/ringrun --nproc-per-node N prog, torchrun, Open MPI's mpirun, MPICH's mpiexec or "
    "Slurm's srun, or pass InitOptions explicitly";

// An environment variable, or nullopt when unset or empty.
std::optional<std::string> env(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  return std::string(text);
}

// An integer environment variable: nullopt when unset, an error when set but not an integer.
std::optional<int> env_int(const char* name) {
  const std::optional<std::string> text = env(name);
  if (!text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text->c_str(), &end, 10);
  RINGGRAD_CHECK(errno == 0 && *end == '\0' && end != text->c_str() && value >= std::numeric_limits<int>::min() &&
                     value <= std::numeric_limits<int>::max(),
                 "init_process_group: expected ", name, " to be an integer, got '", *text, "'");
  return static_cast<int>(value);
}

// RINGGRAD_TIMEOUT: seconds, a positive number (fractions allowed: 0.5 is half a second).
std::optional<std::chrono::milliseconds> env_timeout() {
  const std::optional<std::string> text = env("RINGGRAD_TIMEOUT");
  if (!text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double seconds = std::strtod(text->c_str(), &end);
  RINGGRAD_CHECK(errno == 0 && *end == '\0' && end != text->c_str() && seconds > 0 && seconds <= 30 * 86400.0,
                 "init_process_group: expected RINGGRAD_TIMEOUT to be a number of seconds in (0, 2592000], got '",
                 *text, "'");
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds * 1000))));
}

// One launcher's names for the three variables. local_rank may be absent (PMI without Hydra).
struct Family {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
};

constexpr Family kFamilies[] = {
    {"ringrun or torchrun (RANK, WORLD_SIZE)", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"MPICH/Intel MPI (PMI)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at the first comma outside brackets; each bracket group in it contributes
  // its first number ("003" of "[003-007,9]", zero padding kept).
  std::string host;
  for (size_t i = 0; i < nodelist.size(); ++i) {
    const char c = nodelist[i];
    if (c == ',') break;
    if (c != '[') {
      host += c;
      continue;
    }
    const size_t close = nodelist.find(']', i);
    RINGGRAD_CHECK(close != std::string::npos, "init_process_group: cannot read SLURM_JOB_NODELIST '", nodelist,
                   "': '[' without ']'");
    const std::string group = nodelist.substr(i + 1, close - i - 1);
    const std::string first = group.substr(0, group.find_first_of(",-"));
    RINGGRAD_CHECK(!first.empty(), "init_process_group: cannot read SLURM_JOB_NODELIST '", nodelist,
                   "': an empty range in brackets");
    host += first;
    i = close;
  }
  RINGGRAD_CHECK(!host.empty(), "init_process_group: cannot read a host name from SLURM_JOB_NODELIST '", nodelist, "'");
  return host;
}

LaunchInfo read_launch_info(const InitOptions& options) {
  LaunchInfo info;
  // Rank and world size: the code's, else the first launcher family whose rank variable is set.
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    if (env(f.rank) || (f.rank == kFamilies[0].rank && env(f.size))) {
      family = &f;
      break;
    }
  }
  std::optional<int> world = options.world_size() >= 0 ? std::optional<int>(options.world_size()) : std::nullopt;
  std::optional<int> rank = options.rank() >= 0 ? std::optional<int>(options.rank()) : std::nullopt;
  if (family != nullptr) {
    if (!world) world = env_int(family->size);
    if (!rank) rank = env_int(family->rank);
    info.launcher = family->launcher;
  }
  const char* size_name = family ? family->size : "WORLD_SIZE";
  const char* rank_name = family ? family->rank : "RANK";
  RINGGRAD_CHECK(world.has_value(), "init_process_group: ", size_name, " is not set", kHowToLaunch);
  RINGGRAD_CHECK(rank.has_value(), "init_process_group: ", rank_name, " is not set", kHowToLaunch);
  info.world_size = *world;
  info.rank = *rank;
  RINGGRAD_CHECK(info.world_size >= 1, "init_process_group: expected ", size_name, " >= 1, got ", info.world_size);
  RINGGRAD_CHECK(info.rank >= 0 && info.rank < info.world_size, "init_process_group: expected 0 <= ", rank_name, " < ",
                 size_name, " (", info.world_size, "), got ", info.rank);
  // srun can start an MPI job itself (srun --mpi=pmi2 sets PMI_* as well as SLURM_*): when Slurm's
  // numbers agree with the chosen family's, Slurm fills in what that family leaves out.
  const bool under_srun = env_int("SLURM_PROCID") == std::optional<int>(info.rank) &&
                          env_int("SLURM_NTASKS") == std::optional<int>(info.world_size);
  std::optional<int> local = options.local_rank() >= 0 ? std::optional<int>(options.local_rank()) : std::nullopt;
  if (!local && family != nullptr) local = env_int(family->local_rank);
  if (!local && under_srun) local = env_int("SLURM_LOCALID");
  info.local_rank = local.value_or(info.rank);
  RINGGRAD_CHECK(info.local_rank >= 0, "init_process_group: expected a local rank >= 0, got ", info.local_rank);

  // Where rank 0's store is. ringrun and torchrun always say; MPI and Slurm say nothing, so their
  // jobs get defaults: Slurm's first host, and port 29500 (PyTorch's).
  const bool mpi_or_slurm = family != nullptr && family != &kFamilies[0];
  if (!options.master_addr().empty()) {
    info.master_addr = options.master_addr();
  } else if (const std::optional<std::string> addr = env("MASTER_ADDR")) {
    info.master_addr = *addr;
  } else if (family == &kFamilies[3] || (mpi_or_slurm && under_srun)) {
    // The step's first node runs its task 0 (a step started with -w or -r need not use the job's first).
    std::optional<std::string> nodes = env("SLURM_STEP_NODELIST");
    if (!nodes) nodes = env("SLURM_JOB_NODELIST");
    if (!nodes) nodes = env("SLURM_NODELIST");
    if (nodes) info.master_addr = first_slurm_host(*nodes);
  } else if (family == &kFamilies[1] || family == &kFamilies[2]) {
    // MPI says how many ranks share this host: fewer than the job means several hosts, and
    // 127.0.0.1 would be the wrong machine for all but one of them.
    const char* local_size_name = family == &kFamilies[1] ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "MPI_LOCALNRANKS";
    const std::optional<int> local_size = env_int(local_size_name);
    RINGGRAD_CHECK(!local_size || *local_size >= info.world_size, "init_process_group: this ", family->launcher,
                   " job spans several hosts (", local_size_name, " ", local_size.value_or(0), " < ", family->size, " ",
                   info.world_size,
                   "), so MASTER_ADDR must name rank 0's host (Open MPI: mpirun -x MASTER_ADDR=<host>)");
  }
  if (options.master_port() >= 0) {
    info.master_port = options.master_port();
  } else if (const std::optional<int> port = env_int("MASTER_PORT")) {
    info.master_port = *port;
  } else {
    info.master_port = mpi_or_slurm ? 29500 : -1;
  }
  if (info.world_size > 1) {
    RINGGRAD_CHECK(info.master_port != -1,
                   "init_process_group: MASTER_PORT is not set (rank 0 serves the "
                   "rendezvous store there)",
                   kHowToLaunch);
    RINGGRAD_CHECK(info.master_port >= 1 && info.master_port <= 65535,
                   "init_process_group: expected MASTER_PORT in 1..65535, got ", info.master_port);
  }

  // The launcher's job id, when it has one.
  if (family == &kFamilies[3] && env("SLURM_JOB_ID")) {
    info.job_id = "slurm " + *env("SLURM_JOB_ID") + "." + env("SLURM_STEP_ID").value_or("0");
  } else if (family == &kFamilies[1] && env("OMPI_MCA_ess_base_jobid")) {
    info.job_id = "open-mpi " + *env("OMPI_MCA_ess_base_jobid");
  } else if (env("PMIX_NAMESPACE") && mpi_or_slurm) {
    info.job_id = "pmix " + *env("PMIX_NAMESPACE");
  } else if (family == &kFamilies[0] && env("TORCHELASTIC_RUN_ID")) {
    info.job_id = "torchrun " + *env("TORCHELASTIC_RUN_ID");
  }

  // torchrun (without --standalone or with it) runs an agent that already serves its own TCPStore on
  // MASTER_PORT and tells its workers so.
  const std::optional<std::string> agent_store = env("TORCHELASTIC_USE_AGENT_STORE");
  info.torchrun_agent_store = agent_store && (*agent_store == "True" || *agent_store == "true" || *agent_store == "1");

  // Timeouts: the code's, else RINGGRAD_TIMEOUT, else the defaults. A timeout set in code also bounds
  // setup, as it always did; RINGGRAD_TIMEOUT is one knob for both.
  const std::optional<std::chrono::milliseconds> from_env = env_timeout();
  info.timeout = options.timeout().value_or(from_env.value_or(kDefaultTimeout));
  info.setup_timeout =
      options.setup_timeout().value_or(options.timeout().value_or(from_env.value_or(kDefaultSetupTimeout)));
  RINGGRAD_CHECK(info.timeout.count() > 0 && info.setup_timeout.count() > 0,
                 "init_process_group: expected positive timeouts, got ", info.timeout.count(), " ms and ",
                 info.setup_timeout.count(), " ms (setup)");
  return info;
}

}  // namespace parallel
}  // namespace ringgrad
