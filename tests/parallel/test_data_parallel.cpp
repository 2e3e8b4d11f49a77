// tests/parallel/test_data_parallel.cpp: DataParallel reproduces single-device training, keeps the
// gradients on the original parameters, runs the replicas' backward passes at the same time, and
// turns bad input into clear errors without breaking the next step.
//
// Reference: the same model (a clone with the same values) trained on one device on the same global
// batch. DataParallel differs only in the order its per-chunk gradients are summed, so float64 runs
// agree to 1e-10 and float32 runs to a few ulps of the parameters (checked at 2e-5 relative).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/linear.h>
#include <ringgrad/nn/optim/adam.h>
#include <ringgrad/nn/optim/sgd.h>
#include <ringgrad/nn/sequential.h>
#include <ringgrad/parallel/data_parallel.h>
#include "test_util.h"

using namespace ringgrad;
using parallel::DataParallel;

namespace {

std::vector<Device> first_devices(int k) {
  std::vector<Device> devices;
  for (int i = 0; i < k; ++i) devices.push_back(Device::cpu(i));
  return devices;
}

std::shared_ptr<nn::MLP> make_mlp(const std::vector<int64_t>& sizes, DType dtype, uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::MLP>(sizes);
  model->to(dtype);
  return model;
}

struct Batch {
  Tensor x, y;
};

// Step s's batch: inputs from a seeded normal, labels cycling through the classes.
Batch batch_for(int64_t step, int64_t rows, int64_t in, int64_t classes, DType dtype) {
  std::vector<int64_t> labels;
  for (int64_t r = 0; r < rows; ++r) labels.push_back((r * 7 + step) % classes);
  return {randn({rows, in}, dtype, /*seed=*/100 + step), from_vector(labels, {rows})};
}

using MakeOptimizer = std::function<std::unique_ptr<nn::optim::Optimizer>(std::vector<Tensor>)>;

// K steps of cross-entropy training; `forward` is the model or DataParallel around it.
void train(const std::function<Tensor(const Tensor&)>& forward, nn::optim::Optimizer& opt, int64_t steps, int64_t rows,
           int64_t in, int64_t classes, DType dtype) {
  for (int64_t s = 0; s < steps; ++s) {
    const Batch b = batch_for(s, rows, in, classes, dtype);
    opt.zero_grad();
    cross_entropy(forward(b.x), b.y).backward();
    opt.step();
  }
}

double max_relative_difference(const nn::Module& a, const nn::Module& b) {
  double worst = 0;
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::vector<double> va = pa[i].second.to(DType::f64).to_vector<double>();
    const std::vector<double> vb = pb[i].second.to(DType::f64).to_vector<double>();
    REQUIRE(va.size() == vb.size());
    for (size_t j = 0; j < va.size(); ++j)
      worst = std::max(worst, std::abs(va[j] - vb[j]) / std::max(1.0, std::abs(vb[j])));
  }
  return worst;
}

// Trains a model on one device and a clone of it under DataParallel; returns the largest difference.
double dp_vs_single(int devices, int64_t rows, DType dtype, const MakeOptimizer& make, int64_t steps = 4) {
  const int64_t in = 9, classes = 5;
  auto single = make_mlp({in, 17, 13, classes}, dtype, 42);
  auto wrapped = std::static_pointer_cast<nn::MLP>(single->clone());
  auto opt_single = make(single->parameters());
  train([&](const Tensor& x) { return single->forward(x); }, *opt_single, steps, rows, in, classes, dtype);

  DataParallel<nn::MLP> dp(wrapped, first_devices(devices));
  auto opt_dp = make(dp.parameters());
  train([&](const Tensor& x) { return dp.forward(x); }, *opt_dp, steps, rows, in, classes, dtype);
  CHECK(dp.timings().devices_used == std::min<int64_t>(devices, rows));
  return max_relative_difference(*dp.module(), *single);
}

const MakeOptimizer kSgd = [](std::vector<Tensor> ps) {
  return std::unique_ptr<nn::optim::Optimizer>(
      new nn::optim::SGD(ps, nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true)));
};
const MakeOptimizer kAdamW = [](std::vector<Tensor> ps) {
  return std::unique_ptr<nn::optim::Optimizer>(
      new nn::optim::AdamW(ps, nn::optim::AdamWOptions(0.01).weight_decay(0.05)));
};

}  // namespace

TEST_CASE("DataParallel: float64 training on 2, 3, 4 devices equals one device (SGD and AdamW)", "[dp]") {
  REQUIRE(cpu_device_count() >= 4);
  const int devices = GENERATE(2, 3, 4);
  // 12 divides evenly; 10 does not (3 and 4 devices get uneven chunks); 3 is smaller than 4 devices.
  const int64_t rows = GENERATE(12, 10, 3);
  const bool adamw = GENERATE(false, true);
  INFO("devices " << devices << ", rows " << rows << ", " << (adamw ? "AdamW" : "SGD"));
  CHECK(dp_vs_single(devices, rows, DType::f64, adamw ? kAdamW : kSgd) <= 1e-10);
}

TEST_CASE("DataParallel: float32 training on 3 devices equals one device within 2e-5", "[dp]") {
  REQUIRE(cpu_device_count() >= 3);
  const bool adamw = GENERATE(false, true);
  CHECK(dp_vs_single(3, 11, DType::f32, adamw ? kAdamW : kSgd) <= 2e-5);
}

TEST_CASE("DataParallel: one device is a plain call on that device", "[dp]") {
  auto model = make_mlp({4, 6, 3}, DType::f64, 1);
  DataParallel<nn::MLP> dp(model, {Device::cpu(0)});
  const Tensor x = randn({5, 4}, DType::f64, 2);
  CHECK(dp.forward(x).to_vector<double>() == model->forward(x).to_vector<double>());
  CHECK(dp.timings().devices_used == 1);
}

TEST_CASE("DataParallel: gradients land on the original parameters only, never on replicas", "[dp]") {
  REQUIRE(cpu_device_count() >= 3);
  auto model = make_mlp({6, 8, 4}, DType::f32, 3);
  DataParallel<nn::MLP> dp(model, first_devices(3));
  const Batch b = batch_for(0, 9, 6, 4, DType::f32);
  cross_entropy(dp(b.x), b.y).backward();
  for (const Tensor& p : model->parameters()) {
    CHECK(p.is_leaf());
    CHECK(p.grad().defined());
    CHECK(p.grad().device() == Device::cpu(0));
  }
  REQUIRE(dp.replicas().size() == 3);
  for (size_t k = 0; k < dp.replicas().size(); ++k) {
    CHECK(dp.replicas()[k]->layers[0]->weight.device() == Device::cpu(static_cast<int>(k)));
    for (const Tensor& p : dp.replicas()[k]->parameters()) {
      CHECK_FALSE(p.is_leaf());  // a Broadcast output
      CHECK_FALSE(p.grad().defined());
    }
  }
}

TEST_CASE("DataParallel: module() is the user's model, state_dict has no module. prefix", "[dp]") {
  REQUIRE(cpu_device_count() >= 2);
  auto model = make_mlp({3, 5, 2}, DType::f32, 4);
  DataParallel<nn::MLP> dp(model, first_devices(2));
  CHECK(dp.module() == model);
  CHECK(dp.module()->layers[0] == model->layers[0]);
  CHECK(dp.module()->layers[0]->weight.same(model->layers[0]->weight));
  const nn::StateDict state = dp.state_dict();
  for (const auto& [name, t] : state) CHECK(name.rfind("module.", 0) == std::string::npos);
  CHECK(state.count("fc1.weight") == 1);

  // PyTorch's DataParallel checkpoints carry the prefix; loading accepts them.
  nn::StateDict prefixed;
  for (const auto& [name, t] : state) prefixed["module." + name] = zeros_like(t);
  dp.load_state_dict(prefixed);
  for (const Tensor& p : model->parameters())
    for (float v : p.to_vector<float>()) CHECK(v == 0.0f);
}

TEST_CASE("DataParallel: the replicas' backward passes run at the same time", "[dp]") {
  REQUIRE(cpu_device_count() >= 2);
  // Big enough that each replica's backward takes milliseconds, so the workers' busy periods are
  // long compared with the serial parts on cpu:0 (the loss, gather's backward, the reductions).
  auto model = make_mlp({256, 768, 768, 10}, DType::f32, 5);
  DataParallel<nn::MLP> dp(model, first_devices(2));
  double best_ratio = 0;
  for (int64_t step = 0; step < 3; ++step) {
    const Batch b = batch_for(step, 512, 256, 10, DType::f32);
    model->zero_grad();
    cross_entropy(dp(b.x), b.y).backward();
    const parallel::DataParallelTimings t = dp.timings();
    REQUIRE(t.backward.size() == 2);
    const DeviceActivity &d0 = t.backward[0], &d1 = t.backward[1];
    CHECK(d0.device == Device::cpu(0));
    CHECK(d1.device == Device::cpu(1));
    // The two workers' intervals intersect...
    CHECK(std::max(d0.first_start, d1.first_start) < std::min(d0.last_end, d1.last_end));
    // ...and they were busy at the same time: if they had taken turns, the busy times would add up
    // to at most the span both intervals cover together.
    const auto span = std::max(d0.last_end, d1.last_end) - std::min(d0.first_start, d1.first_start);
    best_ratio = std::max(best_ratio, static_cast<double>((d0.busy + d1.busy).count()) / span.count());
    CHECK(t.backward_us > 0);
    CHECK(t.reduce_us > 0);
    CHECK(t.reduce_us < t.backward_us);
    CHECK(t.scatter_us > 0);
    CHECK(t.replicate_us > 0);
    CHECK(t.apply_us > 0);
    CHECK(t.gather_us > 0);
    CHECK(t.forward.size() == 2);
  }
  INFO("best (busy cpu:0 + busy cpu:1) / span of both: " << best_ratio);
  CHECK(best_ratio > 1.25);
}

namespace {

// A layer that fails on one device while `fail` is set: the error must name that device.
struct FailsOnDevice : nn::Cloneable<FailsOnDevice> {
  FailsOnDevice(Device bad, std::shared_ptr<std::atomic<bool>> fail) : bad(bad), fail(std::move(fail)) { reset(); }
  void reset() override { fc = register_module("fc", std::make_shared<nn::Linear>(4, 2)); }
  Tensor forward(const Tensor& x) override {
    if (*fail && x.device() == bad) throw Error("FailsOnDevice: deliberate failure");
    return fc->forward(x);
  }
  Device bad;
  std::shared_ptr<std::atomic<bool>> fail;  // shared with the replicas, which copy the pointer
  std::shared_ptr<nn::Linear> fc;
};

}  // namespace

TEST_CASE("DataParallel: a replica that throws names its device, and the next step works", "[dp]") {
  REQUIRE(cpu_device_count() >= 3);
  auto fail = std::make_shared<std::atomic<bool>>(true);
  auto model = std::make_shared<FailsOnDevice>(Device::cpu(2), fail);
  DataParallel<FailsOnDevice> dp(model, first_devices(3));
  const Tensor x = randn({6, 4});
  CHECK_ERROR(dp(x), "replica 2", "cpu:2", "deliberate failure");
  *fail = false;
  const Tensor y = dp(x);
  sum(y).backward();
  CHECK(y.shape() == Shape{6, 2});
  CHECK(model->fc->weight.grad().defined());

  // Wrong input width fails in every replica; the first one is reported, then a good batch works.
  auto mlp = make_mlp({4, 3, 2}, DType::f32, 6);
  DataParallel<nn::MLP> dp_mlp(mlp, first_devices(2));
  CHECK_ERROR(dp_mlp(randn({6, 5})), "replica 0", "cpu:0", "linear", "[3, 5]");
  CHECK(dp_mlp(randn({6, 4})).shape() == Shape{6, 2});
}

TEST_CASE("DataParallel: bad devices and a module elsewhere are clear errors", "[dp]") {
  REQUIRE(cpu_device_count() >= 4);
  auto model = make_mlp({3, 4, 2}, DType::f32, 7);
  using DP = DataParallel<nn::MLP>;
  CHECK_ERROR(DP(model, {}), "DataParallel", "at least one device");
  CHECK_ERROR(DP(model, {Device::cpu(0), Device::cpu(1), Device::cpu(0)}), "DataParallel", "distinct", "cpu:0");
  CHECK_ERROR(DP(model, {Device::cpu(0), Device::cpu(7)}), "cpu:7");
  CHECK_ERROR(DP(model, {Device::cpu(0), Device::cuda(0)}), "DataParallel", "one kind", "cuda:0");
  CHECK_ERROR(DP(model, {Device::cpu(1), Device::cpu(2)}), "DataParallel", "on cpu:1", "first device", "cpu:0");
  CHECK_ERROR(DP(nullptr, {Device::cpu(0)}), "DataParallel", "null");

  DP dp(model, first_devices(2));
  model->to(Device::cpu(3));  // moved after wrapping: the next forward says so
  CHECK_ERROR(dp(randn({4, 3})), "DataParallel", "expected the module on cpu:0", "cpu:3");
  model->to(Device::cpu(0));
  CHECK(dp(randn({4, 3})).device() == Device::cpu(0));
}

TEST_CASE("DataParallel: output_device puts the output (and so the loss) elsewhere", "[dp]") {
  REQUIRE(cpu_device_count() >= 3);
  auto model = make_mlp({3, 4, 2}, DType::f64, 8);
  DataParallel<nn::MLP> dp(model, first_devices(2), parallel::DataParallelOptions().output_device(Device::cpu(2)));
  const Tensor x = randn({5, 3}, DType::f64, 9);
  const Tensor y = dp(x);
  CHECK(y.device() == Device::cpu(2));
  const std::vector<double> got = y.to(Device::cpu(0)).to_vector<double>();
  const std::vector<double> want = model->forward(x).to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
}
