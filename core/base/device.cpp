// core/base/device.cpp: device names, both ways.
#include <ringgrad/core/base/device.h>

#include <ringgrad/core/base/error.h>

namespace ringgrad {

Device Device::parse(const std::string& text) {
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    const std::string digits = text.substr(colon + 1);
    RINGGRAD_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos,
                   "Device::parse: expected 'cpu:K' or 'cuda:K' with K a non-negative integer, got '", text, "'");
    RINGGRAD_CHECK(digits.size() <= 6, "Device::parse: device index out of range in '", text, "'");
    index = std::stoi(digits);
  }
  if (kind == "cpu") return cpu(index);
  if (kind == "cuda") return cuda(index);
  throw Error(detail::str("Device::parse: expected 'cpu:K' or 'cuda:K', got '", text, "'"));
}

std::string Device::str() const { return detail::str(is_cpu() ? "cpu:" : "cuda:", index); }

}  // namespace ringgrad
