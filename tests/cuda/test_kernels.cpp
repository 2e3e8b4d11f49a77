// tests/cuda/test_kernels.cpp: every non-GEMM CUDA launcher agrees with the CPU backend.
//
// Same seeded inputs go to the CPU backend (host buffers) and to the CUDA launcher (device buffers);
// each GPU output is poisoned with NaN (all bits set) before the launch, so an element the kernel
// forgets to write fails the comparison. Tolerances are stated per test: 0 where both sides do the
// same IEEE operations (copies, binary ops, dropout masks, max), a few ulp where CUDA's math library
// or FMA contraction differ from libm and GCC, more where sums are ordered differently.
//
// Label `cuda`: these tests FAIL without a GPU (a skipped GPU test reads as a passed one).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <ringgrad/core/base/fp16.h>
#include <ringgrad/kernels/backend.h>
#include "core/base/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/probe.h"
#include "cuda_test_util.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/softmax.h"

using namespace ringgrad;
using namespace ringgrad::kernels;
using ringgrad::test::require_gpu;

namespace {

Backend& cpu() { return backend_for(DeviceKind::CPU); }

// Device memory freed on every path out of a test.
class DeviceArray {
 public:
  explicit DeviceArray(size_t bytes) : bytes_(bytes) { RINGGRAD_CUDA_CHECK(cudaMalloc(&ptr_, bytes ? bytes : 1)); }
  template <typename T>
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size() * sizeof(T)) {
    RINGGRAD_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  // All bits set: NaN in f32, f64, bf16 and f16, -1 in int64.
  void poison() { RINGGRAD_CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes_)); }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    RINGGRAD_CUDA_CHECK(cudaDeviceSynchronize());  // also surfaces a fault of the kernel under test
    RINGGRAD_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
std::vector<T> seeded(size_t n, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T& e : v) {
    double d = dist(rng);
    if (std::fabs(d) < 1e-2) d += 0.05;  // keep away from relu's kink and from dividing by ~0
    e = static_cast<T>(d);
  }
  return v;
}

// Every element within atol + rtol*|expected|; NaN must meet NaN. On failure names the first bad one.
template <typename T>
void check_close(const std::vector<T>& gpu, const std::vector<T>& expected, double atol, double rtol,
                 const std::string& what) {
  REQUIRE(gpu.size() == expected.size());
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double g = static_cast<double>(gpu[i]), e = static_cast<double>(expected[i]);
    const bool ok = (std::isnan(e) && std::isnan(g)) || (g == e) || std::fabs(g - e) <= atol + rtol * std::fabs(e);
    if (!ok && wrong++ == 0) first = i;
  }
  INFO(what << ": " << wrong << " of " << gpu.size() << " wrong; first at " << first << ": GPU "
            << (gpu.empty() ? 0.0 : static_cast<double>(gpu[first])) << ", CPU "
            << (expected.empty() ? 0.0 : static_cast<double>(expected[first])));
  CHECK(wrong == 0);
}

StridedDesc desc(void* data, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  StridedDesc d;
  d.data = data;
  d.ndim = static_cast<int>(shape.size());
  for (int i = 0; i < d.ndim; ++i) {
    d.shape[i] = shape[static_cast<size_t>(i)];
    d.strides[i] = strides[static_cast<size_t>(i)];
  }
  return d;
}

StridedDesc dense(void* data, std::vector<int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return desc(data, shape, strides);
}

// Tolerance of a transcendental computed by CUDA's math library versus libm, as relative error.
template <typename T>
double ulps(double k) {
  return k * std::numeric_limits<T>::epsilon();
}

}  // namespace

TEST_CASE("cuda kernels: fill and arange agree with the CPU", "[cuda][kernels]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000, 4099);  // 4099: past a small device's grid
  std::vector<float> f(static_cast<size_t>(n));
  std::vector<int64_t> l(static_cast<size_t>(n));
  DeviceArray df(f.size() * 4), dl(l.size() * 8);

  cpu().fill(DType::f32, f.data(), n, 2.5, nullptr);
  df.poison();
  cuda::fill(DType::f32, df.get(), n, 2.5, nullptr);
  check_close(df.download<float>(), f, 0, 0, "fill f32");

  cpu().arange(DType::i64, l.data(), n, -3, 2, nullptr);
  dl.poison();
  cuda::arange(DType::i64, dl.get(), n, -3, 2, nullptr);
  check_close(dl.download<int64_t>(), l, 0, 0, "arange i64");

  cpu().arange(DType::f32, f.data(), n, 0.25, 0.1, nullptr);
  df.poison();
  cuda::arange(DType::f32, df.get(), n, 0.25, 0.1, nullptr);
  check_close(df.download<float>(), f, 0, 0, "arange f32");
}

TEST_CASE("cuda kernels: strided copy and dtype casts agree with the CPU", "[cuda][kernels]") {
  require_gpu();
  const int64_t rows = GENERATE(1, 7, 33, 129), cols = 13;
  const std::vector<float> x = seeded<float>(static_cast<size_t>(rows * cols), 3);
  DeviceArray dx(x);

  // Transposed view [cols, rows] of a dense [rows, cols] array, gathered into dense f32 and f64.
  const StridedDesc src_cpu = desc(const_cast<float*>(x.data()), {cols, rows}, {1, cols});
  const StridedDesc src_gpu = desc(dx.get(), {cols, rows}, {1, cols});
  std::vector<float> y(x.size());
  std::vector<double> y64(x.size());
  DeviceArray dy(y.size() * 4), dy64(y64.size() * 8);
  cpu().copy(DType::f32, src_cpu, DType::f32, dense(y.data(), {cols, rows}), nullptr);
  dy.poison();
  cuda::copy(DType::f32, src_gpu, DType::f32, dense(dy.get(), {cols, rows}), nullptr);
  check_close(dy.download<float>(), y, 0, 0, "transpose f32");
  cpu().copy(DType::f32, src_cpu, DType::f64, dense(y64.data(), {cols, rows}), nullptr);
  dy64.poison();
  cuda::copy(DType::f32, src_gpu, DType::f64, dense(dy64.get(), {cols, rows}), nullptr);
  check_close(dy64.download<double>(), y64, 0, 0, "transpose f32 -> f64");

  // Scatter a dense block into every other column of a larger array (the backward of a slice).
  std::vector<float> big(static_cast<size_t>(rows * 2 * cols), 0.0f);
  DeviceArray dbig(big);
  cpu().copy(DType::f32, dense(const_cast<float*>(x.data()), {rows, cols}), DType::f32,
             desc(big.data(), {rows, cols}, {2 * cols, 2}), nullptr);
  cuda::copy(DType::f32, dense(dx.get(), {rows, cols}), DType::f32, desc(dbig.get(), {rows, cols}, {2 * cols, 2}),
             nullptr);
  check_close(dbig.download<float>(), big, 0, 0, "scatter into a strided view");

  // uint8 -> float32 (images).
  std::vector<uint8_t> u(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(i * 37);
  DeviceArray du(u);
  cpu().copy(DType::u8, dense(u.data(), {rows * cols}), DType::f32, dense(y.data(), {rows * cols}), nullptr);
  dy.poison();
  cuda::copy(DType::u8, dense(du.get(), {rows * cols}), DType::f32, dense(dy.get(), {rows * cols}), nullptr);
  check_close(dy.download<float>(), y, 0, 0, "u8 -> f32");

  // f32 -> bf16 -> f32 keeps 8 significant bits (7 stored): rounding to nearest moves a value by at
  // most half an ulp, 2^-8 relative to the power of two below it, so relative error up to 2^-8.
  DeviceArray db(x.size() * 2), dback(x.size() * 4);
  db.poison();
  dback.poison();
  cuda::copy(DType::f32, dense(dx.get(), {rows * cols}), DType::bf16, dense(db.get(), {rows * cols}), nullptr);
  cuda::copy(DType::bf16, dense(db.get(), {rows * cols}), DType::f32, dense(dback.get(), {rows * cols}), nullptr);
  check_close(dback.download<float>(), x, 0, 1.0 / 256, "f32 -> bf16 -> f32");

  // f32 -> f16 -> f32: each value rounded once, to nearest even, bit for bit as the host's
  // float_to_fp16 (core/base/fp16.h, written apart from CUDA's) rounds it, and widened exactly.
  DeviceArray dh(x.size() * 2), dhback(x.size() * 4);
  dh.poison();
  dhback.poison();
  cuda::copy(DType::f32, dense(dx.get(), {rows * cols}), DType::f16, dense(dh.get(), {rows * cols}), nullptr);
  cuda::copy(DType::f16, dense(dh.get(), {rows * cols}), DType::f32, dense(dhback.get(), {rows * cols}), nullptr);
  const std::vector<uint16_t> bits = dh.download<uint16_t>();
  std::vector<uint16_t> want_bits(x.size());
  std::vector<float> widened(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want_bits[i] = float_to_fp16(x[i]);
    widened[i] = fp16_to_float(want_bits[i]);
  }
  CHECK(bits == want_bits);
  check_close(dhback.download<float>(), widened, 0, 0, "f32 -> f16 -> f32");
  check_close(dhback.download<float>(), x, 0, 1.0 / 2048, "f32 -> f16 -> f32, against the input");
}

TEST_CASE("cuda kernels: float16 conversions round as the host does, at the range's edges too", "[cuda][kernels]") {
  require_gpu();
  // Every float16 bit pattern widens exactly (a NaN to a NaN).
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  for (size_t i = 0; i < all.size(); ++i) wide[i] = fp16_to_float(all[i]);
  DeviceArray dall(all), dwide(all.size() * 4);
  dwide.poison();
  cuda::copy(DType::f16, dense(dall.get(), {65536}), DType::f32, dense(dwide.get(), {65536}), nullptr);
  check_close(dwide.download<float>(), wide, 0, 0, "every f16 -> f32");

  // float32 at the edges: overflow from 65520, the subnormals and their ties, ties between normals.
  const float m24 = std::ldexp(1.0f, -24), m25 = std::ldexp(1.0f, -25);
  const std::vector<float> edges = {65504.0f,
                                    std::nextafter(65520.0f, 0.0f),
                                    65520.0f,
                                    1e10f,
                                    -65520.0f,
                                    INFINITY,
                                    -INFINITY,
                                    0.0f,
                                    -0.0f,
                                    m24,
                                    m25,
                                    std::nextafter(m25, 1.0f),
                                    3 * m25,
                                    1023 * m24,
                                    1024 * m24 - m25,
                                    1.0f + std::ldexp(1.0f, -11),
                                    1.0f + 3 * std::ldexp(1.0f, -11),
                                    1e-30f,
                                    2049.0f,
                                    -1.5f,
                                    NAN};
  const int64_t n = static_cast<int64_t>(edges.size());
  DeviceArray dedges(edges), dh(edges.size() * 2);
  dh.poison();
  cuda::copy(DType::f32, dense(dedges.get(), {n}), DType::f16, dense(dh.get(), {n}), nullptr);
  const std::vector<uint16_t> got = dh.download<uint16_t>();
  for (size_t i = 0; i < edges.size(); ++i) {
    INFO("f32 " << edges[i] << " -> f16 bits " << std::hex << got[i] << ", host " << float_to_fp16(edges[i]));
    if (std::isnan(edges[i]))
      CHECK(((got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff) != 0));  // a NaN (CUDA's is 0x7fff)
    else
      CHECK(got[i] == float_to_fp16(edges[i]));
  }

  // float64 straight to float16 is one rounding, not two: 1 + 2^-11 + 2^-40 is above the tie that
  // float32 would round it to, so it goes up; 2^-25 + 2^-60 is past half the smallest subnormal.
  const std::vector<double> doubles = {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                                       std::ldexp(1.0, -25) + std::ldexp(1.0, -60),
                                       65519.99999,
                                       65520.0,
                                       std::ldexp(1.0, -25),
                                       -1e300};
  const std::vector<uint16_t> want = {0x3c01, 0x0001, 0x7bff, 0x7c00, 0x0000, 0xfc00};
  DeviceArray dd(doubles), dh64(doubles.size() * 2);
  dh64.poison();
  cuda::copy(DType::f64, dense(dd.get(), {static_cast<int64_t>(doubles.size())}), DType::f16,
             dense(dh64.get(), {static_cast<int64_t>(doubles.size())}), nullptr);
  CHECK(dh64.download<uint16_t>() == want);
}

TEST_CASE("cuda kernels: unary ops and their backward agree with the CPU", "[cuda][kernels]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000);
  const int misalign = GENERATE(0, 1);  // 1 shifts every pointer by one element: the scalar path
  const UnaryOp ops[] = {UnaryOp::Neg,      UnaryOp::Exp,       UnaryOp::Log,       UnaryOp::Sqrt,
                         UnaryOp::Relu,     UnaryOp::GeluTanh,  UnaryOp::GeluErf,   UnaryOp::Tanh,
                         UnaryOp::Sigmoid,  UnaryOp::AddScalar, UnaryOp::MulScalar, UnaryOp::RDivScalar,
                         UnaryOp::PowScalar};
  const size_t total = static_cast<size_t>(n + misalign);
  for (const UnaryOp op : ops) {
    const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::PowScalar;
    const std::vector<float> x = seeded<float>(total, 11, positive ? 0.1 : -2.0, 2.0);
    const std::vector<float> g = seeded<float>(total, 12);
    for (const double alpha : {2.0, 1.5}) {
      std::vector<float> y(total), dx(total);
      cpu().unary(op, DType::f32, x.data() + misalign, y.data() + misalign, n, alpha, nullptr);
      DeviceArray dxs(x), dgs(g), dys(total * 4), ddx(total * 4);
      dys.poison();
      cuda::unary(op, DType::f32, dxs.as<float>() + misalign, dys.as<float>() + misalign, n, alpha, nullptr);
      std::vector<float> gy = dys.download<float>();
      // Compare only the n written elements (the misaligned head is poison on both sides).
      std::vector<float> gy_n(gy.begin() + misalign, gy.end()), y_n(y.begin() + misalign, y.end());
      const std::string name = "unary op " + std::to_string(static_cast<int>(op)) + " alpha " + std::to_string(alpha);
      check_close(gy_n, y_n, 1e-6, ulps<float>(8), name);

      // The backward reads x or y as UnaryOp documents; the CPU's y serves both sides.
      const bool saves_y = op == UnaryOp::Exp || op == UnaryOp::Sqrt || op == UnaryOp::Relu || op == UnaryOp::Tanh ||
                           op == UnaryOp::Sigmoid;
      const std::vector<float>& saved = saves_y ? y : x;
      DeviceArray dsaved(saved);
      cpu().unary_backward(op, DType::f32, saved.data() + misalign, g.data() + misalign, dx.data() + misalign, n, alpha,
                           nullptr);
      ddx.poison();
      cuda::unary_backward(op, DType::f32, dsaved.as<float>() + misalign, dgs.as<float>() + misalign,
                           ddx.as<float>() + misalign, n, alpha, nullptr);
      std::vector<float> gdx = ddx.download<float>();
      check_close(std::vector<float>(gdx.begin() + misalign, gdx.end()),
                  std::vector<float>(dx.begin() + misalign, dx.end()), 1e-6, ulps<float>(16), name + " backward");
    }
  }
}

TEST_CASE("cuda kernels: unary in float64, bfloat16 and float16 agree with the CPU", "[cuda][kernels]") {
  require_gpu();
  const int64_t n = GENERATE(7, 1000);
  const std::vector<double> x = seeded<double>(static_cast<size_t>(n), 21);
  std::vector<double> y(x.size());
  DeviceArray dx(x), dy(x.size() * 8);
  for (const UnaryOp op : {UnaryOp::GeluTanh, UnaryOp::GeluErf, UnaryOp::Tanh, UnaryOp::Sigmoid}) {
    cpu().unary(op, DType::f64, x.data(), y.data(), n, 0.0, nullptr);
    dy.poison();
    cuda::unary(op, DType::f64, dx.get(), dy.get(), n, 0.0, nullptr);
    check_close(dy.download<double>(), y, 1e-15, ulps<double>(8),
                "f64 unary op " + std::to_string(static_cast<int>(op)));
  }
  // bf16 and f16: round x to the 16-bit type on the GPU, apply tanh in it, widen; against the CPU's
  // f32 tanh of the same rounded x, within the rounding of the result (2^-8 relative for bf16's 8
  // significant bits, 2^-11 for f16's 11) plus a little.
  for (const auto& [dt, rtol] : {std::pair{DType::bf16, 1.0 / 256}, std::pair{DType::f16, 1.0 / 2048}}) {
    const std::vector<float> xf = seeded<float>(static_cast<size_t>(n), 22);
    DeviceArray dxf(xf), dxb(xf.size() * 2), dyb(xf.size() * 2), dxr(xf.size() * 4), dyf(xf.size() * 4);
    const StridedDesc flat_f = dense(dxf.get(), {n}), flat_b = dense(dxb.get(), {n});
    cuda::copy(DType::f32, flat_f, dt, flat_b, nullptr);
    cuda::copy(dt, flat_b, DType::f32, dense(dxr.get(), {n}), nullptr);
    dyb.poison();
    cuda::unary(UnaryOp::Tanh, dt, dxb.get(), dyb.get(), n, 0.0, nullptr);
    cuda::copy(dt, dense(dyb.get(), {n}), DType::f32, dense(dyf.get(), {n}), nullptr);
    std::vector<float> xr = dxr.download<float>(), expected(xr.size());
    cpu().unary(UnaryOp::Tanh, DType::f32, xr.data(), expected.data(), n, 0.0, nullptr);
    check_close(dyf.download<float>(), expected, 1e-6, rtol, detail::str(dt, " tanh"));
  }
}

// SiLU is a functor of kernels/unary_ops.h like the others: this checks that one table entry gives
// the CUDA kernel, in every dtype and on both the vectorised and the scalar path.
TEST_CASE("cuda kernels: silu and its backward agree with the CPU at odd sizes in f32, f64, bf16 and f16",
          "[cuda][kernels]") {
  require_gpu();
  const int64_t n = GENERATE(1, 3, 37, 1001);
  const int misalign = GENERATE(0, 1);  // 1 shifts every pointer by one element: the scalar path
  const size_t total = static_cast<size_t>(n + misalign);
  const auto tail = [misalign](auto v) {  // the n written elements: the misaligned head is poison on the GPU
    v.erase(v.begin(), v.begin() + misalign);
    return v;
  };

  // f32 and f64: the backward reads x (UnaryOp::Silu saves the input).
  const std::vector<float> x = seeded<float>(total, 51, -6.0, 6.0), g = seeded<float>(total, 52);
  std::vector<float> y(total), dx(total);
  cpu().unary(UnaryOp::Silu, DType::f32, x.data() + misalign, y.data() + misalign, n, 0.0, nullptr);
  cpu().unary_backward(UnaryOp::Silu, DType::f32, x.data() + misalign, g.data() + misalign, dx.data() + misalign, n,
                       0.0, nullptr);
  DeviceArray dxs(x), dgs(g), dys(total * 4), ddx(total * 4);
  dys.poison();
  ddx.poison();
  cuda::unary(UnaryOp::Silu, DType::f32, dxs.as<float>() + misalign, dys.as<float>() + misalign, n, 0.0, nullptr);
  cuda::unary_backward(UnaryOp::Silu, DType::f32, dxs.as<float>() + misalign, dgs.as<float>() + misalign,
                       ddx.as<float>() + misalign, n, 0.0, nullptr);
  check_close(tail(dys.download<float>()), tail(y), 1e-6, ulps<float>(8), "f32 silu");
  check_close(tail(ddx.download<float>()), tail(dx), 1e-6, ulps<float>(16), "f32 silu backward");

  const std::vector<double> xd = seeded<double>(total, 53, -6.0, 6.0), gd = seeded<double>(total, 54);
  std::vector<double> yd(total), dxd(total);
  cpu().unary(UnaryOp::Silu, DType::f64, xd.data() + misalign, yd.data() + misalign, n, 0.0, nullptr);
  cpu().unary_backward(UnaryOp::Silu, DType::f64, xd.data() + misalign, gd.data() + misalign, dxd.data() + misalign, n,
                       0.0, nullptr);
  DeviceArray dxds(xd), dgds(gd), dyds(total * 8), ddxd(total * 8);
  dyds.poison();
  ddxd.poison();
  cuda::unary(UnaryOp::Silu, DType::f64, dxds.as<double>() + misalign, dyds.as<double>() + misalign, n, 0.0, nullptr);
  cuda::unary_backward(UnaryOp::Silu, DType::f64, dxds.as<double>() + misalign, dgds.as<double>() + misalign,
                       ddxd.as<double>() + misalign, n, 0.0, nullptr);
  check_close(tail(dyds.download<double>()), tail(yd), 1e-15, ulps<double>(8), "f64 silu");
  check_close(tail(ddxd.download<double>()), tail(dxd), 1e-15, ulps<double>(16), "f64 silu backward");

  // bf16 and f16: x rounded to the 16-bit type on the GPU, silu computed in float and rounded back,
  // widened; against the CPU's f32 silu of the same rounded x, within the rounding of the result
  // (2^-8 relative for bf16, 2^-11 for f16).
  for (const auto& [dt, rtol] : {std::pair{DType::bf16, 1.0 / 256}, std::pair{DType::f16, 1.0 / 2048}}) {
    DeviceArray dxb(total * 2), dyb(total * 2), dxr(total * 4), dyf(total * 4);
    cuda::copy(DType::f32, dense(dxs.get(), {static_cast<int64_t>(total)}), dt,
               dense(dxb.get(), {static_cast<int64_t>(total)}), nullptr);
    cuda::copy(dt, dense(dxb.get(), {static_cast<int64_t>(total)}), DType::f32,
               dense(dxr.get(), {static_cast<int64_t>(total)}), nullptr);
    dyb.poison();
    cuda::unary(UnaryOp::Silu, dt, dxb.as<uint16_t>() + misalign, dyb.as<uint16_t>() + misalign, n, 0.0, nullptr);
    cuda::copy(dt, dense(dyb.as<uint16_t>() + misalign, {n}), DType::f32, dense(dyf.as<float>() + misalign, {n}),
               nullptr);
    std::vector<float> xr = dxr.download<float>(), expected(total);
    cpu().unary(UnaryOp::Silu, DType::f32, xr.data() + misalign, expected.data() + misalign, n, 0.0, nullptr);
    check_close(tail(dyf.download<float>()), tail(expected), 1e-6, rtol, detail::str(dt, " silu"));
  }
}

TEST_CASE("cuda kernels: binary ops with broadcasting agree with the CPU bitwise", "[cuda][kernels]") {
  require_gpu();
  const int64_t rows = GENERATE(1, 7, 33, 129, 1000), cols = 19;
  const std::vector<float> a = seeded<float>(static_cast<size_t>(rows * cols), 31);
  const std::vector<float> b = seeded<float>(static_cast<size_t>(rows * cols), 32);
  DeviceArray da(a), db(b), dout(a.size() * 4);
  std::vector<float> out(a.size());
  float* pa = const_cast<float*>(a.data());
  float* pb = const_cast<float*>(b.data());

  struct Layout {
    const char* name;
    std::vector<int64_t> a_strides, b_strides;
  };
  // Every layout reads within the first rows*cols elements of a and b.
  const Layout layouts[] = {
      {"dense", {cols, 1}, {cols, 1}},
      {"row bias (b broadcast over rows)", {cols, 1}, {0, 1}},
      {"column scale (b broadcast over columns)", {cols, 1}, {1, 0}},
      {"one value", {0, 0}, {cols, 1}},
      {"a transposed", {1, rows}, {cols, 1}},
  };
  for (const Layout& l : layouts) {
    for (const BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div}) {
      cpu().binary(op, DType::f32, desc(pa, {rows, cols}, l.a_strides), desc(pb, {rows, cols}, l.b_strides), out.data(),
                   nullptr);
      dout.poison();
      cuda::binary(op, DType::f32, desc(da.get(), {rows, cols}, l.a_strides), desc(db.get(), {rows, cols}, l.b_strides),
                   dout.get(), nullptr);
      check_close(dout.download<float>(), out, 0, 0,
                  std::string(l.name) + " op " + std::to_string(static_cast<int>(op)));
    }
  }
}

TEST_CASE("cuda kernels: random draws and dropout masks equal the CPU's", "[cuda][kernels]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000);
  const uint64_t seed = 0x1234567890abcdefull, offset = 977;
  std::vector<float> u(static_cast<size_t>(n));
  std::vector<double> u64(static_cast<size_t>(n));
  DeviceArray du(u.size() * 4), du64(u64.size() * 8);

  // Uniform: the same Philox bits; the CPU may fuse lo + width*u into one FMA, so allow an ulp.
  cpu().random(RandomKind::Uniform, DType::f32, u.data(), n, seed, offset, -1.0, 3.0, nullptr);
  du.poison();
  cuda::random(RandomKind::Uniform, DType::f32, du.get(), n, seed, offset, -1.0, 3.0, nullptr);
  check_close(du.download<float>(), u, 1e-7, ulps<float>(1), "uniform f32");
  cpu().random(RandomKind::Uniform, DType::f64, u64.data(), n, seed, offset, 0.0, 1.0, nullptr);
  du64.poison();
  cuda::random(RandomKind::Uniform, DType::f64, du64.get(), n, seed, offset, 0.0, 1.0, nullptr);
  check_close(du64.download<double>(), u64, 0, 0, "uniform f64 on [0, 1)");
  // Normal: logf/cosf of CUDA against libm.
  cpu().random(RandomKind::Normal, DType::f32, u.data(), n, seed, offset, 0.5, 2.0, nullptr);
  du.poison();
  cuda::random(RandomKind::Normal, DType::f32, du.get(), n, seed, offset, 0.5, 2.0, nullptr);
  check_close(du.download<float>(), u, 1e-5, ulps<float>(16), "normal f32");

  // Dropout: mask and output bitwise equal (a compare and one multiply on both sides).
  for (const double p : {0.0, 0.3, 1.0}) {
    const std::vector<float> x = seeded<float>(static_cast<size_t>(n), 41);
    std::vector<float> y(x.size()), mask(x.size());
    DeviceArray dx(x), dy(x.size() * 4), dmask(x.size() * 4);
    cpu().dropout(DType::f32, x.data(), y.data(), mask.data(), n, p, seed, offset, nullptr);
    dy.poison();
    dmask.poison();
    cuda::dropout(DType::f32, dx.get(), dy.get(), dmask.get(), n, p, seed, offset, nullptr);
    check_close(dmask.download<float>(), mask, 0, 0, "dropout mask p=" + std::to_string(p));
    check_close(dy.download<float>(), y, 0, 0, "dropout output p=" + std::to_string(p));

    const std::vector<double> x64 = seeded<double>(static_cast<size_t>(n), 42);
    std::vector<double> y64(x64.size()), mask64(x64.size());
    DeviceArray dx64(x64), dy64(x64.size() * 8), dmask64(x64.size() * 8);
    cpu().dropout(DType::f64, x64.data(), y64.data(), mask64.data(), n, p, seed, offset, nullptr);
    dmask64.poison();
    dy64.poison();
    cuda::dropout(DType::f64, dx64.get(), dy64.get(), dmask64.get(), n, p, seed, offset, nullptr);
    check_close(dmask64.download<double>(), mask64, 0, 0, "dropout mask f64 p=" + std::to_string(p));
    check_close(dy64.download<double>(), y64, 0, 0, "dropout output f64 p=" + std::to_string(p));
  }
}

TEST_CASE("cuda kernels: sum and max over a dimension agree with the CPU", "[cuda][kernels]") {
  require_gpu();
  const int64_t r = GENERATE(1, 7, 33, 129, 1000);
  const int64_t outer = GENERATE(1, 5);
  const int64_t inner = GENERATE(1, 3, 40);
  std::vector<float> x = seeded<float>(static_cast<size_t>(outer * r * inner), 51);
  // Ties (the first must win) and a NaN (it must propagate, with its index).
  if (r > 3) x[static_cast<size_t>(2 * inner)] = x[static_cast<size_t>(3 * inner)] = 5.0f;
  if (r > 100) x[static_cast<size_t>(77 * inner)] = std::numeric_limits<float>::quiet_NaN();
  DeviceArray dx(x), dy(static_cast<size_t>(outer * inner) * 4), di(static_cast<size_t>(outer * inner) * 8);
  std::vector<float> y(static_cast<size_t>(outer * inner));
  std::vector<int64_t> idx(y.size());

  cpu().reduce(ReduceOp::Sum, DType::f32, x.data(), y.data(), nullptr, outer, r, inner, nullptr);
  dy.poison();
  cuda::reduce(ReduceOp::Sum, DType::f32, dx.get(), dy.as<float>(), nullptr, outer, r, inner, nullptr);
  // The GPU accumulates in double and rounds once; the CPU adds in float lanes within fixed chunks,
  // within u|s| + 22u sum|x| of the exact sum s (kernels/cpu/sum_lanes.h). So the two may differ by
  // the CPU's bound plus one rounding of the GPU's, for each output's own sum|x|.
  {
    const std::vector<float> gpu = dy.download<float>();
    const double u = std::ldexp(1.0, -24);
    int64_t wrong = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        double magnitude = 0;
        bool nan = false;
        for (int64_t k = 0; k < r; ++k) {
          const float v = x[static_cast<size_t>((o * r + k) * inner + i)];
          nan = nan || std::isnan(v);
          magnitude += std::fabs(static_cast<double>(v));
        }
        const auto at = static_cast<size_t>(o * inner + i);
        const double g = gpu[at], c = y[at];
        const bool ok = nan ? std::isnan(g) && std::isnan(c)
                            : std::fabs(g - c) <= 2 * u * std::fabs(c) + 22 * u * magnitude + 1e-30;
        if (!ok && wrong++ == 0) UNSCOPED_INFO("sum at " << at << ": GPU " << g << ", CPU " << c);
      }
    }
    CHECK(wrong == 0);
  }

  cpu().reduce(ReduceOp::Max, DType::f32, x.data(), y.data(), idx.data(), outer, r, inner, nullptr);
  dy.poison();
  di.poison();
  cuda::reduce(ReduceOp::Max, DType::f32, dx.get(), dy.as<float>(), di.as<int64_t>(), outer, r, inner, nullptr);
  check_close(dy.download<float>(), y, 0, 0, "max");
  check_close(di.download<int64_t>(), idx, 0, 0, "argmax");

  // scatter_add_dim: the backward of max, adding into a non-zero dst.
  const std::vector<float> src = seeded<float>(y.size(), 52);
  std::vector<float> dst = seeded<float>(x.size(), 53);
  DeviceArray dsrc(src), ddst(dst);
  cpu().scatter_add_dim(DType::f32, src.data(), idx.data(), dst.data(), outer, r, inner, nullptr);
  cuda::scatter_add_dim(DType::f32, dsrc.get(), di.as<int64_t>(), ddst.get(), outer, r, inner, nullptr);
  check_close(ddst.download<float>(), dst, 0, 0, "scatter_add_dim");
}

TEST_CASE("cuda kernels: softmax and log_softmax agree with the CPU", "[cuda][kernels]") {
  require_gpu();
  const int64_t c = GENERATE(1, 7, 33, 129, 1000);
  const int64_t inner = GENERATE(1, 6);
  const int64_t outer = 3;
  const size_t total = static_cast<size_t>(outer * c * inner);
  const std::vector<float> x = seeded<float>(total, 61, -8.0, 8.0);
  const std::vector<float> dy = seeded<float>(total, 62);
  DeviceArray dx(x), ddy(dy), dyv(total * 4), ddx(total * 4);
  for (const bool log : {false, true}) {
    const std::string name = log ? "log_softmax" : "softmax";
    std::vector<float> y(total), dxv(total);
    cpu().softmax(DType::f32, x.data(), y.data(), outer, c, inner, log, nullptr);
    dyv.poison();
    cuda::softmax(DType::f32, dx.get(), dyv.get(), outer, c, inner, log, nullptr);
    check_close(dyv.download<float>(), y, 1e-6, ulps<float>(8), name);

    // Backward from the CPU's y on both sides, so only the backward is compared.
    DeviceArray dycpu(y);
    cpu().softmax_backward(DType::f32, y.data(), dy.data(), dxv.data(), outer, c, inner, log, nullptr);
    ddx.poison();
    cuda::softmax_backward(DType::f32, dycpu.get(), ddy.get(), ddx.get(), outer, c, inner, log, nullptr);
    check_close(ddx.download<float>(), dxv, 1e-6, ulps<float>(16), name + " backward");
  }
}

TEST_CASE("cuda kernels: fused cross-entropy agrees with the CPU", "[cuda][kernels]") {
  require_gpu();
  const int64_t rows = GENERATE(1, 7, 33, 129), c = GENERATE(1, 10, 1000);
  const double eps = GENERATE(0.0, 0.1);
  const std::vector<float> logits = seeded<float>(static_cast<size_t>(rows * c), 71, -6.0, 6.0);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) labels[static_cast<size_t>(r)] = (r * 7 + 3) % c;
  DeviceArray dlogits(logits), dlabels(labels), dloss(labels.size() * 4), dprobs(logits.size() * 4);
  std::vector<float> loss(labels.size()), probs(logits.size());

  cpu().cross_entropy_forward(DType::f32, logits.data(), labels.data(), loss.data(), probs.data(), rows, c, eps,
                              nullptr);
  dloss.poison();
  dprobs.poison();
  cuda::cross_entropy_forward(DType::f32, dlogits.get(), dlabels.as<int64_t>(), dloss.get(), dprobs.get(), rows, c, eps,
                              nullptr);
  check_close(dprobs.download<float>(), probs, 1e-7, ulps<float>(8), "probs");
  check_close(dloss.download<float>(), loss, 1e-6, ulps<float>(8), "loss");

  // dloss_stride 0 (a mean loss: one upstream gradient for all rows, scale 1/rows) and 1 (per-row).
  const std::vector<float> upstream = seeded<float>(labels.size(), 72);
  DeviceArray dup(upstream), dgrad(logits.size() * 4), dprobs_cpu(probs);
  for (const int64_t stride : {int64_t{0}, int64_t{1}}) {
    const double scale = stride == 0 ? 1.0 / static_cast<double>(rows) : 1.0;
    std::vector<float> grad(logits.size());
    cpu().cross_entropy_backward(DType::f32, probs.data(), labels.data(), upstream.data(), stride, scale, grad.data(),
                                 rows, c, eps, nullptr);
    dgrad.poison();
    cuda::cross_entropy_backward(DType::f32, dprobs_cpu.get(), dlabels.as<int64_t>(), dup.get(), stride, scale,
                                 dgrad.get(), rows, c, eps, nullptr);
    check_close(dgrad.download<float>(), grad, 1e-7, ulps<float>(4), "dlogits, dloss_stride " + std::to_string(stride));
  }
}

TEST_CASE("cuda kernels: fused SGD and Adam steps agree with the CPU", "[cuda][kernels]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000);
  const std::vector<float> p0 = seeded<float>(static_cast<size_t>(n), 81);
  const std::vector<float> g = seeded<float>(static_cast<size_t>(n), 82);
  const std::vector<float> buf0 = seeded<float>(static_cast<size_t>(n), 83);
  const std::vector<float> v0 = seeded<float>(static_cast<size_t>(n), 84, 0.01, 1.0);  // exp_avg_sq >= 0
  DeviceArray dg(g);

  SgdStepArgs sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  sgd.dampening = 0.1;
  sgd.weight_decay = 1e-2;
  for (const bool nesterov : {false, true}) {
    for (const bool first : {false, true}) {
      sgd.nesterov = nesterov;
      sgd.dampening = nesterov ? 0.0 : 0.1;
      sgd.first_step = first;
      std::vector<float> p = p0, buf = buf0;
      DeviceArray dp(p0), dbuf(buf0);
      cpu().sgd_step(DType::f32, p.data(), g.data(), buf.data(), n, sgd, nullptr);
      cuda::sgd_step(DType::f32, dp.get(), dg.get(), dbuf.get(), n, sgd, nullptr);
      check_close(dp.download<float>(), p, 1e-7, ulps<float>(4), "sgd param");
      check_close(dbuf.download<float>(), buf, 1e-7, ulps<float>(4), "sgd momentum buffer");
    }
  }
  SgdStepArgs plain;
  plain.lr = 0.1;
  std::vector<float> p = p0;
  DeviceArray dp(p0);
  cpu().sgd_step(DType::f32, p.data(), g.data(), nullptr, n, plain, nullptr);
  cuda::sgd_step(DType::f32, dp.get(), dg.get(), nullptr, n, plain, nullptr);
  check_close(dp.download<float>(), p, 1e-7, ulps<float>(2), "sgd without momentum");

  for (const bool decoupled : {false, true}) {
    AdamStepArgs adam;
    adam.lr = 1e-3;
    adam.weight_decay = 0.01;
    adam.decoupled_weight_decay = decoupled;
    adam.step = 3;
    std::vector<float> pa = p0, m = buf0, v = v0;
    DeviceArray dpa(p0), dm(buf0), dv(v0);
    cpu().adam_step(DType::f32, pa.data(), g.data(), m.data(), v.data(), n, adam, nullptr);
    cuda::adam_step(DType::f32, dpa.get(), dg.get(), dm.get(), dv.get(), n, adam, nullptr);
    const std::string name = decoupled ? "adamw" : "adam";
    check_close(dpa.download<float>(), pa, 1e-7, ulps<float>(8), name + " param");
    check_close(dm.download<float>(), m, 1e-7, ulps<float>(4), name + " exp_avg");
    check_close(dv.download<float>(), v, 1e-7, ulps<float>(4), name + " exp_avg_sq");
  }
}

TEST_CASE("cuda kernels: multi-tensor steps equal one launch per tensor", "[cuda][kernels]") {
  require_gpu();
  // 30 tensors (more than one table holds), one of several chunks, sizes odd and even.
  std::vector<int64_t> sizes;
  for (int k = 0; k < 30; ++k) sizes.push_back(k == 5 ? 300001 : 1 + k * 97);
  AdamStepArgs adam;
  adam.lr = 1e-2;
  adam.weight_decay = 0.1;
  adam.decoupled_weight_decay = true;
  adam.step = 2;
  SgdStepArgs sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;

  struct Arrays {
    std::unique_ptr<DeviceArray> p, g, m, v;
  };
  auto make = [&](uint32_t seed) {
    std::vector<Arrays> out;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t n = static_cast<size_t>(sizes[k]);
      Arrays a;
      a.p = std::make_unique<DeviceArray>(seeded<float>(n, seed + static_cast<uint32_t>(k)));
      a.g = std::make_unique<DeviceArray>(seeded<float>(n, seed + 100 + static_cast<uint32_t>(k)));
      a.m = std::make_unique<DeviceArray>(seeded<float>(n, seed + 200 + static_cast<uint32_t>(k)));
      a.v = std::make_unique<DeviceArray>(seeded<float>(n, seed + 300 + static_cast<uint32_t>(k), 0.01, 1.0));
      out.push_back(std::move(a));
    }
    return out;
  };
  std::vector<Arrays> single = make(1000), multi = make(1000);

  std::vector<cuda::AdamTensor> adam_list;
  std::vector<cuda::SgdTensor> sgd_list;
  for (size_t k = 0; k < sizes.size(); ++k) {
    cuda::adam_step(DType::f32, single[k].p->get(), single[k].g->get(), single[k].m->get(), single[k].v->get(),
                    sizes[k], adam, nullptr);
    cuda::sgd_step(DType::f32, single[k].p->get(), single[k].g->get(), single[k].m->get(), sizes[k], sgd, nullptr);
    adam_list.push_back({multi[k].p->get(), multi[k].g->get(), multi[k].m->get(), multi[k].v->get(), sizes[k]});
    sgd_list.push_back({multi[k].p->get(), multi[k].g->get(), multi[k].m->get(), sizes[k]});
  }
  cuda::adam_step_multi(DType::f32, adam_list.data(), static_cast<int>(adam_list.size()), adam, nullptr);
  cuda::sgd_step_multi(DType::f32, sgd_list.data(), static_cast<int>(sgd_list.size()), sgd, nullptr);
  for (size_t k = 0; k < sizes.size(); ++k) {
    // The same per-element device code on both paths: bitwise equal.
    check_close(multi[k].p->download<float>(), single[k].p->download<float>(), 0, 0,
                "param of tensor " + std::to_string(k));
    check_close(multi[k].v->download<float>(), single[k].v->download<float>(), 0, 0,
                "exp_avg_sq of tensor " + std::to_string(k));
  }
}

TEST_CASE("cuda kernels: unsupported dtypes are rejected with the kernel's name", "[cuda][kernels]") {
  // Host-side checks: these throw before any launch, so they need no GPU.
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(cuda::random(RandomKind::Uniform, DType::bf16, nullptr, 4, 1, 0, 0.0, 1.0, nullptr),
                    Contains("random") && Contains("bfloat16"));
  CHECK_THROWS_WITH(cuda::random(RandomKind::Uniform, DType::f16, nullptr, 4, 1, 0, 0.0, 1.0, nullptr),
                    Contains("random: the CUDA backend supports float32, float64 here, got float16"));
  CHECK_THROWS_WITH(cuda::unary(UnaryOp::Neg, DType::i64, nullptr, nullptr, 4, 0.0, nullptr),
                    Contains("supports float32, float64, bfloat16 and float16 here, got int64"));
  CHECK_THROWS_WITH(cuda::unary(UnaryOp::Neg, DType::i64, nullptr, nullptr, 4, 0.0, nullptr),
                    Contains("unary") && Contains("int64"));
  CHECK_THROWS_WITH(cuda::dropout(DType::f32, nullptr, nullptr, nullptr, 4, 1.5, 1, 0, nullptr),
                    Contains("dropout: expected a probability p in [0, 1], got 1.5"));
}
