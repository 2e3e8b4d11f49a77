// nn/data/distributed_sampler.cpp: the sizes, padding and striding of PyTorch 1.13's DistributedSampler.
#include <ringgrad/nn/data/distributed_sampler.h>

#include <numeric>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace nn {
namespace data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  RINGGRAD_CHECK(num_replicas >= 1, "DistributedSampler: expected num_replicas >= 1 (the world size), got ",
                 num_replicas);
  RINGGRAD_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: expected a rank in [0, ", num_replicas - 1,
                 "] for num_replicas ", num_replicas, ", got rank ", rank);
  RINGGRAD_CHECK(dataset_size >= 0, "DistributedSampler: expected dataset_size >= 0, got ", dataset_size);
  RINGGRAD_CHECK(!options_.shuffle() || dataset_size <= int64_t{UINT32_MAX},
                 "DistributedSampler: with shuffle, at most 2^32 - 1 samples are supported, got dataset_size ",
                 dataset_size);
  // PyTorch: num_samples = ceil((N - R) / R) with drop_last when R does not divide N, else ceil(N / R).
  // For N % R != 0 the first is floor(N / R) (and 0 when N < R), which is what is computed here.
  const int64_t r = num_replicas;
  num_samples_ = options_.drop_last() ? dataset_size / r : (dataset_size + r - 1) / r;
  total_size_ = num_samples_ * r;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  RINGGRAD_CHECK(epoch >= 0, "DistributedSampler::set_epoch: expected epoch >= 0, got ", epoch);
  epoch_ = epoch;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  RINGGRAD_CHECK(epoch >= 0, "DistributedSampler::indices: expected epoch >= 0, got ", epoch);
  std::vector<int64_t> order;
  if (options_.shuffle()) {
    order = shuffled_indices(dataset_size_, options_.seed(), static_cast<uint64_t>(epoch));
  } else {
    order.resize(static_cast<size_t>(dataset_size_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  // The padded (or cut) order has total_size_ entries, padded[i] = order[i % N]: PyTorch appends
  // order[:padding] when padding <= N and repeats the whole order otherwise, which is the same cyclic
  // repetition; with drop_last every i < total_size_ <= N. When N = 0, num_samples_ = 0 and no i is taken.
  std::vector<int64_t> mine(static_cast<size_t>(num_samples_));
  for (int64_t k = 0; k < num_samples_; ++k) {
    const int64_t i = (rank_ + k * num_replicas_) % dataset_size_;
    mine[static_cast<size_t>(k)] = order[static_cast<size_t>(i)];
  }
  return mine;
}

}  // namespace data
}  // namespace nn
}  // namespace ringgrad
