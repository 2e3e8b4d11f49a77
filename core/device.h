/// @file
/// core/device.h: where a tensor lives -- cpu:k or cuda:k -- and the worker thread behind each device.
///
/// The CPU backend exposes K *logical* devices cpu:0 .. cpu:K-1 (K from RINGGRAD_CPU_DEVICES, default 1,
/// or set_cpu_device_count() before first use). Each owns one worker thread and copies between them are
/// real copies, so multi-device code (DataParallel, DDP) runs and is tested on one CPU -- the same trick
/// JAX uses with --xla_force_host_platform_device_count.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <ostream>
#include <string>

#include <ringgrad/core/base/device.h>

namespace ringgrad {

// Device, DeviceKind and Stream are base-layer vocabulary (core/base/device.h).

/// Number of logical CPU devices. Fixed at first use (read from RINGGRAD_CPU_DEVICES).
int cpu_device_count();
/// Sets the logical CPU device count; only allowed before any device was used.
void set_cpu_device_count(int count);

/// Threads the CPU kernels started from the calling thread may use (its share of the cores), like
/// torch.set_num_threads but per thread: each logical device's worker sets its own share. Only large
/// kernels split (GEMMs, and from about 128K elements elementwise ops, reductions, softmax, copies);
/// small ones run on the calling thread.
void set_num_threads(int threads);

/// Throws unless `device` exists in this process (cpu:k with k < K; cuda:k with k < cuda_device_count()).
void check_device(Device device, const char* op);

/// Runs `task` on the device's worker thread and returns a future for its completion; an exception
/// thrown by the task is rethrown by future.get(). Called from that worker itself, it runs inline.
std::future<void> run_on(Device device, std::function<void()> task);

/// Queues `task` on the device's worker thread without waiting (the autograd engine's scheduler).
void post_to(Device device, std::function<void()> task);

/// The device whose worker thread is running the caller; {CPU, -1} on any other thread.
Device current_worker_device();

}  // namespace ringgrad
