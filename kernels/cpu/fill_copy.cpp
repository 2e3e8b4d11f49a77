// kernels/cpu/fill_copy.cpp: fill, arange, and the strided copy that also converts dtypes.
//
// All three are pure memory traffic (no arithmetic worth counting): fill writes n*size bytes, copy
// reads and writes numel*size bytes each. A dense same-dtype copy is one memcpy; a strided one
// walks rows (see strided_loop.h), and its speed depends on how scattered the reads are -- a
// transposed view reads one element per cache line when its rows are long.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_loop.h"

namespace ringgrad {
namespace kernels {

void CpuBackend::fill(DType dt, void* dst, int64_t n, double value, Stream) {
  cpu::dispatch_storage("fill", dt, [&](auto zero) {
    using T = decltype(zero);
    std::fill_n(static_cast<T*>(dst), n, static_cast<T>(value));
  });
}

void CpuBackend::arange(DType dt, void* dst, int64_t n, double start, double step, Stream) {
  cpu::dispatch_storage("arange", dt, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(dst);
    // start + i*step rather than a running sum, so rounding errors do not accumulate along the range.
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<double>(i) * step);
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

}  // namespace

void CpuBackend::copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, Stream) {
  RINGGRAD_CHECK(src.ndim == dst.ndim && std::equal(src.shape, src.shape + src.ndim, dst.shape),
                 "copy: expected source and destination of the same shape, got ",
                 std::vector<int64_t>(src.shape, src.shape + src.ndim), " and ",
                 std::vector<int64_t>(dst.shape, dst.shape + dst.ndim));
  if (src.numel() == 0) return;

  if (src_dt == dst_dt && src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.data, src.data, static_cast<size_t>(src.numel() * dtype_size(src_dt)));
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
      cpu::for_each_row(layout, [&](const int64_t* offset, const int64_t* stride, int64_t n) {
        copy_row(s + offset[0], stride[0], d + offset[1], stride[1], n);
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
