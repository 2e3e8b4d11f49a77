// kernels/cuda/optim.cu: fused SGD (momentum, dampening, Nesterov, weight decay) and Adam/AdamW steps,
// for one tensor or many tensors per launch.
//
// Budget per element (b = 4 B in float32):
//   SGD, no momentum      reads p, g; writes p                 3b (12 B)   2 FLOPs (4 with weight decay)
//   SGD, momentum         reads p, g, buf; writes p, buf       5b (20 B)   ~6 FLOPs
//   Adam/AdamW            reads p, g, m, v; writes p, m, v     7b (28 B)   ~12 FLOPs + sqrt + div
// Under 1 FLOP/byte: memory-bound; fusing is the whole point (one pass instead of one per tensor op).
// Target : at least 80% of DRAM bandwidth (H200: 4.8 TB/s) over a model's parameters, >= 2^24 elements.
// Mapping: single tensor -- a grid-stride loop, one element per thread per iteration. Multi-tensor --
//          the tensors are cut into chunks of kChunk elements; a table in the kernel's parameters
//          (pointers per tensor, and per block which tensor and which chunk) sends each block to one
//          chunk, so small tensors (biases) and large ones (weights) share one launch. A table holds
//          kMaxTensors tensors and kMaxChunks chunks (under CUDA's 4 KiB parameter limit); longer
//          lists take several launches.
// The arithmetic mirrors kernels/cpu/optim.cpp line by line; nvcc may contract a*b + c into one FMA
// where the CPU rounds twice, so results agree to a few ulp rather than bitwise.
#include "kernels/cuda/optim.h"

#include <math.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/base/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stride_loop.cuh"
#include "kernels/cuda/kernel_util.cuh"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

// The per-step constants, each formed in double on the host and rounded to T, as on the CPU.
template <typename T>
struct SgdConsts {
  T weight_decay, momentum, one_minus_dampening, minus_lr;
  bool decay, first_step, nesterov;
};

template <typename T>
SgdConsts<T> sgd_consts(const SgdStepArgs& a) {
  return SgdConsts<T>{T(a.weight_decay), T(a.momentum), T(1.0 - a.dampening), T(-a.lr), a.weight_decay != 0.0,
                      a.first_step,      a.nesterov};
}

template <typename T>
struct AdamConsts {
  T decay, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, minus_step_size;
  bool decoupled, coupled_decay;
};

template <typename T>
AdamConsts<T> adam_consts(const AdamStepArgs& a) {
  const double t = static_cast<double>(a.step);
  const double bias_correction1 = 1.0 - std::pow(a.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(a.beta2, t);
  return AdamConsts<T>{T(1.0 - a.lr * a.weight_decay),
                       T(a.weight_decay),
                       T(a.beta1),
                       T(1.0 - a.beta1),
                       T(a.beta2),
                       T(1.0 - a.beta2),
                       T(std::sqrt(bias_correction2)),
                       T(a.eps),
                       T(-(a.lr / bias_correction1)),
                       a.decoupled_weight_decay,
                       !a.decoupled_weight_decay && a.weight_decay != 0.0};
}

// One element of SGD; `buf` null means no momentum. The flags are the same for every thread.
template <typename T>
__device__ inline void sgd_update(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, int64_t i,
                                  const SgdConsts<T>& c) {
  T d = g[i];
  if (c.decay) d = d + c.weight_decay * p[i];  // d_p = d_p.add(param, alpha=weight_decay)
  if (buf != nullptr) {
    // buf = clone(d_p) on the first step, else buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
    const T b = c.first_step ? d : buf[i] * c.momentum + c.one_minus_dampening * d;
    buf[i] = b;
    d = c.nesterov ? d + c.momentum * b : b;  // d_p = d_p.add(buf, alpha=momentum) or d_p = buf
  }
  p[i] = p[i] + c.minus_lr * d;  // param.add_(d_p, alpha=-lr)
}

template <typename T>
__device__ inline void adam_update(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                                   int64_t i, const AdamConsts<T>& c) {
  T pi = p[i];
  T gi = g[i];
  if (c.decoupled) pi = pi * c.decay;                         // param.mul_(1 - lr * weight_decay)
  if (c.coupled_decay) gi = gi + c.weight_decay * pi;         // grad = grad.add(param, alpha=weight_decay)
  const T mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;       // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
  const T vi = v[i] * c.beta2 + c.one_minus_beta2 * gi * gi;  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
  m[i] = mi;
  v[i] = vi;
  const T denom = sqrt(vi) / c.bias_correction2_sqrt + c.eps;  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
  p[i] = pi + c.minus_step_size * mi / denom;                  // param.addcdiv_(exp_avg, denom, value=-step_size)
}

template <typename T>
__global__ void sgd_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, int64_t n, SgdConsts<T> c) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) sgd_update(p, g, buf, i, c);
}

template <typename T>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v, int64_t n,
                            AdamConsts<T> c) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) adam_update(p, g, m, v, i, c);
}

// ---- multi-tensor ------------------------------------------------------------------------------------
constexpr int kMaxTensors = 24;
constexpr int kMaxChunks = 160;
constexpr int64_t kChunk = 64 * 1024;  // elements per block: 256 threads x 256 elements each

// Passed by value as a kernel parameter (about 1.8 KiB), so no device copy and no synchronisation.
// Tensor k's arrays are ptr[0..3][k] (SGD: param, grad, buf; Adam: param, grad, exp_avg, exp_avg_sq).
struct ChunkTable {
  void* ptr[4][kMaxTensors];
  int64_t n[kMaxTensors];
  uint8_t tensor[kMaxChunks];  // block b updates chunk chunk[b] of tensor tensor[b]
  int32_t chunk[kMaxChunks];
};
static_assert(sizeof(ChunkTable) + sizeof(AdamConsts<double>) < 4096, "kernel parameters are limited to 4 KiB");

template <typename T>
__global__ void sgd_multi_kernel(ChunkTable table, SgdConsts<T> c) {
  const int k = table.tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(table.chunk[blockIdx.x]) * kChunk;
  const int64_t end = min(begin + kChunk, table.n[k]);
  T* p = static_cast<T*>(table.ptr[0][k]);
  const T* g = static_cast<const T*>(table.ptr[1][k]);
  T* buf = static_cast<T*>(table.ptr[2][k]);
  for (int64_t i = begin + threadIdx.x; i < end; RG_STEP(i, blockDim.x)) sgd_update(p, g, buf, i, c);
}

template <typename T>
__global__ void adam_multi_kernel(ChunkTable table, AdamConsts<T> c) {
  const int k = table.tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(table.chunk[blockIdx.x]) * kChunk;
  const int64_t end = min(begin + kChunk, table.n[k]);
  T* p = static_cast<T*>(table.ptr[0][k]);
  const T* g = static_cast<const T*>(table.ptr[1][k]);
  T* m = static_cast<T*>(table.ptr[2][k]);
  T* v = static_cast<T*>(table.ptr[3][k]);
  for (int64_t i = begin + threadIdx.x; i < end; RG_STEP(i, blockDim.x)) adam_update(p, g, m, v, i, c);
}

// Fills tables tensor by tensor, chunk by chunk, and calls launch(table, blocks) whenever one is full
// (of tensors or of chunks) and once at the end. `pointers(k, slot)` gives tensor k's arrays.
template <typename Pointers, typename Launch>
void for_each_table(int count, const int64_t* sizes, Pointers pointers, Launch launch) {
  ChunkTable table{};
  int tensors = 0, blocks = 0;
  for (int k = 0; k < count; ++k) {
    if (sizes[k] <= 0) continue;
    if (tensors == kMaxTensors) {
      launch(table, blocks);
      tensors = blocks = 0;
    }
    for (int slot = 0; slot < 4; ++slot) table.ptr[slot][tensors] = pointers(k, slot);
    table.n[tensors] = sizes[k];
    const int64_t chunks = (sizes[k] + kChunk - 1) / kChunk;
    for (int64_t ch = 0; ch < chunks; ++ch) {
      if (blocks == kMaxChunks) {
        launch(table, blocks);
        blocks = 0;
        // The tensor being chunked stays as entry 0 of the next table.
        for (int slot = 0; slot < 4; ++slot) table.ptr[slot][0] = table.ptr[slot][tensors];
        table.n[0] = table.n[tensors];
        tensors = 0;
      }
      table.tensor[blocks] = static_cast<uint8_t>(tensors);
      table.chunk[blocks] = static_cast<int32_t>(ch);
      ++blocks;
    }
    ++tensors;
  }
  if (blocks > 0) launch(table, blocks);
}

}  // namespace

void sgd_step(DType dt, void* param, const void* grad, void* momentum_buffer, int64_t n, const SgdStepArgs& args,
              cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_floating<false>("sgd_step", dt, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel("sgd_kernel", sgd_kernel<T>, blocks_for(n), kThreads, 0, stream, static_cast<T*>(param),
                  static_cast<const T*>(grad), static_cast<T*>(momentum_buffer), n, sgd_consts<T>(args));
  });
}

void adam_step(DType dt, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
               const AdamStepArgs& args, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_floating<false>("adam_step", dt, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel("adam_kernel", adam_kernel<T>, blocks_for(n), kThreads, 0, stream, static_cast<T*>(param),
                  static_cast<const T*>(grad), static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq), n,
                  adam_consts<T>(args));
  });
}

void sgd_step_multi(DType dt, const SgdTensor* tensors, int count, const SgdStepArgs& args, cudaStream_t stream) {
  if (count <= 0) return;
  std::vector<int64_t> sizes(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) sizes[static_cast<size_t>(k)] = tensors[k].n;
  dispatch_floating<false>("sgd_step_multi", dt, [&](auto zero) {
    using T = decltype(zero);
    const SgdConsts<T> consts = sgd_consts<T>(args);
    for_each_table(
        count, sizes.data(),
        [&](int k, int slot) -> void* {
          const SgdTensor& t = tensors[k];
          return slot == 0 ? t.param : slot == 1 ? const_cast<void*>(t.grad) : slot == 2 ? t.momentum_buffer : nullptr;
        },
        [&](const ChunkTable& table, int blocks) {
          launch_kernel("sgd_multi_kernel", sgd_multi_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, stream,
                        table, consts);
        });
  });
}

void adam_step_multi(DType dt, const AdamTensor* tensors, int count, const AdamStepArgs& args, cudaStream_t stream) {
  if (count <= 0) return;
  std::vector<int64_t> sizes(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) sizes[static_cast<size_t>(k)] = tensors[k].n;
  dispatch_floating<false>("adam_step_multi", dt, [&](auto zero) {
    using T = decltype(zero);
    const AdamConsts<T> consts = adam_consts<T>(args);
    for_each_table(
        count, sizes.data(),
        [&](int k, int slot) -> void* {
          const AdamTensor& t = tensors[k];
          return slot == 0 ? t.param : slot == 1 ? const_cast<void*>(t.grad) : slot == 2 ? t.exp_avg : t.exp_avg_sq;
        },
        [&](const ChunkTable& table, int blocks) {
          launch_kernel("adam_multi_kernel", adam_multi_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, stream,
                        table, consts);
        });
  });
}

}  // namespace cuda
}  // namespace kernels
}  // namespace ringgrad
