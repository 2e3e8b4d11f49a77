// docs/snippets/distributed_sampler.cpp: the DistributedSampler loop of docs/nn.md. The ranks are
// played one after another in this one process (a sampler needs only its world size and rank), so
// the test can check what the chapter says: every rank gets ceil(N / R) samples an epoch, together
// the ranks cover the dataset, and each epoch has its own order.
#include <algorithm>
#include <set>
#include <vector>

#include "mlp.h"

using namespace ringgrad;

int main() {
  const int64_t epochs = 2;
  const int world_size = 3;
  const int64_t n = 1000;                     // ceil(1000 / 3) = 334 samples per rank
  Tensor images = arange(n).reshape({n, 1});  // sample i is the number i
  Tensor labels = snippets::labels_for(n, 10);

  std::vector<std::vector<int64_t>> seen(world_size);  // [rank]: the samples it trained on, in order
  for (int rank = 0; rank < world_size; ++rank) {
    auto step = [&](const Tensor& x, const Tensor& y) {
      for (float v : x.to_vector<float>()) seen[rank].push_back(static_cast<int64_t>(v));
    };
    // [sampler]
    auto sampler = std::make_shared<nn::data::DistributedSampler>(images.size(0), world_size, rank);
    nn::data::DataLoader loader(images, labels, nn::data::DataLoaderOptions().batch_size(64).sampler(sampler));
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      loader.set_epoch(epoch);                                 // selects sampler->indices(epoch)
      for (const nn::data::Batch& b : loader) step(b.x, b.y);  // this rank's ceil(N / R) samples
    }
    // [/sampler]
  }

  const int64_t per_rank = (n + world_size - 1) / world_size;
  for (int rank = 0; rank < world_size; ++rank) {
    snippets::expect(static_cast<int64_t>(seen[rank].size()) == epochs * per_rank, "each rank: ceil(N / R) an epoch");
    snippets::expect(!std::equal(seen[rank].begin(), seen[rank].begin() + per_rank, seen[rank].begin() + per_rank),
                     "each epoch is shuffled anew");
  }
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    std::set<int64_t> covered;
    for (int rank = 0; rank < world_size; ++rank) {
      covered.insert(seen[rank].begin() + epoch * per_rank, seen[rank].begin() + (epoch + 1) * per_rank);
    }
    snippets::expect(static_cast<int64_t>(covered.size()) == n && *covered.begin() == 0 && *covered.rbegin() == n - 1,
                     "together the ranks cover the dataset every epoch");
  }
  std::cout << "distributed_sampler: " << world_size << " ranks, " << per_rank << " samples each per epoch\n";
  return 0;
}
