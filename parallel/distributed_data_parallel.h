/// @file
/// parallel/distributed_data_parallel.h: DistributedDataParallel<M>, one process per device.
///
/// Every process runs this same program on its own shard of the data (DistributedSampler) and holds a
/// FULL replica of the model -- DDP is data parallelism, not model parallelism. The wrapper adds three
/// things to the model it holds:
///
/// @code
///   construction   every rank checks it has the same parameters (names, shapes, dtypes), then rank
///                  0's parameters and buffers are broadcast, so every replica starts identical;
///   forward        rank 0's buffers are broadcast (broadcast_buffers), the model runs, and the
///                  Reducer is armed for the backward that follows;
///   backward       the Reducer averages gradients bucket by bucket while backward runs
///                  (parallel/reducer.h), so after loss.backward() every rank's .grad is the average
///                  -- and the optimizer steps keep the replicas identical.
/// @endcode
///
/// @code
///   auto pg = parallel::init_process_group("ring");
///   auto model = std::make_shared<Mlp>(784, 256, 10);
///   parallel::DistributedDataParallel<Mlp> ddp(model, pg);
///   nn::optim::SGD opt(ddp.parameters(), nn::optim::SGDOptions(0.1));
///   Tensor loss = cross_entropy(ddp.forward(x), y);   // x, y: this rank's shard
///   opt.zero_grad(); loss.backward(); opt.step();
///   ddp.module()->fc1                                  // the model's own layer, as with DataParallel
/// @endcode
///
/// Gradient accumulation: { auto guard = ddp.no_sync(); cross_entropy(ddp(x1), y1).backward(); } then a
/// normal step: the accumulated sum is what gets averaged.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/module.h>
#include <ringgrad/parallel/process_group.h>
#include <ringgrad/parallel/reducer.h>

namespace ringgrad {
namespace detail {

/// The part of DistributedDataParallel that does not depend on the module type.
class DistributedDataParallelCore {
 public:
  DistributedDataParallelCore(nn::Module& module, std::shared_ptr<parallel::ProcessGroup> group,
                              const parallel::DDPOptions& options);

  void before_forward();                                                 ///< broadcasts buffers when asked to
  void after_forward(const Tensor& output, parallel::SteadyTime start);  ///< arms the reducer
  parallel::Reducer& reducer() { return *reducer_; }
  const parallel::Reducer& reducer() const { return *reducer_; }
  const std::shared_ptr<parallel::ProcessGroup>& group() const { return group_; }

 private:
  void check_same_model_on_every_rank();
  void broadcast_from_rank0(const std::vector<Tensor>& tensors);

  nn::Module& module_;
  std::shared_ptr<parallel::ProcessGroup> group_;
  parallel::DDPOptions options_;
  std::unique_ptr<parallel::Reducer> reducer_;
};

}  // namespace detail

namespace parallel {

/// Data parallelism across processes: each process holds a full replica of a model of type M and
/// trains it on its own shard of the data; backward averages the gradients over the ranks (see the
/// top of this file).
template <typename M>
class DistributedDataParallel {
 public:
  /// Collective: every rank of `group` must construct its DDP at the same point.
  DistributedDataParallel(std::shared_ptr<M> module, std::shared_ptr<ProcessGroup> group = default_process_group(),
                          DDPOptions options = {})
      : module_(checked(std::move(module))), core_(*module_, std::move(group), options) {}

  /// Broadcasts rank 0's buffers (broadcast_buffers), runs the model, and arms the Reducer for the
  /// backward of the output.
  Tensor forward(const Tensor& x) {
    const SteadyTime start = std::chrono::steady_clock::now();
    core_.before_forward();
    Tensor output = module_->forward(x);
    core_.after_forward(output, start);
    return output;
  }
  Tensor operator()(const Tensor& x) { return forward(x); }  ///< forward(x)

  /// The user's model, as given: ddp.module()->fc1 is its layer (exactly as dp.module()->fc1).
  const std::shared_ptr<M>& module() const { return module_; }
  std::vector<Tensor> parameters() const { return module_->parameters(); }  ///< the model's, for the optimizer
  /// The model's state, without a "module." prefix; loading also accepts PyTorch's prefixed keys.
  nn::StateDict state_dict() const { return module_->state_dict(); }
  /// Loads into the model (nn::Module::load_state_dict). Load the same state on every rank.
  void load_state_dict(const nn::StateDict& state, bool strict = true) { module_->load_state_dict(state, strict); }

  /// Inside the returned guard's scope, backward passes do not communicate: gradients accumulate
  /// locally until the next synchronised backward.
  class NoSync {
   public:
    /// Turns sync off until destroyed, then restores what it was (so guards nest).
    explicit NoSync(Reducer& reducer) : reducer_(&reducer), previous_(reducer.require_sync()) {
      reducer.set_require_sync(false);
    }
    ~NoSync() {
      if (reducer_) reducer_->set_require_sync(previous_);
    }
    /// The moved-from guard restores nothing.
    NoSync(NoSync&& other) noexcept : reducer_(other.reducer_), previous_(other.previous_) { other.reducer_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    Reducer* reducer_;
    bool previous_;
  };
  /// { auto guard = ddp.no_sync(); loss.backward(); }: accumulate gradients without communicating.
  NoSync no_sync() { return NoSync(core_.reducer()); }

  ProcessGroup& process_group() const { return *core_.group(); }  ///< the group the gradients are averaged over
  /// The bucket layout (parameter names per bucket) and the last synchronised step's timings.
  std::vector<std::vector<std::string>> buckets() const { return core_.reducer().bucket_parameter_names(); }
  DDPTimings timings() const { return core_.reducer().timings(); }  ///< see buckets()

 private:
  static std::shared_ptr<M> checked(std::shared_ptr<M> module) {
    RINGGRAD_CHECK(module != nullptr, "DistributedDataParallel: expected a module, got a null pointer");
    return module;
  }
  std::shared_ptr<M> module_;
  detail::DistributedDataParallelCore core_;
};

}  // namespace parallel
}  // namespace ringgrad
