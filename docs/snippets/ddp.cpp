// docs/snippets/ddp.cpp: the DistributedDataParallel loop of docs/distributed_data_parallel.md, with
// no_sync and find_unused_parameters. One rank per process: its CTest starts two under tools/ringrun
// (run it alone with RANK=0 WORLD_SIZE=1 for a job of one).
#include "mlp.h"

using namespace ringgrad;
using snippets::Mlp;

// A model whose second head is used only on some steps: the case find_unused_parameters is for.
struct TwoHeads : nn::Cloneable<TwoHeads> {
  TwoHeads() { reset(); }
  void reset() override {
    body = register_module("body", std::make_shared<nn::Linear>(16, 16));
    head_a = register_module("head_a", std::make_shared<nn::Linear>(16, 4));
    head_b = register_module("head_b", std::make_shared<nn::Linear>(16, 4));
  }
  Tensor forward(const Tensor& x) override { return head_a->forward(relu(body->forward(x))); }
  std::shared_ptr<nn::Linear> body, head_a, head_b;
};

int main() {
  const int64_t epochs = 2;
  Tensor images = randn({256, 784}, TensorOptions(), /*seed=*/5);  // the same data on every rank
  Tensor labels = snippets::labels_for(256, 10);

  // [ddp_loop]
  auto pg = parallel::init_process_group("ring");  // RANK, WORLD_SIZE, ... from ringrun
  auto model = std::make_shared<Mlp>(784, 256, 10);
  parallel::DistributedDataParallel<Mlp> ddp(model, pg);  // broadcasts rank 0's weights
  nn::optim::SGD opt(ddp.parameters(), nn::optim::SGDOptions(0.1));
  auto sampler = std::make_shared<nn::data::DistributedSampler>(images.size(0), pg->size(), pg->rank());
  nn::data::DataLoader loader(images, labels, nn::data::DataLoaderOptions().batch_size(64).sampler(sampler));
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    loader.set_epoch(epoch);  // same shuffle on every rank
    for (const nn::data::Batch& b : loader) {
      Tensor loss = cross_entropy(ddp.forward(b.x), b.y);
      opt.zero_grad();
      loss.backward();  // gradients averaged over all ranks
      opt.step();
    }
  }
  std::shared_ptr<nn::Linear> fc1 = ddp.module()->fc1;  // the model's own layer
  // [/ddp_loop]
  snippets::expect(fc1.get() == model->fc1.get(), "ddp.module() is the model itself");

  // Every rank must hold the same weights after the same averaged steps.
  Tensor w = model->fc1->weight.detach().clone();
  Tensor mean_w = w.clone();
  pg->all_reduce(mean_w, parallel::ReduceOp::Avg)->wait();
  snippets::expect(w.to_vector<float>() == mean_w.to_vector<float>(), "replicas stay identical");

  {
    Tensor x1 = images.narrow(0, 0, 32), y1 = labels.narrow(0, 0, 32);
    Tensor x2 = images.narrow(0, 32, 32), y2 = labels.narrow(0, 32, 32);
    opt.zero_grad();
    // [no_sync]
    {
      auto guard = ddp.no_sync();                     // no communication in this scope:
      cross_entropy(ddp.forward(x1), y1).backward();  // .grad holds this micro-batch's gradient
    }
    cross_entropy(ddp.forward(x2), y2).backward();  // adds, then averages the sum over the ranks
    opt.step();
    // [/no_sync]
  }
  {
    // [unused]
    auto net = std::make_shared<TwoHeads>();  // head_b gets no gradient in this step
    parallel::DistributedDataParallel<TwoHeads> ddp2(net, pg, parallel::DDPOptions().find_unused_parameters(true));
    sum(ddp2.forward(randn({8, 16}))).backward();  // head_b counts as ready; its bucket is reduced
    // [/unused]
    snippets::expect(net->body->weight.grad().defined(), "used parameters get averaged gradients");
  }
  {
    // [comm_hook]
    auto compressed = parallel::DDPOptions().comm_hook(parallel::bf16_compress_hook());
    parallel::DistributedDataParallel<Mlp> ddp3(std::make_shared<Mlp>(784, 256, 10), pg, compressed);
    Tensor x3 = randn({8, 784});
    cross_entropy(ddp3.forward(x3), from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8})).backward();
    // every bucket went as bfloat16: .grad holds the average, rounded to bfloat16's 8-bit mantissa
    // float16 instead: 3 more bits, a range of +-65504 (each bucket divided by the world size first)
    auto finer = parallel::DDPOptions().comm_hook(parallel::fp16_compress_hook());
    // [/comm_hook]
    snippets::expect(ddp3.module()->parameters()[0].grad().defined(), "compressed buckets still give gradients");
    parallel::DistributedDataParallel<Mlp> ddp4(std::make_shared<Mlp>(784, 256, 10), pg, finer);
    cross_entropy(ddp4.forward(x3), from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8})).backward();
    snippets::expect(ddp4.module()->parameters()[0].grad().defined(), "float16 buckets still give gradients");
  }
  std::cout << "ddp: rank " << pg->rank() << " of " << pg->size() << " done\n";
  return 0;
}
