// tests/cuda_emu/planted_async.cpp: planted asynchronous bugs -- host code that queues GPU work and
// forgets to order it. Each is right whenever the GPU happens to run the work at once (the eager
// streams of the emulator, a lucky run on a GPU) and wrong when it runs as late as CUDA allows
// (RINGGRAD_EMU_STREAMS=lazy):
//
//   host-read-before-sync       a device-to-pinned copy read by the host without synchronising:
//                               the host sees the poisoned buffer (NaN), not the result
//   staging-without-wait        a copy on a side stream of a tensor the compute stream is still
//                               writing, without waiting for the compute stream's event
//   peer-copy-without-wait      a copy from cuda:0 to cuda:1 on cuda:1's stream, without waiting
//                               for the cuda:0 stream that produces the source
//   blocking-copy-skips-stream  cudaMemcpy of a result produced on a non-blocking stream: the
//                               legacy stream it runs on does not wait for non-blocking streams
//   pinned-reused-before-copy   a pinned staging buffer handed to its next user (as a caching
//                               allocator would) while the copy that sends it is still queued: the
//                               next user's writes would be what arrives; the emulator's guard on
//                               pinned memory stops the program at the first write, naming the copy
//   collective-freed-in-flight  a gradient bucket all-reduced on the NCCL stream, dropped, and handed
//                               by a caching allocator to the compute stream's next tensor while the
//                               collective may still be running (the record_stream that was forgotten)
//
// Each "-fixed" twin adds the one missing synchronisation and is right in every mode. The
// happens-before checker (src/races.h) stops every one of them that orders two GPU operations wrongly,
// in every mode, eager included; the host's own reads and writes are the poisoning's and the pinned
// guard's to catch.
#include "planted_kernels.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <vector>

namespace planted {
namespace {

constexpr int kCount = 1000;

__global__ void fill_value(float* y, int n, float value) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(blockDim.x * gridDim.x))
    y[i] = value;
}

bool all_equal(const float* got, float want, const char* what) {
  for (int i = 0; i < kCount; ++i) {
    if (!(got[i] == want)) {
      std::printf("%s: element %d is %g, want %g\n", what, i, static_cast<double>(got[i]), static_cast<double>(want));
      return false;
    }
  }
  return true;
}

float* device_floats(float value) {
  float* p = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&p), kCount * sizeof(float));
  std::vector<float> host(kCount, value);
  cudaMemcpy(p, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
  return p;
}

template <bool kSynchronised>
bool host_read() {
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  float* y = device_floats(0.0f);
  float* pinned = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&pinned), kCount * sizeof(float), cudaHostAllocPortable);
  cuda_emu::launch("fill_value", fill_value, 4, 64, 0, stream, y, kCount, 3.0f);
  cudaMemcpyAsync(pinned, y, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream);
  if (kSynchronised) cudaStreamSynchronize(stream);  // the planted bug: the host reads without it
  const bool right = all_equal(pinned, 3.0f, "pinned result");
  cudaStreamSynchronize(stream);
  cudaFreeHost(pinned);
  cudaFree(y);
  cudaStreamDestroy(stream);
  return right;
}

template <bool kWaits>
bool staging() {
  cudaStream_t compute = nullptr, side = nullptr;
  cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  cudaEvent_t ready = nullptr;
  cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  float* grad = device_floats(1.0f);
  float* pinned = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&pinned), kCount * sizeof(float), cudaHostAllocPortable);
  cuda_emu::launch("fill_value", fill_value, 4, 64, 0, compute, grad, kCount, 5.0f);  // backward writes the gradient
  cudaEventRecord(ready, compute);
  if (kWaits) cudaStreamWaitEvent(side, ready, 0);  // the planted bug: the side stream does not wait
  cudaMemcpyAsync(pinned, grad, kCount * sizeof(float), cudaMemcpyDeviceToHost, side);
  cudaStreamSynchronize(side);
  const bool right = all_equal(pinned, 5.0f, "staged gradient");
  cudaDeviceSynchronize();
  cudaFreeHost(pinned);
  cudaFree(grad);
  cudaEventDestroy(ready);
  cudaStreamDestroy(side);
  cudaStreamDestroy(compute);
  return right;
}

template <bool kWaits>
bool peer_copy() {
  cudaSetDevice(0);
  cudaStream_t producer = nullptr;
  cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking);
  cudaEvent_t produced = nullptr;
  cudaEventCreateWithFlags(&produced, cudaEventDisableTiming);
  float* x0 = device_floats(0.0f);
  cuda_emu::launch("fill_value", fill_value, 4, 64, 0, producer, x0, kCount, 7.0f);
  cudaEventRecord(produced, producer);
  cudaSetDevice(1);
  cudaStream_t consumer = nullptr;
  cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking);
  float* x1 = device_floats(0.0f);
  if (kWaits) cudaStreamWaitEvent(consumer, produced, 0);  // the planted bug: no wait for cuda:0's stream
  cudaMemcpyPeerAsync(x1, 1, x0, 0, kCount * sizeof(float), consumer);
  std::vector<float> host(kCount);
  cudaMemcpyAsync(host.data(), x1, kCount * sizeof(float), cudaMemcpyDeviceToHost, consumer);  // pageable: waits
  const bool right = all_equal(host.data(), 7.0f, "peer copy");
  cudaFree(x1);
  cudaStreamDestroy(consumer);
  cudaSetDevice(0);
  cudaFree(x0);
  cudaEventDestroy(produced);
  cudaStreamDestroy(producer);
  return right;
}

template <bool kSynchronised>
bool blocking_copy() {
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  float* y = device_floats(0.0f);
  cuda_emu::launch("fill_value", fill_value, 4, 64, 0, stream, y, kCount, 9.0f);
  if (kSynchronised) cudaStreamSynchronize(stream);  // the planted bug: cudaMemcpy does not wait for `stream`
  std::vector<float> host(kCount);
  cudaMemcpy(host.data(), y, kCount * sizeof(float), cudaMemcpyDeviceToHost);
  const bool right = all_equal(host.data(), 9.0f, "blocking copy");
  cudaFree(y);
  cudaStreamDestroy(stream);
  return right;
}

// A pinned staging buffer: the caller sends it, "frees" it to a pool of one, and the next caller
// takes it from the pool and fills it. Four pages, so that the emulator can guard it.
template <bool kWaits>
bool pinned_reuse() {
  constexpr int kFloats = 4096;
  constexpr size_t kBytes = kFloats * sizeof(float);
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  float* y = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&y), kBytes);
  float* staging = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&staging), kBytes, cudaHostAllocPortable);
  for (int i = 0; i < kFloats; ++i) staging[i] = 1.0f;
  cudaMemcpyAsync(y, staging, kBytes, cudaMemcpyHostToDevice, stream);
  float* pool = staging;                      // deallocated to the cache...
  if (kWaits) cudaStreamSynchronize(stream);  // the planted bug: ...before the copy that reads it has run
  float* next = pool;                         // ...and the next allocation gets it back
  for (int i = 0; i < kFloats; ++i) next[i] = 2.0f;
  std::vector<float> host(kFloats);
  cudaStreamSynchronize(stream);
  cudaMemcpy(host.data(), y, kBytes, cudaMemcpyDeviceToHost);
  bool right = true;
  for (int i = 0; i < kFloats && right; ++i) right = host[i] == 1.0f;
  if (!right) std::printf("pinned staging: the GPU received the next user's values\n");
  cudaFreeHost(staging);
  cudaFree(y);
  cudaStreamDestroy(stream);
  return right;
}

// One rank's gradient bucket: the compute stream writes it, the NCCL stream all-reduces it (waiting
// for the compute stream's event, as DDP does), then its tensor is dropped and a caching allocator
// that files free blocks by stream hands the block to the compute stream's next tensor at once. The
// compute stream must first wait for an event recorded after the collective (PyTorch's record_stream;
// ringgrad's NCCL Work keeps the tensor alive until the host has seen the collective done).
template <bool kWaits>
bool collective_reuse() {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    std::printf("collective: ncclCommInitRank failed\n");
    return false;
  }
  cudaStream_t compute = nullptr, collectives = nullptr;
  cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&collectives, cudaStreamNonBlocking);
  cudaEvent_t ready = nullptr, reduced = nullptr;
  cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&reduced, cudaEventDisableTiming);
  float* bucket = device_floats(0.0f);
  cuda_emu::launch("fill_value", fill_value, 4, 64, 0, compute, bucket, kCount, 2.0f);  // backward
  cudaEventRecord(ready, compute);
  cudaStreamWaitEvent(collectives, ready, 0);
  ncclAllReduce(bucket, bucket, kCount, ncclFloat, ncclSum, comm, collectives);
  cudaEventRecord(reduced, collectives);
  float* next = bucket;                                  // dropped, and reused on the compute stream...
  if (kWaits) cudaStreamWaitEvent(compute, reduced, 0);  // the planted bug: ...without this wait
  cuda_emu::launch("fill_value", fill_value, 4, 64, 0, compute, next, kCount, 9.0f);
  cudaDeviceSynchronize();
  std::vector<float> host(kCount);
  cudaMemcpy(host.data(), next, kCount * sizeof(float), cudaMemcpyDeviceToHost);
  const bool right = all_equal(host.data(), 9.0f, "the next tensor");
  ncclCommDestroy(comm);
  cudaFree(bucket);
  cudaEventDestroy(reduced);
  cudaEventDestroy(ready);
  cudaStreamDestroy(collectives);
  cudaStreamDestroy(compute);
  return right;
}

}  // namespace

std::vector<std::string> async_names() {
  return {"host-read-before-sync",           "host-read-before-sync-fixed",      "staging-without-wait",
          "staging-without-wait-fixed",      "peer-copy-without-wait",           "peer-copy-without-wait-fixed",
          "blocking-copy-skips-stream",      "blocking-copy-skips-stream-fixed", "pinned-reused-before-copy",
          "pinned-reused-before-copy-fixed", "collective-freed-in-flight",       "collective-freed-in-flight-fixed"};
}

bool run_async(const std::string& name, bool* known) {
  *known = true;
  if (name == "host-read-before-sync") return host_read<false>();
  if (name == "host-read-before-sync-fixed") return host_read<true>();
  if (name == "staging-without-wait") return staging<false>();
  if (name == "staging-without-wait-fixed") return staging<true>();
  if (name == "peer-copy-without-wait") return peer_copy<false>();
  if (name == "peer-copy-without-wait-fixed") return peer_copy<true>();
  if (name == "blocking-copy-skips-stream") return blocking_copy<false>();
  if (name == "blocking-copy-skips-stream-fixed") return blocking_copy<true>();
  if (name == "pinned-reused-before-copy") return pinned_reuse<false>();
  if (name == "pinned-reused-before-copy-fixed") return pinned_reuse<true>();
  if (name == "collective-freed-in-flight") return collective_reuse<false>();
  if (name == "collective-freed-in-flight-fixed") return collective_reuse<true>();
  *known = false;
  return false;
}

}  // namespace planted
