// kernels/cuda/cuda_backend.cpp: CudaBackend -- every Backend function as "make the stream's device
// current, call the launcher, name the device if it throws". The kernels themselves, with their
// FLOP and byte budgets, are in unary.cu, binary.cu, copy.cu, random.cu, reduce.cu, gemm.cu, softmax.cu
// and optim.cu.
//
// Plain C++ (no kernels here), so it is compiled by the host compiler, not nvcc.
#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ringgrad/core/base/error.h>
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/softmax.h"

namespace ringgrad {
namespace kernels {
namespace cuda {

GemmImpl parse_gemm_impl(const char* value) {
  if (value == nullptr || *value == '\0' || std::strcmp(value, "native") == 0) return GemmImpl::Native;
  if (std::strcmp(value, "cublas") == 0) return GemmImpl::Cublas;
  throw Error(detail::str("RINGGRAD_GEMM: expected 'native' (ringgrad's GEMM kernel, the default) or 'cublas', got '",
                          value, "'"));
}

GemmImpl gemm_impl() {
  static const GemmImpl impl = parse_gemm_impl(std::getenv("RINGGRAD_GEMM"));
  return impl;
}

namespace {

// One cuBLAS handle per (thread, device): a handle carries its stream, so two threads sharing one
// would race on cublasSetStream. Handles are never destroyed -- a thread_local destructor can run
// after the CUDA runtime has shut down at exit -- which costs a few KB per thread that used cuBLAS.
cublasHandle_t cublas_handle(int device) {
  thread_local std::vector<cublasHandle_t> handles;
  if (static_cast<int>(handles.size()) <= device) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  if (handles[static_cast<size_t>(device)] == nullptr) {
    cublasHandle_t h = nullptr;
    const cublasStatus_t status = cublasCreate(&h);  // on the current device: the caller's guard set it
    RINGGRAD_CHECK(status == CUBLAS_STATUS_SUCCESS, "gemm: cublasCreate failed on cuda:", device, ": ",
                   cublasGetStatusString(status));
    handles[static_cast<size_t>(device)] = h;
  }
  return handles[static_cast<size_t>(device)];
}

}  // namespace
}  // namespace cuda

using cuda::on_stream;

Stream CudaBackend::stream_for(int device_index) { return static_cast<Stream>(cuda::stream_for(device_index)); }

void CudaBackend::fill(DType dt, void* dst, int64_t n, double value, Stream s) {
  on_stream("fill", s, [&](cudaStream_t st, int) { cuda::fill(dt, dst, n, value, st); });
}

void CudaBackend::arange(DType dt, void* dst, int64_t n, double start, double step, Stream s) {
  on_stream("arange", s, [&](cudaStream_t st, int) { cuda::arange(dt, dst, n, start, step, st); });
}

void CudaBackend::copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, Stream s) {
  on_stream("copy", s, [&](cudaStream_t st, int) { cuda::copy(src_dt, src, dst_dt, dst, st); });
}

void CudaBackend::copy_between(DeviceKind src_kind, int src_index, const void* src, DeviceKind dst_kind, int dst_index,
                               void* dst, int64_t nbytes) {
  cuda::copy_between(src_kind, src_index, src, dst_kind, dst_index, dst, nbytes);
}

void CudaBackend::random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset, double a,
                         double b, Stream s) {
  on_stream("random", s, [&](cudaStream_t st, int) { cuda::random(kind, dt, dst, n, seed, offset, a, b, st); });
}

void CudaBackend::unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, Stream s) {
  on_stream("unary", s, [&](cudaStream_t st, int) { cuda::unary(op, dt, x, y, n, alpha, st); });
}

void CudaBackend::unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n,
                                 double alpha, Stream s) {
  on_stream("unary_backward", s,
            [&](cudaStream_t st, int) { cuda::unary_backward(op, dt, saved, dy, dx, n, alpha, st); });
}

void CudaBackend::binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, Stream s) {
  on_stream("binary", s, [&](cudaStream_t st, int) { cuda::binary(op, dt, a, b, out, st); });
}

void CudaBackend::reduce(ReduceOp op, DType dt, const void* x, void* y, int64_t* indices, int64_t outer, int64_t r,
                         int64_t inner, Stream s) {
  on_stream("reduce", s, [&](cudaStream_t st, int) { cuda::reduce(op, dt, x, y, indices, outer, r, inner, st); });
}

void CudaBackend::scatter_add_dim(DType dt, const void* src, const int64_t* index, void* dst, int64_t outer, int64_t r,
                                  int64_t inner, Stream s) {
  on_stream("scatter_add_dim", s,
            [&](cudaStream_t st, int) { cuda::scatter_add_dim(dt, src, index, dst, outer, r, inner, st); });
}

void CudaBackend::gemm(const GemmArgs& args, Stream s) {
  on_stream("gemm", s, [&](cudaStream_t st, int device) {
    RINGGRAD_CHECK(args.dtype == DType::f32, "gemm: the CUDA backend multiplies float32 only, got ", args.dtype,
                   " on cuda:", device, "; convert with .to(DType::f32), or run float64 on the CPU");
    if (cuda::gemm_impl() == cuda::GemmImpl::Cublas) {
      cuda::gemm_cublas_f32(args, st, cuda::cublas_handle(device));
    } else {
      cuda::gemm_f32(args, st);
    }
  });
}

void CudaBackend::softmax(DType dt, const void* x, void* y, int64_t outer, int64_t c, int64_t inner, bool log,
                          Stream s) {
  on_stream("softmax", s, [&](cudaStream_t st, int) { cuda::softmax(dt, x, y, outer, c, inner, log, st); });
}

void CudaBackend::softmax_backward(DType dt, const void* y, const void* dy, void* dx, int64_t outer, int64_t c,
                                   int64_t inner, bool log, Stream s) {
  on_stream("softmax_backward", s,
            [&](cudaStream_t st, int) { cuda::softmax_backward(dt, y, dy, dx, outer, c, inner, log, st); });
}

void CudaBackend::cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* loss, void* probs,
                                        int64_t rows, int64_t c, double label_smoothing, Stream s) {
  on_stream("cross_entropy", s, [&](cudaStream_t st, int) {
    cuda::cross_entropy_forward(dt, logits, labels, loss, probs, rows, c, label_smoothing, st);
  });
}

void CudaBackend::cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* dloss,
                                         int64_t dloss_stride, double scale, void* dlogits, int64_t rows, int64_t c,
                                         double label_smoothing, Stream s) {
  on_stream("cross_entropy_backward", s, [&](cudaStream_t st, int) {
    cuda::cross_entropy_backward(dt, probs, labels, dloss, dloss_stride, scale, dlogits, rows, c, label_smoothing, st);
  });
}

void CudaBackend::dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed,
                          uint64_t offset, Stream s) {
  on_stream("dropout", s, [&](cudaStream_t st, int) { cuda::dropout(dt, x, y, mask, n, p, seed, offset, st); });
}

void CudaBackend::sgd_step(DType dt, void* param, const void* grad, void* momentum_buffer, int64_t n,
                           const SgdStepArgs& args, Stream s) {
  on_stream("sgd_step", s,
            [&](cudaStream_t st, int) { cuda::sgd_step(dt, param, grad, momentum_buffer, n, args, st); });
}

void CudaBackend::adam_step(DType dt, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                            const AdamStepArgs& args, Stream s) {
  on_stream("adam_step", s,
            [&](cudaStream_t st, int) { cuda::adam_step(dt, param, grad, exp_avg, exp_avg_sq, n, args, st); });
}

CudaBackend& cuda_backend_instance() {
  static CudaBackend* backend = [] {
    // Tensors on CUDA devices take their memory from the caching allocator, unless a user
    // installed another allocator before the first CUDA tensor.
    set_allocator_if_unset(DeviceKind::CUDA, &cuda::device_allocator());
    return new CudaBackend();  // never destroyed: tensors may be freed during static destruction
  }();
  return *backend;
}

Backend& cuda_backend(const char* op) {
  // Checked on every call (a cached integer compare): without a GPU each CUDA request fails here,
  // with the op's name, instead of deep inside a CUDA call.
  if (cuda::device_count() == 0) cuda::check_device(0, op);
  return cuda_backend_instance();
}

namespace {
// How this library joins a program (kernels/backend.h): registered before main() runs. The library
// is linked whole (ringgrad::cuda), so this object is never dropped.
Backend& cuda_backend_any() { return cuda_backend_instance(); }
const bool kRegistered = [] {
  register_device_backend(DeviceKind::CUDA, {&cuda_backend, &cuda_backend_any});
  return true;
}();
}  // namespace

}  // namespace kernels
}  // namespace ringgrad
