// tests/core/test_devices_setup.cpp: gives the test executable four logical CPU devices, cpu:0 .. cpu:3.
//
// set_cpu_device_count() is only allowed before any device is used, and every test runs in the same
// process, so the count is set here by a static initializer, before main() and before any test makes
// a tensor. This is the only file that sets it: every other test may use cpu:0 .. cpu:3 (tests that
// need several devices still REQUIRE(cpu_device_count() >= k), so a wrong setup fails loudly).
#include <catch2/catch.hpp>

#include <ringgrad/core/device.h>
#include <ringgrad/core/base/error.h>

namespace {

struct FourLogicalCpuDevices {
  FourLogicalCpuDevices() {
    try {
      ringgrad::set_cpu_device_count(4);
    } catch (const ringgrad::Error&) {
      // Already fixed (something used a device first): the tests that need four devices will say so.
    }
  }
};

const FourLogicalCpuDevices g_four_logical_cpu_devices;

}  // namespace

TEST_CASE("cpu_device_count: the test executable runs with four logical CPU devices", "[tensor]") {
  CHECK(ringgrad::cpu_device_count() == 4);
}
