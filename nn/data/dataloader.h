/// @file
/// nn/data/dataloader.h: DataLoader, which cuts a dataset into shuffled batches on a background thread.
///
/// Shape legend: N samples in the dataset, B samples in a batch, F = the product of a sample's sizes
/// (784 for a 28x28 image).
///
/// @code
///   data::FashionMNIST train(data::Split::Train);
///   data::DataLoader loader(train, data::DataLoaderOptions().batch_size(256).seed(7).normalize(0.2860, 0.3530));
///   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
///     loader.set_epoch(epoch);
///     for (const data::Batch& batch : loader) step(batch.x, batch.y);  // x: float32 [B, 784], y: int64 [B]
///   }
/// @endcode
///
/// The order. With shuffle on, epoch e visits the samples in permutation(e), a Fisher-Yates shuffle
/// driven by Philox4x32-10 keyed by the seed, with e in the counter's upper half (shuffled_indices in
/// sampler.h). It is a pure function of (seed, e, N): the same on every platform, compiler and run,
/// with no state carried from one epoch to the next -- so a run resumed from a checkpoint sees exactly
/// the batches the original would have.
/// (std::shuffle and std::uniform_int_distribution are implementation-defined, so they are not used.)
///
/// A sampler (sampler.h) replaces that order: with options().sampler(s), epoch e visits s->indices(e),
/// which may be a part of the dataset (DistributedSampler: this rank's share) and may repeat samples.
/// The loader hands the sampler its own epoch, so set_epoch(e) on the loader is all a training loop
/// needs; the loader's shuffle and seed are then unused, since the sampler decides the order.
///
/// The cursor. A loader remembers (epoch, batch): the next batch it will hand out. set_epoch(e) puts
/// it at the start of epoch e, start_at(e, k) at batch k of epoch e (resuming mid-epoch), reset() back
/// to the start of the current epoch. Iterating hands out batches from the cursor to the end of the
/// epoch and then moves the cursor to the start of the next epoch, so a loop that never calls set_epoch
/// still sees a fresh order each epoch. Leaving a loop early (break) keeps the cursor at the first batch
/// not handed out, and the next loop continues from there; position() tells a checkpoint where that is.
///
/// The prefetch thread. With prefetch on, one background thread gathers, converts and normalises the
/// next batches (up to kPrefetchDepth of them) while the caller trains on the current one. It stops
/// when the epoch ends, when the cursor is moved, and when the loader is destroyed -- at most one batch
/// of work later. An exception thrown while preparing a batch (by a transform, say) is rethrown by the
/// call that would have returned that batch. A loader is used from one thread at a time.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/data/sampler.h>

namespace ringgrad {
namespace nn {
namespace data {

class FashionMNIST;

/// One batch: inputs and labels of the same B samples.
struct Batch {
  Tensor x;  ///< float32 [B, F] when flattening, else [B, ...] (a sample's own shape)
  Tensor y;  ///< int64 [B]
};

/// How a DataLoader cuts, orders and prepares batches: `DataLoaderOptions().batch_size(128).seed(1)`.
struct DataLoaderOptions {
  /// What transform() runs on each batch: the batch, its epoch and its index in the epoch.
  using Transform = std::function<void(Batch& batch, int64_t epoch, int64_t index)>;

  RINGGRAD_ARG(int64_t, batch_size) = 64;  ///< samples per batch (B)
  RINGGRAD_ARG(uint64_t, seed) = 0;        ///< the shuffle's seed: epoch e's order depends on (seed, e) only
  /// Without it the last batch of an epoch holds the N % B leftover samples (when N % B != 0); with a
  /// sampler, its size() takes N's place.
  RINGGRAD_ARG(bool, drop_last) = false;
  RINGGRAD_ARG(bool, prefetch) = true;  ///< build the next batch on a background thread while this one trains
  /// On: x is [B, F], what a Linear layer takes. Off: x keeps each sample's shape, [B, 28, 28].
  RINGGRAD_ARG(bool, flatten) = true;
  /// Runs on each finished batch (on the prefetch thread when prefetching): augmentation, a check, a
  /// device copy. Gets the batch's epoch and index, so random augmentation can be seeded reproducibly.
  RINGGRAD_ARG(Transform, transform);
  /// Epoch e visits sampler->indices(e) instead of the loader's own order (null: the loader's own
  /// order over all N samples). As in PyTorch, a sampler and an explicit shuffle(true) are mutually
  /// exclusive (the constructor throws): shuffling is the sampler's option. The default shuffle,
  /// never set, simply gives way to the sampler.
  RINGGRAD_ARG(std::shared_ptr<const Sampler>, sampler);

 public:
  /// Shuffle each epoch's order (default on). shuffle_set(): whether shuffle() was called, since
  /// shuffle(true) and a sampler contradict each other while the default gives way.
  DataLoaderOptions& shuffle(bool s) {
    shuffle_ = s;
    shuffle_set_ = true;
    return *this;
  }
  bool shuffle() const { return shuffle_; }          ///< whether each epoch is shuffled
  bool shuffle_set() const { return shuffle_set_; }  ///< whether shuffle() was called

  /// x = (pixel / 255 - mean) / std for uint8 images, (value - mean) / std for floating ones.
  /// Fashion-MNIST's training set has mean 0.2860 and std 0.3530. Off by default: x is the
  /// [0, 1]-scaled value itself.
  DataLoaderOptions& normalize(double mean, double std) {
    normalize_ = true;
    normalize_mean_ = mean;
    normalize_std_ = std;
    return *this;
  }
  bool normalize() const { return normalize_; }              ///< whether normalize() was called
  double normalize_mean() const { return normalize_mean_; }  ///< the mean normalize() subtracts
  double normalize_std() const { return normalize_std_; }    ///< the std normalize() divides by

 private:
  bool shuffle_ = true;
  bool shuffle_set_ = false;
  bool normalize_ = false;
  double normalize_mean_ = 0.0;
  double normalize_std_ = 1.0;
};

/// Batches of a labelled dataset, in a reproducible order, prepared ahead on a prefetch thread (see
/// the top of this file for the order and the cursor). A loader is used from one thread at a time.
class DataLoader {
 public:
  static constexpr int64_t kPrefetchDepth = 2;  ///< batches prepared ahead of the one being trained on

  /// images: uint8 (scaled by 1/255), float32 or float64, shape [N, ...]; labels: int64 [N]. Both on
  /// the CPU. The loader keeps handles to them (no copy); do not modify them while it runs.
  DataLoader(const Tensor& images, const Tensor& labels, DataLoaderOptions options = {});
  /// Over a loaded Fashion-MNIST split (its images and labels).
  explicit DataLoader(const FashionMNIST& dataset, DataLoaderOptions options = {});
  ~DataLoader();  ///< stops and joins the prefetch thread
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t size() const { return n_; }  ///< N, samples in the dataset
  /// Per epoch: ceil(S / B), or floor(S / B) with drop_last, for S samples per epoch: N, or
  /// sampler->size() with a sampler.
  int64_t num_batches() const { return batches_for(samples_per_epoch()); }
  const DataLoaderOptions& options() const { return options_; }  ///< as given to the constructor

  /// The cursor (see the top of this file): moves it to the first batch of epoch `epoch` (>= 0).
  void set_epoch(int64_t epoch) { start_at(epoch, 0); }
  /// Moves the cursor to batch `batch` of epoch `epoch`, e.g. to resume from a checkpoint.
  void start_at(int64_t epoch, int64_t batch);  ///< 0 <= batch <= num_batches()
  void reset() { start_at(epoch_, 0); }         ///< back to the first batch of the current epoch
  int64_t epoch() const { return epoch_; }      ///< the epoch the cursor is in
  int64_t position() const { return next_; }    ///< index of the next batch to be handed out

  /// The order in which epoch `epoch` visits the samples: a permutation of 0 .. N-1 (the identity
  /// without shuffle), or with a sampler its indices(epoch), checked to hold sampler->size() indices,
  /// each in [0, N). Batch k holds samples permutation(epoch)[k*B .. k*B + B).
  std::vector<int64_t> permutation(int64_t epoch) const;

  /// Hands out the batch at the cursor and advances it; false (and the cursor moves to the next
  /// epoch) once the epoch is done.
  bool next(Batch& batch);

  /// Range-for over the rest of the current epoch: for (const Batch& b : loader). Each begin() continues
  /// from the cursor; an iterator is single-pass, like an input stream's.
  class Iterator {
   public:
    ///@{
    /// The standard iterator traits of an input iterator over Batch.
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;
    ///@}

    Iterator() = default;                                ///< the end
    const Batch& operator*() const { return batch_; }    ///< the current batch
    const Batch* operator->() const { return &batch_; }  ///< the current batch
    /// Fetches the next batch (DataLoader::next); at the end of the epoch it becomes end().
    Iterator& operator++() {
      if (!loader_->next(batch_)) loader_ = nullptr;
      return *this;
    }
    bool operator==(const Iterator& other) const { return loader_ == other.loader_; }  ///< both at the end, or not
    bool operator!=(const Iterator& other) const { return loader_ != other.loader_; }  ///< !(*this == other)

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader) : loader_(loader) { ++*this; }
    DataLoader* loader_ = nullptr;
    Batch batch_;
  };
  Iterator begin() { return Iterator(this); }  ///< hands out the batch at the cursor (see Iterator)
  Iterator end() { return Iterator(); }        ///< the end of the current epoch

 private:
  // A prepared batch, or the exception its preparation threw.
  struct Slot {
    int64_t index = 0;
    Batch batch;
    std::exception_ptr error;
  };

  int64_t samples_per_epoch() const { return options_.sampler() ? options_.sampler()->size() : n_; }
  int64_t batches_for(int64_t samples) const;
  Batch make_batch(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const;
  void ensure_order();  // computes order_ for epoch_ if not done yet
  void start_worker();
  void stop_worker();
  void worker_loop(std::shared_ptr<const std::vector<int64_t>> order, int64_t epoch, int64_t first);

  Tensor images_;  // contiguous, [N, ...]
  Tensor labels_;  // contiguous int64 [N]
  DataLoaderOptions options_;
  int64_t n_ = 0;
  int64_t features_ = 1;  // F
  float lut_[256] = {};   // uint8 pixel -> normalised float32, exact for each of the 256 values

  int64_t epoch_ = 0;
  int64_t next_ = 0;                                   // the cursor's batch
  std::shared_ptr<const std::vector<int64_t>> order_;  // permutation(epoch_), shared with the worker

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable ready_;  // a slot was queued
  std::condition_variable space_;  // a slot was taken, or stop_ was set
  std::deque<Slot> queue_;
  bool stop_ = false;
};

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
