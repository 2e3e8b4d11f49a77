// kernels/cuda/indexing.cu: the CUDA indexing kernels (kernels/indexing.h) -- index_select, index_add,
// gather, scatter_add.
//
// Budget : index_select and gather read one element and one int64 index per element written (12 B
//          moved per 4-byte float, no FLOPs; index_select's indices are shared by a whole row and
//          stay in L1). index_add and scatter_add read one element and one index and do one add per
//          contribution, plus a read-modify-write per destination element. All four are
//          memory-bound: the target is 80% of DRAM bandwidth (H200: 4.8 TB/s) on large arrays.
// Mapping: one thread per output element for the copies, consecutive threads on consecutive `inner`
//          positions, so loads and stores of a warp are coalesced whenever inner >= 32. The adds give
//          each destination element (index_add) or destination column (scatter_add) to one thread,
//          which adds its contributions in the family's fixed order: no atomics, the same bits as
//          the CPU in float32 and float64, whatever the grid.
// Limitation: scatter_add runs outer*inner threads, each walking all n rows of its column, so an
//          indexed last dimension (inner == 1) with few rows gets little parallelism; index_add's
//          thread for a destination row that receives most of the positions (one token repeated)
//          does most of the work. Sorting contributions and reducing segments in parallel would fix
//          both; the GPT's embedding (byte vocabulary, rows receive tens of positions) does not need it.
#include <cstdint>

#include <ringgrad/kernels/indexing.h>
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/stride_loop.cuh"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

// [cuda_index_select_kernel]
// y[o, j, i] = x[o, index[j], i]; y is [outer, n, inner].
template <typename T>
__global__ void index_select_kernel(const T* __restrict__ x, const int64_t* __restrict__ index, T* __restrict__ y,
                                    int64_t outer, int64_t size, int64_t inner, int64_t n) {
  const int64_t total = outer * n * inner;
  for (int64_t k = global_thread(); k < total; RG_STEP(k, grid_threads())) {
    const int64_t row = k / inner, i = k - row * inner;
    const int64_t o = row / n, j = row - o * n;
    y[k] = x[(o * size + index[j]) * inner + i];
  }
}
// [/cuda_index_select_kernel]

// dst[o, r, i] += src[o, order[k], i] for k in [offsets[r], offsets[r + 1]), in that order.
template <typename T>
__global__ void index_add_kernel(const T* __restrict__ src, const int64_t* __restrict__ order,
                                 const int64_t* __restrict__ offsets, T* __restrict__ dst, int64_t outer, int64_t size,
                                 int64_t inner, int64_t n) {
  const int64_t total = outer * size * inner;
  for (int64_t e = global_thread(); e < total; RG_STEP(e, grid_threads())) {
    const int64_t row = e / inner, i = e - row * inner;
    const int64_t o = row / size, r = row - o * size;
    acc_t<T> acc = load(&dst[e]);
    for (int64_t k = offsets[r]; k < offsets[r + 1]; ++k) acc += load(&src[(o * n + order[k]) * inner + i]);
    dst[e] = store_value<T>(acc);
  }
}

// y[o, j, i] = x[o, index[o, j, i], i]; index and y are [outer, n, inner].
template <typename T>
__global__ void gather_kernel(const T* __restrict__ x, const int64_t* __restrict__ index, T* __restrict__ y,
                              int64_t outer, int64_t size, int64_t inner, int64_t n) {
  const int64_t total = outer * n * inner;
  for (int64_t k = global_thread(); k < total; RG_STEP(k, grid_threads())) {
    const int64_t o = k / (n * inner), i = k % inner;
    y[k] = x[(o * size + index[k]) * inner + i];
  }
}

// For each column (o, i): dst[o, index[o, j, i], i] += src[o, j, i] for j = 0 .. n-1 in order.
template <typename T>
__global__ void scatter_add_kernel(const T* __restrict__ src, const int64_t* __restrict__ index, T* __restrict__ dst,
                                   int64_t outer, int64_t size, int64_t inner, int64_t n) {
  const int64_t columns = outer * inner;
  for (int64_t c = global_thread(); c < columns; RG_STEP(c, grid_threads())) {
    const int64_t o = c / inner, i = c - o * inner;
    T* plane = dst + o * size * inner;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = (o * n + j) * inner + i;
      T* d = plane + index[at] * inner + i;
      *d = store_value<T>(load(d) + load(&src[at]));
    }
  }
}

// [cuda_index_select]
class CudaIndexing final : public IndexingKernels {
 public:
  void index_select(DType dt, const void* x, const IndexLayout& xl, const int64_t* index, int64_t n, void* y,
                    Stream s) const override {
    const int64_t total = xl.outer * n * xl.inner;
    if (total == 0) return;
    on_stream("index_select", s, [&](cudaStream_t st, int) {
      dispatch_storage("index_select", dt, [&](auto zero) {
        using T = decltype(zero);
        launch_kernel("index_select_kernel", index_select_kernel<T>, blocks_for(total), kThreads, 0, st,
                      static_cast<const T*>(x), index, static_cast<T*>(y), xl.outer, xl.size, xl.inner, n);
      });
    });
  }
  // [/cuda_index_select]

  void index_add(DType dt, const void* src, int64_t n, const int64_t* order, const int64_t* offsets, void* dst,
                 const IndexLayout& dl, Stream s) const override {
    const int64_t total = dl.outer * dl.size * dl.inner;
    if (total == 0 || n == 0) return;
    on_stream("index_add", s, [&](cudaStream_t st, int) {
      dispatch_floating<true>("index_add", dt, [&](auto zero) {
        using T = decltype(zero);
        launch_kernel("index_add_kernel", index_add_kernel<T>, blocks_for(total), kThreads, 0, st,
                      static_cast<const T*>(src), order, offsets, static_cast<T*>(dst), dl.outer, dl.size, dl.inner, n);
      });
    });
  }

  void gather(DType dt, const void* x, const IndexLayout& xl, const int64_t* index, int64_t n, void* y,
              Stream s) const override {
    const int64_t total = xl.outer * n * xl.inner;
    if (total == 0) return;
    on_stream("gather", s, [&](cudaStream_t st, int) {
      dispatch_storage("gather", dt, [&](auto zero) {
        using T = decltype(zero);
        launch_kernel("gather_kernel", gather_kernel<T>, blocks_for(total), kThreads, 0, st, static_cast<const T*>(x),
                      index, static_cast<T*>(y), xl.outer, xl.size, xl.inner, n);
      });
    });
  }

  void scatter_add(DType dt, const void* src, const int64_t* index, int64_t n, void* dst, const IndexLayout& dl,
                   Stream s) const override {
    const int64_t columns = dl.outer * dl.inner;
    if (columns == 0 || n == 0) return;
    on_stream("scatter_add", s, [&](cudaStream_t st, int) {
      dispatch_floating<true>("scatter_add", dt, [&](auto zero) {
        using T = decltype(zero);
        launch_kernel("scatter_add_kernel", scatter_add_kernel<T>, blocks_for(columns), kThreads, 0, st,
                      static_cast<const T*>(src), index, static_cast<T*>(dst), dl.outer, dl.size, dl.inner, n);
      });
    });
  }
};

}  // namespace

// [cuda_register]
RINGGRAD_REGISTER_KERNELS(IndexingKernels, DeviceKind::CUDA, CudaIndexing);
// [/cuda_register]

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
