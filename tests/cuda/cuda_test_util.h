// tests/cuda/cuda_test_util.h: what every `cuda`-labelled test file shares -- require_gpu(), and for
// the tests that go through tensors: seeded host inputs, NaN-poisoned GPU outputs, and a comparison
// that names the first element that differs.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <ringgrad/core/cuda.h>
#include <ringgrad/core/tensor.h>
#include "kernels/cuda/probe.h"

namespace ringgrad {
namespace test {

// GPU tests FAIL without a GPU: a skipped GPU test would read as a passed one in a summary.
inline void require_gpu() {
  if (cuda_device_count() == 0) {
    FAIL(
        "this test needs a CUDA GPU, but cuda_device_count() is 0 (no GPU, or no driver). "
        "Tests labelled `cuda` need a GPU; run the others with `ctest -LE cuda`.");
  }
}

// Tests that need several GPUs carry the Catch tag [multi-gpu] and so the CTest label `multi-gpu`
// (instead of `cuda`): a one-GPU machine runs `ctest -L '^cuda$'` and says what it left out. Run
// anyway, they FAIL -- never pass without having run.
inline void require_gpus(int n) {
  require_gpu();
  if (cuda_device_count() < n) {
    FAIL("this test needs " << n << " GPUs, but cuda_device_count() is " << cuda_device_count()
                            << ". Tests labelled `multi-gpu` need several; run the others with "
                               "`ctest -L '^cuda$'`.");
  }
}

// A host tensor of seeded values in [lo, hi), kept at least 0.05 away from 0 (ReLU's kink, division).
inline Tensor seeded_host(const Shape& shape, DType dt, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& e : v) {
    e = dist(rng);
    if (std::fabs(e) < 0.05) e += e < 0 ? -0.05 : 0.05;
  }
  return from_vector(v, shape).to(dt);
}

// A tensor on cuda:0 whose every element is NaN (-1 for int64, 255 for uint8): an output element that
// a kernel forgets to write keeps the poison and fails the comparison.
inline Tensor poisoned(const Shape& shape, DType dt) {
  const double poison = dt == DType::i64 ? -1.0 : dt == DType::u8 ? 255.0 : NAN;
  return full(shape, poison, TensorOptions(dt).device(Device::cuda(0)));
}

// Every element of `got` (any device) within atol + rtol*|want| of `want`; NaN must meet NaN.
inline void check_close(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                    std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]);
    if (!ok && wrong++ == 0) first = i;
  }
  INFO(what << ": " << wrong << " of " << g.size() << " wrong; first at flat index " << first << ": GPU "
            << (g.empty() ? 0.0 : g[first]) << ", CPU " << (w.empty() ? 0.0 : w[first]));
  CHECK(wrong == 0);
}

}  // namespace test
}  // namespace ringgrad
