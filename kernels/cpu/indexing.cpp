// kernels/cpu/indexing.cpp: the CPU's indexing kernels (kernels/indexing.h).
//
// All four are memory-bound: a copy of one element, or one add, per element moved. They split across
// threads by output rows or columns, never inside one output element's sum, so every element is
// summed in the order the family promises whatever the thread count.
#include <algorithm>
#include <cstring>

#include <ringgrad/kernels/indexing.h>
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/thread_pool.h"

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

// Rows of `inner` elements per part, so that a part moves about kGrain elements.
int64_t row_grain(int64_t inner) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)); }

// [cpu_index_select]
class CpuIndexing final : public IndexingKernels {
 public:
  void index_select(DType dt, const void* x, const IndexLayout& xl, const int64_t* index, int64_t n, void* y,
                    Stream) const override {
    dispatch_storage("index_select", dt, [&](auto zero) {
      using T = decltype(zero);
      const T* src = static_cast<const T*>(x);
      T* dst = static_cast<T*>(y);
      const size_t row_bytes = static_cast<size_t>(xl.inner) * sizeof(T);
      // One output row [o, j, :] is one contiguous input row [o, index[j], :].
      parallel_range(xl.outer * n, row_grain(xl.inner), [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t o = row / n, j = row - o * n;
          std::memcpy(dst + row * xl.inner, src + (o * xl.size + index[j]) * xl.inner, row_bytes);
        }
      });
    });
  }
  // [/cpu_index_select]

  void index_add(DType dt, const void* src, int64_t n, const int64_t* order, const int64_t* offsets, void* dst,
                 const IndexLayout& dl, Stream) const override {
    dispatch_floating("index_add", dt, [&](auto zero) {
      using T = decltype(zero);
      const T* s = static_cast<const T*>(src);
      T* d = static_cast<T*>(dst);
      // Each part owns whole destination rows [o, r, :] and adds their sources in CSR order.
      const int64_t per_row = std::max<int64_t>(1, n / std::max<int64_t>(dl.size, 1));
      parallel_range(dl.outer * dl.size, std::max<int64_t>(1, row_grain(dl.inner) / per_row),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t row = begin; row < end; ++row) {
                         const int64_t o = row / dl.size, r = row - o * dl.size;
                         T* out = d + row * dl.inner;
                         for (int64_t k = offsets[r]; k < offsets[r + 1]; ++k) {
                           const T* in = s + (o * n + order[k]) * dl.inner;
                           for (int64_t i = 0; i < dl.inner; ++i) out[i] += in[i];
                         }
                       }
                     });
    });
  }

  void gather(DType dt, const void* x, const IndexLayout& xl, const int64_t* index, int64_t n, void* y,
              Stream) const override {
    dispatch_storage("gather", dt, [&](auto zero) {
      using T = decltype(zero);
      const T* src = static_cast<const T*>(x);
      T* dst = static_cast<T*>(y);
      parallel_range(xl.outer * n, row_grain(xl.inner), [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t o = row / n;
          const int64_t* idx = index + row * xl.inner;
          const T* plane = src + o * xl.size * xl.inner;
          T* out = dst + row * xl.inner;
          for (int64_t i = 0; i < xl.inner; ++i) out[i] = plane[idx[i] * xl.inner + i];
        }
      });
    });
  }

  void scatter_add(DType dt, const void* src, const int64_t* index, int64_t n, void* dst, const IndexLayout& dl,
                   Stream) const override {
    dispatch_floating("scatter_add", dt, [&](auto zero) {
      using T = decltype(zero);
      const T* s = static_cast<const T*>(src);
      T* d = static_cast<T*>(dst);
      // Column (o, i) of dst only ever receives from column (o, i) of src, so a part owns a range of
      // columns and walks j in order for each: the promised order, and no two parts touch one element.
      const int64_t columns = dl.outer * dl.inner;
      parallel_range(columns, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
        for (int64_t o = begin / dl.inner; o * dl.inner < end; ++o) {
          const int64_t i0 = std::max(begin, o * dl.inner) - o * dl.inner;
          const int64_t i1 = std::min(end, (o + 1) * dl.inner) - o * dl.inner;
          T* plane = d + o * dl.size * dl.inner;
          for (int64_t j = 0; j < n; ++j) {
            const int64_t* idx = index + (o * n + j) * dl.inner;
            const T* in = s + (o * n + j) * dl.inner;
            for (int64_t i = i0; i < i1; ++i) plane[idx[i] * dl.inner + i] += in[i];
          }
        }
      });
    });
  }
};

}  // namespace

// [cpu_register]
RINGGRAD_REGISTER_KERNELS(IndexingKernels, DeviceKind::CPU, CpuIndexing);
// [/cpu_register]

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
