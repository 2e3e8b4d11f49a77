// tests/kernels/test_cpu_sum.cpp: float32 sums against float64, with the error bound that
// kernels/cpu/sum_lanes.h documents, and their determinism: the same bits on any thread count, at
// any vector level (SSE, AVX2, AVX-512, whichever this CPU has) and at any pointer alignment of
// the chunk starts' neighbours.
//
// The bound, u = 2^-24, s the exact sum:  |result - s| <= u |s| + 22 u sum |x|.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <ringgrad/kernels/backend.h>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/sum_chunks.h"
#include "kernels/cpu/thread_pool.h"

using namespace ringgrad;
using namespace ringgrad::kernels;

namespace {

Backend& host() { return backend_for(DeviceKind::CPU, "test"); }

// Restores the calling thread's kernel thread count when a test ends, even by an exception.
struct ThreadsGuard {
  int saved = cpu::kernel_threads();
  ~ThreadsGuard() { cpu::set_kernel_threads(saved); }
};

// Values in [lo, hi): lo = -1 makes terms cancel (|s| << sum |x|), lo = 0 makes none cancel.
std::vector<float> values(int64_t n, unsigned seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(dist(gen));
  return v;
}

// The exact sum (long double: 64-bit mantissa, error far below the bound) and sum |x|.
struct Exact {
  long double sum = 0, magnitude = 0;
};
Exact exact(const float* x, int64_t n) {
  Exact e;
  for (int64_t i = 0; i < n; ++i) e.sum += x[i], e.magnitude += std::fabs(static_cast<long double>(x[i]));
  return e;
}

bool within_bound(float got, const Exact& e) {
  const double u = std::ldexp(1.0, -24);
  const double error = std::fabs(static_cast<double>(static_cast<long double>(got) - e.sum));
  return error <= u * std::fabs(static_cast<double>(e.sum)) + 22 * u * static_cast<double>(e.magnitude);
}

float sum_of(const float* x, int64_t n) {
  float y = 0;
  host().reduce(ReduceOp::Sum, DType::f32, x, &y, nullptr, 1, n, 1, Stream{});
  return y;
}

uint32_t bits(float v) {
  uint32_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Around the lane count (64), the chunk (1024), a block of chunks (64 Ki) and a few blocks.
const std::vector<int64_t> kSizes = {0,    1,     63,    64,    65,          1023,   1024,         1025,
                                     4097, 65535, 65536, 65537, 131072 + 33, 300007, (1 << 20) + 5};

}  // namespace

TEST_CASE("float32 sums stay within the documented bound of the float64 sum", "[kernels][reduce]") {
  for (const double lo : {-1.0, 0.0}) {
    for (const int64_t n : kSizes) {
      const auto x = values(n, 21, lo, 1.0);
      const float got = sum_of(x.data(), n);
      INFO("n " << n << ", values in [" << lo << ", 1): got " << got << ", exact " << double(exact(x.data(), n).sum));
      CHECK(within_bound(got, exact(x.data(), n)));
    }
  }
}

TEST_CASE("float32 sums of misaligned starts stay within the bound and do not depend on threads",
          "[kernels][reduce][parallel]") {
  ThreadsGuard guard;
  const int64_t n = 3 * 65536 + 1001;
  const auto storage = values(n + 7, 22, -1.0, 1.0);
  for (const int64_t shift : {1, 3, 7}) {  // 4, 12 and 28 bytes past a 64-byte-aligned start
    const float* x = storage.data() + shift;
    cpu::set_kernel_threads(1);
    const float one = sum_of(x, n);
    INFO("shift " << shift);
    CHECK(within_bound(one, exact(x, n)));
    for (const int threads : {2, 3}) {
      cpu::set_kernel_threads(threads);
      CHECK(bits(sum_of(x, n)) == bits(one));
    }
  }
}

TEST_CASE("sums of matrix rows equal the sum of each row alone, bit for bit, on any thread count",
          "[kernels][reduce][parallel]") {
  ThreadsGuard guard;
  for (const int64_t r : {int64_t{1000}, int64_t{1024}, int64_t{70001}}) {
    const int64_t rows = 2 * cpu::kGrain / r + 3;
    const auto x = values(rows * r, 23, -1.0, 1.0);
    for (const int threads : {1, 2, 3}) {
      cpu::set_kernel_threads(threads);
      std::vector<float> y(static_cast<size_t>(rows));
      host().reduce(ReduceOp::Sum, DType::f32, x.data(), y.data(), nullptr, rows, r, 1, Stream{});
      for (int64_t o = 0; o < rows; ++o) {
        INFO("r " << r << ", row " << o << ", threads " << threads);
        const float* row = x.data() + o * r;
        REQUIRE(bits(y[static_cast<size_t>(o)]) == bits(sum_of(row, r)));
        REQUIRE(within_bound(y[static_cast<size_t>(o)], exact(row, r)));
      }
    }
  }
}

TEST_CASE("the chunk loop gives the same bits at every vector level this CPU has", "[kernels][reduce]") {
  const cpu::Isa supported = cpu::cpu_isa_supported();
  for (const int64_t n : kSizes) {
    const auto x = values(n + 1, 24, -1.0, 1.0);
    const auto xd = std::vector<double>(x.begin(), x.end());
    for (const int64_t shift : {0, 1}) {
      INFO("n " << n << ", shift " << shift);
      const double base = cpu::sum_chunks_baseline(x.data() + shift, n);
      const double base_d = cpu::sum_chunks_baseline(xd.data() + shift, n);
      if (supported >= cpu::Isa::avx2) {
        CHECK(cpu::sum_chunks_avx2(x.data() + shift, n) == base);
        CHECK(cpu::sum_chunks_avx2(xd.data() + shift, n) == base_d);
      }
      if (supported >= cpu::Isa::avx512) {
        CHECK(cpu::sum_chunks_avx512(x.data() + shift, n) == base);
        CHECK(cpu::sum_chunks_avx512(xd.data() + shift, n) == base_d);
      }
    }
  }
}

TEST_CASE("a row of more than 1024 blocks (64 Mi floats) is summed in groups, the same on any thread count",
          "[kernels][reduce][parallel]") {
  // reduce.cpp keeps 1024 block sums on the stack; a longer row goes through in groups of them.
  ThreadsGuard guard;
  const int64_t n = (int64_t{1} << 26) + 3 * 65536 + 5;
  std::vector<float> x(static_cast<size_t>(n));
  uint32_t state = 12345;  // a cheap generator: 67M draws of mt19937 would dominate the test
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
  cpu::set_kernel_threads(1);
  const float one = sum_of(x.data(), n);
  cpu::set_kernel_threads(2);
  CHECK(bits(sum_of(x.data(), n)) == bits(one));
  CHECK(within_bound(one, exact(x.data(), n)));
}
