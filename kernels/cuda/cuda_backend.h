// kernels/cuda/cuda_backend.h: the CUDA implementation of the Backend interface (kernels/backend.h).
//
// Each function makes the device of its stream current (CudaDeviceGuard), hands its device pointers
// to the launcher of the same name in kernels/cuda/*.h, and returns without waiting: the work runs
// in order on that device's ringgrad stream. Errors -- an unsupported dtype, a failed CUDA call --
// are ringgrad::Errors naming the op and the device.
//
// Dtypes (what the launchers support; anything else is an Error naming the op, the dtype and the device):
//   fill, arange, copy                                  float32 float64 bfloat16 float16 int64 uint8
//   unary, unary_backward, binary, dropout              float32 float64 bfloat16 float16 (16-bit computed in float)
//   reduce, scatter_add_dim, softmax, softmax_backward  float32 float64 bfloat16 float16
//   random, cross_entropy_*, sgd_step, adam_step        float32 float64
//   gemm                                                float32 only: ringgrad's kernel (kernels/cuda/gemm.cu),
//                                                       or cuBLAS when RINGGRAD_GEMM=cublas
// Free of CUDA types, so core/ and the tests can include it.
#pragma once

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  Stream stream_for(int device_index) override;

  void fill(DType dt, void* dst, int64_t n, double value, Stream s) override;
  void arange(DType dt, void* dst, int64_t n, double start, double step, Stream s) override;
  void copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, Stream s) override;
  void copy_between(DeviceKind src_kind, int src_index, const void* src, DeviceKind dst_kind, int dst_index, void* dst,
                    int64_t nbytes) override;
  void random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset, double a, double b,
              Stream s) override;

  void unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, Stream s) override;
  void unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n, double alpha,
                      Stream s) override;
  void binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, Stream s) override;

  void reduce(ReduceOp op, DType dt, const void* x, void* y, int64_t* indices, int64_t outer, int64_t r, int64_t inner,
              Stream s) override;
  void scatter_add_dim(DType dt, const void* src, const int64_t* index, void* dst, int64_t outer, int64_t r,
                       int64_t inner, Stream s) override;

  void gemm(const GemmArgs& args, Stream s) override;

  void softmax(DType dt, const void* x, void* y, int64_t outer, int64_t c, int64_t inner, bool log, Stream s) override;
  void softmax_backward(DType dt, const void* y, const void* dy, void* dx, int64_t outer, int64_t c, int64_t inner,
                        bool log, Stream s) override;
  void cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* loss, void* probs, int64_t rows,
                             int64_t c, double label_smoothing, Stream s) override;
  void cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* dloss,
                              int64_t dloss_stride, double scale, void* dlogits, int64_t rows, int64_t c,
                              double label_smoothing, Stream s) override;

  void dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed, uint64_t offset,
               Stream s) override;

  void sgd_step(DType dt, void* param, const void* grad, void* momentum_buffer, int64_t n, const SgdStepArgs& args,
                Stream s) override;
  void adam_step(DType dt, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                 const AdamStepArgs& args, Stream s) override;

  // The device runtime (kernels/cuda/runtime.cpp, memory.cpp, transfer.cpp).
  int device_count() override;
  void synchronize(int device) override;
  int exchange_current_device(int device) override;
  MemoryStats memory_stats(int device) override;
  void reset_peak_memory_stats(int device) override;
  void empty_cache() override;
  Allocator& pinned_allocator() override;
  MemoryStats pinned_memory_stats() override;
  std::unique_ptr<ReadyPoint> mark_ready(int device) override;
  void copy_to_pinned(int device, const ReadyPoint& ready, const void* src, void* pinned_dst, int64_t nbytes) override;
  void copy_from_pinned(int device, const ReadyPoint& after, const void* pinned_src, void* dst,
                        int64_t nbytes) override;
};

// The process's CudaBackend. Its first use installs the CUDA caching allocator for CUDA storages
// (unless set_allocator() installed another one first). Throws ringgrad::Error naming `op` when no
// GPU is visible -- the library itself loads and runs CPU work without one.
Backend& cuda_backend(const char* op);
// The same object without the check: what the device runtime's questions (how many GPUs?) go to.
CudaBackend& cuda_backend_instance();

namespace cuda {

// The caching allocator over cudaMalloc/cudaFree that cuda_backend() installs (kernels/cuda/memory.cpp).
CachingAllocator& device_allocator();

// The body of CudaBackend::copy_between (kernels/cuda/transfer.cpp).
void copy_between(DeviceKind src_kind, int src_index, const void* src, DeviceKind dst_kind, int dst_index, void* dst,
                  int64_t nbytes);

// Which GEMM the backend runs, chosen by the environment variable RINGGRAD_GEMM, read once:
// unset, empty or "native" -> ringgrad's kernel; "cublas" -> cuBLAS (the yardstick, no TF32).
enum class GemmImpl { Native, Cublas };
GemmImpl parse_gemm_impl(const char* value);  // throws ringgrad::Error for any other value
GemmImpl gemm_impl();

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
