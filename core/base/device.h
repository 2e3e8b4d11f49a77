/// @file
/// core/base/device.h: the vocabulary of places -- a device kind, a device {kind, index}, and the
/// opaque stream handle work is queued on.
///
/// This is base-layer vocabulary, shared by core/ and kernels/ (like c10::Device under ATen): a
/// kernel needs to know which device and stream it runs on, never how devices get their threads.
/// The worker thread behind each device lives one layer up, in core/device.h.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace ringgrad {

/// The kinds of device a tensor can live on.
enum class DeviceKind : uint8_t { CPU, CUDA };

/// The device stream to run on: a cudaStream_t on CUDA, null on the CPU (whose kernels run on the
/// calling thread). Opaque here, so nothing above kernels/cuda needs CUDA's headers.
using Stream = void*;

/// A device: its kind and its index among the devices of that kind ("cpu:1", "cuda:0"). CPU devices
/// are logical (core/device.h): each has a worker thread, so several can compute at once.
struct Device {
  DeviceKind kind = DeviceKind::CPU;  ///< CPU or CUDA
  int index = 0;                      ///< which device of that kind, from 0

  static Device cpu(int index = 0) { return {DeviceKind::CPU, index}; }    ///< cpu:index
  static Device cuda(int index = 0) { return {DeviceKind::CUDA, index}; }  ///< cuda:index
  /// Parses "cpu", "cpu:1", "cuda", "cuda:3"; throws on anything else.
  static Device parse(const std::string& text);

  bool is_cpu() const { return kind == DeviceKind::CPU; }    ///< kind == DeviceKind::CPU
  bool is_cuda() const { return kind == DeviceKind::CUDA; }  ///< kind == DeviceKind::CUDA
  std::string str() const;                                   ///< "cpu:0", "cuda:1": what parse() reads back

  /// Same kind and index.
  friend bool operator==(Device a, Device b) { return a.kind == b.kind && a.index == b.index; }
  friend bool operator!=(Device a, Device b) { return !(a == b); }  ///< !(a == b)
  /// By kind, then index: CPU devices before CUDA ones (for sorted containers).
  friend bool operator<(Device a, Device b) { return a.kind != b.kind ? a.kind < b.kind : a.index < b.index; }
};

/// Prints d.str().
inline std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace ringgrad
