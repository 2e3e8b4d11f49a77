/// @file
/// core/base/error.h: ringgrad::Error and the checks that throw it.
///
/// Every bad input -- a shape, dtype or device mismatch, a bad file, a dead peer -- ends up here.
/// The message names the op, what was expected and what was got, so the reader of a log can fix the
/// call without opening a debugger. We throw, never exit(): a prototype embedding ringgrad must be
/// able to catch the error and carry on.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringgrad {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

/// str(a, b, c) streams its arguments into one string. Containers of integers (shapes, dims) print
/// as [2, 3], the way PyTorch prints sizes.
inline void append(std::ostringstream& os, const std::vector<int64_t>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
}
template <typename T>
void append(std::ostringstream& os, const T& value) {
  os << value;
}

template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (append(os, args), ...);
  return os.str();
}

}  // namespace detail
}  // namespace ringgrad

/// RINGGRAD_CHECK(cond, "op: expected ..., got ", x): throws ringgrad::Error when cond is false.
/// The message arguments are only evaluated on failure, so checks are cheap on the hot path.
#define RINGGRAD_CHECK(cond, ...)                                               \
  do {                                                                          \
    if (!(cond)) throw ::ringgrad::Error(::ringgrad::detail::str(__VA_ARGS__)); \
  } while (false)
