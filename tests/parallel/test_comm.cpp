// tests/parallel/test_comm.cpp: scatter, gather and broadcast -- values, devices, gradients, errors.
//
// The test executable has four logical CPU devices (tests/core/test_devices_setup.cpp); copies
// between them are real copies, so these tests exercise the same paths as GPUs, minus the GPU.
#include <catch2/catch.hpp>

#include <vector>

#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/parallel/comm.h>
#include "test_util.h"

using namespace ringgrad;
using parallel::broadcast;
using parallel::chunk_sizes;
using parallel::gather;
using parallel::scatter;

namespace {

const std::vector<Device> kThree = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};

// Element-wise equality of values, whatever the devices.
bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to(Device::cpu()).to_vector<double>() == b.to(Device::cpu()).to_vector<double>();
}

}  // namespace

TEST_CASE("chunk_sizes: balanced chunks, larger first, no empty chunk", "[dp]") {
  CHECK(chunk_sizes(10, 4) == std::vector<int64_t>{3, 3, 2, 2});
  CHECK(chunk_sizes(12, 4) == std::vector<int64_t>{3, 3, 3, 3});
  CHECK(chunk_sizes(3, 4) == std::vector<int64_t>{1, 1, 1});
  CHECK(chunk_sizes(7, 1) == std::vector<int64_t>{7});
  CHECK_ERROR(chunk_sizes(0, 2), "scatter", "non-empty batch", "0 rows");
  CHECK_ERROR(chunk_sizes(5, 0), "scatter", "at least one device");
}

TEST_CASE("scatter: chunk i lands on device i with the rows of x, a view where it stays", "[dp]") {
  REQUIRE(cpu_device_count() >= 3);
  const Tensor x = randn({7, 5}, DType::f64, /*seed=*/1);
  const std::vector<Tensor> chunks = scatter(x, kThree);
  REQUIRE(chunks.size() == 3);
  const std::vector<int64_t> expected_rows = {3, 2, 2};
  int64_t row = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    CHECK(chunks[i].device() == kThree[i]);
    CHECK(chunks[i].shape() == Shape{expected_rows[i], 5});
    CHECK(same_values(chunks[i], x.narrow(0, row, expected_rows[i])));
    row += expected_rows[i];
  }
  CHECK(chunks[0].storage() == x.storage());  // no copy on the source device
  CHECK(chunks[1].storage() != x.storage());
}

TEST_CASE("scatter: along dim 1, and fewer chunks than devices for a small batch", "[dp]") {
  REQUIRE(cpu_device_count() >= 3);
  const Tensor x = randn({2, 5}, DType::f32, /*seed=*/2);
  const std::vector<Tensor> by_column = scatter(x, kThree, 1);
  REQUIRE(by_column.size() == 3);
  CHECK(by_column[0].shape() == Shape{2, 2});
  CHECK(by_column[2].shape() == Shape{2, 1});
  CHECK(same_values(by_column[2], x.narrow(1, 4, 1)));
  const std::vector<Tensor> by_row = scatter(x, kThree, 0);
  REQUIRE(by_row.size() == 2);  // two rows: the third device gets nothing
  CHECK(by_row[1].device() == Device::cpu(1));
}

TEST_CASE("gather: joins on the target device in order, along any dim", "[dp]") {
  REQUIRE(cpu_device_count() >= 3);
  const Tensor a = randn({2, 3}, DType::f32, 3).to(Device::cpu(1));
  const Tensor b = randn({4, 3}, DType::f32, 4).to(Device::cpu(2));
  const Tensor joined = gather({a, b}, Device::cpu(0));
  CHECK(joined.device() == Device::cpu(0));
  CHECK(same_values(joined, cat({a.to(Device::cpu(0)), b.to(Device::cpu(0))}, 0)));
  const Tensor c = randn({2, 1}, DType::f32, 5).to(Device::cpu(2));
  const Tensor side = gather({a, c}, Device::cpu(1), -1);
  CHECK(side.shape() == Shape{2, 4});
  CHECK(same_values(side.narrow(1, 3, 1), c));
}

TEST_CASE("scatter then gather: gradient matches finite differences", "[dp][grad]") {
  REQUIRE(cpu_device_count() >= 3);
  const Tensor x = (randn({7, 3}, DType::f64, 6) * 0.5).detach().requires_grad_(true);
  CHECK_GRADCHECK(
      [](const Tensor& in) {
        std::vector<Tensor> chunks = scatter(in, kThree);
        // A different function on each device, so a gradient sent to the wrong chunk shows.
        for (size_t i = 0; i < chunks.size(); ++i) chunks[i] = tanh(chunks[i] * static_cast<double>(i + 1));
        return gather(chunks, Device::cpu(1));
      },
      x);
}

TEST_CASE("broadcast: gradients of the copies are summed onto the source", "[dp][grad]") {
  REQUIRE(cpu_device_count() >= 3);
  const Tensor p = (randn({4, 3}, DType::f64, 7) * 0.5).detach().requires_grad_(true);
  CHECK_GRADCHECK(
      [](const Tensor& in) {
        std::vector<Tensor> copies = broadcast(in, kThree);
        for (size_t i = 0; i < copies.size(); ++i) copies[i] = sigmoid(copies[i] * static_cast<double>(i + 2));
        return gather(copies, Device::cpu(0));
      },
      p);
}

TEST_CASE("broadcast: copy i on device i, the source's own copy shares its memory, .grad only on the source", "[dp]") {
  REQUIRE(cpu_device_count() >= 3);
  const Tensor p = randn({3, 2}, DType::f32, 8).requires_grad_(true);
  const std::vector<Tensor> copies = broadcast(p, kThree);
  REQUIRE(copies.size() == 3);
  CHECK(copies[0].storage() == p.storage());
  for (size_t i = 0; i < 3; ++i) {
    CHECK(copies[i].device() == kThree[i]);
    CHECK(same_values(copies[i], p));
    CHECK_FALSE(copies[i].is_leaf());
  }
  // Only copies 0 and 2 are used: slot 1 gets no gradient, and the sum is 2 + 3 per element.
  (sum(copies[0] * 2.0) + sum(copies[2] * 3.0).to(Device::cpu(0))).backward();
  REQUIRE(p.grad().defined());
  for (float g : p.grad().to_vector<float>()) CHECK(g == 5.0f);
  for (const Tensor& c : copies) CHECK_FALSE(c.grad().defined());
}

TEST_CASE("scatter, gather, broadcast: bad input is a clear error", "[dp]") {
  REQUIRE(cpu_device_count() >= 3);
  const Tensor x = randn({4, 3});
  CHECK_ERROR(scatter(x, {}), "scatter", "at least one device");
  CHECK_ERROR(scatter(zeros({0, 3}), kThree), "scatter", "non-empty batch", "[0, 3]");
  CHECK_ERROR(scatter(x, kThree, 2), "scatter", "dim 2", "out of range");
  CHECK_ERROR(scatter(x, {Device::cpu(0), Device::cpu(9)}), "cpu:9");
  CHECK_ERROR(gather({}, Device::cpu(0)), "gather", "at least one tensor");
  CHECK_ERROR(gather({x, randn({4, 2}).to(Device::cpu(1))}, Device::cpu(0)), "gather", "[4, 3]", "[4, 2]", "index 1",
              "cpu:1");
  CHECK_ERROR(gather({x, randn({4, 3}, DType::f64)}, Device::cpu(0)), "gather", "float32", "float64", "index 1");
  CHECK_ERROR(broadcast(x, {Device::cpu(1), Device::cpu(2)}), "broadcast", "one of the target devices", "cpu:0");
  CHECK_ERROR(broadcast(x, {Device::cpu(0), Device::cpu(0)}), "broadcast", "distinct");
}
