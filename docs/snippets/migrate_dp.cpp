// docs/snippets/migrate_dp.cpp: the DataParallel form of the training script in
// docs/migrating_dp_to_ddp.md; migrate_ddp.cpp is the same script after the migration.
// Launch: RINGGRAD_CPU_DEVICES=2 ./train    (one process; on a machine with two GPUs it uses them)
#include "mlp.h"

using namespace ringgrad;
using snippets::Mlp;

int main() {
  const int64_t epochs = 2;
  Tensor images = randn({512, 784}, TensorOptions(), /*seed=*/11);
  Tensor labels = snippets::labels_for(512, 10);

  // [script]
  // One process drives every device.
  const bool gpus = cuda_device_count() >= 2;
  const std::vector<Device> devices = gpus ? std::vector<Device>{Device::cuda(0), Device::cuda(1)}
                                           : std::vector<Device>{Device::cpu(0), Device::cpu(1)};
  auto model = std::make_shared<Mlp>(784, 256, 10);
  model->to(devices[0]);
  parallel::DataParallel<Mlp> dp(model, devices);
  nn::optim::SGD opt(dp.parameters(), nn::optim::SGDOptions(0.1).momentum(0.9));
  // The whole global batch of 256 goes through this one process.
  nn::data::DataLoader loader(images, labels, nn::data::DataLoaderOptions().batch_size(256).seed(0));
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    loader.set_epoch(epoch);
    for (const nn::data::Batch& b : loader) {
      Tensor loss = cross_entropy(dp.forward(b.x.to(devices[0])), b.y.to(devices[0]));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
  std::cout << dp.module()->fc1->weight.shape() << '\n';
  nn::save_model("migrate_dp.safetensors", *dp.module());
  // [/script]
  return 0;
}
