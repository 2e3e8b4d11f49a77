// tests/cuda/test_cuda_probe.cpp: the CUDA toolchain probe runs a real kernel and agrees with the CPU.
//
// These tests carry the CTest label `cuda`. They need a GPU and FAIL without one -- a skipped GPU
// test reads as a passed one in a summary. CI has no GPU and runs `ctest -LE cuda`.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <ringgrad/core/base/error.h>
#include "core/base/cuda_check.h"
#include "kernels/cuda/probe.h"
#include "cuda_test_util.h"

using namespace ringgrad;
using ringgrad::test::require_gpu;

namespace {

std::vector<float> seeded_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& e : v) e = dist(rng);
  return v;
}

}  // namespace

TEST_CASE("cuda probe: a GPU is present", "[cuda]") {
  require_gpu();
  CHECK(cuda_device_count() > 0);
}

TEST_CASE("cuda probe: saxpy agrees with the CPU on odd sizes", "[cuda]") {
  require_gpu();
  const size_t n = GENERATE(1, 7, 1000, 100003);
  const float a = 1.75f;
  const std::vector<float> x = seeded_values(n, 1);
  std::vector<float> y = seeded_values(n, 2);
  std::vector<float> expected(n);
  for (size_t i = 0; i < n; ++i) expected[i] = a * x[i] + y[i];

  kernels::cuda_probe_saxpy(a, x, y);

  // The GPU fuses a*x + y into one FMA (one rounding), the CPU may round twice: allow an ulp or so.
  size_t wrong = 0, first_wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::fabs(y[i] - expected[i]) > 1e-6f * (1.0f + std::fabs(expected[i]))) {
      if (wrong++ == 0) first_wrong = i;
    }
  }
  INFO("n = " << n << ": " << wrong << " wrong; first at " << first_wrong << ": GPU " << y[first_wrong] << ", CPU "
              << expected[first_wrong]);
  CHECK(wrong == 0);
}

TEST_CASE("cuda probe: saxpy rejects x and y of different sizes", "[cuda]") {
  std::vector<float> y(3);
  CHECK_THROWS_WITH(kernels::cuda_probe_saxpy(2.0f, std::vector<float>(4), y),
                    "cuda_probe_saxpy: expected x and y of the same size, got 4 and 3");
}

TEST_CASE("cuda probe: RINGGRAD_CUDA_CHECK names the call, the error and the place", "[cuda]") {
  using Catch::Matchers::Contains;
  // A failing "call" that needs no GPU: the macro sees only the returned error code.
  const auto fails = [] { RINGGRAD_CUDA_CHECK(cudaErrorInvalidValue); };
  CHECK_THROWS_AS(fails(), Error);
  CHECK_THROWS_WITH(fails(), Contains("cudaErrorInvalidValue failed: cudaErrorInvalidValue (invalid argument)") &&
                                 Contains("test_cuda_probe.cpp:"));
}
