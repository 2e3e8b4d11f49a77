// nn/data/dataloader.cpp: the per-epoch order, batch assembly, and the prefetch thread.
#include <ringgrad/nn/data/dataloader.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include <ringgrad/nn/data/fashion_mnist.h>

namespace ringgrad {
namespace nn {
namespace data {
namespace {

// x[r, :] = convert(images[order[r], :]) for one dtype of images.
template <typename T>
void gather_rows(const T* images, const int64_t* rows, int64_t count, int64_t features, float* out, float scale,
                 float shift) {
  for (int64_t r = 0; r < count; ++r) {
    const T* src = images + rows[r] * features;
    float* dst = out + r * features;
    for (int64_t f = 0; f < features; ++f) dst[f] = static_cast<float>(src[f]) * scale + shift;
  }
}

}  // namespace

DataLoader::DataLoader(const Tensor& images, const Tensor& labels, DataLoaderOptions options)
    : options_(std::move(options)) {
  RINGGRAD_CHECK(images.defined() && labels.defined(), "DataLoader: expected defined images and labels tensors");
  RINGGRAD_CHECK(images.device().is_cpu() && labels.device().is_cpu(),
                 "DataLoader: expected images and labels on the CPU, got ", images.device(), " and ", labels.device(),
                 "; move batches to a device in a transform or after next()");
  RINGGRAD_CHECK(images.dim() >= 1, "DataLoader: expected images of shape [N, ...], got a 0-d tensor");
  const DType dt = images.dtype();
  RINGGRAD_CHECK(dt == DType::u8 || dt == DType::f32 || dt == DType::f64,
                 "DataLoader: expected uint8, float32 or float64 images, got ", dt);
  RINGGRAD_CHECK(labels.dtype() == DType::i64 && labels.dim() == 1,
                 "DataLoader: expected int64 labels of shape [N], got ", labels.dtype(), " ", labels.shape(),
                 "; convert with .to(DType::i64)");
  RINGGRAD_CHECK(labels.size(0) == images.size(0), "DataLoader: expected as many labels as images, got ",
                 labels.size(0), " labels for images of shape ", images.shape());
  RINGGRAD_CHECK(options_.batch_size() >= 1, "DataLoader: expected batch_size >= 1, got ", options_.batch_size());
  if (options_.sampler()) {
    RINGGRAD_CHECK(!(options_.shuffle_set() && options_.shuffle()),
                   "DataLoader: sampler is mutually exclusive with shuffle(true): the sampler decides the order; "
                   "drop shuffle(true), and shuffle through the sampler's options instead");
    RINGGRAD_CHECK(options_.sampler()->size() >= 0, "DataLoader: expected sampler->size() >= 0, got ",
                   options_.sampler()->size());
  }
  RINGGRAD_CHECK(!options_.normalize() || (std::isfinite(options_.normalize_mean()) &&
                                           std::isfinite(options_.normalize_std()) && options_.normalize_std() > 0),
                 "DataLoader: expected a finite mean and a std > 0 for normalize, got mean ", options_.normalize_mean(),
                 " std ", options_.normalize_std());
  n_ = images.size(0);
  RINGGRAD_CHECK(n_ <= int64_t{UINT32_MAX}, "DataLoader: at most 2^32 - 1 samples are supported, got ", n_);
  images_ = images.contiguous();
  labels_ = labels.contiguous();
  for (int64_t d = 1; d < images_.dim(); ++d) features_ *= images_.size(d);

  // uint8 pixels take one of 256 values, so their normalised floats are a table lookup. Computed in
  // double and rounded once, so each entry is the float nearest (p / 255 - mean) / std.
  for (int p = 0; p < 256; ++p) {
    double v = p / 255.0;
    if (options_.normalize()) v = (v - options_.normalize_mean()) / options_.normalize_std();
    lut_[p] = static_cast<float>(v);
  }
}

DataLoader::DataLoader(const FashionMNIST& dataset, DataLoaderOptions options)
    : DataLoader(dataset.images(), dataset.labels(), std::move(options)) {}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::batches_for(int64_t samples) const {
  const int64_t b = options_.batch_size();
  return options_.drop_last() ? samples / b : (samples + b - 1) / b;
}

std::vector<int64_t> DataLoader::permutation(int64_t epoch) const {
  RINGGRAD_CHECK(epoch >= 0, "DataLoader::permutation: expected epoch >= 0, got ", epoch);
  if (options_.sampler()) {
    // Checked here, on the caller's thread, so a bad sampler fails at the call that starts the epoch
    // rather than as a wild read in make_batch.
    std::vector<int64_t> order = options_.sampler()->indices(epoch);
    const int64_t expected = options_.sampler()->size();
    RINGGRAD_CHECK(static_cast<int64_t>(order.size()) == expected, "DataLoader: expected sampler->indices(", epoch,
                   ") to hold sampler->size() = ", expected, " indices, got ", order.size());
    for (size_t i = 0; i < order.size(); ++i)
      RINGGRAD_CHECK(order[i] >= 0 && order[i] < n_, "DataLoader: expected sampler indices in [0, ", n_,
                     ") (the dataset's size), got ", order[i], " at position ", i, " of epoch ", epoch,
                     "; was the sampler built for a different dataset?");
    return order;
  }
  if (options_.shuffle()) return shuffled_indices(n_, options_.seed(), static_cast<uint64_t>(epoch));
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

void DataLoader::start_at(int64_t epoch, int64_t batch) {
  RINGGRAD_CHECK(epoch >= 0, "DataLoader::start_at: expected epoch >= 0, got ", epoch);
  RINGGRAD_CHECK(batch >= 0 && batch <= num_batches(), "DataLoader::start_at: expected a batch index in [0, ",
                 num_batches(), "], got ", batch);
  if (epoch == epoch_ && batch == next_) return;  // already there: keep what was prefetched
  stop_worker();
  if (epoch != epoch_) order_.reset();
  epoch_ = epoch;
  next_ = batch;
}

void DataLoader::ensure_order() {
  if (!order_) order_ = std::make_shared<const std::vector<int64_t>>(permutation(epoch_));
}

Batch DataLoader::make_batch(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const {
  const int64_t first = index * options_.batch_size();
  const int64_t count = std::min(options_.batch_size(), static_cast<int64_t>(order.size()) - first);
  const int64_t* rows = order.data() + first;

  Shape x_shape{count};
  if (options_.flatten()) {
    x_shape.push_back(features_);
  } else {
    for (int64_t d = 1; d < images_.dim(); ++d) x_shape.push_back(images_.size(d));
  }
  Batch batch{empty(x_shape, DType::f32), empty({count}, DType::i64)};
  auto* x = batch.x.data<float>();
  if (images_.dtype() == DType::u8) {
    const uint8_t* src = images_.data<uint8_t>();
    for (int64_t r = 0; r < count; ++r) {
      const uint8_t* row = src + rows[r] * features_;
      float* dst = x + r * features_;
      for (int64_t f = 0; f < features_; ++f) dst[f] = lut_[row[f]];
    }
  } else {
    // Floating images are taken as they are: no 1/255 scaling, only the optional normalisation.
    const float scale = options_.normalize() ? static_cast<float>(1.0 / options_.normalize_std()) : 1.0f;
    const float shift =
        options_.normalize() ? static_cast<float>(-options_.normalize_mean() / options_.normalize_std()) : 0.0f;
    if (images_.dtype() == DType::f32)
      gather_rows(images_.data<float>(), rows, count, features_, x, scale, shift);
    else
      gather_rows(images_.data<double>(), rows, count, features_, x, scale, shift);
  }
  const int64_t* labels = labels_.data<int64_t>();
  auto* y = batch.y.data<int64_t>();
  for (int64_t r = 0; r < count; ++r) y[r] = labels[rows[r]];

  if (options_.transform()) options_.transform()(batch, epoch, index);
  return batch;
}

bool DataLoader::next(Batch& batch) {
  const int64_t total = num_batches();
  if (next_ >= total) {  // epoch done: the cursor moves to the start of the next one
    stop_worker();
    ++epoch_;
    next_ = 0;
    order_.reset();
    return false;
  }
  if (!options_.prefetch()) {
    ensure_order();
    batch = make_batch(*order_, epoch_, next_);
    ++next_;
    return true;
  }

  if (!worker_.joinable()) start_worker();
  Slot slot;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return !queue_.empty(); });
    slot = std::move(queue_.front());
    queue_.pop_front();
  }
  space_.notify_one();
  if (slot.error) {
    stop_worker();  // it has already exited; the cursor stays on the batch that failed
    std::rethrow_exception(slot.error);
  }
  RINGGRAD_CHECK(slot.index == next_, "DataLoader: internal error: the prefetch thread produced batch ", slot.index,
                 " when batch ", next_, " was expected");
  batch = std::move(slot.batch);
  ++next_;
  return true;
}

void DataLoader::start_worker() {
  ensure_order();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = false;
    queue_.clear();
  }
  worker_ = std::thread(&DataLoader::worker_loop, this, order_, epoch_, next_);
}

void DataLoader::stop_worker() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    space_.notify_all();
    worker_.join();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = false;
  queue_.clear();
}

// Prepares batches first, first + 1, ... of `epoch` until the epoch ends, a batch fails, or stop_ is
// set. `order` is a shared handle, so moving the cursor never frees it under this thread.
// NOLINTNEXTLINE(performance-unnecessary-value-param): by value on purpose, the thread owns its handle
void DataLoader::worker_loop(std::shared_ptr<const std::vector<int64_t>> order, int64_t epoch, int64_t first) {
  const int64_t total = batches_for(static_cast<int64_t>(order->size()));  // never asks the sampler
  for (int64_t index = first; index < total; ++index) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      space_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < kPrefetchDepth; });
      if (stop_) return;
    }
    Slot slot;
    slot.index = index;
    try {
      slot.batch = make_batch(*order, epoch, index);
    } catch (...) {
      slot.error = std::current_exception();
    }
    const bool failed = static_cast<bool>(slot.error);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      queue_.push_back(std::move(slot));  // only this thread pushes, so the space is still there
    }
    ready_.notify_one();
    if (failed) return;
  }
}

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
