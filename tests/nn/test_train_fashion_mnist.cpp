// End to end on real data: a small MLP trained on 512 Fashion-MNIST images must lower its loss and
// beat chance clearly. Skipped (with a warning) only when the dataset is not installed; CI installs it.
#include <catch2/catch.hpp>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/nn/data/dataloader.h>
#include <ringgrad/nn/data/fashion_mnist.h>
#include <ringgrad/nn/optim/sgd.h>
#include <ringgrad/nn/sequential.h>

using namespace ringgrad;

TEST_CASE("fashion_mnist: an MLP trained on 512 real images lowers its loss and beats chance", "[nn][train]") {
  if (!nn::data::FashionMNIST::available(nn::data::FashionMNIST::default_dir())) {
    WARN("Fashion-MNIST not found in " << nn::data::FashionMNIST::default_dir()
                                       << "; apt-get install dataset-fashion-mnist to run this test");
    return;
  }
  const nn::data::FashionMNIST test_split(nn::data::Split::Test);
  const Tensor images = test_split.images().narrow(0, 0, 512);
  const Tensor labels = test_split.labels().narrow(0, 0, 512);
  nn::data::DataLoader loader(
      images, labels, nn::data::DataLoaderOptions().batch_size(64).seed(3).normalize(0.2860, 0.3530).prefetch(false));

  manual_seed(5);
  nn::MLP model({784, 64, 10});
  nn::optim::SGD opt(model.parameters(), nn::optim::SGDOptions(0.1).momentum(0.9));

  auto mean_loss = [&]() {
    NoGradGuard no_grad;
    const Tensor x = (images.to(DType::f32).reshape({512, 784}) * (1.0 / 255.0) - 0.2860) / 0.3530;
    return cross_entropy(model.forward(x), labels).item();
  };
  const double before = mean_loss();
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    loader.set_epoch(epoch);
    nn::data::Batch batch;
    while (loader.next(batch)) {
      const Tensor loss = cross_entropy(model.forward(batch.x), batch.y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
  const double after = mean_loss();
  INFO("mean loss before " << before << ", after " << after);
  CHECK(before > 2.0);  // about ln(10) = 2.30 for an untrained 10-way classifier
  CHECK(after < 0.5 * before);

  NoGradGuard no_grad;
  const Tensor x = (images.to(DType::f32).reshape({512, 784}) * (1.0 / 255.0) - 0.2860) / 0.3530;
  const std::vector<int64_t> predicted = argmax(model.forward(x), 1).to_vector<int64_t>();
  const std::vector<int64_t> truth = labels.to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i];
  CHECK(correct > 512 * 7 / 10);  // chance is 10 %
}
