// kernels/cpu/compare.cpp: the CPU's comparison kernels (kernels/compare.h).
//
// Memory-bound loops, one comparison or select per element. Strided inputs are walked with
// strided_loop.h's lockstep rows (broadcast operands have stride 0), split across threads by ranges
// of the output; every element is computed by the same expression whatever the split.
#include <algorithm>

#include <ringgrad/kernels/compare.h>
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_loop.h"
#include "kernels/cpu/thread_pool.h"

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

// Calls row(offsets, strides, n) over the lockstep rows of N strided arrays of `shape`, the last of
// them the dense output, split across threads.
template <size_t N, typename Row>
void walk(const StridedDesc& shape_of, const int64_t* const (&input_strides)[N - 1], Row&& row) {
  int64_t out_strides[kMaxDims];
  contiguous_strides(shape_of.ndim, shape_of.shape, out_strides);
  int64_t const* strides[N];
  for (size_t k = 0; k + 1 < N; ++k) strides[k] = input_strides[k];
  strides[N - 1] = out_strides;
  const LockstepLayout<N> layout = simplify_layout<N>(shape_of.ndim, shape_of.shape, strides);
  parallel_range(shape_of.numel(), kGrain,
                 [&](int64_t begin, int64_t end) { for_each_row_in(layout, begin, end, row); });
}

class CpuCompare final : public CompareKernels {
 public:
  void compare(CompareOp op, DType dt, const StridedDesc& a, const StridedDesc& b, uint8_t* out,
               Stream) const override {
    dispatch_storage("compare", dt, [&](auto zero) {
      using T = decltype(zero);
      const T* pa = static_cast<const T*>(a.data);
      const T* pb = static_cast<const T*>(b.data);
      walk<3>(a, {a.strides, b.strides}, [&](const int64_t* off, const int64_t* stride, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          out[off[2] + i] = compare_values(op, pa[off[0] + i * stride[0]], pb[off[1] + i * stride[1]]) ? 1 : 0;
      });
    });
  }

  void where(DType dt, const StridedDesc& cond, const StridedDesc& a, const StridedDesc& b, void* out,
             Stream) const override {
    dispatch_storage("where", dt, [&](auto zero) {
      using T = decltype(zero);
      const auto* pc = static_cast<const uint8_t*>(cond.data);
      const T* pa = static_cast<const T*>(a.data);
      const T* pb = static_cast<const T*>(b.data);
      T* po = static_cast<T*>(out);
      walk<4>(a, {cond.strides, a.strides, b.strides}, [&](const int64_t* off, const int64_t* stride, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          po[off[3] + i] = pc[off[0] + i * stride[0]] ? pa[off[1] + i * stride[1]] : pb[off[2] + i * stride[2]];
      });
    });
  }

  void triangle(DType dt, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
                bool upper, Stream) const override {
    dispatch_storage(upper ? "triu" : "tril", dt, [&](auto zero) {
      using T = decltype(zero);
      const T* px = static_cast<const T*>(x);
      T* py = static_cast<T*>(y);
      const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1));
      parallel_range(batch * rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t i = r % rows;
          const T* in = px + r * cols;
          T* o = py + r * cols;
          for (int64_t j = 0; j < cols; ++j) {
            const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
            o[j] = keep ? in[j] : T(0);
          }
        }
      });
    });
  }
};

}  // namespace

RINGGRAD_REGISTER_KERNELS(CompareKernels, DeviceKind::CPU, CpuCompare);

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
