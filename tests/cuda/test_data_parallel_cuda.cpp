// tests/cuda/test_data_parallel_cuda.cpp: DataParallel and its data movements on CUDA devices.
//
// The same properties tests/parallel/ checks on logical CPU devices, on every GPU the machine has:
// scatter/broadcast/gather move the right values between host and GPU and their backward sums land
// on the source, and DataParallel training over all GPUs follows CPU training on the same global
// batch (float32: the GPU's GEMMs sum in another order, so within 1e-4 relative after 4 steps).
// With one GPU, DataParallel takes its one-device path; the movements still cross host and device.
//
// Label `cuda`: these tests FAIL without a GPU (a skipped GPU test reads as a passed one).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include "kernels/cuda/probe.h"
#include <ringgrad/nn/optim/sgd.h>
#include <ringgrad/nn/sequential.h>
#include <ringgrad/parallel/data_parallel.h>
#include "cuda_test_util.h"

using namespace ringgrad;

namespace {

std::vector<Device> all_gpus() {
  std::vector<Device> devices;
  for (int i = 0; i < cuda_device_count(); ++i) devices.push_back(Device::cuda(i));
  return devices;
}

}  // namespace

TEST_CASE("scatter and gather: host to GPU and back keeps every value", "[dp][cuda]") {
  test::require_gpu();
  const Tensor x = randn({9, 5}, DType::f32, 1);
  const std::vector<Tensor> chunks = parallel::scatter(x, {Device::cpu(0), Device::cuda(0)});
  REQUIRE(chunks.size() == 2);
  CHECK(chunks[1].device() == Device::cuda(0));
  CHECK(chunks[1].shape() == Shape{4, 5});
  CHECK(parallel::gather(chunks, Device::cpu(0)).to_vector<float>() == x.to_vector<float>());
  CHECK(parallel::gather(chunks, Device::cuda(0)).to(Device::cpu(0)).to_vector<float>() == x.to_vector<float>());
}

TEST_CASE("broadcast: the GPU copy's gradient is summed onto the host parameter", "[dp][cuda]") {
  test::require_gpu();
  const Tensor p = randn({3, 4}, DType::f32, 2).requires_grad_(true);
  const std::vector<Tensor> copies = parallel::broadcast(p, {Device::cpu(0), Device::cuda(0)});
  CHECK(copies[1].device() == Device::cuda(0));
  CHECK(copies[1].to(Device::cpu(0)).to_vector<float>() == p.to_vector<float>());
  (sum(copies[0] * 2.0) + sum(copies[1] * 3.0).to(Device::cpu(0))).backward();
  for (float g : p.grad().to_vector<float>()) CHECK(g == 5.0f);
}

TEST_CASE("DataParallel over every GPU follows CPU training on the same global batch", "[dp][cuda]") {
  test::require_gpu();
  const int64_t rows = 37, in = 33, classes = 7;
  manual_seed(3);
  auto cpu_model = std::make_shared<nn::MLP>(std::vector<int64_t>{in, 129, 65, classes});
  auto gpu_model = std::static_pointer_cast<nn::MLP>(cpu_model->clone());
  gpu_model->to(Device::cuda(0));
  parallel::DataParallel<nn::MLP> dp(gpu_model, all_gpus());
  nn::optim::SGD opt_cpu(cpu_model->parameters(), nn::optim::SGDOptions(0.1).momentum(0.9));
  nn::optim::SGD opt_gpu(dp.parameters(), nn::optim::SGDOptions(0.1).momentum(0.9));
  for (int64_t step = 0; step < 4; ++step) {
    const Tensor x = randn({rows, in}, DType::f32, 10 + step);
    std::vector<int64_t> labels;
    for (int64_t r = 0; r < rows; ++r) labels.push_back((r * 3 + step) % classes);
    const Tensor y = from_vector(labels, {rows});

    opt_cpu.zero_grad();
    const Tensor loss_cpu = cross_entropy(cpu_model->forward(x), y);
    loss_cpu.backward();
    opt_cpu.step();

    opt_gpu.zero_grad();
    const Tensor loss_gpu = cross_entropy(dp.forward(x.to(Device::cuda(0))), y.to(Device::cuda(0)));
    loss_gpu.backward();
    opt_gpu.step();
    CHECK(loss_gpu.item() == Approx(loss_cpu.item()).epsilon(1e-4));
  }
  const auto a = cpu_model->named_parameters(), b = gpu_model->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> va = a[i].second.to_vector<float>(), vb = b[i].second.to_vector<float>();
    for (size_t j = 0; j < va.size(); ++j) CHECK(std::abs(va[j] - vb[j]) <= 1e-4f * std::max(1.0f, std::abs(va[j])));
  }
}
