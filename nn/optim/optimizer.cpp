// nn/optim/optimizer.cpp: what every optimizer shares -- parameter checks, zero_grad, lr, and the
// reading and writing of its state_dict.
#include <ringgrad/nn/optim/optimizer.h>

#include <sstream>

namespace ringgrad {
namespace nn {
namespace optim {

namespace {
const char kGroupPrefix[] = "param_groups.0.";
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  RINGGRAD_CHECK(!params_.empty(), "Optimizer: got an empty parameter list; pass model->parameters()");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    RINGGRAD_CHECK(p.defined(), "Optimizer: parameter ", i, " is an undefined tensor");
    RINGGRAD_CHECK(is_floating(p.dtype()), "Optimizer: expected parameter ", i, " to be floating, got ", p.dtype());
    RINGGRAD_CHECK(p.requires_grad(), "Optimizer: expected parameter ", i,
                   " to require grad; call requires_grad_(true) on it or leave it out");
    RINGGRAD_CHECK(p.is_leaf(), "Optimizer: expected parameter ", i,
                   " to be a leaf tensor, got the output of an op; optimize the tensor it was computed from");
    for (size_t j = 0; j < i; ++j)
      RINGGRAD_CHECK(!params_[j].same(p), "Optimizer: parameter ", i, " is the same tensor as parameter ", j,
                     "; list each parameter once");
  }
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.set_grad(Tensor());
}

void Optimizer::set_lr(double lr) {
  RINGGRAD_CHECK(lr >= 0.0, name(), ": expected a learning rate >= 0, got ", lr);
  lr_ = lr;
}

Tensor Optimizer::dense_grad(size_t i) const {
  const Tensor& p = params_[i];
  Tensor g = p.grad();  // not const, so that the early return moves it
  if (!g.defined()) return g;
  // The kernels update the parameter's storage in place, element by element.
  RINGGRAD_CHECK(p.is_contiguous(), name(), ".step: parameter ", i, " of shape ", p.shape(), " has strides ",
                 p.strides(), "; optimizers update dense parameters only");
  RINGGRAD_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype() && g.device() == p.device(), name(),
                 ".step: parameter ", i, " is ", p.dtype(), p.shape(), " on ", p.device(), " but its grad is ",
                 g.dtype(), g.shape(), " on ", g.device());
  return g.contiguous();
}

nn::StateDict Optimizer::group_state(const std::vector<std::pair<std::string, double>>& hyperparameters) const {
  nn::StateDict out;
  out[std::string(kGroupPrefix) + "params"] =
      arange(0.0, static_cast<double>(params_.size()), 1.0, TensorOptions(DType::i64));
  for (const auto& [key, value] : hyperparameters)
    out[kGroupPrefix + key] = scalar_tensor(value, TensorOptions(DType::f64));
  return out;
}

std::string Optimizer::state_key(size_t i, const std::string& name) {
  return "state." + std::to_string(i) + "." + name;
}

// --- StateReader -------------------------------------------------------------------------------------

Optimizer::StateReader::StateReader(const Optimizer& opt, const nn::StateDict& state) : opt_(opt), state_(state) {
  const Tensor& indices = find(std::string(kGroupPrefix) + "params");
  RINGGRAD_CHECK(indices.dim() == 1 && indices.numel() == static_cast<int64_t>(opt_.params_.size()), opt_.name(),
                 ".load_state_dict: ", kGroupPrefix, "params: expected ", opt_.params_.size(),
                 " parameters (this optimizer's), got a state for ", indices.numel(), " (shape ", indices.shape(), ")");
}

const Tensor& Optimizer::StateReader::find(const std::string& key) {
  const auto it = state_.find(key);
  RINGGRAD_CHECK(it != state_.end(), opt_.name(), ".load_state_dict: missing key ", key);
  RINGGRAD_CHECK(it->second.defined(), opt_.name(), ".load_state_dict: key ", key, " holds an undefined tensor");
  read_.insert(key);
  return it->second;
}

double Optimizer::StateReader::hyperparameter(const std::string& name) {
  const std::string key = kGroupPrefix + name;
  const Tensor& t = find(key);
  RINGGRAD_CHECK(t.numel() == 1, opt_.name(), ".load_state_dict: ", key, ": expected one number, got shape ",
                 t.shape());
  return t.item();
}

bool Optimizer::StateReader::has_state(size_t i) const {
  const std::string prefix = "state." + std::to_string(i) + ".";
  const auto it = state_.lower_bound(prefix);
  return it != state_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

Tensor Optimizer::StateReader::state_like_param(size_t i, const std::string& name) {
  const std::string key = state_key(i, name);
  const Tensor src = find(key).detach();
  const Tensor& p = opt_.params_[i];
  RINGGRAD_CHECK(src.dtype() == p.dtype(), opt_.name(), ".load_state_dict: ", key, ": expected dtype ", p.dtype(),
                 " (parameter ", i, "'s), got ", src.dtype());
  RINGGRAD_CHECK(src.shape() == p.shape(), opt_.name(), ".load_state_dict: ", key, ": expected shape ", p.shape(),
                 " (parameter ", i, "'s), got ", src.shape());
  // Our own dense copy on the parameter's device: steps update it in place, and the caller's
  // state dict must not change under it.
  Tensor out = src.to(p.device());
  return out.same(src) ? src.clone() : out.contiguous();
}

double Optimizer::StateReader::state_scalar(size_t i, const std::string& name) {
  const std::string key = state_key(i, name);
  const Tensor& t = find(key);
  RINGGRAD_CHECK(t.numel() == 1, opt_.name(), ".load_state_dict: ", key, ": expected one number, got shape ",
                 t.shape());
  return t.item();
}

void Optimizer::StateReader::finish() const {
  std::ostringstream unexpected;
  int count = 0;
  constexpr int kShown = 10;  // the first few names (escaped: they come from a file), then a count
  for (const auto& entry : state_) {
    if (read_.count(entry.first)) continue;
    if (count < kShown) unexpected << (count ? ", " : "") << detail::printable(entry.first);
    ++count;
  }
  if (count > kShown) unexpected << " and " << count - kShown << " more";
  RINGGRAD_CHECK(count == 0, opt_.name(), ".load_state_dict: unexpected key", count > 1 ? "s " : " ", unexpected.str(),
                 " (is this the state of a ", opt_.name(), " over ", opt_.params_.size(), " parameters?)");
}

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
