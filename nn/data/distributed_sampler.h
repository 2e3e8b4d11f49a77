/// @file
/// nn/data/distributed_sampler.h: DistributedSampler, which gives each of R ranks its own equal share of
/// the dataset every epoch -- torch.utils.data.distributed.DistributedSampler, as in PyTorch 1.13.
///
/// Shape legend: N samples in the dataset, R replicas (ranks), M = num_samples() per rank and epoch.
///
/// @code
///   auto sampler = std::make_shared<data::DistributedSampler>(train.size(), world_size, rank,
///                                                             data::DistributedSamplerOptions().seed(7));
///   data::DataLoader loader(train, data::DataLoaderOptions().batch_size(64).sampler(sampler));
///   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
///     loader.set_epoch(epoch);  // the loader hands its epoch to sampler->indices(epoch)
///     for (const data::Batch& batch : loader) step(batch.x, batch.y);  // this rank's M samples
///   }
/// @endcode
///
/// An epoch, on every rank alike:
/// @code
///   1. order: with shuffle, shuffled_indices(N, seed, epoch) (sampler.h); without, 0, 1, .., N-1.
///      Every rank computes the same order, since it depends on (seed, epoch) only.
///   2. size : without drop_last, total = ceil(N / R) * R and the order is padded to that length by
///             repeating its beginning (cyclically, when more than N samples are missing: N = 2, R = 7
///             gives 0 1 0 1 0 1 0). With drop_last, total = floor(N / R) * R and the tail is cut.
///             PyTorch writes the drop_last size as ceil((N - R) / R) when R does not divide N, which is
///             the same number, floor(N / R); it is 0 when N < R -- no rank gets a sample, as in PyTorch.
///   3. share: rank r takes padded[r], padded[r + R], padded[r + 2R], ...: M = total / R samples.
/// @endcode
/// So the ranks' shares have equal lengths (collectives stay in step: no rank runs out of batches
/// first), are disjoint apart from the padding, and together cover the dataset (without drop_last) or
/// all but fewer than R samples (with it).
///
/// Against PyTorch: the sizes, the padding and the striding are PyTorch's, index for index, and with
/// shuffle off the shares are identical. The shuffled order is not torch.randperm's (a Mersenne Twister
/// seeded with seed + epoch); it is ringgrad's Philox Fisher-Yates, keyed by seed and epoch separately
/// (so seed 1, epoch 0 and seed 0, epoch 1 differ, where PyTorch's coincide), deterministic and the same
/// on every platform.
///
/// Epochs. indices(e) is a pure function of e, and a DataLoader calls indices(loader.epoch()): inside a
/// loader, loader.set_epoch(e) -- or the loader's cursor moving on at the end of an epoch -- is what
/// selects the order. set_epoch()/epoch() here are PyTorch's, for a sampler used on its own: indices()
/// without an argument is indices(epoch()). A loader never reads them, so sampler->set_epoch(e) alone
/// does not move a loader to epoch e; call loader.set_epoch(e).
#pragma once

#include <cstdint>
#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/nn/data/sampler.h>

namespace ringgrad {
namespace nn {
namespace data {

/// How a DistributedSampler orders and pads the samples it shares out among the ranks.
struct DistributedSamplerOptions {
  RINGGRAD_ARG(bool, shuffle) = true;  ///< a new order each epoch (set_epoch), the same on every rank
  RINGGRAD_ARG(uint64_t, seed) = 0;    ///< must be the same on every rank, or the ranks' shares overlap
  /// Off: pad with repeated samples to a multiple of R. On: cut the N % R samples that do not fit.
  RINGGRAD_ARG(bool, drop_last) = false;
};

/// Each rank's share of the dataset, the same size on every rank (see the top of this file), as
/// torch.utils.data.distributed.DistributedSampler.
class DistributedSampler final : public Sampler {
 public:
  /// dataset_size: N >= 0 (N < 2^32 with shuffle); num_replicas: R >= 1 (the world size); rank in [0, R).
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, DistributedSamplerOptions options = {});

  int64_t size() const override { return num_samples_; }  ///< M, PyTorch's len(sampler)
  /// This rank's M dataset indices for epoch `epoch` (>= 0), in the order it visits them.
  std::vector<int64_t> indices(int64_t epoch) const override;
  std::vector<int64_t> indices() const { return indices(epoch_); }  ///< indices(epoch())

  /// PyTorch's set_epoch, for indices() without an argument; a DataLoader passes its own epoch instead.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }  ///< the last set_epoch() (0 before any)

  int64_t dataset_size() const { return dataset_size_; }                 ///< N
  int num_replicas() const { return num_replicas_; }                     ///< R
  int rank() const { return rank_; }                                     ///< r, this process's rank
  int64_t num_samples() const { return num_samples_; }                   ///< M
  int64_t total_size() const { return total_size_; }                     ///< M * R: the padded or cut order's length
  const DistributedSamplerOptions& options() const { return options_; }  ///< as given

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  DistributedSamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t total_size_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
