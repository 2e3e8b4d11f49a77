// parallel/replicate.cpp: clone once per device, then point every replica at broadcast copies.
#include <ringgrad/parallel/replicate.h>

#include <algorithm>

#include <ringgrad/core/autograd/node.h>

namespace ringgrad {
namespace parallel {
namespace {

std::string device_list(const std::vector<Device>& devices) {
  std::string out = "[";
  for (size_t i = 0; i < devices.size(); ++i) out += (i ? ", " : "") + devices[i].str();
  return out + "]";
}

// Makes `handle` -- a tensor the replica's registry and members share -- show `copy`'s data and
// become `copy` for autograd too: a non-leaf produced by copy's Broadcast node (or, when nothing
// requires grad, a plain tensor). Every holder of the handle sees the change.
void become(const Tensor& handle, const Tensor& copy) {
  handle.set_data(copy);
  AutogradMeta& meta = handle.autograd_meta();
  meta.requires_grad = copy.requires_grad();
  meta.grad_fn = copy.grad_fn();
  meta.output_nr = copy.grad_fn() ? copy.output_nr() : 0;
  meta.grad = Tensor();
}

// The module's tensors must all sit on one of the target devices, which the copies are made from.
void check_module_device(const nn::Named<Tensor>& tensors, const std::vector<Device>& devices) {
  for (const auto& [name, t] : tensors)
    RINGGRAD_CHECK(std::find(devices.begin(), devices.end(), t.device()) != devices.end(),
                   "replicate: expected the module on one of the devices ", device_list(devices), ", got '", name,
                   "' on ", t.device(), "; call module->to(", devices[0], ") first");
}

}  // namespace

}  // namespace parallel

namespace detail {
void check_clone_type(bool ok, const nn::Module& module) {
  RINGGRAD_CHECK(ok, "replicate: clone() of a ", module.type_name(), " returned another type; derive ",
                 module.type_name(), " from nn::Cloneable<", module.type_name(), ">");
}
}  // namespace detail

namespace parallel {

std::vector<std::shared_ptr<nn::Module>> replicate(nn::Module& module, const std::vector<Device>& devices,
                                                   const std::shared_ptr<ReduceClock>& clock) {
  RINGGRAD_CHECK(!devices.empty(), "replicate: expected at least one device, got an empty list");
  std::vector<std::shared_ptr<nn::Module>> replicas;
  for (size_t i = 0; i < devices.size(); ++i) replicas.push_back(module.clone());
  refresh_replicas(module, replicas, devices, clock);
  return replicas;
}

void refresh_replicas(nn::Module& module, const std::vector<std::shared_ptr<nn::Module>>& replicas,
                      const std::vector<Device>& devices, const std::shared_ptr<ReduceClock>& clock) {
  RINGGRAD_CHECK(replicas.size() == devices.size(), "refresh_replicas: expected one replica per device (",
                 devices.size(), "), got ", replicas.size());
  const nn::Named<Tensor> params = module.named_parameters();
  const nn::Named<Tensor> buffers = module.named_buffers();
  check_module_device(params, devices);
  check_module_device(buffers, devices);

  std::vector<nn::Named<Tensor>> replica_params, replica_buffers;
  for (size_t k = 0; k < replicas.size(); ++k) {
    replica_params.push_back(replicas[k]->named_parameters());
    replica_buffers.push_back(replicas[k]->named_buffers());
    bool same = replica_params[k].size() == params.size() && replica_buffers[k].size() == buffers.size();
    for (size_t i = 0; same && i < params.size(); ++i) same = replica_params[k][i].first == params[i].first;
    for (size_t i = 0; same && i < buffers.size(); ++i) same = replica_buffers[k][i].first == buffers[i].first;
    RINGGRAD_CHECK(same, "refresh_replicas: replica ", k, " has other parameters or buffers than the ",
                   module.type_name(), " it was made from (was the module changed after replicate()?)");
  }

  // One Broadcast node per parameter: its backward sums that parameter's gradients as soon as every
  // replica delivered one, while the replicas may still be busy with earlier layers.
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<Tensor> copies = broadcast(params[i].second, devices, clock);
    for (size_t k = 0; k < replicas.size(); ++k) become(replica_params[k][i].second, copies[k]);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    const std::vector<Tensor> copies = broadcast(buffers[i].second, devices);
    for (size_t k = 0; k < replicas.size(); ++k) become(replica_buffers[k][i].second, copies[k]);
  }

  // Dropout and friends must behave as in the module: copy train/eval, module by module.
  const nn::Named<std::shared_ptr<nn::Module>> originals = module.named_modules();
  for (const std::shared_ptr<nn::Module>& replica : replicas) {
    const nn::Named<std::shared_ptr<nn::Module>> copies = replica->named_modules();
    for (size_t m = 0; m < copies.size() && m < originals.size(); ++m)
      if (copies[m].second->is_training() != originals[m].second->is_training())
        copies[m].second->train(originals[m].second->is_training());
  }
}

}  // namespace parallel
}  // namespace ringgrad
