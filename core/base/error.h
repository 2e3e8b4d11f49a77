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

/// A string from outside -- a file's tensor names, its metadata -- as an error message may show it:
/// every byte outside printable ASCII as \xHH and a backslash as \\, so that a crafted name cannot
/// move the cursor, colour the terminal or begin a line that looks like another program's; then at
/// most `max_chars` of it, and its length when it was cut.
inline std::string printable(const std::string& text, size_t max_chars = 200) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && out.size() < max_chars; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\\') {
      out += "\\\\";
    } else if (byte >= 0x20 && byte < 0x7f) {
      out += static_cast<char>(byte);
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
    if (out.size() >= max_chars && i + 1 < text.size()) return out + "... (" + std::to_string(text.size()) + " bytes)";
  }
  return out;
}

}  // namespace detail
}  // namespace ringgrad

/// RINGGRAD_CHECK(cond, "op: expected ..., got ", x): throws ringgrad::Error when cond is false.
/// The message arguments are only evaluated on failure, so checks are cheap on the hot path.
#define RINGGRAD_CHECK(cond, ...)                                               \
  do {                                                                          \
    if (!(cond)) throw ::ringgrad::Error(::ringgrad::detail::str(__VA_ARGS__)); \
  } while (false)
