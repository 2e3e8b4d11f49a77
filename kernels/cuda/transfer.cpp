// kernels/cuda/transfer.cpp: dense byte copies between the host and GPUs and between two GPUs -- the
// CUDA backend's copy_between (kernels/backend.h states the contract).
//
// Budget : pure data movement: nbytes over the link. Host<->H200 over PCIe 5.0 x16 moves at most
//          ~55 GB/s from pinned memory, less from pageable memory (the driver stages it through its
//          own pinned buffer); GPU<->GPU over NVLink (H200: up to 900 GB/s per GPU) when peer access
//          is available, else through the host twice.
// Order  : every copy runs on a ringgrad stream, after the work already queued there, so it sees the
//          finished results of earlier kernels without a device-wide synchronisation.
//   host -> GPU   cudaMemcpyAsync on the destination's stream. From pageable memory it returns once
//                 the driver has staged the bytes, so the host may reuse its buffer at once; from
//                 pinned memory it would return before the DMA is done, so then we wait.
//   GPU -> host   cudaMemcpyAsync on the source's stream, then wait for that stream: the host is
//                 about to read the bytes.
//   GPU -> GPU    with peer access: the source's stream first waits (an event, not the host) for
//                 the destination's stream -- whose earlier work may still use the destination block
//                 -- then runs cudaMemcpyPeerAsync, and the destination's stream waits for the copy;
//                 the host never blocks. Without peer access: GPU -> pinned host buffer -> GPU.
#include <cstring>
#include <memory>

#include <ringgrad/core/base/error.h>
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/runtime.h"

namespace ringgrad {
namespace kernels {
namespace cuda {
namespace {

bool is_pinned_host(const void* ptr) {
  cudaPointerAttributes attributes{};
  // Pageable memory is reported as cudaMemoryTypeUnregistered, not as an error (CUDA >= 11).
  RINGGRAD_CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
  return attributes.type == cudaMemoryTypeHost;
}

void host_to_device(const void* src, int dst_device, void* dst, int64_t nbytes) {
  const cudaStream_t stream = stream_for(dst_device);
  CudaDeviceGuard guard(dst_device);
  RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(nbytes), cudaMemcpyHostToDevice, stream));
  if (is_pinned_host(src)) RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void device_to_host(int src_device, const void* src, void* dst, int64_t nbytes) {
  const cudaStream_t stream = stream_for(src_device);
  CudaDeviceGuard guard(src_device);
  RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(nbytes), cudaMemcpyDeviceToHost, stream));
  RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void peer_copy(int src_device, const void* src, int dst_device, void* dst, int64_t nbytes) {
  const cudaStream_t src_stream = stream_for(src_device), dst_stream = stream_for(dst_device);
  Event dst_ready(dst_device), copied(src_device);
  dst_ready.record(dst_stream);
  {
    CudaDeviceGuard guard(src_device);
    dst_ready.wait_in(src_stream);
    RINGGRAD_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, static_cast<size_t>(nbytes), src_stream));
    copied.record(src_stream);
  }
  CudaDeviceGuard guard(dst_device);
  copied.wait_in(dst_stream);
}

void staged_copy(int src_device, const void* src, int dst_device, void* dst, int64_t nbytes) {
  Allocator& pinned = cuda_backend_instance().pinned_allocator();
  void* buffer = pinned.allocate(nbytes, Device::cpu());
  try {
    device_to_host(src_device, src, buffer, nbytes);  // waits for the source stream
    host_to_device(buffer, dst_device, dst, nbytes);  // pinned source: waits for the destination stream
  } catch (...) {
    pinned.deallocate(buffer, nbytes, Device::cpu());
    throw;
  }
  pinned.deallocate(buffer, nbytes, Device::cpu());
}

}  // namespace

void copy_between(DeviceKind src_kind, int src_index, const void* src, DeviceKind dst_kind, int dst_index, void* dst,
                  int64_t nbytes) {
  RINGGRAD_CHECK(nbytes >= 0, "copy_between: expected a non-negative byte count, got ", nbytes);
  if (nbytes == 0) return;
  const bool src_gpu = src_kind == DeviceKind::CUDA, dst_gpu = dst_kind == DeviceKind::CUDA;
  if (src_gpu) check_device(src_index, "copy_between");
  if (dst_gpu) check_device(dst_index, "copy_between");

  if (!src_gpu && !dst_gpu) {
    std::memcpy(dst, src, static_cast<size_t>(nbytes));
  } else if (!src_gpu) {
    host_to_device(src, dst_index, dst, nbytes);
  } else if (!dst_gpu) {
    device_to_host(src_index, src, dst, nbytes);
  } else if (src_index == dst_index) {
    const cudaStream_t stream = stream_for(src_index);
    CudaDeviceGuard guard(src_index);
    RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(nbytes), cudaMemcpyDeviceToDevice, stream));
  } else if (can_access_peer(dst_index, src_index)) {
    peer_copy(src_index, src, dst_index, dst, nbytes);
  } else {
    staged_copy(src_index, src, dst_index, dst, nbytes);
  }
}

}  // namespace cuda

// ---- staging copies that overlap compute (core/cuda.h) ---------------------------------------------
// On the device's side stream (copy_stream_for), ordered with the compute stream by events: the
// host waits for the side stream only, never for kernels queued after the ready point.
namespace {
struct CudaReadyPoint final : ReadyPoint {
  explicit CudaReadyPoint(int device) : event(device) {}
  cuda::Event event;
};
const cuda::Event& event_of(const ReadyPoint& point) { return static_cast<const CudaReadyPoint&>(point).event; }
}  // namespace

std::unique_ptr<ReadyPoint> CudaBackend::mark_ready(int device) {
  cuda::check_device(device, "cuda_mark_ready");
  auto point = std::make_unique<CudaReadyPoint>(device);
  point->event.record(cuda::stream_for(device));
  return point;
}

void CudaBackend::copy_to_pinned(int device, const ReadyPoint& ready, const void* src, void* pinned_dst,
                                 int64_t nbytes) {
  RINGGRAD_CHECK(nbytes >= 0, "cuda_copy_to_pinned: expected a non-negative byte count, got ", nbytes);
  if (nbytes == 0) return;
  const cudaStream_t side = cuda::copy_stream_for(device);
  cuda::CudaDeviceGuard guard(device);
  event_of(ready).wait_in(side);
  RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(pinned_dst, src, static_cast<size_t>(nbytes), cudaMemcpyDeviceToHost, side));
  RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(side));
}

void CudaBackend::copy_from_pinned(int device, const ReadyPoint& after, const void* pinned_src, void* dst,
                                   int64_t nbytes) {
  RINGGRAD_CHECK(nbytes >= 0, "cuda_copy_from_pinned: expected a non-negative byte count, got ", nbytes);
  if (nbytes == 0) return;
  const cudaStream_t side = cuda::copy_stream_for(device), compute = cuda::stream_for(device);
  cuda::CudaDeviceGuard guard(device);
  event_of(after).wait_in(side);  // the destination's earlier producers (and readers) are done first
  RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(dst, pinned_src, static_cast<size_t>(nbytes), cudaMemcpyHostToDevice, side));
  cuda::Event copied(device);
  copied.record(side);
  copied.wait_in(compute);                           // compute-stream work queued from now on sees the bytes
  RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(side));  // the pinned source may be reused
}

}  // namespace kernels
}  // namespace ringgrad
