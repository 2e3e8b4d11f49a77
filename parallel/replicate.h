/// @file
/// parallel/replicate.h: one copy of a module per device, wired into the autograd graph.
///
/// A replica is a structural copy of the module (Module::clone: same layers, same sizes) whose
/// parameters are not leaves of their own but the outputs of broadcast(): replica i's fc1.weight is
/// copy i of the original fc1.weight. Backward through a replica therefore ends in the Broadcast
/// node, which sums all replicas' gradients into the ORIGINAL parameter's .grad -- the replicas never
/// hold a .grad, and the optimizer, which holds the original parameters, sees one summed gradient.
///
/// Replicas live for one forward/backward: the next step's parameters have new values, so they need
/// new copies. refresh_replicas() re-points existing replicas at fresh copies, which avoids rebuilding
/// the module objects every step (DataParallel keeps its replicas between steps for that reason;
/// PyTorch rebuilds shallow copies of the module objects each step instead).
#pragma once

#include <memory>
#include <vector>

#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/module.h>
#include <ringgrad/parallel/comm.h>

namespace ringgrad {
namespace parallel {

/// One replica of `module` per device, devices[i] getting replica i. The module must live on one of
/// the devices (its parameters and buffers on that device). `clock` is charged with the gradient
/// summation time of the Broadcast nodes (see comm.h).
std::vector<std::shared_ptr<nn::Module>> replicate(nn::Module& module, const std::vector<Device>& devices,
                                                   const std::shared_ptr<ReduceClock>& clock = nullptr);

/// The same, typed: replicate(model, devices)[1]->fc1 is replica 1's layer. M must derive from
/// nn::Cloneable<M> so that clone() makes an M.
template <typename M>
std::vector<std::shared_ptr<M>> replicate(const std::shared_ptr<M>& module, const std::vector<Device>& devices,
                                          const std::shared_ptr<ReduceClock>& clock = nullptr);

/// Gives existing replicas (made by replicate() from this module) fresh broadcast copies of the
/// module's current parameters and buffers, and its train/eval mode.
void refresh_replicas(nn::Module& module, const std::vector<std::shared_ptr<nn::Module>>& replicas,
                      const std::vector<Device>& devices, const std::shared_ptr<ReduceClock>& clock = nullptr);

// --- implementation ------------------------------------------------------------------------------

}  // namespace parallel

namespace detail {
/// clone()'s result as an M, or an error naming the module type.
void check_clone_type(bool ok, const nn::Module& module);
}  // namespace detail

namespace parallel {

template <typename M>
std::vector<std::shared_ptr<M>> replicate(const std::shared_ptr<M>& module, const std::vector<Device>& devices,
                                          const std::shared_ptr<ReduceClock>& clock) {
  RINGGRAD_CHECK(module != nullptr, "replicate: expected a module, got a null pointer");
  std::vector<std::shared_ptr<M>> typed;
  for (const std::shared_ptr<nn::Module>& replica : replicate(static_cast<nn::Module&>(*module), devices, clock)) {
    typed.push_back(std::dynamic_pointer_cast<M>(replica));
    detail::check_clone_type(typed.back() != nullptr, *module);
  }
  return typed;
}

}  // namespace parallel
}  // namespace ringgrad
