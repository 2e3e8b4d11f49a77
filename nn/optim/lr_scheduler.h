/// @file
/// nn/optim/lr_scheduler.h: learning-rate schedules, stepped once per epoch.
///
/// @code
///   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
///   optim::CosineAnnealingLR sched(opt, /*T_max=*/epochs);
///   for (int epoch = 0; epoch < epochs; ++epoch) { train_one_epoch(opt); sched.step(); }
/// @endcode
///
/// As in PyTorch, constructing a scheduler is epoch 0 (the optimizer's lr is the base lr and stays as
/// it is), and each step() advances one epoch and writes that epoch's lr into the optimizer. Here the
/// lr is a function of (base_lr, last_epoch) alone, so those two numbers are the whole state a
/// checkpoint needs; an lr set by hand between steps is overwritten by the next step().
#pragma once

#include <cstdint>

#include <ringgrad/nn/module.h>
#include <ringgrad/nn/optim/optimizer.h>

namespace ringgrad {
namespace nn {
namespace optim {

/// The base of the schedulers: the lr is a function lr_at(epoch) of (base_lr, last_epoch) alone,
/// and step() writes it into the optimizer.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);  ///< base_lr = optimizer.lr(), last_epoch = 0
  virtual ~LRScheduler() = default;

  void step();  ///< last_epoch += 1, then the optimizer's lr = lr_at(last_epoch)
  double get_last_lr() const { return lr_at(last_epoch_); }  ///< the lr of the current epoch
  int64_t last_epoch() const { return last_epoch_; }         ///< epochs stepped so far
  double base_lr() const { return base_lr_; }                ///< the optimizer's lr at construction
  virtual double lr_at(int64_t epoch) const = 0;             ///< the schedule: the lr of epoch `epoch`

  /// {"last_epoch", "base_lr"} as 0-d float64 tensors. Loading does not touch the optimizer: its own
  /// state_dict restores its lr.
  nn::StateDict state_dict() const;
  /// Restores a state_dict(); throws ringgrad::Error naming a missing, unexpected or invalid key.
  void load_state_dict(const nn::StateDict& state);

 protected:
  Optimizer& optimizer_;    ///< the optimizer whose lr step() sets
  double base_lr_;          ///< see base_lr()
  int64_t last_epoch_ = 0;  ///< see last_epoch()
};

/// lr = base_lr * gamma^floor(epoch / step_size). Formed as PyTorch does, by multiplying by gamma at
/// every step_size-th epoch (0.1 * 0.1 * 0.1, not 0.1 * 0.1^2), so the values match it bit for bit.
class StepLR : public LRScheduler {
 public:
  /// step_size >= 1 epochs between decays (throws otherwise); gamma, the factor of each decay.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch) const override;  ///< base_lr * gamma^floor(epoch / step_size)

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2: from base_lr down to eta_min
/// over T_max epochs (and, like PyTorch's, back up again after T_max). This is the closed form;
/// PyTorch's step() uses an equivalent recursion from the previous lr, which agrees with it to
/// rounding (about 1e-16 relative), not bit for bit.
class CosineAnnealingLR : public LRScheduler {
 public:
  /// T_max >= 1 epochs (throws otherwise) from base_lr down to eta_min.
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t epoch) const override;  ///< the cosine of the class comment

 private:
  int64_t T_max_;
  double eta_min_;
};

}  // namespace optim
}  // namespace nn
}  // namespace ringgrad
