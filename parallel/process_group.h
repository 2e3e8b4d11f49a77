/// @file
/// parallel/process_group.h: a group of processes that run collectives together, and how to make one.
///
/// Every process of a job calls init_process_group(); it reads where it stands (RANK, WORLD_SIZE,
/// LOCAL_RANK, MASTER_ADDR, MASTER_PORT from ringrun or torchrun; or Open MPI's, MPICH's or Slurm's own),
/// meets the others through a TCPStore served by rank 0, and returns a ProcessGroup. Collectives are
/// asynchronous: each returns a Work to wait() on, so a caller (DDP's reducer) can launch one and keep
/// computing. They run in the order they were launched, which must be the same on every rank.
///
/// @code
///   auto pg = parallel::init_process_group("ring");      // or "nccl" for CUDA tensors
///   Tensor g = ...;                                        // same shape on every rank
///   pg->all_reduce(g, parallel::ReduceOp::Avg)->wait();   // g is now the mean over all ranks
/// @endcode
///
/// Every collective has a deadline (the group's timeout, 300 s unless set): a peer that dies or
/// stalls makes the others fail with an error naming the rank and the collective, never hang.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/parallel/store.h>

namespace ringgrad {
namespace parallel {

/// How all_reduce and reduce_scatter combine the ranks' values (PyTorch's dist.ReduceOp).
enum class ReduceOp : uint8_t { Sum, Avg, Min, Max };
const char* reduce_op_name(ReduceOp op);  ///< "sum", "avg", "min", "max": for messages

/// A collective in flight. wait() blocks until it finished and rethrows its error, if any.
class Work {
 public:
  /// `description` names the collective in messages and traces.
  explicit Work(std::string description) : description_(std::move(description)) {}
  virtual ~Work() = default;
  virtual bool is_completed() const;  ///< true once the collective finished, with or without an error
  /// Blocks until the collective finished; rethrows its error (a timeout, a dead peer) if it failed.
  virtual void wait();
  const std::string& description() const { return description_; }  ///< "all_reduce(sum, 1048576 x float32)"

  /// When the collective started and finished running (not when it was queued): for timelines.
  std::chrono::steady_clock::time_point start_time() const;
  std::chrono::steady_clock::time_point end_time() const;  ///< see start_time()

  /// Backend side: mark the start, and the end with or without an error.
  void mark_started();
  void mark_done(std::exception_ptr error = nullptr);  ///< wakes every wait(); see mark_started()

 protected:
  mutable std::mutex mutex_;         ///< guards the members below
  std::condition_variable done_cv_;  ///< signalled by mark_done()
  bool done_ = false;                ///< set by mark_done()
  std::exception_ptr error_;         ///< the failure wait() rethrows, if any
  std::string description_;          ///< see description()
  ///@{
  /// see start_time()
  std::chrono::steady_clock::time_point start_, end_;
  ///@}
};

/// A group of processes that run collectives together, one ProcessGroup per process (PyTorch's
/// ProcessGroup). Backends ("ring", "nccl", or one registered with register_process_group_backend)
/// derive from it; init_process_group makes one.
class ProcessGroup {
 public:
  /// For backends: this process's rank in [0, size), and the collectives' initial timeout.
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }             ///< this process's rank, in [0, size())
  int size() const { return size_; }             ///< the number of processes (the world size)
  virtual const char* backend_name() const = 0;  ///< "ring", "nccl", ...: the registered name
  /// Where this backend wants the tensors of a collective whose caller may choose (DDP's model
  /// check): the host for backends that work on host memory (the default, and "ring", which would
  /// only stage GPU tensors there), the module's own device for one that moves GPU memory ("nccl").
  virtual Device collective_device(Device module_device) const { return Device::cpu(); }

  /// All in place on dense tensors of the same shape and dtype on every rank.
  /// tensor = op over ranks of tensor.
  virtual std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  /// tensor = root's tensor.
  virtual std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) = 0;
  /// outputs[r] = rank r's input (outputs: size() tensors shaped like input).
  virtual std::shared_ptr<Work> all_gather(const std::vector<Tensor>& outputs, const Tensor& input) = 0;
  /// output = op over ranks of inputs[rank()] (inputs: size() tensors shaped like output).
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                               ReduceOp op = ReduceOp::Sum) = 0;
  /// Returns once every rank reached it.
  virtual std::shared_ptr<Work> barrier() = 0;

  /// Deadline of each collective from when it starts running (default 300 s, like PyTorch). Safe to
  /// change while collectives run: each reads it when it starts.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ms_ = timeout.count(); }
  /// The current deadline of each collective (see set_timeout()).
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }

 protected:
  ///@{
  /// see rank() and size()
  int rank_, size_;
  ///@}
  std::atomic<int64_t> timeout_ms_;  ///< see set_timeout()
};

/// Where this process stands in the job. Values left at -1 / "" / unset are read from the environment
/// that the launcher set (see read_launch_info).
struct InitOptions {
  /// Unset (-1): from the environment (RANK, WORLD_SIZE, LOCAL_RANK, or MPI's and Slurm's own).
  RINGGRAD_ARG(int, rank) = -1;
  RINGGRAD_ARG(int, world_size) = -1;      ///< the number of processes in the job
  RINGGRAD_ARG(int, local_rank) = -1;      ///< this process's index on its host (its GPU, with NCCL)
  RINGGRAD_ARG(std::string, master_addr);  ///< default: MASTER_ADDR, else (Slurm) the job's first host, else 127.0.0.1
  RINGGRAD_ARG(int,
               master_port) = -1;  ///< default: MASTER_PORT (required from ringrun/torchrun; 29500 under MPI/Slurm)
  /// How long a collective may wait for the other ranks. Default: RINGGRAD_TIMEOUT (seconds), else 300 s.
  RINGGRAD_ARG(std::optional<std::chrono::milliseconds>, timeout);
  /// Setup -- meeting at rank 0's store and connecting the ring (or NCCL) -- is a wait a user watches,
  /// so it gets a shorter default. Default: timeout when set in code, else RINGGRAD_TIMEOUT, else 60 s.
  RINGGRAD_ARG(std::optional<std::chrono::milliseconds>, setup_timeout);
  /// ring only: "auto" (shared memory when every rank is on this host, else TCP), "tcp" or "shm".
  RINGGRAD_ARG(std::string, transport) = "auto";
  /// ring only, all_reduce's algorithm: "auto" (hierarchical across hosts with the same number, 2 or
  /// more, of ranks each; else flat), "flat" or "hierarchical". Default: RINGGRAD_RING_ALGORITHM, else "auto".
  RINGGRAD_ARG(std::string, ring_algorithm);
};

constexpr std::chrono::milliseconds kDefaultTimeout{300000};      ///< collectives, as PyTorch's gloo
constexpr std::chrono::milliseconds kDefaultSetupTimeout{60000};  ///< rendezvous and connecting

/// The launch variables after defaults and checks. Throws naming the missing or invalid variable and
/// how to launch. Sources, first match wins (rank and world size always come from the same one):
/// @code
///   1. InitOptions fields set in code
///   2. RANK, WORLD_SIZE, LOCAL_RANK          ringrun, torchrun, or set by hand
///   3. OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK        Open MPI's mpirun
///   4. PMI_RANK, PMI_SIZE, MPI_LOCALRANKID   MPICH's and Intel MPI's mpiexec (Hydra)
///   5. SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID         srun
/// @endcode
struct LaunchInfo {
  ///@{
  /// local_rank: the rank among this host's processes
  int rank = 0, world_size = 1, local_rank = 0;
  ///@}
  std::string master_addr = "127.0.0.1";      ///< the host of rank 0's store
  int master_port = 0;                        ///< the port of rank 0's store
  std::string launcher = "explicit options";  ///< which source gave rank and world size, for messages
  bool torchrun_agent_store = false;          ///< torchrun's agent already serves a TCPStore on MASTER_PORT
  /// The launcher's name for this job ("slurm 4242.0", "open-mpi 1273495553", "torchrun <run id>"),
  /// "" when it gives none. Ranks that meet at a store whose rank 0 has another job id fail at once:
  /// two jobs on one MASTER_PORT must not build one ring.
  std::string job_id;
  std::chrono::milliseconds timeout = kDefaultTimeout;             ///< of each collective
  std::chrono::milliseconds setup_timeout = kDefaultSetupTimeout;  ///< of the rendezvous and connecting
};
/// See LaunchInfo: reads the launch variables, `options` first.
LaunchInfo read_launch_info(const InitOptions& options);

/// The first host of a Slurm node list: "node[03-05,9],gpu1" -> "node03". Exposed for tests.
std::string first_slurm_host(const std::string& nodelist);

/// What init_process_group hands a backend's factory, once the ranks have met: where this process
/// stands (after defaults), the options given in code, and the store served by rank 0 -- null in a
/// job of one, which needs no store.
struct BackendContext {
  LaunchInfo info;               ///< this process's place in the job, after defaults
  InitOptions options;           ///< as given to init_process_group
  std::shared_ptr<Store> store;  ///< rank 0's store; null when the world size is 1
};
/// Makes a backend's ProcessGroup; see register_process_group_backend.
using ProcessGroupFactory = std::function<std::shared_ptr<ProcessGroup>(const BackendContext&)>;

/// The backends init_process_group can make, by name, as PyTorch's Backend.register_backend. "ring"
/// is always there; "nccl" and "gloo" are there in a program that links ringgrad::nccl or ringgrad::gloo
/// (each registers itself before main()). Registering a name that is already registered, an empty
/// name or an empty factory throws, naming it.
void register_process_group_backend(const std::string& name, ProcessGroupFactory factory);
std::vector<std::string> registered_process_group_backends();  ///< sorted by name

/// Creates this process's group with a registered backend: "ring" (CPU tensors; the hand-written
/// ring all-reduce), "nccl" (CUDA tensors; ringgrad::nccl), "gloo" (CPU tensors; PyTorch's CPU
/// collectives, ringgrad::gloo) or one registered by the user.
/// It also becomes the default group. An unknown name is refused before any rank meets the others.
std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend, const InitOptions& options = {});
/// True when this program has the "nccl" backend: ringgrad was configured with CUDA and NCCL and the
/// program links ringgrad::nccl.
bool nccl_available();
/// True when this program has the "gloo" backend: ringgrad was configured with Gloo (Debian's
/// libgloo-dev) and the program links ringgrad::gloo.
bool gloo_available();
std::shared_ptr<ProcessGroup> default_process_group();  ///< null before init_process_group
void destroy_process_group();                           ///< drops the default group

}  // namespace parallel
}  // namespace ringgrad
