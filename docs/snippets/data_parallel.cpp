// docs/snippets/data_parallel.cpp: the DataParallel loop of docs/data_parallel.md, on two logical
// CPU devices (run with RINGGRAD_CPU_DEVICES=2; its CTest sets it).
#include "mlp.h"

using namespace ringgrad;
using snippets::Mlp;

int main() {
  Tensor x = randn({64, 784}, TensorOptions(), /*seed=*/3);
  Tensor y = snippets::labels_for(64, 10);

  // [dp_loop]
  auto model = std::make_shared<Mlp>(784, 256, 10);  // lives on cpu:0, the first device
  parallel::DataParallel<Mlp> dp(model, {Device::cpu(0), Device::cpu(1)});
  nn::optim::SGD opt(dp.parameters(), nn::optim::SGDOptions(0.1));  // the model's own parameters
  for (int step = 0; step < 5; ++step) {
    Tensor loss = cross_entropy(dp.forward(x), y);  // x, y on cpu:0
    opt.zero_grad();
    loss.backward();  // replicas' backward in parallel
    opt.step();
  }
  std::shared_ptr<nn::Linear> fc1 = dp.module()->fc1;  // the model's own layer
  // [/dp_loop]

  const double first = cross_entropy(snippets::Mlp(784, 256, 10).forward(x), y).item();  // a fresh model
  const double last = cross_entropy(model->forward(x), y).item();
  snippets::expect(fc1.get() == model->fc1.get(), "dp.module() is the model itself");
  snippets::expect(last < first, "the loss falls under DataParallel");
  snippets::expect(dp.timings().devices_used == 2, "both devices ran a replica");
  std::cout << "data_parallel: loss " << first << " -> " << last << '\n';
  return 0;
}
