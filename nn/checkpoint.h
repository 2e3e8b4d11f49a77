/// @file
/// nn/checkpoint.h: saving a model's weights, and saving and resuming a whole training run.
///
/// Both are safetensors files (nn/safetensors.h), so they open in PyTorch and other tools:
///
/// @code
///   weights      save_model / load_model: the keys are the module's state_dict() names
///                ("fc1.weight"), exactly what a PyTorch model's state_dict() holds.
///   training     save_checkpoint / load_checkpoint: "model.<name>" for the weights,
///                "optimizer.<name>" for the optimizer's state_dict(), and a TrainingState (step,
///                epoch, RNG state, free-form strings) in the header's __metadata__, tagged
///                "format": "ringgrad.checkpoint.v1".
/// @endcode
///
/// Resuming from a training checkpoint continues *bitwise* as if the run had never stopped (on the
/// same build and device), provided the data order is restored too: the TrainingState carries the
/// step and epoch for that.
///
/// @code
///   nn::TrainingState state{step, epoch};
///   nn::capture_rng_state(state);                      // the default generator's (seed, offset)
///   nn::save_checkpoint("run.ckpt", *model, opt, state);
///   ...
///   nn::TrainingState resumed = nn::load_checkpoint("run.ckpt", *model, opt);
///   nn::restore_rng_state(resumed);
/// @endcode
///
/// Every write goes through a temporary file that is renamed into place, so a crash mid-save leaves
/// the previous checkpoint intact; a symlink ("latest.ckpt") is written through to its target, and a
/// FIFO or device at the path is refused (save_safetensors in nn/safetensors.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <ringgrad/core/generator.h>
#include <ringgrad/nn/module.h>
#include <ringgrad/nn/optim/optimizer.h>

namespace ringgrad {
namespace nn {

/// The tag stored under "format" in a training checkpoint's metadata.
constexpr char kCheckpointFormat[] = "ringgrad.checkpoint.v1";

/// Writes the module's state_dict() (parameters and buffers) to `path`.
void save_model(const std::string& path, const Module& model);
/// Loads weights into the module in place (Module::load_state_dict): keys may carry a leading
/// "module." (PyTorch DataParallel/DDP checkpoints). With `strict` the error lists every missing,
/// unexpected and mis-shaped name; a load that fails changes nothing. Given a training checkpoint,
/// it loads the checkpoint's "model." part, so one file also serves evaluation.
void load_model(const std::string& path, Module& model, bool strict = true);

/// Where a training run stands, besides its tensors.
struct TrainingState {
  int64_t step = 0;   ///< optimizer steps taken so far
  int64_t epoch = 0;  ///< the epoch to resume in (DataLoader::start_at)
  ///@{
  /// a Generator's state (see capture_rng_state)
  uint64_t rng_seed = 0, rng_offset = 0;
  ///@}
  std::map<std::string, std::string> extra;  ///< anything else the training script wants back
};

/// Copies a generator's (seed, offset) into `state`, and back. The default generator draws every
/// dropout mask and rand()/randn() without an explicit generator, so restoring it is what makes a
/// resumed run draw the same masks as an uninterrupted one.
void capture_rng_state(TrainingState& state, const Generator& generator = default_generator());
/// Copies `state`'s (seed, offset) back into the generator (see capture_rng_state).
void restore_rng_state(const TrainingState& state, Generator& generator = default_generator());

/// Writes model, optimizer and `state` to `path` in one file.
void save_checkpoint(const std::string& path, const Module& model, const optim::Optimizer& optimizer,
                     const TrainingState& state);

/// Restores the model's weights and the optimizer's state from `path` and returns the
/// TrainingState (the RNG is not touched: call restore_rng_state). All or nothing: the file, its
/// format tag, its metadata and the fit of both parts are checked before the model or the optimizer
/// changes; any problem throws ringgrad::Error naming the file, and both are left as they were.
TrainingState load_checkpoint(const std::string& path, Module& model, optim::Optimizer& optimizer);

}  // namespace nn
}  // namespace ringgrad
