// tests/cuda/test_gemm.cpp: the float32 GEMM kernels (ringgrad's own, kernels/cuda/gemm.cu, and the
// cuBLAS yardstick, kernels/cuda/gemm_cublas.cu) agree with the CPU backend.
//
// Every case fills seeded inputs, runs the CPU backend on host copies, then each GPU kernel on the
// same inputs with C poisoned by NaN when beta == 0 (so an unwritten element fails) and with random
// values otherwise. Padding around C (ldc > n) must come back untouched. Sizes are odd and not
// multiples of the 128/64 tiles. These tests carry the CTest label `cuda` and FAIL without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <ringgrad/kernels/backend.h>
#include "core/base/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/probe.h"
#include "kernels/cuda/runtime.h"
#include "cuda_test_util.h"

using namespace ringgrad;
using namespace ringgrad::kernels;
using ringgrad::test::require_gpu;

namespace {

// Device memory holding a host vector's values. Copies go through `stream`, the stream the kernels
// run on, and wait for it: a cudaMemcpy on the legacy default stream would not be ordered with work on
// a cudaStreamNonBlocking stream.
class DeviceBuffer {
 public:
  DeviceBuffer(const std::vector<float>& host, cudaStream_t stream) : n_(host.size()), stream_(stream) {
    // At least one element, so that an empty operand (k = 0) still has an address.
    RINGGRAD_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(n_, 1) * sizeof(float)));
    upload(host);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return static_cast<float*>(ptr_); }
  void upload(const std::vector<float>& host) {
    REQUIRE(host.size() == n_);
    if (n_ == 0) return;  // nothing to copy, and an empty vector's data() may be null
    RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(ptr_, host.data(), n_ * sizeof(float), cudaMemcpyHostToDevice, stream_));
    RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  std::vector<float> download() const {
    std::vector<float> host(n_);
    if (n_ == 0) return host;
    RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(host.data(), ptr_, n_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t n_;
  cudaStream_t stream_;
};

struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() {
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw Error("cublasCreate failed");
  }
  ~CublasHandle() { cublasDestroy(h); }
};

struct StreamGuard {
  cudaStream_t s = nullptr;
  StreamGuard() { RINGGRAD_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~StreamGuard() { cudaStreamDestroy(s); }
};

std::vector<float> seeded_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = dist(rng);
  return v;
}

// One GEMM problem, described in the terms of GemmArgs.
struct Case {
  int64_t m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;
  double alpha = 1.0, beta = 0.0;
  bool bias = false;
  Activation activation = Activation::None;
  int64_t batch = 1;
  bool share_a = false, share_b = false;  // stride 0: one operand for every batch entry
  int64_t pad = 0;                        // extra elements per row of A, B and C (ld > cols)
  int64_t offset = 0;                     // elements before each buffer's first element (misaligns)
  bool one_block_per_sm = false;          // also run the 128x128 tile's 1-block-per-SM build (no spills)
};

std::string describe(const Case& c) {
  return detail::str("m=", c.m, " n=", c.n, " k=", c.k, " trans_a=", c.trans_a, " trans_b=", c.trans_b,
                     " alpha=", c.alpha, " beta=", c.beta, " bias=", c.bias,
                     " activation=", static_cast<int>(c.activation), " batch=", c.batch, " share_a=", c.share_a,
                     " share_b=", c.share_b, " pad=", c.pad, " offset=", c.offset);
}

bool same_bits(float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0; }

// Runs `c` on the CPU backend and on both GPU kernels; every GPU result must match the CPU's.
void check_case(const Case& cs, uint32_t seed) {
  const int64_t a_rows = cs.trans_a ? cs.k : cs.m, a_cols = cs.trans_a ? cs.m : cs.k;
  const int64_t b_rows = cs.trans_b ? cs.n : cs.k, b_cols = cs.trans_b ? cs.k : cs.n;
  const int64_t lda = a_cols + cs.pad, ldb = b_cols + cs.pad, ldc = cs.n + cs.pad;
  const int64_t size_a = a_rows * lda, size_b = b_rows * ldb, size_c = cs.m * ldc;
  const int64_t stride_a = cs.share_a ? 0 : size_a, stride_b = cs.share_b ? 0 : size_b, stride_c = size_c;

  const auto total = [&](int64_t size, bool shared) {
    return static_cast<size_t>(cs.offset + (shared ? 1 : cs.batch) * size);
  };
  const std::vector<float> a = seeded_values(total(size_a, cs.share_a), seed);
  const std::vector<float> b = seeded_values(total(size_b, cs.share_b), seed + 1);
  const std::vector<float> bias = seeded_values(static_cast<size_t>(cs.n + cs.offset), seed + 2);
  std::vector<float> c0 = seeded_values(total(size_c, false), seed + 3);
  if (cs.beta == 0.0) {  // poison the whole buffer: unwritten outputs stay NaN and fail
    for (float& e : c0) e = std::numeric_limits<float>::quiet_NaN();
  }

  GemmArgs args;
  args.dtype = DType::f32;
  args.m = cs.m, args.n = cs.n, args.k = cs.k;
  args.lda = lda, args.ldb = ldb, args.ldc = ldc;
  args.trans_a = cs.trans_a, args.trans_b = cs.trans_b;
  args.alpha = cs.alpha, args.beta = cs.beta;
  args.batch = cs.batch, args.stride_a = stride_a, args.stride_b = stride_b, args.stride_c = stride_c;
  args.activation = cs.activation;

  std::vector<float> want = c0;
  {
    GemmArgs host = args;
    host.a = a.data() + cs.offset, host.b = b.data() + cs.offset, host.c = want.data() + cs.offset;
    host.bias = cs.bias ? bias.data() + cs.offset : nullptr;
    backend_for(DeviceKind::CPU).gemm(host, nullptr);
  }

  StreamGuard stream;
  DeviceBuffer da(a, stream.s), db(b, stream.s), dbias(bias, stream.s), dc(c0, stream.s);
  args.a = da.get() + cs.offset, args.b = db.get() + cs.offset, args.c = dc.get() + cs.offset;
  args.bias = cs.bias ? dbias.get() + cs.offset : nullptr;
  CublasHandle cublas;

  std::vector<const char*> impls = {"gemm_f32", "gemm_cublas_f32"};
  if (cs.one_block_per_sm) impls.push_back("gemm_f32 (1 block/SM)");
  for (const char* impl : impls) {
    dc.upload(c0);
    if (impl[5] == 'c')
      cuda::gemm_cublas_f32(args, stream.s, cublas.h);
    else
      cuda::gemm_f32(args, stream.s, std::strchr(impl, '(') != nullptr ? 1 : 2);
    RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    const std::vector<float> got = dc.download();

    // fp32 accumulation over k terms of magnitude <= 1: allow error growing with k.
    const double tol_scale = 1e-6 + 3e-7 * static_cast<double>(cs.k);
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
      const int64_t e = i - cs.offset;
      const bool inside = e >= 0 && (e % ldc) < cs.n;  // an element of some C, not padding
      bool ok;
      if (inside) {
        const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
        ok = diff <= tol_scale * (1.0 + std::fabs(static_cast<double>(want[i])));  // NaN fails
      } else {
        ok = same_bits(got[i], c0[i]);  // padding and the bytes before the first element stay
      }
      if (!ok && wrong++ == 0) first = i;
    }
    if (wrong > 0) {
      const int64_t e = first - cs.offset;
      INFO(impl << " on " << describe(cs) << ": " << wrong << " wrong; first at buffer index " << first << " (batch "
                << (e >= 0 ? e / size_c : -1) << ", row " << (e >= 0 ? (e % size_c) / ldc : -1) << ", col "
                << (e >= 0 ? e % ldc : -1) << "): GPU " << got[first] << ", CPU " << want[first] << ", before "
                << c0[first]);
      CHECK(wrong == 0);
    } else {
      SUCCEED(impl << " matches on " << describe(cs));
    }
  }
}

}  // namespace

TEST_CASE("gemm: CUDA kernels agree with the CPU for every transpose, beta and epilogue", "[cuda][kernels]") {
  require_gpu();
  const auto [m, n, k] =
      GENERATE(table<int64_t, int64_t, int64_t>({{1, 1, 1}, {17, 33, 65}, {128, 96, 257}, {401, 133, 513}}));
  // 401 x 133: 7 x 3 tiles of 64 on a GPU; on the emulator's small device (grids 3 high), 4 row tiles
  // of 128, so the row-tile grid stride makes a second trip. k = 513: 65 steps of 8 and a partial one.
  const bool trans_a = GENERATE(false, true);
  const bool trans_b = GENERATE(false, true);
  const double beta = GENERATE(0.0, 0.5);
  const int epilogue = GENERATE(0, 1, 2);  // none; bias + ReLU; bias + GELU-tanh
  Case cs;
  cs.m = m, cs.n = n, cs.k = k;
  cs.trans_a = trans_a, cs.trans_b = trans_b;
  cs.beta = beta;
  cs.bias = epilogue != 0;
  cs.activation = epilogue == 1 ? Activation::Relu : epilogue == 2 ? Activation::GeluTanh : Activation::None;
  check_case(cs, static_cast<uint32_t>(m * 7 + n * 13 + k));
}

// Enough 128x128 tiles (9 per product x 8 products = 72, at least half of an H200's 132 SMs) for
// gemm_f32 to pick its large tile, in both of its register budgets.
TEST_CASE("gemm: the 128x128 tile agrees with the CPU for every transpose, in both register budgets",
          "[cuda][kernels]") {
  require_gpu();
  const bool trans_a = GENERATE(false, true);
  const bool trans_b = GENERATE(false, true);
  Case cs;
  cs.m = 257, cs.n = 383, cs.k = 129;
  cs.trans_a = trans_a, cs.trans_b = trans_b;
  cs.batch = 8;
  cs.beta = 0.5, cs.bias = true, cs.activation = Activation::Relu;
  cs.one_block_per_sm = true;
  check_case(cs, 13);
}

TEST_CASE("gemm: batched products with a stride 0 operand agree with the CPU", "[cuda][kernels]") {
  require_gpu();
  const auto [m, n, k] = GENERATE(table<int64_t, int64_t, int64_t>({{33, 65, 17}, {130, 129, 70}}));
  const bool trans_a = GENERATE(false, true);
  const bool trans_b = GENERATE(false, true);
  const int shared = GENERATE(0, 1, 2);  // none; A shared; B shared
  Case cs;
  cs.m = m, cs.n = n, cs.k = k;
  cs.trans_a = trans_a, cs.trans_b = trans_b;
  cs.batch = 3;
  cs.share_a = shared == 1, cs.share_b = shared == 2;
  cs.beta = 0.5, cs.bias = true, cs.activation = Activation::Relu;
  check_case(cs, 11);
}

TEST_CASE("gemm: padded and misaligned operands agree with the CPU", "[cuda][kernels]") {
  require_gpu();
  // pad 3 makes every leading dimension odd and offset 1 misaligns every pointer: the scalar path.
  // pad 4 with offset 0 keeps 16-byte loads legal while ld != cols.
  const auto [pad, offset] = GENERATE(table<int64_t, int64_t>({{3, 1}, {4, 0}, {0, 2}}));
  const bool trans_a = GENERATE(false, true);
  const bool trans_b = GENERATE(false, true);
  const double beta = GENERATE(0.0, 1.0);
  Case cs;
  cs.m = 150, cs.n = 131, cs.k = 45;
  cs.trans_a = trans_a, cs.trans_b = trans_b;
  cs.alpha = 1.5, cs.beta = beta;
  cs.bias = true, cs.activation = Activation::GeluTanh;
  cs.batch = 2;
  cs.pad = pad, cs.offset = offset;
  check_case(cs, 23);
}

TEST_CASE("gemm: k equal to 0 gives beta C plus bias", "[cuda][kernels]") {
  require_gpu();
  const double beta = GENERATE(0.0, 0.5);
  Case cs;
  cs.m = 5, cs.n = 7, cs.k = 0;
  cs.beta = beta, cs.bias = true, cs.activation = Activation::Relu;
  check_case(cs, 31);
}

TEST_CASE("gemm: large batch walks the grid stride over batch entries", "[cuda][kernels]") {
  require_gpu();
  Case cs;
  cs.m = 3, cs.n = 5, cs.k = 4;
  // More entries than the device's grid is deep (65535 on a GPU, 3 on the emulator's small device).
  cs.batch = cuda::current_device_limits().max_grid[2] + 5;
  cs.share_b = true;
  cs.bias = true, cs.activation = Activation::Relu;
  check_case(cs, 41);
}

TEST_CASE("gemm: a dtype other than float32 is rejected", "[cuda][kernels]") {
  GemmArgs args;
  args.dtype = DType::f64;
  args.m = args.n = args.k = 1;
  CHECK_THROWS_WITH(cuda::gemm_f32(args, nullptr), Catch::Matchers::Contains("expected float32"));
}
