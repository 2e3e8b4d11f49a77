// nn/optim/lr_scheduler.cpp: StepLR and CosineAnnealingLR, and the epoch bookkeeping they share.
#include <ringgrad/nn/optim/lr_scheduler.h>

#include <cmath>

namespace ringgrad {
namespace nn {
namespace optim {

namespace {
const double kPi = 3.14159265358979323846;  // math.pi

double read_number(const nn::StateDict& state, const char* key) {
  const auto it = state.find(key);
  RINGGRAD_CHECK(it != state.end(), "LRScheduler.load_state_dict: missing key ", key);
  RINGGRAD_CHECK(it->second.defined() && it->second.numel() == 1, "LRScheduler.load_state_dict: ", key,
                 ": expected one number, got ", it->second.defined() ? "shape " : "an undefined tensor",
                 it->second.defined() ? it->second.shape() : Shape{});
  return it->second.item();
}
}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() {
  ++last_epoch_;
  optimizer_.set_lr(lr_at(last_epoch_));
}

nn::StateDict LRScheduler::state_dict() const {
  return {{"last_epoch", scalar_tensor(static_cast<double>(last_epoch_), TensorOptions(DType::f64))},
          {"base_lr", scalar_tensor(base_lr_, TensorOptions(DType::f64))}};
}

void LRScheduler::load_state_dict(const nn::StateDict& state) {
  for (const auto& entry : state)
    RINGGRAD_CHECK(entry.first == "last_epoch" || entry.first == "base_lr",
                   "LRScheduler.load_state_dict: unexpected key ", entry.first, " (expected last_epoch and base_lr)");
  const double epoch = read_number(state, "last_epoch");
  const double base_lr = read_number(state, "base_lr");
  RINGGRAD_CHECK(epoch >= 0.0 && epoch == std::floor(epoch) && epoch < 9.0e15,
                 "LRScheduler.load_state_dict: last_epoch: expected a whole number >= 0, got ", epoch);
  RINGGRAD_CHECK(base_lr >= 0.0, "LRScheduler.load_state_dict: base_lr: expected >= 0, got ", base_lr);
  last_epoch_ = static_cast<int64_t>(epoch);
  base_lr_ = base_lr;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  RINGGRAD_CHECK(step_size >= 1, "StepLR: expected step_size >= 1, got ", step_size);
}

double StepLR::lr_at(int64_t epoch) const {
  double lr = base_lr_;
  for (int64_t k = 0; k < epoch / step_size_; ++k) lr *= gamma_;
  return lr;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  RINGGRAD_CHECK(T_max >= 1, "CosineAnnealingLR: expected T_max >= 1, got ", T_max);
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  // Evaluated in the order of PyTorch's _get_closed_form_lr.
  return eta_min_ +
         (base_lr_ - eta_min_) * (1.0 + std::cos(kPi * static_cast<double>(epoch) / static_cast<double>(T_max_))) / 2.0;
}

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
