// examples/device_list.h: the --dp device list of the example programs.
//
//   const std::vector<Device> devices = parse_devices("cpu:0,cpu:1");
//   ensure_cpu_devices(devices);  // before the first use of any device
#pragma once

#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace ringgrad::examples {

// "cpu:0,cpu:1" -> {cpu:0, cpu:1}.
inline std::vector<Device> parse_devices(const std::string& list) {
  std::vector<Device> devices;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    devices.push_back(Device::parse(list.substr(begin, end - begin)));
    begin = end + 1;
  }
  return devices;
}

// Logical CPU devices must exist before first use: make enough for --dp unless the environment
// already chose (RINGGRAD_CPU_DEVICES).
inline void ensure_cpu_devices(const std::vector<Device>& devices) {
  int needed = 1;
  for (Device d : devices)
    if (d.is_cpu()) needed = std::max(needed, d.index + 1);
  if (needed > 1 && std::getenv("RINGGRAD_CPU_DEVICES") == nullptr) set_cpu_device_count(needed);
}

}  // namespace ringgrad::examples
