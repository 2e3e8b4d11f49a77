// kernels/cuda/elementwise.cu: fill, arange, strided copy/cast, unary and binary ops, random draws
// and dropout on the GPU.
//
// Budget (float32, per element):
//   fill, arange        write 4 B; no arithmetic worth counting
//   copy                read 4 B, write 4 B (other dtypes: their sizes); a cast is one instruction
//   unary               read 4 B, write 4 B; 1 FLOP (neg, relu, scalar ops) to ~20 (tanh, erf GELU)
//   unary_backward      read 8 B (saved, dy), write 4 B; 1-30 FLOPs
//   binary              read 8 B, write 4 B; 1 FLOP
//   random, dropout     write 4 B (dropout: read 4 B, write 8 B); one Philox block = 10 rounds of two
//                       32x32 multiplies, ~40 integer ops, plus log/cos for a normal
// All of these sit far below an H200's ~14 FLOP/byte balance point (67 TFLOP/s f32 / 4.8 TB/s),
// even Philox and the GELUs, so they are memory-bound: judge them in GB/s.
// Target  : at least 80% of DRAM bandwidth (H200: 4.8 TB/s) for dense arrays of >= 2^24 elements.
// Mapping : grid-stride loops of 256-thread blocks. Dense kernels move 16 bytes per thread per
//           iteration (float4 / double2 / 8 x bf16) when every pointer is 16-byte aligned, the tail
//           element by element. Strided kernels (copy of a view, broadcasting binary) index through
//           a collapsed layout (kernel_util.cuh): a dense operand costs one dimension, not ndim.
//
// The op of unary/binary is a runtime argument rather than a template parameter: it is the same
// for every thread, so the switch is a uniformly taken branch, and one kernel per dtype keeps the
// build small (13 unary ops x 3 dtypes x 2 directions x 2 widths would be 156 kernels).
#include "kernels/cuda/elementwise.h"

#include <math.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/philox.h"

namespace ringgrad {
namespace cuda {
namespace {

using namespace detail;

// ---- scalar math, one overload per arithmetic type (CUDA's float functions are the *f ones) ----------
__device__ inline float d_exp(float x) { return expf(x); }
__device__ inline double d_exp(double x) { return exp(x); }
__device__ inline float d_log(float x) { return logf(x); }
__device__ inline double d_log(double x) { return log(x); }
__device__ inline float d_sqrt(float x) { return sqrtf(x); }
__device__ inline double d_sqrt(double x) { return sqrt(x); }
__device__ inline float d_tanh(float x) { return tanhf(x); }
__device__ inline double d_tanh(double x) { return tanh(x); }
__device__ inline float d_erf(float x) { return erff(x); }
__device__ inline double d_erf(double x) { return erf(x); }
__device__ inline float d_pow(float x, float y) { return powf(x, y); }
__device__ inline double d_pow(double x, double y) { return pow(x, y); }

// The constants and formulas of kernels/cpu/activation.h, so both backends compute the same function.
constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;
constexpr double kInvSqrt2 = 0.70710678118654752440084436210485;
constexpr double kInvSqrt2Pi = 0.39894228040143267793994605993438;
constexpr double kGeluCubic = 0.044715;

template <typename A>
__device__ inline A gelu_tanh(A x) {
  const A u = A(kSqrt2OverPi) * (x + A(kGeluCubic) * x * x * x);
  return A(0.5) * x * (A(1) + d_tanh(u));
}
template <typename A>
__device__ inline A gelu_tanh_derivative(A x) {
  const A u = A(kSqrt2OverPi) * (x + A(kGeluCubic) * x * x * x);
  const A t = d_tanh(u);
  const A du_dx = A(kSqrt2OverPi) * (A(1) + A(3 * kGeluCubic) * x * x);
  return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * du_dx;
}
template <typename A>
__device__ inline A gelu_erf(A x) {
  return A(0.5) * x * (A(1) + d_erf(x * A(kInvSqrt2)));
}
template <typename A>
__device__ inline A gelu_erf_derivative(A x) {
  const A cdf = A(0.5) * (A(1) + d_erf(x * A(kInvSqrt2)));
  const A pdf = A(kInvSqrt2Pi) * d_exp(A(-0.5) * x * x);
  return cdf + x * pdf;
}

// y = f(x), as in kernels/cpu/unary.cpp.
template <typename A>
__device__ inline A unary_value(UnaryOp op, A x, A alpha) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return d_exp(x);
    case UnaryOp::Log: return d_log(x);
    case UnaryOp::Sqrt: return d_sqrt(x);
    case UnaryOp::Relu: return x > A(0) ? x : A(0);
    case UnaryOp::GeluTanh: return gelu_tanh(x);
    case UnaryOp::GeluErf: return gelu_erf(x);
    case UnaryOp::Tanh: return d_tanh(x);
    case UnaryOp::Sigmoid: return A(1) / (A(1) + d_exp(-x));
    case UnaryOp::AddScalar: return x + alpha;
    case UnaryOp::MulScalar: return x * alpha;
    case UnaryOp::RDivScalar: return alpha / x;
    case UnaryOp::PowScalar: return alpha == A(2) ? x * x : d_pow(x, alpha);
  }
  return x;
}

// dx = dy * f'(.), `s` being the saved x or y named in UnaryOp (unused by the ops that save none).
template <typename A>
__device__ inline A unary_derivative(UnaryOp op, A s, A g, A alpha) {
  switch (op) {
    case UnaryOp::Neg: return -g;
    case UnaryOp::Exp: return g * s;
    case UnaryOp::Log: return g / s;
    case UnaryOp::Sqrt: return g / (A(2) * s);
    case UnaryOp::Relu: return s > A(0) ? g : A(0);
    case UnaryOp::GeluTanh: return g * gelu_tanh_derivative(s);
    case UnaryOp::GeluErf: return g * gelu_erf_derivative(s);
    case UnaryOp::Tanh: return g * (A(1) - s * s);
    case UnaryOp::Sigmoid: return g * s * (A(1) - s);
    case UnaryOp::AddScalar: return g;
    case UnaryOp::MulScalar: return g * alpha;
    case UnaryOp::RDivScalar: return -g * alpha / (s * s);
    case UnaryOp::PowScalar:
      // x^0 is constant: derivative 0 everywhere, even at x = 0 where 0 * x^-1 would be NaN.
      if (alpha == A(0)) return A(0);
      if (alpha == A(2)) return A(2) * s * g;
      return g * alpha * d_pow(s, alpha - A(1));
  }
  return g;
}

bool saves_nothing(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::AddScalar || op == UnaryOp::MulScalar;
}

// ---- fill and arange -------------------------------------------------------------------------------
template <typename T>
__global__ void fill_kernel(T* __restrict__ dst, int64_t n, T value) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = value;
}

template <typename T>
__global__ void arange_kernel(T* __restrict__ dst, int64_t n, double start, double step) {
  // start + i*step, not a running sum, so rounding does not accumulate (as on the CPU).
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    dst[i] = convert<T>(start + static_cast<double>(i) * step);
}

// ---- copy ------------------------------------------------------------------------------------------
template <typename Src, typename Dst>
__global__ void copy_kernel(const Src* __restrict__ src, Dst* __restrict__ dst, int64_t n, Layout<2> layout) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[2];
    offsets_of(layout, i, off);
    dst[off[1]] = convert<Dst>(src[off[0]]);
  }
}

// ---- unary -----------------------------------------------------------------------------------------
// Dense y[i] = f(x[i]): kVec elements per load where the pointers allow, then the tail.
template <typename T, int kVec>
__global__ void unary_kernel(UnaryOp op, const T* __restrict__ x, T* __restrict__ y, int64_t n, acc_t<T> alpha) {
  using P = Pack<T, kVec>;
  const int64_t vectors = n / kVec;
  for (int64_t v = global_thread(); v < vectors; v += grid_threads()) {
    P p = reinterpret_cast<const P*>(x)[v];
#pragma unroll
    for (int k = 0; k < kVec; ++k) p.v[k] = store_value<T>(unary_value(op, load(&p.v[k]), alpha));
    reinterpret_cast<P*>(y)[v] = p;
  }
  for (int64_t i = vectors * kVec + global_thread(); i < n; i += grid_threads())
    y[i] = store_value<T>(unary_value(op, load(&x[i]), alpha));
}

template <typename T, int kVec>
__global__ void unary_backward_kernel(UnaryOp op, const T* __restrict__ saved, const T* __restrict__ dy,
                                      T* __restrict__ dx, int64_t n, acc_t<T> alpha) {
  using A = acc_t<T>;
  using P = Pack<T, kVec>;
  const int64_t vectors = n / kVec;
  for (int64_t v = global_thread(); v < vectors; v += grid_threads()) {
    P g = reinterpret_cast<const P*>(dy)[v];
    P s = g;  // the ops that save nothing never look at it
    if (saved != nullptr) s = reinterpret_cast<const P*>(saved)[v];
#pragma unroll
    for (int k = 0; k < kVec; ++k) g.v[k] = store_value<T>(unary_derivative(op, load(&s.v[k]), load(&g.v[k]), alpha));
    reinterpret_cast<P*>(dx)[v] = g;
  }
  for (int64_t i = vectors * kVec + global_thread(); i < n; i += grid_threads()) {
    const A s = saved != nullptr ? load(&saved[i]) : A(0);
    dx[i] = store_value<T>(unary_derivative(op, s, load(&dy[i]), alpha));
  }
}

// ---- binary ----------------------------------------------------------------------------------------
template <typename A>
__device__ inline A binary_value(BinaryOp op, A a, A b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
  }
  return a;
}

template <typename T, int kVec>
__global__ void binary_dense_kernel(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b,
                                    T* __restrict__ out, int64_t n) {
  using P = Pack<T, kVec>;
  const int64_t vectors = n / kVec;
  for (int64_t v = global_thread(); v < vectors; v += grid_threads()) {
    P pa = reinterpret_cast<const P*>(a)[v];
    const P pb = reinterpret_cast<const P*>(b)[v];
#pragma unroll
    for (int k = 0; k < kVec; ++k) pa.v[k] = store_value<T>(binary_value(op, load(&pa.v[k]), load(&pb.v[k])));
    reinterpret_cast<P*>(out)[v] = pa;
  }
  for (int64_t i = vectors * kVec + global_thread(); i < n; i += grid_threads())
    out[i] = store_value<T>(binary_value(op, load(&a[i]), load(&b[i])));
}

// out is dense, so the linear index is its offset; a and b are read through the layout's strides,
// a broadcast dimension having stride 0 (its value is re-read from L1/L2, not DRAM).
template <typename T>
__global__ void binary_strided_kernel(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b,
                                      T* __restrict__ out, int64_t n, Layout<3> layout) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[3];
    offsets_of(layout, i, off);
    out[i] = store_value<T>(binary_value(op, load(&a[off[0]]), load(&b[off[1]])));
  }
}

// ---- random and dropout ----------------------------------------------------------------------------
// Explicitly rounded multiply and add: nvcc would otherwise contract lo + width*u into one FMA and
// round differently from the CPU, which rounds the product and the sum separately.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float next_toward(float from, float to) { return nextafterf(from, to); }
__device__ inline double next_toward(double from, double to) { return nextafter(from, to); }

// Uniform draws: lo + width*u, moved below hi when rounding lands on it (the interval is half-open).
template <typename T>
__global__ void uniform_kernel(T* __restrict__ dst, int64_t n, uint64_t seed, uint64_t offset, T lo, T hi, T width) {
  const T below_hi = next_toward(hi, lo);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const T v = add_rn(lo, mul_rn(width, philox::uniform<T>(seed, offset + static_cast<uint64_t>(i))));
    dst[i] = v < hi ? v : below_hi;
  }
}

template <typename T>
__global__ void normal_kernel(T* __restrict__ dst, int64_t n, uint64_t seed, uint64_t offset, T mean, T std_dev) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    dst[i] = add_rn(mean, mul_rn(std_dev, philox::normal<T>(seed, offset + static_cast<uint64_t>(i))));
}

// mask[i] = (u_i >= p) / (1 - p), y = x * mask. The draw is philox::uniform of the arithmetic type
// (float for bf16), so for f32 and f64 the mask is bit-identical to the CPU's.
template <typename T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, T* __restrict__ mask, int64_t n,
                               acc_t<T> p, acc_t<T> scale, uint64_t seed, uint64_t offset) {
  using A = acc_t<T>;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const A keep = philox::uniform<A>(seed, offset + static_cast<uint64_t>(i)) >= p ? scale : A(0);
    mask[i] = store_value<T>(keep);
    y[i] = store_value<T>(mul_rn(load(&x[i]), keep));
  }
}

// Elements per 16-byte vector load: 4 floats, 2 doubles, 8 bfloat16s.
constexpr int vec_width(size_t element_bytes) { return static_cast<int>(16 / element_bytes); }

}  // namespace

void fill(DType dt, void* dst, int64_t n, double value, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_storage("fill", dt, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel("fill_kernel", fill_kernel<T>, blocks_for(n), kThreads, 0, stream, static_cast<T*>(dst), n,
                  convert<T>(value));
  });
}

void arange(DType dt, void* dst, int64_t n, double start, double step, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_storage("arange", dt, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel("arange_kernel", arange_kernel<T>, blocks_for(n), kThreads, 0, stream, static_cast<T*>(dst), n, start,
                  step);
  });
}

void copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, cudaStream_t stream) {
  RINGGRAD_CHECK(src.ndim == dst.ndim && std::equal(src.shape, src.shape + src.ndim, dst.shape),
                 "copy: expected source and destination of the same shape, got ",
                 std::vector<int64_t>(src.shape, src.shape + src.ndim), " and ",
                 std::vector<int64_t>(dst.shape, dst.shape + dst.ndim));
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src_dt == dst_dt && src.is_contiguous() && dst.is_contiguous()) {
    RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(n * dtype_size(src_dt)),
                                        cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const int64_t* const strides[2] = {src.strides, dst.strides};
  const Layout<2> layout = collapse<2>(src.ndim, src.shape, strides);
  dispatch_storage("copy", src_dt, [&](auto src_zero) {
    using Src = decltype(src_zero);
    dispatch_storage("copy", dst_dt, [&](auto dst_zero) {
      using Dst = decltype(dst_zero);
      launch_kernel("copy_kernel", copy_kernel<Src, Dst>, blocks_for(n), kThreads, 0, stream,
                    static_cast<const Src*>(src.data), static_cast<Dst*>(dst.data), n, layout);
    });
  });
}

void random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset, double a, double b,
            cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_floating<false>("random", dt, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(dst);
    if (kind == RandomKind::Uniform) {
      // The CPU rounds the width b - a once from double; so does this.
      launch_kernel("uniform_kernel", uniform_kernel<T>, blocks_for(n), kThreads, 0, stream, out, n, seed, offset,
                    static_cast<T>(a), static_cast<T>(b), static_cast<T>(b - a));
    } else {
      launch_kernel("normal_kernel", normal_kernel<T>, blocks_for(n), kThreads, 0, stream, out, n, seed, offset,
                    static_cast<T>(a), static_cast<T>(b));
    }
  });
}

void unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_floating<true>("unary", dt, [&](auto zero) {
    using T = decltype(zero);
    using A = acc_t<T>;
    constexpr int kVec = vec_width(sizeof(T));
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (aligned16(x) && aligned16(y)) {
      launch_kernel("unary_kernel", unary_kernel<T, kVec>, blocks_for(n / kVec + 1), kThreads, 0, stream, op, xs, ys, n,
                    static_cast<A>(alpha));
    } else {
      launch_kernel("unary_kernel", unary_kernel<T, 1>, blocks_for(n), kThreads, 0, stream, op, xs, ys, n,
                    static_cast<A>(alpha));
    }
  });
}

void unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n, double alpha,
                    cudaStream_t stream) {
  if (n <= 0) return;
  RINGGRAD_CHECK(saved != nullptr || saves_nothing(op), "unary_backward: op ", static_cast<int>(op),
                 " needs its saved input or output, got a null pointer");
  if (saves_nothing(op)) saved = nullptr;
  dispatch_floating<true>("unary_backward", dt, [&](auto zero) {
    using T = decltype(zero);
    using A = acc_t<T>;
    constexpr int kVec = vec_width(sizeof(T));
    const T* ss = static_cast<const T*>(saved);
    const T* gs = static_cast<const T*>(dy);
    T* dxs = static_cast<T*>(dx);
    if (aligned16(dy) && aligned16(dx) && (saved == nullptr || aligned16(saved))) {
      launch_kernel("unary_backward_kernel", unary_backward_kernel<T, kVec>, blocks_for(n / kVec + 1), kThreads, 0,
                    stream, op, ss, gs, dxs, n, static_cast<A>(alpha));
    } else {
      launch_kernel("unary_backward_kernel", unary_backward_kernel<T, 1>, blocks_for(n), kThreads, 0, stream, op, ss,
                    gs, dxs, n, static_cast<A>(alpha));
    }
  });
}

void binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, cudaStream_t stream) {
  RINGGRAD_CHECK(a.ndim == b.ndim && std::equal(a.shape, a.shape + a.ndim, b.shape),
                 "binary: expected both operands broadcast to the output's shape, got ",
                 std::vector<int64_t>(a.shape, a.shape + a.ndim), " and ",
                 std::vector<int64_t>(b.shape, b.shape + b.ndim));
  const int64_t n = a.numel();
  if (n == 0) return;
  dispatch_floating<true>("binary", dt, [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = vec_width(sizeof(T));
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    T* po = static_cast<T*>(out);
    if (a.is_contiguous() && b.is_contiguous()) {
      if (aligned16(pa) && aligned16(pb) && aligned16(po)) {
        launch_kernel("binary_dense_kernel", binary_dense_kernel<T, kVec>, blocks_for(n / kVec + 1), kThreads, 0,
                      stream, op, pa, pb, po, n);
      } else {
        launch_kernel("binary_dense_kernel", binary_dense_kernel<T, 1>, blocks_for(n), kThreads, 0, stream, op, pa, pb,
                      po, n);
      }
    } else {
      int64_t out_strides[kMaxDims];
      contiguous_strides(a.ndim, a.shape, out_strides);
      const int64_t* const strides[3] = {a.strides, b.strides, out_strides};
      const Layout<3> layout = collapse<3>(a.ndim, a.shape, strides);
      launch_kernel("binary_strided_kernel", binary_strided_kernel<T>, blocks_for(n), kThreads, 0, stream, op, pa, pb,
                    po, n, layout);
    }
  });
}

void dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream) {
  RINGGRAD_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected a probability p in [0, 1], got ", p);
  if (n <= 0) return;
  dispatch_floating<true>("dropout", dt, [&](auto zero) {
    using T = decltype(zero);
    using A = acc_t<T>;
    // p == 1 drops everything; 1/(1-p) would be infinite and 0*inf a NaN.
    const A scale = p < 1.0 ? static_cast<A>(1.0 / (1.0 - p)) : A(0);
    launch_kernel("dropout_kernel", dropout_kernel<T>, blocks_for(n), kThreads, 0, stream, static_cast<const T*>(x),
                  static_cast<T*>(y), static_cast<T*>(mask), n, static_cast<A>(p), scale, seed, offset);
  });
}

}  // namespace cuda
}  // namespace ringgrad
