// tests/cuda/cuda_test_util.h: what every `cuda`-labelled test file shares.
#pragma once

#include <catch2/catch.hpp>

#include "kernels/cuda/probe.h"

namespace ringgrad {
namespace test {

// GPU tests FAIL without a GPU: a skipped GPU test would read as a passed one in a summary.
inline void require_gpu() {
  if (cuda_device_count() == 0) {
    FAIL("this test needs a CUDA GPU, but cuda_device_count() is 0 (no GPU, or no driver). "
         "Tests labelled `cuda` need a GPU; run the others with `ctest -LE cuda`.");
  }
}

}  // namespace test
}  // namespace ringgrad
