/// @file
/// parallel/data_parallel.h: DataParallel<M>, one process driving a model on several devices.
///
/// Each forward runs four steps (each a free function you can call on its own):
///
/// @code
///   1. scatter          cut the batch into one chunk per device          parallel/comm.h
///   2. replicate        broadcast the parameters into one replica each   parallel/replicate.h
///   3. parallel_apply   run the replicas at once, one worker per device  parallel/parallel_apply.h
///   4. gather           join the outputs on the output device            parallel/comm.h
/// @endcode
///
/// and loss.backward() runs them backwards: gather's backward sends each device its slice of the
/// gradient, the replicas' backward passes run in parallel on their workers, and each parameter's
/// Broadcast node sums the replicas' gradients into the original parameter's .grad.
///
/// @code
///   auto model = std::make_shared<Mlp>(784, 256, 10);           // on cpu:0, the first device
///   parallel::DataParallel<Mlp> dp(model, {Device::cpu(0), Device::cpu(1)});
///   nn::optim::SGD opt(dp.parameters(), nn::optim::SGDOptions(0.1));     // the model's own parameters
///   Tensor loss = cross_entropy(dp.forward(x), y);               // x, y on cpu:0
///   loss.backward();  opt.step();
///   dp.module()->fc1                                             // the model's own layer
/// @endcode
///
/// What this costs every step, which DistributedDataParallel avoids: copying every parameter to every
/// device (replicate), funnelling all outputs through one device (gather, and the loss there), and
/// summing all gradients on that device at the end of backward (reduce), while the other devices wait.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/core/autograd/engine.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/module.h>
#include <ringgrad/parallel/comm.h>
#include <ringgrad/parallel/parallel_apply.h>
#include <ringgrad/parallel/replicate.h>

namespace ringgrad {
namespace parallel {

/// Where DataParallel gathers its output, and along which dimension it splits the batch.
struct DataParallelOptions {
  /// Where gather puts the output (and so where the loss is computed); unset: the first device.
  RINGGRAD_ARG(std::optional<Device>, output_device);
  /// The batch dimension scatter cuts and gather joins.
  RINGGRAD_ARG(int64_t, dim) = 0;
};

/// Where the last step's time went, in microseconds. Forward phases are timed on the caller's
/// thread; backward ones by DataParallel's nodes during loss.backward(). Cheap enough to stay on:
/// a handful of clock reads per step.
struct DataParallelTimings {
  int64_t step = 0;          ///< forward calls so far
  int64_t devices_used = 0;  ///< replicas that ran (fewer than devices for a batch smaller than that)
  ///@{
  /// the four forward steps
  double scatter_us = 0, replicate_us = 0, apply_us = 0, gather_us = 0;
  ///@}
  double backward_us = 0;                ///< from the start of gather's backward to the end of the backward pass
  double reduce_us = 0;                  ///< inside Broadcast nodes summing replica gradients (part of backward_us)
  std::vector<Interval> forward;         ///< each replica's forward
  std::vector<DeviceActivity> backward;  ///< each device's worker during the backward pass
};

}  // namespace parallel

namespace detail {

/// The part of DataParallel that does not depend on the module type.
class DataParallelCore {
 public:
  DataParallelCore(std::vector<Device> devices, const parallel::DataParallelOptions& options);

  /// Throws unless every parameter and buffer of `module` is on the first device.
  void check_module(const nn::Module& module) const;
  /// One step's forward. `apply` runs the first n replicas on the chunks, refreshing them first.
  Tensor forward(
      nn::Module& module, const Tensor& x,
      const std::function<std::vector<Tensor>(const std::vector<Tensor>&, std::vector<parallel::Interval>*)>& apply);
  const std::vector<Device>& devices() const { return devices_; }
  Device output_device() const { return output_device_; }
  const std::vector<std::shared_ptr<nn::Module>>& replicas() const { return replicas_; }
  parallel::DataParallelTimings timings() const;

 private:
  struct Recorder;  // shared with the backward hook, which may outlive this object
  void prepare_replicas(nn::Module& module, size_t n);
  void time_backward(const Tensor& output);
  std::vector<Device> devices_;
  Device output_device_;
  int64_t dim_;
  std::vector<std::shared_ptr<nn::Module>> replicas_;
  std::shared_ptr<parallel::ReduceClock> reduce_clock_;
  std::shared_ptr<Recorder> recorder_;
};

}  // namespace detail

namespace parallel {

/// Runs a model of type M on several devices of one process, splitting each batch among them (see
/// the top of this file). M must derive from nn::Cloneable<M>.
template <typename M>
class DataParallel {
 public:
  /// `module` must already be on devices[0]; devices must be distinct and of one kind.
  DataParallel(std::shared_ptr<M> module, std::vector<Device> devices, DataParallelOptions options = {})
      : module_(std::move(module)), core_(std::move(devices), options) {
    RINGGRAD_CHECK(module_ != nullptr, "DataParallel: expected a module, got a null pointer");
    core_.check_module(*module_);
  }

  /// The four steps on x (which may live on any device); the output is on the output device.
  /// With one device this is a plain module->forward(x) on that device.
  Tensor forward(const Tensor& x) {
    return core_.forward(*module_, x, [this](const std::vector<Tensor>& chunks, std::vector<Interval>* ran) {
      typed_.resize(chunks.size());
      for (size_t i = 0; i < chunks.size(); ++i) {
        typed_[i] = std::dynamic_pointer_cast<M>(core_.replicas()[i]);
        detail::check_clone_type(typed_[i] != nullptr, *module_);
      }
      return parallel_apply(typed_, chunks, ran);
    });
  }
  Tensor operator()(const Tensor& x) { return forward(x); }  ///< forward(x)

  /// The user's model, as given: dp.module()->fc1 is its layer, and its parameters get the gradients.
  const std::shared_ptr<M>& module() const { return module_; }
  std::vector<Tensor> parameters() const { return module_->parameters(); }  ///< the model's, for the optimizer
  /// The model's state, without a "module." prefix; loading also accepts PyTorch's prefixed keys.
  nn::StateDict state_dict() const { return module_->state_dict(); }
  /// Loads into the model (nn::Module::load_state_dict); the replicas pick it up at the next forward.
  void load_state_dict(const nn::StateDict& state, bool strict = true) { module_->load_state_dict(state, strict); }

  const std::vector<Device>& devices() const { return core_.devices(); }  ///< as given
  Device output_device() const { return core_.output_device(); }          ///< where forward() returns its output
  /// The replicas the last forward ran (their parameters are Broadcast outputs, never leaves).
  const std::vector<std::shared_ptr<M>>& replicas() const { return typed_; }
  DataParallelTimings timings() const { return core_.timings(); }  ///< of the last step

 private:
  std::shared_ptr<M> module_;
  detail::DataParallelCore core_;
  std::vector<std::shared_ptr<M>> typed_;
};

}  // namespace parallel
}  // namespace ringgrad
