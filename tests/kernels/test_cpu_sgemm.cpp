// tests/kernels/test_cpu_sgemm.cpp: ringgrad's packed float32 GEMM (kernels/cpu/sgemm.cpp) at every
// vector level this CPU has, against a float64 reference.
//
// Shapes are chosen to exercise every loop of the driver: sizes that leave partial tiles in both
// dimensions, K deeper than one k block (KC is 384 / 256), N wider than one column block (480 /
// 384), M taller than one row band (3072), and tiny ones (1 x 1 x 1). Operands are views into
// larger buffers: an offset of one float (so nothing is 64-byte aligned) and a leading dimension
// longer than the row. The error bound is the classical one for a dot product of length k in
// float32: |computed - exact| <= gamma_k * sum_k |alpha a_ik b_kj| + |beta c_ij| u, with
// gamma_k = k u / (1 - k u) and u = 2^-24; a test fails at twice that.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/cpu/thread_pool.h"

using namespace ringgrad;
using namespace ringgrad::kernels;

namespace {

struct ThreadsGuard {
  int saved = cpu::kernel_threads();
  ~ThreadsGuard() { cpu::set_kernel_threads(saved); }
};

// The levels with a packed kernel that this CPU can run.
std::vector<cpu::Isa> packed_levels() {
  std::vector<cpu::Isa> levels;
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512})
    if (static_cast<int>(isa) <= static_cast<int>(cpu::cpu_isa_supported()) && cpu::sgemm_packed_available(isa))
      levels.push_back(isa);
  return levels;
}

struct Case {
  int64_t m, n, k;
  bool trans_a, trans_b;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  Activation activation = Activation::None;
};

// Operands stored as a real caller would hold them, one float past an aligned start and with rows
// `pad` longer than needed; C starts as NaN when beta = 0 (it must not be read) and as random
// values otherwise.
struct Operands {
  Case c;
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, out, bias;
  std::vector<float> c0;

  explicit Operands(const Case& cs, int64_t pad = 3, unsigned seed = 1) : c(cs) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const int64_t a_rows = cs.trans_a ? cs.k : cs.m, a_cols = cs.trans_a ? cs.m : cs.k;
    const int64_t b_rows = cs.trans_b ? cs.n : cs.k, b_cols = cs.trans_b ? cs.k : cs.n;
    lda = a_cols + pad, ldb = b_cols + pad, ldc = cs.n + pad;
    a.resize(static_cast<size_t>(1 + a_rows * lda));
    b.resize(static_cast<size_t>(1 + b_rows * ldb));
    out.resize(static_cast<size_t>(1 + cs.m * ldc));
    for (float& v : a) v = dist(gen);
    for (float& v : b) v = dist(gen);
    for (float& v : out) v = cs.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : dist(gen);
    bias.resize(static_cast<size_t>(cs.n));
    for (float& v : bias) v = dist(gen);
    c0 = out;
  }

  float A(int64_t i, int64_t p) const {
    return c.trans_a ? a[static_cast<size_t>(1 + p * lda + i)] : a[static_cast<size_t>(1 + i * lda + p)];
  }
  float B(int64_t p, int64_t j) const {
    return c.trans_b ? b[static_cast<size_t>(1 + j * ldb + p)] : b[static_cast<size_t>(1 + p * ldb + j)];
  }

  cpu::SgemmProblem problem() {
    cpu::SgemmProblem p;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.a = a.data() + 1;
    p.lda = lda;
    p.trans_a = c.trans_a;
    p.b = b.data() + 1;
    p.ldb = ldb;
    p.trans_b = c.trans_b;
    p.c = out.data() + 1;
    p.ldc = ldc;
    p.alpha = c.alpha;
    p.beta = c.beta;
    p.bias = c.bias ? bias.data() : nullptr;
    p.activation = c.activation;
    return p;
  }
};

double activate(double x, Activation act) {
  switch (act) {
    case Activation::Relu: return x > 0 ? x : 0;
    case Activation::GeluTanh: return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case Activation::None: break;
  }
  return x;
}

// Checks every element of C (and that the padding between rows was not written).
void check(const Operands& o, const std::string& what) {
  const double u = std::ldexp(1.0, -24);
  const double gamma = static_cast<double>(o.c.k) * u / (1 - static_cast<double>(o.c.k) * u);
  int64_t bad = 0;
  for (int64_t i = 0; i < o.c.m; ++i) {
    for (int64_t j = 0; j < o.ldc; ++j) {
      const size_t at = static_cast<size_t>(1 + i * o.ldc + j);
      if (j >= o.c.n) {  // padding: untouched
        if (!(std::isnan(o.out[at]) && std::isnan(o.c0[at])) && o.out[at] != o.c0[at]) ++bad;
        continue;
      }
      double exact = 0, magnitude = 0;
      for (int64_t p = 0; p < o.c.k; ++p) {
        const double term = static_cast<double>(o.A(i, p)) * static_cast<double>(o.B(p, j));
        exact += term;
        magnitude += std::fabs(term);
      }
      exact *= o.c.alpha;
      magnitude *= std::fabs(o.c.alpha);
      if (o.c.beta != 0.0f) {
        exact += static_cast<double>(o.c.beta) * o.c0[at];
        magnitude += std::fabs(static_cast<double>(o.c.beta) * o.c0[at]);
      }
      double tolerance = 2 * (gamma * magnitude + u * magnitude) + 1e-30;
      if (o.c.bias) {
        exact += o.bias[static_cast<size_t>(j)];
        tolerance += 2 * u * (magnitude + std::fabs(o.bias[static_cast<size_t>(j)]));
      }
      const double want = activate(exact, o.c.activation);
      if (o.c.activation == Activation::GeluTanh) tolerance = 1.2 * tolerance + 4 * u * std::fabs(want);
      if (!(std::fabs(static_cast<double>(o.out[at]) - want) <= tolerance)) {
        if (bad < 3)
          UNSCOPED_INFO(what << ": C[" << i << "][" << j << "] = " << o.out[at] << ", want " << want << " +- "
                             << tolerance);
        ++bad;
      }
    }
  }
  CHECK(bad == 0);
}

void run_and_check(cpu::Isa isa, const Case& cs, int threads = 1) {
  Operands o(cs);
  cpu::sgemm_packed(isa, o.problem(), threads);
  check(o, std::string(cpu::isa_name(isa)) + " m=" + std::to_string(cs.m) + " n=" + std::to_string(cs.n) + " k=" +
               std::to_string(cs.k) + " ta=" + std::to_string(cs.trans_a) + " tb=" + std::to_string(cs.trans_b));
}

}  // namespace

TEST_CASE("sgemm: every transpose at odd sizes, with partial tiles and several k blocks", "[kernels][sgemm]") {
  const auto levels = packed_levels();
  if (levels.empty()) {
    WARN("this CPU has no AVX2 + FMA: the packed GEMM never runs here");
    return;
  }
  for (cpu::Isa isa : levels) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (auto [m, n, k] :
             {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {5, 7, 3}, {13, 33, 17}, {25, 65, 385}, {37, 17, 800}}) {
          run_and_check(isa, {m, n, k, ta, tb});
          run_and_check(isa, {m, n, k, ta, tb, 0.5f, 1.5f});  // alpha, and beta reading C
        }
      }
    }
  }
}

TEST_CASE("sgemm: wide, tall and deep products cross every block boundary", "[kernels][sgemm]") {
  const auto levels = packed_levels();
  if (levels.empty()) {
    WARN("this CPU has no AVX2 + FMA: the packed GEMM never runs here");
    return;
  }
  for (cpu::Isa isa : levels) {
    run_and_check(isa, {19, 1001, 31, false, true, 1.0f, 0.0f, true, Activation::Relu}, 2);  // several column blocks
    run_and_check(isa, {3083, 23, 9, true, false, 1.0f, 1.0f}, 2);                           // two row bands
    run_and_check(isa, {29, 45, 1157, false, false, -1.0f, 0.25f}, 3);                       // four k blocks
  }
}

TEST_CASE("sgemm: bias and activations in the epilogue, after the last k block only", "[kernels][sgemm]") {
  const auto levels = packed_levels();
  if (levels.empty()) {
    WARN("this CPU has no AVX2 + FMA: the packed GEMM never runs here");
    return;
  }
  for (cpu::Isa isa : levels) {
    for (Activation act : {Activation::None, Activation::Relu, Activation::GeluTanh}) {
      run_and_check(isa, {27, 70, 500, false, true, 1.0f, 0.0f, true, act});
      run_and_check(isa, {27, 70, 500, true, false, 1.0f, 1.0f, true, act});
    }
  }
}

TEST_CASE("sgemm: k = 0 leaves beta C (plus the epilogue), and m or n = 0 writes nothing", "[kernels][sgemm]") {
  const auto levels = packed_levels();
  if (levels.empty()) {
    WARN("this CPU has no AVX2 + FMA: the packed GEMM never runs here");
    return;
  }
  for (cpu::Isa isa : levels) {
    run_and_check(isa, {4, 5, 0, false, false, 1.0f, 0.0f});  // NaN in C becomes 0
    run_and_check(isa, {4, 5, 0, false, false, 1.0f, 0.5f, true, Activation::Relu});
    Operands empty({0, 5, 3, false, false});
    cpu::sgemm_packed(isa, empty.problem(), 1);
    Operands empty_n({4, 0, 3, false, false, 1.0f, 1.0f});
    cpu::sgemm_packed(isa, empty_n.problem(), 1);
    CHECK(empty_n.out == empty_n.c0);
  }
}

TEST_CASE("sgemm: the same bits on 1, 2 and 3 threads", "[kernels][sgemm]") {
  const auto levels = packed_levels();
  if (levels.empty()) {
    WARN("this CPU has no AVX2 + FMA: the packed GEMM never runs here");
    return;
  }
  ThreadsGuard guard;
  for (cpu::Isa isa : levels) {
    for (bool tb : {false, true}) {
      // 2*m*n*k above the parallel threshold, so the work is split; n not a multiple of any tile.
      const Case cs{301, 517, 409, false, tb, 1.0f, 0.5f, true, Activation::Relu};
      std::vector<float> first;
      for (int threads : {1, 2, 3}) {
        cpu::set_kernel_threads(threads);
        Operands o(cs);
        cpu::sgemm_packed(isa, o.problem(), threads);
        if (threads == 1) {
          check(o, "1 thread");
          first = o.out;
        } else {
          CHECK(std::memcmp(first.data(), o.out.data(), first.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("sgemm: a product started from inside another's parallel part gets its own packing buffers",
          "[kernels][sgemm]") {
  const auto levels = packed_levels();
  if (levels.empty()) {
    WARN("this CPU has no AVX2 + FMA: the packed GEMM never runs here");
    return;
  }
  ThreadsGuard guard;
  cpu::set_kernel_threads(2);
  for (cpu::Isa isa : levels) {
    std::vector<Operands> inner;
    for (unsigned s = 0; s < 4; ++s) inner.emplace_back(Case{40, 50, 60, false, true}, 3, s + 10);
    Operands outer({200, 300, 300, false, false});
    // Each part of the outer parallel_for runs a whole product on a thread whose buffers the outer
    // product (on the calling thread) may be holding.
    cpu::parallel_for(4, [&](int part) {
      cpu::sgemm_packed(isa, inner[static_cast<size_t>(part)].problem(), 1);
      if (part == 0) cpu::sgemm_packed(isa, outer.problem(), 2);
    });
    for (const Operands& o : inner) check(o, "inner");
    check(outer, "outer");
  }
}

TEST_CASE("cpu_isa: RINGGRAD_CPU_ISA never raises the level above the CPU's", "[kernels][sgemm]") {
  const cpu::Isa chosen = cpu::cpu_isa();
  CHECK(static_cast<int>(chosen) <= static_cast<int>(cpu::cpu_isa_supported()));
  CHECK(std::string(cpu::isa_name(chosen)).size() > 0);
}
