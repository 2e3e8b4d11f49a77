// kernels/cpu/binary.cpp: out = a op b for add, sub, mul, div, with NumPy-style broadcasting.
//
// Broadcasting costs nothing here: core/ passes a broadcast operand with stride 0 on the expanded
// dimensions, so "add a bias row to every row" reads the same bias over and over from cache.
// Budget: 1 FLOP per 12 bytes (two float reads, one write) -- memory-bound, judge it in GB/s.
//
// Three paths, fastest first: both operands dense (one flat loop), one operand a single value
// (a flat loop against a register), and the general strided walk, whose inner row loop is again
// specialised for the unit-stride and stride-0 cases. A 1-element op takes the first path and
// costs a few nanoseconds.
//
// Threads: from 2 * kGrain elements on (thread_pool.h, where the grain's measurement is), the
// output is cut into contiguous ranges (up to four a thread); the strided walk takes a range of the
// row-major order too, starting mid-row if need be (strided_loop.h). Every element is computed by
// the same expression whatever the split, so results do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_loop.h"
#include "kernels/cpu/thread_pool.h"

namespace ringgrad {
namespace kernels {
namespace {

struct AddOp {
  template <typename T>
  T operator()(T x, T y) const {
    return x + y;
  }
};
struct SubOp {
  template <typename T>
  T operator()(T x, T y) const {
    return x - y;
  }
};
struct MulOp {
  template <typename T>
  T operator()(T x, T y) const {
    return x * y;
  }
};
struct DivOp {
  template <typename T>
  T operator()(T x, T y) const {
    return x / y;
  }
};

bool is_single_value(const StridedDesc& d) {
  for (int i = 0; i < d.ndim; ++i)
    if (d.shape[i] != 1 && d.strides[i] != 0) return false;
  return true;
}

// One innermost row: out[i] = a[i*sa] op b[i*sb]. Each stride pattern gets its own loop so the
// compiler sees unit or zero strides as constants and vectorises.
template <typename T, typename Op>
void binary_row(Op op, const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) out[i] = op(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i * sa], b[i * sb]);
  }
}

template <typename T, typename Op>
void binary_typed(Op op, const StridedDesc& a, const StridedDesc& b, T* out) {
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  const int64_t n = a.numel();
  if (n == 0) return;

  // Fast paths: a flat loop over n elements, with stride 1 or 0 on each input.
  const bool a_dense = a.is_contiguous(), b_dense = b.is_contiguous();
  if (a_dense && b_dense) {
    return cpu::parallel_range(n, cpu::kGrain, [&](int64_t begin, int64_t end) {
      binary_row(op, pa + begin, 1, pb + begin, 1, out + begin, end - begin);
    });
  }
  if (a_dense && is_single_value(b)) {
    return cpu::parallel_range(n, cpu::kGrain, [&](int64_t begin, int64_t end) {
      binary_row(op, pa + begin, 1, pb, 0, out + begin, end - begin);
    });
  }
  if (is_single_value(a) && b_dense) {
    return cpu::parallel_range(n, cpu::kGrain, [&](int64_t begin, int64_t end) {
      binary_row(op, pa, 0, pb + begin, 1, out + begin, end - begin);
    });
  }

  int64_t out_strides[kMaxDims];
  cpu::contiguous_strides(a.ndim, a.shape, out_strides);
  const int64_t* const strides[3] = {a.strides, b.strides, out_strides};
  const cpu::LockstepLayout<3> layout = cpu::simplify_layout<3>(a.ndim, a.shape, strides);
  cpu::parallel_range(n, cpu::kGrain, [&](int64_t begin, int64_t end) {
    cpu::for_each_row_in(layout, begin, end, [&](const int64_t* offset, const int64_t* stride, int64_t len) {
      // The output is dense and walked in order, so its inner stride is always 1.
      binary_row(op, pa + offset[0], stride[0], pb + offset[1], stride[1], out + offset[2], len);
    });
  });
}

}  // namespace

void CpuBackend::binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, Stream) {
  RINGGRAD_CHECK(a.ndim == b.ndim && std::equal(a.shape, a.shape + a.ndim, b.shape),
                 "binary: expected both operands broadcast to the output's shape, got ",
                 std::vector<int64_t>(a.shape, a.shape + a.ndim), " and ",
                 std::vector<int64_t>(b.shape, b.shape + b.ndim));
  cpu::dispatch_floating("binary", dt, [&](auto zero) {
    using T = decltype(zero);
    T* o = static_cast<T*>(out);
    switch (op) {
      case BinaryOp::Add: return binary_typed<T>(AddOp{}, a, b, o);
      case BinaryOp::Sub: return binary_typed<T>(SubOp{}, a, b, o);
      case BinaryOp::Mul: return binary_typed<T>(MulOp{}, a, b, o);
      case BinaryOp::Div: return binary_typed<T>(DivOp{}, a, b, o);
    }
  });
}

}  // namespace kernels
}  // namespace ringgrad
