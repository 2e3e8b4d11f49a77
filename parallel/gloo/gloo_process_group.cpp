// parallel/gloo/gloo_process_group.cpp: the "gloo" backend -- each collective as a call into Gloo, on
// the shared communication thread.
//
// Built, as the library ringgrad::gloo, when Gloo is found at configure time (CMakeLists.txt,
// RINGGRAD_GLOO); a program without it gets "not in this build" from process_group.cpp.
//
// Same design as the ring: collectives are checked on the caller's thread (collective_args.h), then
// run one after another on the group's communication thread (collective_queue.h) -- the same order on
// every rank, which is also what keeps each collective's Gloo tag (its number) the same on every
// rank. A failure (a peer died, the deadline passed) marks its Work and leaves the group broken.
//
// Meeting. Each rank opens a Gloo TCP device on the interface that reaches MASTER_ADDR, and Gloo's
// rendezvous context connects every pair of ranks (a full mesh) through the job's store, under
// "gloo/" (gloo_store.h). Gloo's own connections do not present RINGGRAD_JOB_TOKEN: the store does,
// so only processes admitted to it learn the addresses.
#include "parallel/gloo/gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <pthread.h>

#include <csignal>
#include <cstring>
#include <functional>

#include <ringgrad/core/base/error.h>
#include "parallel/collective_args.h"
#include "parallel/collective_queue.h"
#include "parallel/gloo/gloo_store.h"
#include "parallel/ring/ring_collectives.h"
#include "parallel/ring/tcp_link.h"

namespace ringgrad {
namespace parallel {
namespace {

// memcpy, but an empty tensor's data pointer may be null, and memcpy(null, null, 0) is undefined.
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

size_t byte_count(const Tensor& t) { return static_cast<size_t>(t.numel() * t.element_size()); }

// Gloo moves host memory: a CUDA tensor is refused at the call, saying where to go instead.
void on_the_host(const std::string& op, const Tensor& t, const std::string& what) {
  RINGGRAD_CHECK(t.device().is_cpu(), op, ": expected a CPU tensor for ", what, ", got one on ", t.device(),
                 "; the gloo backend here takes CPU tensors only: move it with .to(Device::cpu()), or use backend "
                 "\"nccl\" (CUDA tensors) or \"ring\" (which stages CUDA tensors through host memory)");
}

using GlooReduce = gloo::AllreduceOptions::Func;
using RawReduce = void (*)(void*, const void*, const void*, size_t);

// Gloo's own element-wise c = a op b for float32 and float64 (the overload on void pointers).
template <typename T>
GlooReduce gloo_function(ReduceOp combine) {
  switch (combine) {
    case ReduceOp::Min: return static_cast<RawReduce>(&gloo::min<T>);
    case ReduceOp::Max: return static_cast<RawReduce>(&gloo::max<T>);
    default: return static_cast<RawReduce>(&gloo::sum<T>);
  }
}

// Gloo's reduction callback: c = a op b over n elements (c may be a or b). float32 and float64 use
// Gloo's own element-wise functions, as PyTorch does. Gloo has no bfloat16, so bfloat16 stays
// bfloat16 on the wire and is combined by the ring's reduce_into (added in float32, then rounded to
// nearest even), the same arithmetic as the ring backend. float16 goes the same way, although Gloo
// has a gloo::float16 (which PyTorch uses): its functions store each result through an assignment
// operator that compares the new bits with the old value converted from an integer, and skips the
// store when they match -- 16 + 19440 comes out as 16. Avg combines as Sum; the caller divides.
GlooReduce reduction(DType dt, ReduceOp op) {
  const ReduceOp combine = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  if (dt == DType::f32) return gloo_function<float>(combine);
  if (dt == DType::f64) return gloo_function<double>(combine);
  return [dt, combine](void* c, const void* a, const void* b, size_t n) {
    const auto count = static_cast<int64_t>(n);  // n counts elements of one buffer: it fits
    if (c == b) std::swap(a, b);                 // sum, min and max are commutative
    if (c != a) copy_bytes(c, a, n * static_cast<size_t>(dtype_size(dt)));
    reduce_into(c, b, count, dt, combine);
  };
}

// Gloo writes to its sockets without MSG_NOSIGNAL, which raises SIGPIPE when the peer is gone, and
// SIGPIPE's default action ends the process before Gloo can report the error. (PyTorch never meets
// this: Python ignores SIGPIPE.) Rather than change the whole process's signal handling, the threads
// that call into Gloo block it: the caller's thread while the group is set up -- and with it Gloo's
// event-loop thread and this group's communication thread, which start then and inherit the mask.
// A blocked SIGPIPE stays pending, and the write fails with EPIPE, which Gloo reports as an error.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &saved_);
  }
  ~SigpipeBlocked() {
    // One raised on this thread meanwhile (a peer died during setup) is pending: take it, or
    // unblocking would deliver it.
    const timespec now{};
    while (sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_{}, saved_{};
};

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, const GlooOptions& options);
  ~GlooProcessGroup() override;  // finishes the queued collectives, then stops the thread

  const char* backend_name() const override { return "gloo"; }
  Device collective_device(Device) const override { return Device::cpu(); }  // Gloo moves host memory

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> all_gather(const std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override;
  std::shared_ptr<Work> barrier() override;

 private:
  // In place over `count` elements at `data`, combined with `op` (Avg: summed; the caller divides).
  void all_reduce_raw(void* data, int64_t count, DType dt, ReduceOp op, const CollectiveRun& run);

  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::Context> context_;  // null for a group of one; dropped after a failure
  CollectiveArgs args_;
  std::unique_ptr<CollectiveQueue> queue_;  // made last: its thread uses the context
};

// The tag that numbers a collective in Gloo's messages: the queue's number, the same on every rank.
uint32_t tag_of(const CollectiveRun& run) { return static_cast<uint32_t>(run.number); }

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, const GlooOptions& options)
    : ProcessGroup(rank, size, options.timeout()), store_(std::move(store)), args_("gloo ", size, on_the_host) {
  const SigpipeBlocked no_sigpipe;  // here, in Gloo's loop thread and in the communication thread
  if (size > 1) {
    RINGGRAD_CHECK(store_ != nullptr, "gloo: a group of ", size, " ranks needs a store to meet through, got none");
    const std::string me = local_address_towards(options.master_addr());
    try {
      gloo::transport::tcp::attr attr(me.c_str());
      std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(options.setup_timeout());
      GlooStore gloo_store(*store_, "gloo/");
      const ScopedStoreTimeout setup(*store_, options.setup_timeout());
      context->connectFullMesh(gloo_store, device);
      context->setTimeout(options.timeout());
      context_ = std::move(context);
    } catch (const std::exception& e) {
      throw Error(detail::str("gloo: rank ", rank, " of ", size, " (listening on ", me,
                              ") cannot connect to the other ranks within ", options.setup_timeout().count(),
                              " ms: ", e.what()));
    }
  }
  CollectiveQueue::Hooks hooks;
  hooks.message_prefix = "gloo ";
  hooks.failure_message = [this](const std::string& description, const std::exception& e) {
    return detail::str("gloo ", description, " on rank ", rank_, " of ", size_, ": ", e.what());
  };
  // Closing this rank's connections tells every peer at once, as the ring's abort does: a rank that
  // waits on this one fails now instead of at its deadline.
  hooks.abort = [this](const std::string&) { context_.reset(); };
  queue_ = std::make_unique<CollectiveQueue>(*this, std::move(hooks));
}

GlooProcessGroup::~GlooProcessGroup() { queue_->stop(); }

void GlooProcessGroup::all_reduce_raw(void* data, int64_t count, DType dt, ReduceOp op, const CollectiveRun& run) {
  if (size_ == 1 || count == 0) return;  // one rank: already the result; nothing to move
  gloo::AllreduceOptions options(context_);
  const auto n = static_cast<size_t>(count);
  switch (dt) {  // the element type only tells Gloo the element size; reduction() knows the rest
    case DType::f32: options.setOutput(static_cast<float*>(data), n); break;
    case DType::f64: options.setOutput(static_cast<double*>(data), n); break;
    default:
      options.setOutput(static_cast<uint16_t*>(data), n);
      break;  // bfloat16, float16 (CollectiveArgs::reducible)
  }
  options.setReduceFunction(reduction(dt, op));
  options.setTag(tag_of(run));
  options.setTimeout(run.timeout);
  gloo::allreduce(options);
}

std::shared_ptr<Work> GlooProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  args_.reducible("all_reduce", tensor, "the tensor");
  return queue_->enqueue(describe_collective("all_reduce", tensor, reduce_op_name(op)),
                         [this, tensor, op](const CollectiveRun& run) {
                           all_reduce_raw(tensor.data(), tensor.numel(), tensor.dtype(), op, run);
                           if (op == ReduceOp::Avg) divide_by(tensor.data(), tensor.numel(), tensor.dtype(), size_);
                         });
}

std::shared_ptr<Work> GlooProcessGroup::broadcast(const Tensor& tensor, int root) {
  args_.tensor("broadcast", tensor, "the tensor");
  args_.root("broadcast", root);
  return queue_->enqueue(describe_collective("broadcast", tensor, detail::str("root ", root)),
                         [this, tensor, root](const CollectiveRun& run) {
                           if (size_ == 1 || tensor.numel() == 0) return;
                           gloo::BroadcastOptions options(context_);
                           options.setOutput(static_cast<uint8_t*>(tensor.data()),
                                             byte_count(tensor));  // root: sent from here
                           options.setRoot(root);
                           options.setTag(tag_of(run));
                           options.setTimeout(run.timeout);
                           gloo::broadcast(options);
                         });
}

std::shared_ptr<Work> GlooProcessGroup::all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
  args_.tensor("all_gather", input, "the input");
  args_.one_per_rank("all_gather", outputs, "output", input, "the input");
  return queue_->enqueue(describe_collective("all_gather", input), [this, outputs, input](const CollectiveRun& run) {
    const size_t bytes = byte_count(input);
    if (size_ == 1 || bytes == 0) {
      copy_bytes(outputs[static_cast<size_t>(rank_)].data(), input.data(), bytes);
      return;
    }
    // Gloo gathers into one buffer, rank after rank; the outputs are separate tensors.
    std::vector<uint8_t> gathered(bytes * outputs.size());
    gloo::AllgatherOptions options(context_);
    options.setInput(static_cast<uint8_t*>(input.data()), bytes);
    options.setOutput(gathered.data(), gathered.size());
    options.setTag(tag_of(run));
    options.setTimeout(run.timeout);
    gloo::allgather(options);
    for (size_t r = 0; r < outputs.size(); ++r) copy_bytes(outputs[r].data(), gathered.data() + r * bytes, bytes);
  });
}

std::shared_ptr<Work> GlooProcessGroup::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                       ReduceOp op) {
  args_.reducible("reduce_scatter", output, "the output");
  args_.one_per_rank("reduce_scatter", inputs, "input", output, "the output");
  return queue_->enqueue(describe_collective("reduce_scatter", output, reduce_op_name(op)),
                         [this, output, inputs, op](const CollectiveRun& run) {
                           // Gloo's one reduce-scatter (ReduceScatterHalvingDoubling) is an old-style algorithm with
                           // typed reduction functions, no bfloat16 and the float16 that reduction() avoids, so this is
                           // an all-reduce of the inputs laid end to end, of which this rank keeps its own chunk. It
                           // moves twice the bytes a true reduce-scatter needs -- fine for correctness and for DDP,
                           // which only all-reduces; the ring has the real one.
                           const size_t bytes = byte_count(output);
                           std::vector<uint8_t> scratch(bytes * inputs.size());  // the inputs are not modified
                           for (size_t r = 0; r < inputs.size(); ++r)
                             copy_bytes(scratch.data() + r * bytes, inputs[r].data(), bytes);
                           all_reduce_raw(scratch.data(), output.numel() * size_, output.dtype(), op, run);
                           uint8_t* const own = scratch.data() + static_cast<size_t>(rank_) * bytes;
                           if (op == ReduceOp::Avg) divide_by(own, output.numel(), output.dtype(), size_);
                           copy_bytes(output.data(), own, bytes);
                         });
}

std::shared_ptr<Work> GlooProcessGroup::barrier() {
  return queue_->enqueue("barrier()", [this](const CollectiveRun& run) {
    if (size_ == 1) return;
    gloo::BarrierOptions options(context_);
    options.setTag(tag_of(run));
    options.setTimeout(run.timeout);
    gloo::barrier(options);
  });
}

}  // namespace

namespace {
std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              const GlooOptions& options) {
  return std::make_shared<GlooProcessGroup>(std::move(store), rank, size, options);
}
// Joins the program before main() (gloo_process_group.h). The library is linked whole (ringgrad::gloo).
const bool kInstalled = (install_gloo(&make_gloo_group), true);
}  // namespace

}  // namespace parallel
}  // namespace ringgrad
