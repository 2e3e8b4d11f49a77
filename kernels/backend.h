// kernels/backend.h: the interface every compute backend implements.
//
// A backend knows raw pointers, sizes, strides and streams -- never Tensor, never autograd. core/ops
// checks arguments, allocates outputs and records backward nodes, then calls exactly one of these
// functions. Only backend_for() chooses a backend, so nothing in core/ asks "is this CUDA?".
//
// Conventions: sizes and strides are in elements; matrices are row-major; `Stream` is the device
// stream to run on (a cudaStream_t from stream_for() on CUDA, ignored on CPU). Floating-point kernels
// accept f32 and f64 on CPU; on CUDA see kernels/cuda/cuda_backend.h.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/strided.h"

namespace ringgrad {

enum class DeviceKind : uint8_t { CPU, CUDA };

using Stream = void*;

// Elementwise y = f(x). Scalar ops read `alpha`. The comment names what unary_backward reads as its
// `saved` argument: the forward's input x or its output y (whichever makes the derivative cheapest).
enum class UnaryOp : uint8_t {
  Neg,         // -x                      saved: none
  Exp,         // e^x                     saved: y   (dy/dx = y)
  Log,         // ln x                    saved: x   (1/x)
  Sqrt,        // sqrt x                  saved: y   (1/(2y))
  Relu,        // max(x, 0)               saved: y   (y > 0)
  GeluTanh,    // x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))   saved: x
  GeluErf,     // x/2 (1 + erf(x/sqrt 2))                        saved: x
  Tanh,        // tanh x                  saved: y   (1 - y^2)
  Sigmoid,     // 1/(1 + e^-x)            saved: y   (y (1 - y))
  AddScalar,   // x + alpha               saved: none
  MulScalar,   // x * alpha               saved: none
  RDivScalar,  // alpha / x               saved: x   (-alpha/x^2)
  PowScalar,   // x^alpha                 saved: x   (alpha x^(alpha-1))
};

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };

enum class ReduceOp : uint8_t { Sum, Max };

// Activation applied in the GEMM epilogue, after the bias: Linear+ReLU in one pass over C.
enum class Activation : uint8_t { None, Relu, GeluTanh };

enum class RandomKind : uint8_t { Uniform, Normal };

// C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C, then + bias (per column), then activation.
// A is stored m x k row-major with leading dimension lda, or -- when trans_a -- k x m, so a transposed
// view is passed as a flag instead of being copied. Same for B. `batch` independent products are
// taken at the given element strides (a stride of 0 reuses one operand for every batch entry).
struct GemmArgs {
  DType dtype = DType::f32;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const void* b = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  void* c = nullptr;
  int64_t ldc = 0;
  double alpha = 1.0, beta = 0.0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  const void* bias = nullptr;  // n values, or null
  Activation activation = Activation::None;
};

// Hyperparameters of one SGD step (PyTorch's names).
struct SgdStepArgs {
  double lr = 0.0, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is uninitialised and becomes d_p, as in PyTorch
};

// Hyperparameters of one Adam/AdamW step.
struct AdamStepArgs {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW: decay the parameter, not the gradient
  int64_t step = 1;                     // 1-based, already incremented for this step
};

struct Backend {
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Called once on each device's worker thread when it starts: how many threads the kernels run from
  // this thread may use. With K logical CPU devices on P cores each gets P/K, so K workers calling
  // a threaded GEMM at once do not oversubscribe the machine.
  virtual void set_thread_count(int /*threads*/) {}

  // The stream work on device `device_index` of this kind is queued on: the CUDA backend's own
  // non-blocking stream of that GPU; null on the CPU, whose kernels run on the calling thread.
  virtual Stream stream_for(int /*device_index*/) { return nullptr; }

  // --- filling and copying (memory itself comes from core/storage.h's Allocator) -------------------
  virtual void fill(DType dt, void* dst, int64_t n, double value, Stream s) = 0;
  virtual void arange(DType dt, void* dst, int64_t n, double start, double step, Stream s) = 0;
  // dst = cast(src), both strided and of the same shape; gathers a view into dense memory, scatters
  // a dense gradient into a region of a larger one, and converts dtypes.
  virtual void copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, Stream s) = 0;
  // nbytes of dense memory from one device to another (host<->GPU, GPU<->GPU; the CPU backend copies
  // between host buffers only). Ordered after earlier work on both devices' streams; returns once the
  // host may read the result when the destination is host memory, and once the source may be reused
  // when it is host memory. Indices name the device of each side (the index of a host side is ignored).
  virtual void copy_between(DeviceKind src_kind, int src_index, const void* src, DeviceKind dst_kind, int dst_index,
                            void* dst, int64_t nbytes) = 0;
  // Counter-based random numbers: element i uses Philox counter (offset + i) under `seed`, so the
  // values do not depend on how the work is split across threads or devices. Uniform in [a, b) or
  // Normal(mean a, std b).
  virtual void random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset,
                      double a, double b, Stream s) = 0;

  // --- elementwise -------------------------------------------------------------------------------
  virtual void unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, Stream s) = 0;
  // dx = dy * f'(.) where `saved` is x or y as listed in UnaryOp (null for ops that save none).
  virtual void unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n,
                              double alpha, Stream s) = 0;
  // out (dense) = a op b; a and b have out's shape, with stride 0 where they were broadcast.
  virtual void binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, Stream s) = 0;

  // --- reductions over the middle axis of a dense [outer, r, inner] array -------------------------
  // y[o, i] = sum_j x[o, j, i]  or  max_j x[o, j, i] (then indices[o, i] = first argmax; indices may
  // be null when only the values are wanted).
  virtual void reduce(ReduceOp op, DType dt, const void* x, void* y, int64_t* indices, int64_t outer, int64_t r,
                      int64_t inner, Stream s) = 0;
  // dst[o, index[o, i], i] += src[o, i]: the backward of max over a dimension.
  virtual void scatter_add_dim(DType dt, const void* src, const int64_t* index, void* dst, int64_t outer,
                               int64_t r, int64_t inner, Stream s) = 0;

  // --- matrix multiply ---------------------------------------------------------------------------
  virtual void gemm(const GemmArgs& args, Stream s) = 0;

  // --- softmax and losses, over the middle axis of a dense [outer, c, inner] array -----------------
  virtual void softmax(DType dt, const void* x, void* y, int64_t outer, int64_t c, int64_t inner, bool log,
                       Stream s) = 0;
  // dx from the forward's output y: softmax  dx = y (dy - sum(dy y));  log_softmax  dx = dy - e^y sum(dy).
  virtual void softmax_backward(DType dt, const void* y, const void* dy, void* dx, int64_t outer, int64_t c,
                                int64_t inner, bool log, Stream s) = 0;
  // Rows of logits [rows x c] against int64 labels: loss[r] = logsumexp(x_r) - (1-eps) x_r[label]
  // - eps mean(x_r); probs keeps softmax(x_r) for the backward.
  virtual void cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* loss, void* probs,
                                     int64_t rows, int64_t c, double label_smoothing, Stream s) = 0;
  // dlogits[r] = scale * dloss[r * dloss_stride] * (probs[r] - (1-eps) onehot(label) - eps/c).
  virtual void cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* dloss,
                                      int64_t dloss_stride, double scale, void* dlogits, int64_t rows, int64_t c,
                                      double label_smoothing, Stream s) = 0;

  // y = x * mask, mask[i] = (uniform(seed, offset + i) >= p) / (1 - p); the mask is kept for backward.
  virtual void dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed,
                       uint64_t offset, Stream s) = 0;

  // --- optimizer steps: one fused pass over a dense parameter and its dense gradient ----------------
  // Exactly PyTorch 1.13's single-tensor rules, computed in the parameter's dtype (see nn/optim/).
  //   SGD : d = g (+ weight_decay p); with momentum, buf = first_step ? d : momentum buf + (1 - dampening) d
  //         and d = nesterov ? d + momentum buf : buf;  p -= lr d.
  virtual void sgd_step(DType dt, void* param, const void* grad, void* momentum_buffer /* null when momentum == 0 */,
                        int64_t n, const SgdStepArgs& args, Stream s) = 0;
  //   Adam: decoupled (AdamW) p *= 1 - lr wd, else g += wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  //         p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
  virtual void adam_step(DType dt, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                         const AdamStepArgs& args, Stream s) = 0;
};

// The backend for a device kind. Throws ringgrad::Error when this build has none (a CPU-only build
// asked for CUDA), naming `op` so the message says which call needed it.
Backend& backend_for(DeviceKind kind, const char* op = "tensor");

// True when this build has the CUDA backend (RINGGRAD_CUDA=ON, or AUTO with nvcc found). Whether a GPU
// is present at run time is cuda_device_count() (core/cuda.h).
bool built_with_cuda();

}  // namespace ringgrad
