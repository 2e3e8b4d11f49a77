// Edge cases found in review: each once crashed, hung or gave a wrong answer.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <future>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/device.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include "test_util.h"

using namespace ringgrad;

TEST_CASE("backward started on a device worker over a two-device graph finishes", "[engine]") {
  // The parallel engine posts nodes to device workers; the caller here *is* cpu:0's worker, so the
  // engine must run serially instead of waiting for a queue it blocks.
  Tensor x = ones({4}).requires_grad_(true);
  Tensor loss = sum(x.to(Device::cpu(1)) * 3.0);
  std::future<void> done = run_on(Device::cpu(0), [&] { loss.backward(); });
  REQUIRE(done.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  done.get();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(4, 3.0f));
}

TEST_CASE("view and reshape reject sizes whose product overflows int64", "[errors]") {
  const int64_t wraps_to_one = 0x6DB6DB6DB6DB6DB7;  // 7 * this == 1 (mod 2^64)
  CHECK_ERROR(ones({1}).view({7, wraps_to_one}), "view", "int64");
  CHECK_ERROR(ones({1}).reshape({7, wraps_to_one}), "reshape", "int64");
}

TEST_CASE("slice with a step: an empty slice gives a zero gradient, a huge step one element", "[grad]") {
  Tensor x = ones({5}).requires_grad_(true);
  sum(x.slice(0, 1, 1, 3)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(5, 0.0f));
  CHECK(ones({5}).slice(0, 0, 5, INT64_MAX).shape() == Shape{1});
}

TEST_CASE("a leaf hook that returns a gradient of the wrong shape is an error", "[errors]") {
  Tensor x = ones({3}).requires_grad_(true);
  x.register_hook([](const Tensor&) { return ones({2, 3}); });
  CHECK_ERROR(sum(x * 2.0).backward(), "register_hook", "[2, 3]", "[3]");
}

TEST_CASE("a tensor a hook returns and keeps is not taken over as .grad", "[engine]") {
  Tensor kept = full({3}, 5.0);
  Tensor x = ones({3}).requires_grad_(true);
  x.register_hook([&kept](const Tensor&) { return kept; });
  sum(x * 2.0).backward();
  CHECK(x.grad().storage() != kept.storage());
}

TEST_CASE("bad arguments to set_data, Device::parse, arange, expand and size throw Error", "[errors]") {
  CHECK_ERROR(Tensor().set_data(ones({1})), "set_data", "undefined");
  CHECK_ERROR(Device::parse("cpu:99999999999"), "Device::parse", "out of range");
  CHECK_ERROR(arange(0.0, INFINITY), "arange", "too many");
  CHECK_ERROR(ones({1, 1}).expand({-2, -3}), "expand", ">= 0");
  CHECK_ERROR(scalar_tensor(1.0).size(0), "size", "0-d");
}
