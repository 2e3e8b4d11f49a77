// docs/snippets/migrate_ddp.cpp: the training script of migrate_dp.cpp after the migration to
// DistributedDataParallel (docs/migrating_dp_to_ddp.md).
// Launch: ringrun --nproc-per-node 2 ./train    (one process per device; NCCL when there are GPUs)
#include "mlp.h"

using namespace ringgrad;
using snippets::Mlp;

int main() {
  const int64_t epochs = 2;
  Tensor images = randn({512, 784}, TensorOptions(), /*seed=*/11);
  Tensor labels = snippets::labels_for(512, 10);

  // [script]
  // One process per device: this one's device is picked by its LOCAL_RANK.
  const bool gpus = cuda_device_count() > 0 && parallel::nccl_available();
  auto pg = parallel::init_process_group(gpus ? "nccl" : "ring");
  const int local_rank = parallel::read_launch_info({}).local_rank;
  const Device device = gpus ? Device::cuda(local_rank) : Device::cpu(0);
  auto model = std::make_shared<Mlp>(784, 256, 10);
  model->to(device);
  parallel::DistributedDataParallel<Mlp> ddp(model, pg);  // broadcasts rank 0's weights
  nn::optim::SGD opt(ddp.parameters(), nn::optim::SGDOptions(0.1).momentum(0.9));
  // Each process loads only its own shard: 256 / world samples per step, 256 in all.
  auto sampler = std::make_shared<nn::data::DistributedSampler>(images.size(0), pg->size(), pg->rank(),
                                                                nn::data::DistributedSamplerOptions().seed(0));
  nn::data::DataLoader loader(images, labels,
                              nn::data::DataLoaderOptions().batch_size(256 / pg->size()).sampler(sampler));
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    loader.set_epoch(epoch);
    for (const nn::data::Batch& b : loader) {
      Tensor loss = cross_entropy(ddp.forward(b.x.to(device)), b.y.to(device));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
  std::cout << ddp.module()->fc1->weight.shape() << '\n';
  if (pg->rank() == 0) nn::save_model("migrate_ddp.safetensors", *ddp.module());
  // [/script]

  pg->barrier()->wait();  // rank 0 has written the file
  // [load]
  // ringgrad writes "fc1.weight"; PyTorch's DP and DDP write "module.fc1.weight". Both load:
  nn::load_model("migrate_ddp.safetensors", *model);
  nn::StateDict from_pytorch;
  for (const auto& [name, t] : model->state_dict()) from_pytorch["module." + name] = t;
  model->load_state_dict(from_pytorch);  // a leading "module." is stripped from each key
  // [/load]
  snippets::expect(model->state_dict().count("fc1.weight") == 1, "state_dict keys have no module. prefix");
  return 0;
}
