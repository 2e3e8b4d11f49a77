// parallel/ring/ring_process_group.cpp: the ring's collectives on the shared queue, and CUDA staging.
#include "parallel/ring/ring_process_group.h"

#include <sys/prctl.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/cuda.h>
#include <ringgrad/core/base/error.h>
#include "parallel/ring/hierarchical.h"
#include "parallel/ring/ring_collectives.h"
#include "parallel/ring/ring_order.h"
#include "parallel/ring/shm_link.h"
#include "parallel/ring/tcp_link.h"

namespace ringgrad {
namespace parallel {
namespace {

// How long diagnostics after a failure may wait on the store (see first_failure): a twentieth of the
// collective's timeout, from 0.2 s to 3 s. A stopped rank 0 serves a store that never answers, so
// this wait is added whole to every survivor's timeout: a twentieth keeps the job's end within 1.1x
// the timeout a user set, at 10 s as at 300 s (it was a fixed 3 s: 13.1 s for a 10 s timeout).
std::chrono::milliseconds diagnostic_limit(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 20, std::chrono::milliseconds(200), std::chrono::milliseconds(3000));
}
// The same wait when setting up fails (agree_on_hierarchical): no collective timeout applies yet.
constexpr std::chrono::milliseconds kSetupDiagnosticLimit(3000);

// memcpy, but an empty tensor's data pointer may be null, and memcpy(null, null, 0) is undefined.
void copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

// Until the counter `key` reaches `count`, for `limit` at most: rank 0 serves the store, and the
// store dies with it, so after a failure it lets the others finish reading and reporting first.
// Best effort: a store that does not answer ends the wait.
void wait_for_count(Store& store, const std::string& key, int count, std::chrono::milliseconds limit) {
  try {
    const ScopedStoreTimeout brief(store, limit);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (store.add(key, 0) < count && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } catch (const std::exception&) {
  }
}

// Whether all_reduce goes hierarchical (hierarchical.h), for the rank that asked for `algorithm`
// (and published it) in a job on `hosts`. Ranks that chose differently would connect different rings
// and wait for each other until the setup deadline: they fail now instead, before connecting
// anything, as do ranks that ask for a hierarchical all-reduce these hosts cannot have. Every rank
// finds the same fault, and reports it: rank 0, whose store the others are reading, leaves only once
// they have read it all.
bool agree_on_hierarchical(Store& store, int rank, int size, const std::string& algorithm,
                           const std::vector<std::string>& hosts) {
  std::vector<std::string> algorithms;
  algorithms.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) algorithms.push_back(store.get_string("ring/algorithm/" + std::to_string(r)));
  bool hierarchical = false;
  std::exception_ptr refused;
  try {
    for (int r = 0; r < size; ++r) {
      const std::string& theirs = algorithms[static_cast<size_t>(r)];
      RINGGRAD_CHECK(theirs == algorithm, "ring: rank ", r, " asks for algorithm \"", detail::printable(theirs),
                     "\" and rank ", rank, " for \"", algorithm,
                     "\"; every rank must ask for the same (RingOptions::algorithm, else ", "RINGGRAD_RING_ALGORITHM)");
    }
    hierarchical = use_hierarchical(algorithm, hosts);
  } catch (const Error&) {
    refused = std::current_exception();
  }
  store.add("ring/algorithm_read", 1);
  if (refused) {
    if (rank == 0) wait_for_count(store, "ring/algorithm_read", size, kSetupDiagnosticLimit);
    std::rethrow_exception(refused);
  }
  return hierarchical;
}

// The ring works on host memory. A CPU tensor is used in place; a CUDA tensor is staged through a
// pinned (page-locked) host buffer -- the one kind of host memory the GPU's copy engines read and
// write directly, at full PCIe/NVLink-C2C speed -- copied in before and back after.
//
// Staging runs on the communication thread while the caller's backward keeps queueing kernels, so
// it must wait for the tensor's producer and for nothing after it: the collective's call marks that
// point in the compute stream (ready_point, on the caller's thread), and the staging copies run on
// the device's side stream after that point alone (core/cuda.h). Waiting for the compute stream
// itself would wait for every kernel queued since, and no all-reduce could overlap backward.
std::shared_ptr<CudaReadyPoint> ready_point(const Tensor& t) {
  if (t.device().is_cpu() || t.numel() == 0) return nullptr;
  return cuda_mark_ready(t.device().index);
}

class HostView {
 public:
  // `read`: the host buffer starts with the tensor's values (false for outputs, fully overwritten).
  HostView(const Tensor& t, const std::shared_ptr<CudaReadyPoint>& ready, bool read = true)
      : original_(t), ready_(ready), bytes_(t.numel() * t.element_size()) {
    if (!staged()) {
      data_ = t.data();
      return;
    }
    RINGGRAD_CHECK(ready_ != nullptr, "ring: a CUDA tensor reached the communication thread without a ready point");
    data_ = cuda_pinned_allocator().allocate(bytes_, Device::cpu());
    if (read) cuda_copy_to_pinned(*ready_, t.data(), data_, bytes_);
  }
  ~HostView() {
    if (staged()) cuda_pinned_allocator().deallocate(data_, bytes_, Device::cpu());
  }
  HostView(HostView&& other) noexcept
      : original_(std::move(other.original_)),
        ready_(std::move(other.ready_)),
        bytes_(other.bytes_),
        data_(other.data_) {
    other.original_ = Tensor();  // the moved-from view frees nothing
  }
  HostView(const HostView&) = delete;
  HostView& operator=(const HostView&) = delete;

  void* data() const { return data_; }
  // Copies the host result back into a CUDA tensor (returns once the pinned buffer is free again);
  // compute-stream work queued from now on sees it.
  void write_back() const {
    if (staged()) cuda_copy_from_pinned(*ready_, data_, original_.data(), bytes_);
  }

 private:
  bool staged() const { return original_.defined() && !original_.device().is_cpu() && bytes_ > 0; }
  Tensor original_;
  std::shared_ptr<CudaReadyPoint> ready_;
  int64_t bytes_;
  void* data_ = nullptr;
};

}  // namespace

RingProcessGroup::RingProcessGroup(std::shared_ptr<Store> store, int rank, int size, const RingOptions& options)
    : ProcessGroup(rank, size, options.timeout()), store_(std::move(store)), args_("", size) {
  RINGGRAD_CHECK(options.transport() == "auto" || options.transport() == "tcp" || options.transport() == "shm",
                 "ring: expected transport \"auto\", \"tcp\" or \"shm\", got \"", options.transport(), "\"");
  const std::string algorithm = requested_algorithm(options.algorithm());
  order_.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) order_[static_cast<size_t>(r)] = r;
  if (size == 1) (void)use_hierarchical(algorithm, {host_identity()});  // refuses "hierarchical", as one host does
  if (size > 1) {
    RINGGRAD_CHECK(store_ != nullptr, "ring: a group of ", size, " ranks needs a store to meet through, got none");
    const Deadline deadline = deadline_in(options.setup_timeout());
    // Every rank says which host it is on, and which all-reduce it asks for; all of them then
    // compute the same rings, host by host.
    store_->set("ring/host/" + std::to_string(rank), host_identity());
    store_->set("ring/algorithm/" + std::to_string(rank), algorithm);
    std::vector<std::string> hosts;
    hosts.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) hosts.push_back(store_->get_string("ring/host/" + std::to_string(r)));
    const bool hierarchical = agree_on_hierarchical(*store_, rank, size, algorithm, hosts);
    order_ = parallel::ring_order(hosts);
    RingNeighbours neighbours = ring_neighbours(order_, hosts, rank, options.transport());
    // Across hosts, messages say where a rank is: its neighbours' addresses, and this one's.
    if (std::count(hosts.begin(), hosts.end(), hosts[0]) != size) {
      neighbours.here = local_address_towards(options.master_addr());
      where_ = " at " + neighbours.here;
    }
    // The rings one after another, in the same order on every rank: within a ring a rank waits only
    // for its neighbours there, who connect the rings in that order too, so none waits in a circle
    // (connect_ring_link).
    link_ = connect_ring_link(*store_, neighbours, options.master_addr(), deadline);
    transport_name_ = link_->name();
    if (hierarchical) {
      auto connect = [&](const std::vector<int>& ring, const char* keys, int& position, int& ring_size) {
        RingNeighbours sub = ring_neighbours(ring, hosts, rank, options.transport());
        sub.here = neighbours.here;
        sub.keys = keys;
        position = static_cast<int>(std::find(ring.begin(), ring.end(), rank) - ring.begin());
        ring_size = static_cast<int>(ring.size());
        return connect_ring_link(*store_, sub, options.master_addr(), deadline);
      };
      local_link_ = connect(host_ring(order_, hosts, rank), "ring/intra", local_position_, local_size_);
      across_link_ = connect(cross_host_ring(order_, hosts, rank), "ring/inter", across_position_, across_size_);
    }
  }
  position_of_.resize(static_cast<size_t>(size));
  for (int p = 0; p < size; ++p) position_of_[static_cast<size_t>(order_[static_cast<size_t>(p)])] = p;
  position_ = position_of_[static_cast<size_t>(rank)];
  CollectiveQueue::Hooks hooks;
  // A waiting transport naps in microsecond steps; Linux's default 50 us timer slack would stretch
  // each nap several-fold, and every nap delays the neighbour that waits on this rank.
  hooks.on_thread_start = [] { ::prctl(PR_SET_TIMERSLACK, 1000UL); };  // 1 us, for that thread only
  hooks.failure_message = [this](const std::string& description, const std::exception& e) {
    std::string message = detail::str(description, " on rank ", rank_, where_, ": ", e.what());
    const std::string first = first_failure(message);
    if (!first.empty()) message += " [first failure in the job: " + first + "]";
    return message;
  };
  hooks.abort = [this](const std::string& reason) { abort_links(reason); };
  queue_ = std::make_unique<CollectiveQueue>(*this, std::move(hooks));
}

RingProcessGroup::~RingProcessGroup() {
  queue_->stop();
  if (rank() == 0 && !queue_->broken().empty()) wait_for_failure_reports();
}

// Rank 0 serves the store, and the store dies with it. After a failure the ranks that are not next
// to the failed one learn what happened from the store (first_failure), and they learn later than
// rank 0, which is next to it or is it: so rank 0 gives them a brief while to read it and report
// back before its process may exit. A rank that died never reports; then the wait ends at the limit.
void RingProcessGroup::wait_for_failure_reports() {
  if (store_) wait_for_count(*store_, "ring/failures_reported", size(), diagnostic_limit(timeout()));
}

// A rank that is not next to a dead one only sees its neighbour hang up. The store tells it what
// happened first: the first rank to fail writes its reason there before telling its neighbours, so
// by the time they fail it is readable. Best effort -- the store may have died with rank 0, or be
// stopped with it -- and brief: the error is already known, and this only adds to its message.
std::string RingProcessGroup::first_failure(const std::string& mine) {
  if (!store_) return "";
  std::string first;
  try {
    const ScopedStoreTimeout brief(*store_, diagnostic_limit(timeout()));
    if (store_->check({"ring/first_failure"}))
      first = store_->get_string("ring/first_failure");
    else
      store_->set("ring/first_failure", mine);
    // Read (or written): rank 0 may stop serving the store once every rank has said so
    // (wait_for_failure_reports). Skipped, with the rest, when the store does not answer.
    store_->add("ring/failures_reported", 1);
  } catch (const std::exception&) {
  }
  return first;
}

const char* RingProcessGroup::transport_name() const { return transport_name_.c_str(); }

// Every ring this rank is on: a neighbour on any of them may be waiting for it.
void RingProcessGroup::abort_links(const std::string& reason) {
  for (RingLink* link : {link_.get(), local_link_.get(), across_link_.get()})
    if (link != nullptr) link->abort(reason);
}

// Every collective goes through here: it tells the links' stop accounting when it starts
// (collective_started, link.h), on the thread that runs it.
std::shared_ptr<Work> RingProcessGroup::enqueue(std::string description,
                                                std::function<void(const CollectiveRun&)> job) {
  return queue_->enqueue(std::move(description), [job = std::move(job)](const CollectiveRun& run) {
    collective_started(run.deadline, run.deadline - run.timeout);
    job(run);
  });
}

std::shared_ptr<Work> RingProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  args_.reducible("all_reduce", tensor, "the tensor");
  auto ready = ready_point(tensor);
  const auto job = [this, tensor, op, ready](const CollectiveRun& run) {
    const uint64_t c = run.number;
    const Deadline d = run.deadline;
    const HostView view(tensor, ready);
    if (local_link_) {
      hierarchical_all_reduce({local_link_.get(), local_position_, local_size_, c, d},
                              {across_link_.get(), across_position_, across_size_, c, d}, view.data(), tensor.numel(),
                              tensor.dtype(), op);
    } else {
      ring_all_reduce({link_.get(), position_, size_, c, d}, view.data(), tensor.numel(), tensor.dtype(), op);
    }
    view.write_back();
  };
  return enqueue(describe_collective("all_reduce", tensor, reduce_op_name(op)), job);
}

std::shared_ptr<Work> RingProcessGroup::broadcast(const Tensor& tensor, int root) {
  args_.tensor("broadcast", tensor, "the tensor");
  args_.root("broadcast", root);
  auto ready = ready_point(tensor);
  const auto job = [this, tensor, root, ready](const CollectiveRun& run) {
    const HostView view(tensor, ready, rank_ == root);
    ring_broadcast({link_.get(), position_, size_, run.number, run.deadline}, view.data(),
                   tensor.numel() * tensor.element_size(), position_of_[static_cast<size_t>(root)]);
    if (rank_ != root) view.write_back();
  };
  return enqueue(describe_collective("broadcast", tensor, detail::str("root ", root)), job);
}

std::shared_ptr<Work> RingProcessGroup::all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
  args_.tensor("all_gather", input, "the input");
  args_.one_per_rank("all_gather", outputs, "output", input, "the input");
  auto ready = ready_point(input);  // outputs and input share the device (one_per_rank)
  const auto job = [this, outputs, input, ready](const CollectiveRun& run) {
    std::vector<HostView> views;
    views.reserve(outputs.size());
    for (const Tensor& t : outputs) views.emplace_back(t, ready, /*read=*/false);  // the ring writes all of them
    const HostView in(input, ready);
    const int64_t bytes = input.numel() * input.element_size();
    copy_bytes(views[static_cast<size_t>(rank_)].data(), in.data(), bytes);
    std::vector<Chunk> chunks;  // in ring order: the chunk at position p is rank order_[p]'s
    chunks.reserve(views.size());
    for (const int r : order_)
      chunks.push_back({static_cast<uint8_t*>(views[static_cast<size_t>(r)].data()), input.numel()});
    if (size_ > 1)
      ring_all_gather({link_.get(), position_, size_, run.number, run.deadline}, chunks, input.element_size());
    for (const HostView& v : views) v.write_back();
  };
  return enqueue(describe_collective("all_gather", input), job);
}

std::shared_ptr<Work> RingProcessGroup::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                       ReduceOp op) {
  args_.reducible("reduce_scatter", output, "the output");
  args_.one_per_rank("reduce_scatter", inputs, "input", output, "the output");
  auto ready = ready_point(output);  // inputs and output share the device (one_per_rank)
  const auto job = [this, output, inputs, op, ready](const CollectiveRun& run) {
    // The inputs are not modified: the reduction runs in a scratch copy laid out chunk after chunk.
    const int64_t count = output.numel(), bytes = count * output.element_size();
    std::vector<uint8_t> scratch(static_cast<size_t>(bytes * size_));
    for (int r = 0; r < size_; ++r) {
      const HostView in(inputs[static_cast<size_t>(r)], ready);
      copy_bytes(scratch.data() + r * bytes, in.data(), bytes);
    }
    std::vector<Chunk> chunks;  // in ring order, as in all_gather
    for (const int r : order_) chunks.push_back({scratch.data() + r * bytes, count});
    if (size_ > 1)
      ring_reduce_scatter({link_.get(), position_, size_, run.number, run.deadline}, chunks, output.dtype(), op);
    uint8_t* const own = chunks[static_cast<size_t>(position_)].data;  // this rank's
    if (op == ReduceOp::Avg) divide_by(own, count, output.dtype(), size_);
    const HostView out(output, ready, /*read=*/false);
    copy_bytes(out.data(), own, bytes);
    out.write_back();
  };
  return enqueue(describe_collective("reduce_scatter", output, reduce_op_name(op)), job);
}

std::shared_ptr<Work> RingProcessGroup::barrier() {
  return enqueue("barrier()", [this](const CollectiveRun& run) {
    // An all-gather of one byte per rank: nobody finishes before every rank's byte went around.
    if (size_ == 1) return;
    std::vector<uint8_t> marks(static_cast<size_t>(size_), 0);
    std::vector<Chunk> chunks;
    chunks.reserve(marks.size());
    for (int r = 0; r < size_; ++r) chunks.push_back({marks.data() + r, 1});
    ring_all_gather({link_.get(), position_, size_, run.number, run.deadline}, chunks, 1);
  });
}

}  // namespace parallel
}  // namespace ringgrad
