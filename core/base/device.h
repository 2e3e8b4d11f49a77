// core/base/device.h: the vocabulary of places -- a device kind, a device {kind, index}, and the
// opaque stream handle work is queued on.
//
// This is base-layer vocabulary, shared by core/ and kernels/ (like c10::Device under ATen): a
// kernel needs to know which device and stream it runs on, never how devices get their threads.
// The worker thread behind each device lives one layer up, in core/device.h.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace ringgrad {

enum class DeviceKind : uint8_t { CPU, CUDA };

// The device stream to run on: a cudaStream_t on CUDA, null on the CPU (whose kernels run on the
// calling thread). Opaque here, so nothing above kernels/cuda needs CUDA's headers.
using Stream = void*;

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static Device cpu(int index = 0) { return {DeviceKind::CPU, index}; }
  static Device cuda(int index = 0) { return {DeviceKind::CUDA, index}; }
  // Parses "cpu", "cpu:1", "cuda", "cuda:3"; throws on anything else.
  static Device parse(const std::string& text);

  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  std::string str() const;

  friend bool operator==(Device a, Device b) { return a.kind == b.kind && a.index == b.index; }
  friend bool operator!=(Device a, Device b) { return !(a == b); }
  friend bool operator<(Device a, Device b) { return a.kind != b.kind ? a.kind < b.kind : a.index < b.index; }
};

inline std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace ringgrad
