// kernels/cpu/cpu_backend.h: the CPU implementation of the Backend interface.
//
// Each family of kernels lives in its own file next to this header:
//   fill_copy.cpp  fill, arange, strided copy with dtype casts, host-to-host copy_between
//   random.cpp     Philox uniform/normal draws and dropout
//   unary.cpp      elementwise y = f(x) and its backward
//   binary.cpp     elementwise a op b with broadcasting
//   reduce.cpp     sum/max over a middle axis and the scatter that undoes max; the sum's inner
//                  loop is sum_lanes.h, compiled per vector level in sum_chunks*.cpp
//   gemm.cpp       batched GEMM on Eigen maps with the bias/activation epilogue
//   softmax.cpp    softmax, log_softmax and cross-entropy, forward and backward
//   optim.cpp      fused SGD and Adam/AdamW parameter updates
// Kernels start on the calling thread (each logical CPU device has its own worker); large GEMMs,
// elementwise ops, reductions, softmax, copies and optimizer steps fan out to the helper threads of
// thread_pool.h, small ones never do. `Stream` is ignored. Kernels never allocate.
#pragma once

#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  void set_thread_count(int threads) override;  // threads a kernel started from this thread may use

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
};

// The one CpuBackend of the process. It holds no state, so every logical CPU device shares it.
Backend& cpu_backend();

}  // namespace kernels
}  // namespace ringgrad
