// parallel/reducer.cpp: buckets, the gradient hooks, launching in order, and the final callback.
#include <ringgrad/parallel/reducer.h>

#include <algorithm>
#include <mutex>
#include <unordered_set>

#include <ringgrad/core/autograd/engine.h>
#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/autograd/node.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/parallel/bucket_assignment.h>

namespace ringgrad {
namespace parallel {
namespace {

using Clock = std::chrono::steady_clock;

double us_between(SteadyTime a, SteadyTime b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

}  // namespace

struct Reducer::State : std::enable_shared_from_this<Reducer::State> {
  struct Param {
    std::string name;
    Tensor tensor;
    size_t bucket = 0;
    int64_t offset = 0;  // elements into the bucket's buffer
    Tensor view;         // its slot of the bucket, shaped like the parameter
  };
  struct Bucket {
    std::vector<size_t> params;  // in the order their gradients are expected
    Tensor buffer;               // flat, the parameters' dtype and device
    int pending = 0;             // gradients still missing this step
    bool ready = false;
    std::shared_ptr<Work> work;
    BucketTiming timing;
  };

  std::shared_ptr<ProcessGroup> group;
  DDPOptions options;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<bool> param_ready;
  size_t next_launch = 0;  // buckets launch in index order: the next one allowed to go
  bool armed = false;      // a synchronised backward is expected
  bool callback_queued = false;
  std::vector<size_t> unused;  // find_unused_parameters: not reached from the output; marked at backward start
  bool require_sync = true;
  DDPTimings current, last;  // the step being run, the last one finished
  mutable std::mutex mutex;

  // Waits for every all-reduce still in flight, ignoring its outcome: a step whose backward never
  // reached the final callback (an exception in backward, a forward without backward) must not leave
  // the communication thread reading a bucket the next step is about to overwrite.
  void drain() {
    for (size_t b = 0; b < next_launch; ++b) {
      if (!buckets[b].work) continue;
      try {
        buckets[b].work->wait();
      } catch (const std::exception&) {
      }
    }
  }

  void reset_step() {
    std::fill(param_ready.begin(), param_ready.end(), false);
    for (Bucket& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      b.ready = false;
      b.work.reset();
      b.timing = BucketTiming{b.timing.index, b.timing.bytes, b.timing.parameters, {}, {}, {}};
    }
    next_launch = 0;
    armed = false;
    callback_queued = false;
    unused.clear();
  }

  // Launches every bucket that is ready and has no unlaunched bucket before it. The order is what
  // keeps the ranks in step: gradients may become ready in a different order on different ranks
  // (threads, unused branches), the sequence of all-reduces never does.
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].ready) {
      Bucket& b = buckets[next_launch++];
      GradBucket bucket{static_cast<int>(next_launch - 1), b.buffer};
      b.work = options.comm_hook()(*group, bucket);
      RINGGRAD_CHECK(b.work != nullptr, "DistributedDataParallel: the comm hook returned no Work for bucket ",
                     bucket.index);
    }
  }

  // Parameter i's gradient for this step (undefined: it has none; its slot counts as zero).
  void mark_ready(size_t i, const Tensor& grad) {
    const Param& p = params[i];
    RINGGRAD_CHECK(!param_ready[i], "DistributedDataParallel: parameter '", p.name,
                   "' was marked ready twice in one "
                   "step (its gradient arrived twice within one backward, e.g. from a reentrant backward, which "
                   "is not supported)");
    param_ready[i] = true;
    Bucket& b = buckets[p.bucket];
    // With gradient_as_bucket_view the gradient normally already is the slot (backward accumulated
    // into it): nothing to copy.
    if (!grad.same(p.view)) p.view.copy_(grad.defined() ? grad : zeros_like(p.view));
    if (--b.pending == 0) {
      b.ready = true;
      b.timing.ready = Clock::now();
      if (options.overlap()) launch_ready();
    }
  }

  // The first thing that happens in a synchronised backward (the output's hook, or the first
  // gradient): queue the final callback, and count the unused parameters as ready. They are marked
  // now and not during forward, so that a bucket they complete is launched inside backward on every
  // rank -- never between forward and backward, where the user may run collectives of their own.
  void begin_backward() {
    if (callback_queued) return;
    callback_queued = true;
    std::shared_ptr<State> self = shared_from_this();
    queue_callback([self] { self->finalize(); });
    // An unused parameter contributes what its .grad holds: zero, or what no_sync steps accumulated.
    for (const size_t i : unused) mark_ready(i, params[i].tensor.grad());
    unused.clear();
  }

  // The post-accumulate hook of parameter i: its .grad is complete for this backward.
  void on_gradient(size_t i, const Tensor& leaf) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!armed) return;  // inside no_sync(), or a backward DDP's forward did not prepare
    begin_backward();
    mark_ready(i, leaf.grad());
  }

  // Runs once backward is done, on the thread that called backward().
  void finalize() {
    std::lock_guard<std::mutex> lock(mutex);
    current.backward_end = Clock::now();
    if (!options.overlap()) launch_ready();  // the non-overlapped variant sends everything now
    std::vector<std::string> missing;
    for (size_t i = 0; i < params.size(); ++i)
      if (!param_ready[i]) missing.push_back(params[i].name);

    // Wait for every launched bucket -- also when about to fail, so that no all-reduce is left
    // running into the next step and the ranks' sequences of collectives stay aligned.
    std::exception_ptr error;
    for (size_t b = 0; b < next_launch; ++b) {
      try {
        buckets[b].work->wait();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    const SteadyTime waited = Clock::now();
    const size_t launched = next_launch;
    armed = false;
    callback_queued = false;
    if (error) {
      reset_step();
      std::rethrow_exception(error);
    }
    if (!missing.empty()) {
      std::string names;
      for (size_t k = 0; k < missing.size() && k < 10; ++k) names += (k ? ", " : "") + missing[k];
      if (missing.size() > 10) names += detail::str(" and ", missing.size() - 10, " more");
      reset_step();
      throw Error(detail::str("DistributedDataParallel: ", missing.size(),
                              " parameter(s) received no gradient in this "
                              "backward: ",
                              names,
                              ". Their buckets could not be reduced. If the model does not use "
                              "every parameter in every step, pass DDPOptions().find_unused_parameters(true); if a "
                              "parameter is never used, remove it or set requires_grad_(false)"));
    }

    // Write the averages back: into .grad, or make .grad a view of the bucket.
    for (Param& p : params) {
      if (options.gradient_as_bucket_view()) {
        if (!p.tensor.grad().same(p.view)) p.tensor.set_grad(p.view);
      } else if (p.tensor.grad().defined()) {
        p.tensor.grad().copy_(p.view);
      } else {
        p.tensor.set_grad(p.view.clone());  // an unused parameter (find_unused_parameters)
      }
    }
    const SteadyTime copied = Clock::now();
    current.exposed_comm_us = us_between(current.backward_end, waited);
    current.copy_back_us = us_between(waited, copied);
    current.backward_us = current.backward_start.time_since_epoch().count() != 0
                              ? us_between(current.backward_start, current.backward_end)
                              : 0;
    current.step_end = copied;
    current.step = last.step + 1;
    current.buckets.clear();
    for (size_t b = 0; b < launched; ++b) {
      BucketTiming t = buckets[b].timing;
      t.comm_start = buckets[b].work->start_time();
      t.comm_end = buckets[b].work->end_time();
      current.buckets.push_back(t);
    }
    last = current;
    reset_step();
  }
};

Reducer::Reducer(const std::vector<std::pair<std::string, Tensor>>& parameters, std::shared_ptr<ProcessGroup> group,
                 const DDPOptions& options)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  RINGGRAD_CHECK(group != nullptr, "DistributedDataParallel: no process group; call init_process_group() first");
  RINGGRAD_CHECK(options.comm_hook() != nullptr,
                 "DistributedDataParallel: expected a comm hook, got an empty one (the default is allreduce_hook())");
  RINGGRAD_CHECK(options.bucket_cap_mb() >= 0 && options.first_bucket_cap_mb() >= 0,
                 "DistributedDataParallel: expected bucket caps >= 0 MB, got ", options.bucket_cap_mb(), " and ",
                 options.first_bucket_cap_mb());
  s.group = std::move(group);
  s.options = options;
  for (const auto& [name, t] : parameters) {
    if (!t.requires_grad()) continue;  // frozen parameters are not reduced
    RINGGRAD_CHECK(t.device() == parameters.front().second.device(),
                   "DistributedDataParallel: expected every "
                   "parameter on one device (one process per device), got '",
                   parameters.front().first, "' on ", parameters.front().second.device(), " and '", name, "' on ",
                   t.device());
    s.params.push_back({name, t, 0, 0, Tensor()});
  }

  // Buckets, filled in reverse registration order: backward produces the last layer's gradients
  // first, so the first bucket is ready earliest and its all-reduce overlaps the rest of backward.
  // Which parameter goes where is bucket_assignment.h's; here each bucket gets its flat buffer.
  std::vector<BucketParam> sizes;
  for (const State::Param& p : s.params)
    sizes.push_back({p.tensor.numel() * p.tensor.element_size(), p.tensor.dtype()});
  const std::vector<std::vector<size_t>> layout =
      assign_buckets(sizes, bucket_cap_bytes_from_mb(options.first_bucket_cap_mb()),
                     bucket_cap_bytes_from_mb(options.bucket_cap_mb()));
  for (const std::vector<size_t>& members : layout) {
    State::Bucket bucket;
    int64_t numel = 0, bytes = 0;
    for (const size_t i : members) {
      State::Param& p = s.params[i];
      p.bucket = s.buckets.size();
      p.offset = numel;
      numel += p.tensor.numel();
      bytes += sizes[i].bytes;
      bucket.params.push_back(i);
    }
    const Tensor& first = s.params[members.front()].tensor;
    bucket.buffer = zeros({numel}, TensorOptions(first.dtype()).device(first.device()));
    bucket.timing.index = static_cast<int>(s.buckets.size());
    bucket.timing.bytes = bytes;
    bucket.timing.parameters = static_cast<int>(members.size());
    s.buckets.push_back(std::move(bucket));
  }
  for (State::Param& p : s.params) {
    p.view = s.buckets[p.bucket].buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
    // Backward then writes each gradient straight into its slot (a linear layer's weight gradient is
    // the GEMM's output there; other gradients are copied or added in by autograd): the .grad the
    // optimizer reads is the bucket the all-reduce averaged, with no copy in either direction.
    if (options.gradient_as_bucket_view()) p.tensor.set_grad_destination(p.view);
  }
  s.param_ready.assign(s.params.size(), false);
  s.reset_step();

  // One hook per parameter. It holds the state weakly: hooks outlive a Reducer that is destroyed
  // while the model lives on, and then do nothing.
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.params[i].tensor.register_post_accumulate_grad_hook([weak, i](const Tensor& leaf) {
      if (std::shared_ptr<State> state = weak.lock()) state->on_gradient(i, leaf);
    });
  }
}

Reducer::~Reducer() {
  // The parameters outlive this reducer with the model: they go back to gradients of their own. A
  // .grad that is a view keeps its bucket's memory alive.
  for (State::Param& p : state_->params)
    if (p.tensor.grad_destination().same(p.view)) p.tensor.set_grad_destination(Tensor());
}

void Reducer::prepare_for_backward(const Tensor& output, SteadyTime forward_start, SteadyTime forward_end) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  // A forward that will not be followed by a synchronised backward (no_sync, no_grad, evaluation)
  // leaves the state alone: a step prepared earlier may still be waiting for its backward.
  if (!(s.require_sync && GradMode::is_enabled() && output.defined() && output.requires_grad())) return;
  s.drain();
  s.reset_step();
  s.armed = true;
  s.current = DDPTimings();
  s.current.forward_start = forward_start;
  s.current.forward_us = us_between(forward_start, forward_end);

  // The start of backward: the first node to run is the one that made `output`. Its hook also
  // queues the final callback, so the step finishes even if no parameter gets a gradient.
  if (output.grad_fn() && output.output_nr() == 0) {
    std::weak_ptr<State> weak = state_;
    output.register_hook([weak](const Tensor&) {
      if (std::shared_ptr<State> state = weak.lock()) {
        std::lock_guard<std::mutex> state_lock(state->mutex);
        if (!state->armed) return Tensor();
        state->current.backward_start = Clock::now();
        state->begin_backward();
      }
      return Tensor();
    });
  }

  if (s.options.find_unused_parameters()) {
    // Walk the graph from the output; a parameter whose AccumulateGrad is not reached will get no
    // gradient, so it will count as ready when backward begins, and its bucket is not held up.
    std::unordered_set<const TensorImpl*> reached;
    std::unordered_set<const Node*> seen;
    std::vector<const Node*> stack;
    if (output.grad_fn()) stack.push_back(output.grad_fn().get());
    while (!stack.empty()) {
      const Node* node = stack.back();
      stack.pop_back();
      if (!seen.insert(node).second) continue;
      if (const auto* acc = dynamic_cast<const AccumulateGrad*>(node)) reached.insert(acc->leaf.impl());
      for (const Edge& e : node->next_edges)
        if (e.valid()) stack.push_back(e.node.get());
    }
    for (size_t i = 0; i < s.params.size(); ++i)
      if (!reached.count(s.params[i].tensor.impl())) s.unused.push_back(i);
  }
}

void Reducer::set_require_sync(bool on) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->require_sync = on;
}

bool Reducer::require_sync() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->require_sync;
}

std::vector<std::vector<std::string>> Reducer::bucket_parameter_names() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::vector<std::string>> out;
  for (const auto& b : state_->buckets) {
    out.emplace_back();
    for (const size_t i : b.params) out.back().push_back(state_->params[i].name);
  }
  return out;
}

DDPTimings Reducer::timings() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->last;
}

}  // namespace parallel
}  // namespace ringgrad
