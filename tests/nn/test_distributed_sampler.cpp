// tests/nn/test_distributed_sampler.cpp: DistributedSampler (sizes, padding and striding against
// PyTorch 1.13; disjoint, equal, covering shards; epochs and seeds) and DataLoader with a sampler.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/data/dataloader.h>
#include <ringgrad/nn/data/distributed_sampler.h>
#include <ringgrad/nn/data/sampler.h>
#include "test_util.h"

using namespace ringgrad;
using namespace ringgrad::nn::data;

namespace {

using Indices = std::vector<int64_t>;

// PyTorch 1.13's num_samples and total_size, printed once with Debian's python3-torch 1.13:
//   /usr/bin/python3 -c "from torch.utils.data.distributed import DistributedSampler as D
//   for dl in (False, True):
//     for n in (0, 1, 7, 10, 11, 100):
//       for r in (1, 2, 3, 4):
//         s = D(range(n), num_replicas=r, rank=0, shuffle=False, drop_last=dl)
//         print(n, r, dl, s.num_samples, s.total_size)"
struct TorchSize {
  int64_t n;
  int replicas;
  bool drop_last;
  int64_t num_samples, total_size;
};
const std::vector<TorchSize> kTorchSizes = {
    {0, 1, false, 0, 0},       {0, 2, false, 0, 0},      {0, 3, false, 0, 0},      {0, 4, false, 0, 0},
    {1, 1, false, 1, 1},       {1, 2, false, 1, 2},      {1, 3, false, 1, 3},      {1, 4, false, 1, 4},
    {7, 1, false, 7, 7},       {7, 2, false, 4, 8},      {7, 3, false, 3, 9},      {7, 4, false, 2, 8},
    {10, 1, false, 10, 10},    {10, 2, false, 5, 10},    {10, 3, false, 4, 12},    {10, 4, false, 3, 12},
    {11, 1, false, 11, 11},    {11, 2, false, 6, 12},    {11, 3, false, 4, 12},    {11, 4, false, 3, 12},
    {100, 1, false, 100, 100}, {100, 2, false, 50, 100}, {100, 3, false, 34, 102}, {100, 4, false, 25, 100},
    {0, 1, true, 0, 0},        {0, 2, true, 0, 0},       {0, 3, true, 0, 0},       {0, 4, true, 0, 0},
    {1, 1, true, 1, 1},        {1, 2, true, 0, 0},       {1, 3, true, 0, 0},       {1, 4, true, 0, 0},
    {7, 1, true, 7, 7},        {7, 2, true, 3, 6},       {7, 3, true, 2, 6},       {7, 4, true, 1, 4},
    {10, 1, true, 10, 10},     {10, 2, true, 5, 10},     {10, 3, true, 3, 9},      {10, 4, true, 2, 8},
    {11, 1, true, 11, 11},     {11, 2, true, 5, 10},     {11, 3, true, 3, 9},      {11, 4, true, 2, 8},
    {100, 1, true, 100, 100},  {100, 2, true, 50, 100},  {100, 3, true, 33, 99},   {100, 4, true, 25, 100},
};

// Every rank's share of one epoch.
std::vector<Indices> shards(int64_t n, int replicas, DistributedSamplerOptions options, int64_t epoch) {
  std::vector<Indices> out;
  for (int rank = 0; rank < replicas; ++rank)
    out.push_back(DistributedSampler(n, replicas, rank, options).indices(epoch));
  return out;
}

// The shards interleaved back into one list: rank r's k-th sample goes to position r + k*R.
Indices interleave(const std::vector<Indices>& parts) {
  Indices out;
  const size_t m = parts.empty() ? 0 : parts[0].size();
  for (size_t k = 0; k < m; ++k)
    for (const Indices& p : parts) out.push_back(p[k]);
  return out;
}

Indices iota(int64_t n) {
  Indices v(n);
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

// Images whose row i holds (i, i + 0.5) and labels i: every batch says which samples it took.
struct Indexed {
  Tensor images, labels;
};
Indexed indexed_dataset(int64_t n) {
  std::vector<float> x(n * 2);
  Indices y(n);
  for (int64_t i = 0; i < n; ++i) x[2 * i] = float(i), x[2 * i + 1] = float(i) + 0.5f, y[i] = i;
  return {from_vector(x, {n, 2}), from_vector(y, {n})};
}

// The batches of one pass from the cursor, as their sizes and their labels concatenated.
struct Pass {
  std::vector<int64_t> batch_sizes;
  Indices order;
};
Pass drain(DataLoader& loader) {
  Pass pass;
  for (const Batch& b : loader) {
    const auto x = b.x.to_vector<float>();
    const auto y = b.y.to_vector<int64_t>();
    for (size_t r = 0; r < y.size(); ++r) {  // rows still belong to their labels
      CHECK(x[2 * r] == float(y[r]));
      CHECK(x[2 * r + 1] == float(y[r]) + 0.5f);
    }
    pass.batch_sizes.push_back(b.y.size(0));
    pass.order.insert(pass.order.end(), y.begin(), y.end());
  }
  return pass;
}

// A sampler that returns whatever it is told to, to check what the loader accepts.
struct FixedSampler final : Sampler {
  FixedSampler(int64_t size, Indices indices) : size_(size), indices_(std::move(indices)) {}
  int64_t size() const override { return size_; }
  Indices indices(int64_t) const override { return indices_; }
  int64_t size_;
  Indices indices_;
};

}  // namespace

// ====================================== DistributedSampler ======================================

TEST_CASE("DistributedSampler: sizes match PyTorch 1.13 for every N, R and drop_last", "[data]") {
  for (const TorchSize& t : kTorchSizes) {
    for (bool shuffle : {false, true}) {
      for (int rank = 0; rank < t.replicas; ++rank) {
        INFO("N " << t.n << " R " << t.replicas << " rank " << rank << " drop_last " << t.drop_last << " shuffle "
                  << shuffle);
        const DistributedSampler s(t.n, t.replicas, rank,
                                   DistributedSamplerOptions().shuffle(shuffle).drop_last(t.drop_last));
        CHECK(s.size() == t.num_samples);
        CHECK(s.num_samples() == t.num_samples);
        CHECK(s.total_size() == t.total_size);
        CHECK(static_cast<int64_t>(s.indices(0).size()) == t.num_samples);
        CHECK(static_cast<int64_t>(s.indices(5).size()) == t.num_samples);
      }
    }
  }
}

TEST_CASE("DistributedSampler: without shuffle the shards are PyTorch's, padding included", "[data]") {
  // Printed with /usr/bin/python3 and torch 1.13:
  //   [list(D(range(n), num_replicas=r, rank=k, shuffle=False, drop_last=dl)) for k in range(r)]
  const DistributedSamplerOptions plain = DistributedSamplerOptions().shuffle(false);
  const DistributedSamplerOptions cut = DistributedSamplerOptions().shuffle(false).drop_last(true);
  CHECK(shards(7, 2, plain, 0) == std::vector<Indices>{{0, 2, 4, 6}, {1, 3, 5, 0}});
  CHECK(shards(7, 3, plain, 0) == std::vector<Indices>{{0, 3, 6}, {1, 4, 0}, {2, 5, 1}});
  CHECK(shards(10, 4, plain, 0) == std::vector<Indices>{{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}});
  CHECK(shards(11, 3, plain, 0) == std::vector<Indices>{{0, 3, 6, 9}, {1, 4, 7, 10}, {2, 5, 8, 0}});
  CHECK(shards(1, 4, plain, 0) == std::vector<Indices>{{0}, {0}, {0}, {0}});
  // More padding than samples: the order repeats as many times as needed.
  CHECK(shards(2, 7, plain, 0) == std::vector<Indices>{{0}, {1}, {0}, {1}, {0}, {1}, {0}});
  CHECK(shards(3, 8, plain, 0) == std::vector<Indices>{{0}, {1}, {2}, {0}, {1}, {2}, {0}, {1}});
  CHECK(shards(7, 4, cut, 0) == std::vector<Indices>{{0}, {1}, {2}, {3}});
  CHECK(shards(11, 2, cut, 0) == std::vector<Indices>{{0, 2, 4, 6, 8}, {1, 3, 5, 7, 9}});
  CHECK(shards(1, 3, cut, 0) == std::vector<Indices>{{}, {}, {}});
  // In general rank r takes r, r + R, r + 2R, ... of 0, 1, .., N-1, 0, 1, ..., whatever the epoch.
  for (const TorchSize& t : kTorchSizes) {
    INFO("N " << t.n << " R " << t.replicas << " drop_last " << t.drop_last);
    const auto parts = shards(t.n, t.replicas, DistributedSamplerOptions().shuffle(false).drop_last(t.drop_last), 3);
    for (int rank = 0; rank < t.replicas; ++rank)
      for (int64_t k = 0; k < t.num_samples; ++k) CHECK(parts[rank][k] == (rank + k * t.replicas) % t.n);
  }
}

TEST_CASE("DistributedSampler: shuffled shards are equal, disjoint and cover the dataset", "[data]") {
  for (const TorchSize& t : kTorchSizes) {
    for (int64_t epoch : {0, 1, 7}) {
      INFO("N " << t.n << " R " << t.replicas << " drop_last " << t.drop_last << " epoch " << epoch);
      const auto options = DistributedSamplerOptions().seed(11).drop_last(t.drop_last);
      const auto parts = shards(t.n, t.replicas, options, epoch);
      for (const Indices& p : parts) CHECK(static_cast<int64_t>(p.size()) == t.num_samples);
      // Interleaving the strided shards gives back the one padded (or cut) permutation all ranks share.
      const Indices all = interleave(parts);
      REQUIRE(static_cast<int64_t>(all.size()) == t.total_size);
      const Indices perm = shuffled_indices(t.n, 11, static_cast<uint64_t>(epoch));
      for (int64_t i = 0; i < t.total_size; ++i) CHECK(all[i] == perm[i % t.n]);
      // Without padding the shards are disjoint; without drop_last they cover every sample.
      Indices seen(all.begin(), all.begin() + std::min(t.n, t.total_size));
      std::sort(seen.begin(), seen.end());
      CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
      if (!t.drop_last) CHECK(seen == iota(t.n));
      if (t.drop_last) CHECK(t.n - t.total_size < t.replicas);  // fewer than R samples are cut
    }
  }
}

TEST_CASE("DistributedSampler: set_epoch changes the order, and every rank agrees on it", "[data]") {
  const int replicas = 3;
  DistributedSampler s(100, replicas, 1, DistributedSamplerOptions().seed(5));
  CHECK(s.epoch() == 0);
  CHECK(s.indices() == s.indices(0));
  CHECK(s.indices(0) != s.indices(1));
  s.set_epoch(4);
  CHECK(s.epoch() == 4);
  CHECK(s.indices() == s.indices(4));
  CHECK(s.indices() != s.indices(0));
  // A sampler built anew -- another process, or a resumed run -- gives the same shard for an epoch.
  CHECK(DistributedSampler(100, replicas, 1, DistributedSamplerOptions().seed(5)).indices(4) == s.indices(4));
  // The seed changes the order; the ranks of one (seed, epoch) interleave into one permutation.
  CHECK(DistributedSampler(100, replicas, 1, DistributedSamplerOptions().seed(6)).indices(4) != s.indices(4));
  const Indices all = interleave(shards(100, replicas, DistributedSamplerOptions().seed(5), 4));
  Indices first(all.begin(), all.begin() + 100);
  CHECK(first == shuffled_indices(100, 5, 4));
  // Seed and epoch are separate keys (PyTorch seeds with seed + epoch, so these two would coincide).
  CHECK(DistributedSampler(100, 1, 0, DistributedSamplerOptions().seed(1)).indices(0) !=
        DistributedSampler(100, 1, 0, DistributedSamplerOptions().seed(0)).indices(1));
}

TEST_CASE("DistributedSampler: one replica visits the DataLoader's own shuffled order", "[data]") {
  const Indexed d = indexed_dataset(37);
  const DataLoader loader(d.images, d.labels, DataLoaderOptions().seed(9));
  const DistributedSampler s(37, 1, 0, DistributedSamplerOptions().seed(9));
  for (int64_t epoch : {0, 1, 2}) CHECK(s.indices(epoch) == loader.permutation(epoch));
  // And the shuffle is still the fixed one test_data.cpp checks against an independent implementation.
  CHECK(shuffled_indices(10, 0, 0) == Indices{6, 9, 0, 2, 1, 8, 4, 5, 7, 3});
}

TEST_CASE("DistributedSampler: bad arguments are rejected with what was expected", "[data]") {
  CHECK_ERROR(DistributedSampler(10, 0, 0), "DistributedSampler", "num_replicas >= 1", "got 0");
  CHECK_ERROR(DistributedSampler(10, 4, 4), "DistributedSampler", "rank in [0, 3]", "got rank 4");
  CHECK_ERROR(DistributedSampler(10, 4, -1), "rank in [0, 3]", "got rank -1");
  CHECK_ERROR(DistributedSampler(-1, 2, 0), "dataset_size >= 0", "got -1");
  CHECK_ERROR(DistributedSampler(int64_t{1} << 32, 2, 0), "2^32 - 1", "got dataset_size 4294967296");
  CHECK_NOTHROW(DistributedSampler(int64_t{1} << 32, 2, 0, DistributedSamplerOptions().shuffle(false)));
  DistributedSampler s(10, 2, 1);
  CHECK_ERROR(s.set_epoch(-1), "set_epoch", "epoch >= 0", "got -1");
  CHECK_ERROR(s.indices(-2), "indices", "epoch >= 0", "got -2");
  CHECK_ERROR(shuffled_indices(-1, 0, 0), "shuffled_indices", "got -1");
}

// =================================== DataLoader with a sampler ===================================

TEST_CASE("DataLoader: with a DistributedSampler it yields exactly the sampler's samples, epoch by epoch", "[data]") {
  const Indexed d = indexed_dataset(11);
  for (bool prefetch : {false, true}) {
    for (int rank = 0; rank < 3; ++rank) {
      INFO("prefetch " << prefetch << " rank " << rank);
      auto sampler = std::make_shared<DistributedSampler>(11, 3, rank, DistributedSamplerOptions().seed(3));
      DataLoader loader(d.images, d.labels, DataLoaderOptions().batch_size(3).sampler(sampler).prefetch(prefetch));
      CHECK(loader.size() == 11);
      CHECK(loader.num_batches() == 2);  // ceil(4 / 3): the sampler's 4 samples, not the dataset's 11
      // Two epochs through the cursor alone (no set_epoch), then epoch 1 again by set_epoch.
      for (int64_t epoch : {0, 1}) {
        const Pass pass = drain(loader);
        CHECK(pass.order == sampler->indices(epoch));
        CHECK(pass.batch_sizes == std::vector<int64_t>{3, 1});
        CHECK(loader.permutation(epoch) == sampler->indices(epoch));
      }
      CHECK(sampler->epoch() == 0);  // the loader never moves the sampler's own epoch
      loader.set_epoch(1);
      CHECK(drain(loader).order == sampler->indices(1));
      // Resuming mid-epoch continues with the sampler's order.
      loader.start_at(5, 1);
      const Indices five = sampler->indices(5);
      CHECK(drain(loader).order == Indices(five.begin() + 3, five.end()));
    }
  }
  // drop_last on the loader cuts the sampler's list into whole batches; shuffle(false) is allowed.
  auto plain = std::make_shared<DistributedSampler>(11, 2, 1, DistributedSamplerOptions().shuffle(false));
  DataLoader loader(d.images, d.labels,
                    DataLoaderOptions().batch_size(4).drop_last(true).shuffle(false).sampler(plain));
  CHECK(loader.num_batches() == 1);
  const Pass pass = drain(loader);
  CHECK(pass.order == Indices{1, 3, 5, 7});  // of rank 1's 1 3 5 7 9 0
}

TEST_CASE("DataLoader: every rank's loader together visits the whole dataset once per epoch", "[data]") {
  const Indexed d = indexed_dataset(100);
  const int replicas = 4;
  std::vector<std::unique_ptr<DataLoader>> loaders;
  for (int rank = 0; rank < replicas; ++rank)
    loaders.push_back(std::make_unique<DataLoader>(
        d.images, d.labels,
        DataLoaderOptions().batch_size(8).sampler(std::make_shared<DistributedSampler>(100, replicas, rank))));
  for (int64_t epoch : {0, 1}) {
    Indices all;
    std::vector<Indices> parts;
    for (auto& loader : loaders) {
      loader->set_epoch(epoch);
      parts.push_back(drain(*loader).order);
      CHECK(parts.back().size() == 25);
      all.insert(all.end(), parts.back().begin(), parts.back().end());
    }
    CHECK(interleave(parts) == shuffled_indices(100, 0, static_cast<uint64_t>(epoch)));
    std::sort(all.begin(), all.end());
    CHECK(all == iota(100));
  }
}

TEST_CASE("DataLoader: a sampler with explicit shuffle, bad indices or a wrong size is rejected", "[data]") {
  const Indexed d = indexed_dataset(11);
  auto sampler = std::make_shared<DistributedSampler>(11, 2, 0);
  CHECK_ERROR(DataLoader(d.images, d.labels, DataLoaderOptions().shuffle(true).sampler(sampler)), "DataLoader",
              "mutually exclusive with shuffle(true)");
  CHECK_NOTHROW(DataLoader(d.images, d.labels, DataLoaderOptions().sampler(sampler)));  // default shuffle gives way

  // A sampler built for a larger dataset hands out indices the loader does not have.
  auto wrong = std::make_shared<DistributedSampler>(20, 2, 1, DistributedSamplerOptions().shuffle(false));
  for (bool prefetch : {false, true}) {
    DataLoader loader(d.images, d.labels, DataLoaderOptions().sampler(wrong).prefetch(prefetch));
    Batch b;
    CHECK_ERROR(loader.next(b), "sampler indices in [0, 11)", "got 11 at position 5 of epoch 0");
    CHECK_ERROR(loader.permutation(0), "sampler indices in [0, 11)");
  }
  const auto negative = std::make_shared<FixedSampler>(2, Indices{0, -1});
  CHECK_ERROR(DataLoader(d.images, d.labels, DataLoaderOptions().sampler(negative)).permutation(3),
              "got -1 at position 1 of epoch 3");
  const auto short_list = std::make_shared<FixedSampler>(3, Indices{0, 1});
  CHECK_ERROR(DataLoader(d.images, d.labels, DataLoaderOptions().sampler(short_list)).permutation(0),
              "sampler->indices(0)", "sampler->size() = 3", "got 2");
  const auto negative_size = std::make_shared<FixedSampler>(-1, Indices{});
  CHECK_ERROR(DataLoader(d.images, d.labels, DataLoaderOptions().sampler(negative_size)), "sampler->size() >= 0",
              "got -1");
}
