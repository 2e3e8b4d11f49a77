// kernels/cpu/fill_copy.cpp: fill, arange, and the strided copy that also converts dtypes.
//
// All three are pure memory traffic (no arithmetic worth counting): fill writes n*size bytes, copy
// reads and writes numel*size bytes each. A dense same-dtype copy is one memcpy; a strided one
// walks rows (see strided_loop.h), and its speed depends on how scattered the reads are -- a
// transposed view reads one element per cache line when its rows are long. So a 2-d copy whose
// source runs with unit stride down its columns (a transposed matrix made contiguous) is copied in
// kBlock x kBlock blocks instead, through a buffer that keeps both sides unit-stride.
//
// Threads: fill, arange and the dense memcpy are cut into contiguous ranges (up to four a thread) from
// 2 * kGrain elements on (thread_pool.h); the strided walk takes ranges of the row-major order
// (strided_loop.h), the blocked transpose ranges of blocks. A copy computes nothing, so the split
// cannot change a result.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_loop.h"
#include "kernels/cpu/thread_pool.h"

namespace ringgrad {
namespace kernels {

void CpuBackend::fill(DType dt, void* dst, int64_t n, double value, Stream) {
  cpu::dispatch_storage("fill", dt, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(dst);
    const T v = static_cast<T>(value);
    cpu::parallel_range(n, cpu::kGrain, [&](int64_t begin, int64_t end) { std::fill(out + begin, out + end, v); });
  });
}

void CpuBackend::arange(DType dt, void* dst, int64_t n, double start, double step, Stream) {
  cpu::dispatch_storage("arange", dt, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(dst);
    // start + i*step rather than a running sum, so rounding errors do not accumulate along the range.
    cpu::parallel_range(n, cpu::kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = static_cast<T>(start + static_cast<double>(i) * step);
    });
  });
}

namespace {

// One row of the copy. The unit-stride case is split out so the compiler vectorises the conversion
// (a uint8 image row to float32, say); the general case serves gathers from views.
template <typename Src, typename Dst>
void copy_row(const Src* src, int64_t src_stride, Dst* dst, int64_t dst_stride, int64_t n) {
  if (src_stride == 1 && dst_stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * dst_stride] = static_cast<Dst>(src[i * src_stride]);
  }
}

// Blocks of the transposed copy: 128 x 128 elements (64 x 64 for 8-byte types), 64 KiB or 32 KiB.
// A block goes through a small buffer, so that both passes over memory are unit-stride: the source
// is read down its columns (its unit stride), the destination written along its rows. A direct
// element-by-element transpose was 3-6x slower here: with power-of-two strides (a [1024, n] matrix)
// all the lines of a block fall into one L1 set and evict each other; the buffer's rows are padded
// by one element for the same reason. At 16M float32 elements (64 MiB, fresh output pages) blocks
// of 128 ran at 3.5 GB/s, of 64 at 2.4 GB/s, of 32 at 2.2 GB/s, on one thread.
template <typename T>
constexpr int64_t block_side() {
  return sizeof(T) <= 4 ? 128 : 64;
}

// A 2-d [rows, cols] copy whose source has unit stride along rows (src_strides[0] == 1), blocks
// [begin, end) of the row-major block order.
template <typename Src, typename Dst>
void copy_blocks(const Src* src, const int64_t* src_strides, Dst* dst, const int64_t* dst_strides, int64_t rows,
                 int64_t cols, int64_t begin, int64_t end) {
  constexpr int64_t kBlock = block_side<Dst>(), kPitch = kBlock + 1;
  Dst buffer[static_cast<size_t>(kBlock * kPitch)];  // [column][row] of one block
  const int64_t block_cols = (cols + kBlock - 1) / kBlock;
  for (int64_t k = begin; k < end; ++k) {
    const int64_t i0 = k / block_cols * kBlock, j0 = k % block_cols * kBlock;
    const int64_t height = std::min(kBlock, rows - i0), width = std::min(kBlock, cols - j0);
    for (int64_t j = 0; j < width; ++j) {
      const Src* s = src + (j0 + j) * src_strides[1] + i0;
      for (int64_t i = 0; i < height; ++i) buffer[j * kPitch + i] = static_cast<Dst>(s[i]);
    }
    for (int64_t i = 0; i < height; ++i) {
      Dst* d = dst + (i0 + i) * dst_strides[0] + j0 * dst_strides[1];
      if (dst_strides[1] == 1) {
        for (int64_t j = 0; j < width; ++j) d[j] = buffer[j * kPitch + i];
      } else {
        for (int64_t j = 0; j < width; ++j) d[j * dst_strides[1]] = buffer[j * kPitch + i];
      }
    }
  }
}

}  // namespace

void CpuBackend::copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, Stream) {
  RINGGRAD_CHECK(src.ndim == dst.ndim && std::equal(src.shape, src.shape + src.ndim, dst.shape),
                 "copy: expected source and destination of the same shape, got ",
                 std::vector<int64_t>(src.shape, src.shape + src.ndim), " and ",
                 std::vector<int64_t>(dst.shape, dst.shape + dst.ndim));
  if (src.numel() == 0) return;

  if (src_dt == dst_dt && src.is_contiguous() && dst.is_contiguous()) {
    const int64_t size = dtype_size(src_dt);
    const char* s = static_cast<const char*>(src.data);
    char* d = static_cast<char*>(dst.data);
    cpu::parallel_range(src.numel(), cpu::kGrain, [&](int64_t begin, int64_t end) {
      std::memcpy(d + begin * size, s + begin * size, static_cast<size_t>((end - begin) * size));
    });
    return;
  }

  const int64_t* const strides[2] = {src.strides, dst.strides};
  const cpu::LockstepLayout<2> layout = cpu::simplify_layout<2>(src.ndim, src.shape, strides);
  cpu::dispatch_storage("copy", src_dt, [&](auto src_zero) {
    using Src = decltype(src_zero);
    cpu::dispatch_storage("copy", dst_dt, [&](auto dst_zero) {
      using Dst = decltype(dst_zero);
      const Src* s = static_cast<const Src*>(src.data);
      Dst* d = static_cast<Dst*>(dst.data);
      const int64_t n = cpu::element_count(layout);
      const bool transposed = layout.ndim == 2 && layout.strides[0][0] == 1 && layout.strides[0][1] != 1 &&
                              layout.shape[0] >= 8 && layout.shape[1] >= 8;  // narrower: rows do well enough
      if (transposed) {
        const int64_t rows = layout.shape[0], cols = layout.shape[1], side = block_side<Dst>();
        const int64_t blocks = ((rows + side - 1) / side) * ((cols + side - 1) / side);
        cpu::parallel_range(blocks, std::max<int64_t>(1, cpu::kGrain / (side * side)), [&](int64_t begin, int64_t end) {
          copy_blocks(s, layout.strides[0], d, layout.strides[1], rows, cols, begin, end);
        });
        return;
      }
      cpu::parallel_range(n, cpu::kGrain, [&](int64_t begin, int64_t end) {
        cpu::for_each_row_in(layout, begin, end, [&](const int64_t* offset, const int64_t* stride, int64_t len) {
          copy_row(s + offset[0], stride[0], d + offset[1], stride[1], len);
        });
      });
    });
  });
}

// Logical CPU devices share the host's memory, so a copy between them is one memcpy. core/ uses it
// for nothing yet (its strided copy covers cpu:i -> cpu:j); a GPU on either side is the CUDA
// backend's business.
void CpuBackend::copy_between(DeviceKind src_kind, int, const void* src, DeviceKind dst_kind, int, void* dst,
                              int64_t nbytes) {
  RINGGRAD_CHECK(src_kind == DeviceKind::CPU && dst_kind == DeviceKind::CPU,
                 "copy_between: the CPU backend copies between host buffers only; a copy to or from a GPU needs "
                 "the CUDA backend");
  RINGGRAD_CHECK(nbytes >= 0, "copy_between: expected a non-negative byte count, got ", nbytes);
  if (nbytes > 0) std::memcpy(dst, src, static_cast<size_t>(nbytes));
}

}  // namespace kernels
}  // namespace ringgrad
