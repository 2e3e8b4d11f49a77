/// @file
/// kernels/backend.h: the interface every compute backend implements.
///
/// A backend knows raw pointers, sizes, strides and streams -- never Tensor, never autograd. core/ops
/// checks arguments, allocates outputs and records backward nodes, then calls exactly one of these
/// functions. Only backend_for() chooses a backend, so nothing in core/ asks "is this CUDA?".
///
/// Conventions: sizes and strides are in elements; matrices are row-major; `Stream` is the device
/// stream to run on (a cudaStream_t from stream_for() on CUDA, ignored on CPU). Floating-point kernels
/// accept f32 and f64 on CPU; on CUDA see kernels/cuda/cuda_backend.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <ringgrad/core/base/allocator.h>
#include <ringgrad/core/base/caching_allocator.h>
#include <ringgrad/core/base/device.h>
#include <ringgrad/core/base/dtype.h>
#include <ringgrad/core/base/op_params.h>
#include <ringgrad/core/base/strided.h>
#include <ringgrad/kernels/unary_ops.h>

/// @namespace ringgrad::kernels
/// The backend interface (Backend, backend_for) and the table of unary ops: raw pointers, sizes and
/// streams, never Tensor.

namespace ringgrad {
namespace kernels {

// UnaryOp (elementwise y = f(x)) comes from kernels/unary_ops.h, the table of unary functors: each
// op's formula, derivative and what unary_backward reads as `saved` (x, y or nothing) are there.

/// Elementwise a op b of Backend::binary.
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };

/// What Backend::reduce computes over the middle axis: the sum, or the maximum and its index.
enum class ReduceOp : uint8_t { Sum, Max };

/// The distribution of Backend::random: uniform in [a, b), or normal with mean a and std b.
enum class RandomKind : uint8_t { Uniform, Normal };

/// C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C, then + bias (per column), then activation.
/// A is stored m x k row-major with leading dimension lda, or -- when trans_a -- k x m, so a transposed
/// view is passed as a flag instead of being copied. Same for B. `batch` independent products are
/// taken at the given element strides (a stride of 0 reuses one operand for every batch entry).
struct GemmArgs {
  DType dtype = DType::f32;  ///< of A, B, C and the bias
  ///@{
  /// C is m x n, the inner dimension k
  int64_t m = 0, n = 0, k = 0;
  ///@}
  const void* a = nullptr;  ///< A, m x k (k x m when trans_a)
  int64_t lda = 0;          ///< A's row stride, in elements
  bool trans_a = false;     ///< A is stored transposed
  const void* b = nullptr;  ///< B, k x n (n x k when trans_b)
  int64_t ldb = 0;          ///< B's row stride, in elements
  bool trans_b = false;     ///< B is stored transposed
  void* c = nullptr;        ///< C, m x n row-major
  int64_t ldc = 0;          ///< C's row stride, in elements
  ///@{
  /// C = alpha A B + beta C
  double alpha = 1.0, beta = 0.0;
  ///@}
  ///@{
  /// batch count and element strides between batch entries
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  ///@}
  const void* bias = nullptr;                ///< n values, or null
  Activation activation = Activation::None;  ///< applied after the bias, in the epilogue
};

/// A point in the work queued so far on one device's compute stream: what a staging copy waits for
/// (core/cuda.h, cuda_mark_ready). Each backend with streams defines what it holds (CUDA: an event).
struct ReadyPoint {
  virtual ~ReadyPoint() = default;
};

/// The interface every backend (CPU, CUDA) implements: raw pointers, sizes, strides and streams,
/// never Tensor and never autograd. backend_for() chooses one; nothing else in core/ asks which.
/// Work is queued on Stream `s` of the device the pointers belong to.
struct Backend {
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  ///< "cpu", "cuda": for messages

  /// Called once on each device's worker thread when it starts: how many threads the kernels run from
  /// this thread may use. With K logical CPU devices on P cores each gets P/K, so K workers calling
  /// a threaded GEMM at once do not oversubscribe the machine.
  virtual void set_thread_count(int /*threads*/) {}

  /// The stream work on device `device_index` of this kind is queued on: the CUDA backend's own
  /// non-blocking stream of that GPU; null on the CPU, whose kernels run on the calling thread.
  virtual Stream stream_for(int /*device_index*/) { return nullptr; }

  // --- filling and copying (memory itself comes from core/storage.h's Allocator) -------------------
  virtual void fill(DType dt, void* dst, int64_t n, double value, Stream s) = 0;  ///< dst[0 .. n) = value
  /// dst[i] = start + i * step for i in [0, n).
  virtual void arange(DType dt, void* dst, int64_t n, double start, double step, Stream s) = 0;
  /// dst = cast(src), both strided and of the same shape; gathers a view into dense memory, scatters
  /// a dense gradient into a region of a larger one, and converts dtypes.
  virtual void copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, Stream s) = 0;
  /// nbytes of dense memory from one device to another (host<->GPU, GPU<->GPU; the CPU backend copies
  /// between host buffers only). Ordered after earlier work on both devices' streams; returns once the
  /// host may read the result when the destination is host memory, and once the source may be reused
  /// when it is host memory. Indices name the device of each side (the index of a host side is ignored).
  virtual void copy_between(DeviceKind src_kind, int src_index, const void* src, DeviceKind dst_kind, int dst_index,
                            void* dst, int64_t nbytes) = 0;
  /// Counter-based random numbers: element i uses Philox counter (offset + i) under `seed`, so the
  /// values do not depend on how the work is split across threads or devices. Uniform in [a, b) or
  /// Normal(mean a, std b).
  virtual void random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset, double a,
                      double b, Stream s) = 0;

  // --- elementwise -------------------------------------------------------------------------------
  /// y[i] = f(x[i]) for the functor of `op` (kernels/unary_ops.h); `alpha` is the scalar of the
  /// scalar ops (AddScalar, MulScalar, RDivScalar, PowScalar), ignored by the others. y may be x
  /// (in place); any other overlap is the caller's error.
  virtual void unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, Stream s) = 0;
  /// dx = dy * f'(.) where `saved` is x or y as unary_saved(op) says (null for ops that save none).
  virtual void unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n,
                              double alpha, Stream s) = 0;
  /// out (dense) = a op b; a and b have out's shape, with stride 0 where they were broadcast.
  virtual void binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, Stream s) = 0;

  // --- reductions over the middle axis of a dense [outer, r, inner] array -------------------------
  /// y[o, i] = sum_j x[o, j, i]  or  max_j x[o, j, i] (then indices[o, i] = first argmax; indices may
  /// be null when only the values are wanted).
  virtual void reduce(ReduceOp op, DType dt, const void* x, void* y, int64_t* indices, int64_t outer, int64_t r,
                      int64_t inner, Stream s) = 0;
  /// dst[o, index[o, i], i] += src[o, i]: the backward of max over a dimension.
  virtual void scatter_add_dim(DType dt, const void* src, const int64_t* index, void* dst, int64_t outer, int64_t r,
                               int64_t inner, Stream s) = 0;

  // --- matrix multiply ---------------------------------------------------------------------------
  virtual void gemm(const GemmArgs& args, Stream s) = 0;  ///< see GemmArgs

  // --- softmax and losses, over the middle axis of a dense [outer, c, inner] array -----------------
  /// y = softmax of x over the middle axis (log_softmax with `log`).
  virtual void softmax(DType dt, const void* x, void* y, int64_t outer, int64_t c, int64_t inner, bool log,
                       Stream s) = 0;
  /// dx from the forward's output y: softmax  dx = y (dy - sum(dy y));  log_softmax  dx = dy - e^y sum(dy).
  virtual void softmax_backward(DType dt, const void* y, const void* dy, void* dx, int64_t outer, int64_t c,
                                int64_t inner, bool log, Stream s) = 0;
  /// Rows of logits [rows x c] against int64 labels: loss[r] = logsumexp(x_r) - (1-eps) x_r[label]
  /// - eps mean(x_r); probs keeps softmax(x_r) for the backward.
  virtual void cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* loss, void* probs,
                                     int64_t rows, int64_t c, double label_smoothing, Stream s) = 0;
  /// dlogits[r] = scale * dloss[r * dloss_stride] * (probs[r] - (1-eps) onehot(label) - eps/c).
  virtual void cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* dloss,
                                      int64_t dloss_stride, double scale, void* dlogits, int64_t rows, int64_t c,
                                      double label_smoothing, Stream s) = 0;

  /// y = x * mask, mask[i] = (uniform(seed, offset + i) >= p) / (1 - p); the mask is kept for backward.
  virtual void dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed,
                       uint64_t offset, Stream s) = 0;

  // --- optimizer steps: one fused pass over a dense parameter and its dense gradient ----------------
  /// Exactly PyTorch 1.13's single-tensor rules, computed in the parameter's dtype (see nn/optim/).
  ///   SGD : d = g (+ weight_decay p); with momentum, buf = first_step ? d : momentum buf + (1 - dampening) d
  ///         and d = nesterov ? d + momentum buf : buf;  p -= lr d.
  virtual void sgd_step(DType dt, void* param, const void* grad, void* momentum_buffer /* null when momentum == 0 */,
                        int64_t n, const SgdStepArgs& args, Stream s) = 0;
  ///   Adam: decoupled (AdamW) p *= 1 - lr wd, else g += wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  ///         p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
  virtual void adam_step(DType dt, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                         const AdamStepArgs& args, Stream s) = 0;

  // --- the device runtime: what core/cuda.h answers through ----------------------------------------
  // A backend whose devices have memory, streams and a runtime of their own (CUDA) overrides these.
  // The defaults are for one without (the CPU, whose logical devices core/device.h manages): no
  // devices, and an Error naming the call and the backend for anything asked of one.
  virtual int device_count() { return 0; }  ///< devices of this kind (none without a device runtime)
  virtual void synchronize(int device);     ///< waits for all work queued on the device's stream
  /// The device that the calling thread's runtime calls go to; makes `device` current and returns the
  /// previous one (CUDA keeps a current device per host thread), or -1 when the thread had none.
  virtual int exchange_current_device(int device);
  /// Statistics of the device memory allocator, and a way to give its cached blocks back.
  virtual MemoryStats memory_stats(int device);
  virtual void reset_peak_memory_stats(int device);  ///< peak_allocated_bytes = allocated_bytes
  virtual void empty_cache() {}                      ///< nothing cached
  /// Page-locked host memory for asynchronous transfers, through a caching allocator of its own.
  virtual Allocator& pinned_allocator();
  virtual MemoryStats pinned_memory_stats();  ///< statistics of pinned_allocator()
  /// Staging copies that overlap compute (core/cuda.h states the contract).
  virtual std::unique_ptr<ReadyPoint> mark_ready(int device);
  /// Device memory -> pinned host memory, after the work `ready` marked (core/cuda.h, cuda_copy_to_pinned).
  virtual void copy_to_pinned(int device, const ReadyPoint& ready, const void* src, void* pinned_dst, int64_t nbytes);
  /// Pinned host memory -> device memory, after the work `after` marked (cuda_copy_from_pinned).
  virtual void copy_from_pinned(int device, const ReadyPoint& after, const void* pinned_src, void* dst, int64_t nbytes);
};

/// The backend for a device kind. Throws ringgrad::Error when this program has none (CUDA asked of a
/// program without ringgrad's CUDA part) or the kind has no device (no GPU visible), naming `op` so
/// the message says which call needed it.
Backend& backend_for(DeviceKind kind, const char* op = "tensor");

/// How a device backend other than the CPU's joins a program: its library registers it from a static
/// initialiser (kernels/cuda/cuda_backend.cpp does, for CUDA), so a program has the CUDA backend
/// exactly when it links ringgrad::cuda, and a CPU-only program needs nothing of CUDA's. `usable`
/// returns the backend for an op, or throws naming the op when no device is visible; `instance`
/// returns it whether or not a device is. Registering a kind twice with other functions throws.
struct DeviceBackendRegistration {
  Backend& (*usable)(const char* op) = nullptr;
  Backend& (*instance)() = nullptr;
};
void register_device_backend(DeviceKind kind, DeviceBackendRegistration registration);

/// What to say when a program has no CUDA backend: "<call>: no CUDA backend in this program (...how
/// to get one)".
std::string no_cuda_backend_message(const char* call);

/// What the CPU backend's GEMM was built from and for, e.g. "Eigen 3.4.0, SIMD: AVX512, FMA, AVX2, AVX,
/// SSE4.2, ..., -march=native": a product's speed depends on it, so benchmarks print it beside their
/// results.
std::string cpu_gemm_build();

/// The vector level the CPU backend's hot kernels chose at run time, e.g. "avx512 (this CPU: avx512)"
/// or "avx2 (this CPU: avx512, lowered by RINGGRAD_CPU_ISA)": one portable build picks its kernels
/// on each machine, so benchmarks print this beside their results.
std::string cpu_kernels_chosen();

/// The backend for a device kind when this program has one, whether or not a device of that kind is
/// present; null when it has none. Never throws: core/cuda.h asks it how many GPUs there are.
Backend* built_backend(DeviceKind kind);

}  // namespace kernels
}  // namespace ringgrad
