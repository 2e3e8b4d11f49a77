// parallel/store_protocol.cpp: TCPStore's wire format -- encoding, and the parser that reads one
// request from the bytes received so far (the table of requests is in store_protocol.h).
//
// The parser is here rather than in the server because it IS the format: its limits are the ones
// the client checks before sending, and both must change together.
#include "parallel/store_protocol.h"

#include <algorithm>
#include <charconv>
#include <system_error>
#include <utility>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace parallel {
namespace {

using detail::str;
using std::chrono::milliseconds;

bool known_command(uint8_t c) {
  return c >= static_cast<uint8_t>(Command::Set) && c <= static_cast<uint8_t>(Command::Ping);
}

bool key_count_ok(Command command, uint32_t n) {
  switch (command) {
    case Command::Wait:
    case Command::Check: return n <= kMaxKeys;
    case Command::Ping: return n == 0;
    default: return n == 1;  // set, get, add, delete
  }
}

// Reads fields from the front of the bytes received so far. A read returns false when its bytes
// have not all arrived yet; take() hands out a pointer, so nothing is copied before it is complete.
class Cursor {
 public:
  explicit Cursor(const std::vector<uint8_t>& bytes) : data_(bytes.data()), size_(bytes.size()) {}
  bool take(size_t n, const uint8_t*& at) {
    if (size_ - used_ < n) return false;
    at = data_ + used_;
    used_ += n;
    return true;
  }
  bool u8(uint8_t& v) {
    const uint8_t* p;
    return take(1, p) && (v = *p, true);
  }
  bool u32(uint32_t& v) {
    const uint8_t* p;
    return take(4, p) && (v = load_u32(p), true);
  }
  bool i64(int64_t& v) {
    const uint8_t* p;
    return take(8, p) && (v = load_i64(p), true);
  }
  size_t used() const { return used_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t used_ = 0;
};

}  // namespace

void put_u8(std::vector<uint8_t>& out, uint8_t v) { out.push_back(v); }
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_i64(std::vector<uint8_t>& out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
}
// [u32 n][n bytes]; callers have checked n against its limit, which is far below 4 GiB.
void put_bytes(std::vector<uint8_t>& out, const void* data, size_t n) {
  put_u32(out, static_cast<uint32_t>(n));
  const auto* bytes = static_cast<const uint8_t*>(data);
  out.insert(out.end(), bytes, bytes + n);
}
void put_string(std::vector<uint8_t>& out, const std::string& s) { put_bytes(out, s.data(), s.size()); }

uint32_t load_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
int64_t load_i64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<int64_t>(v);
}

// The request header: command, key count, keys. The command's payload follows.
std::vector<uint8_t> request_header(Command command, const std::vector<std::string>& keys) {
  std::vector<uint8_t> out;
  put_u8(out, static_cast<uint8_t>(command));
  put_u32(out, static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) put_string(out, key);
  return out;
}

// Parses one request from the front of `bytes` into `req` and sets `used` to its length. Every
// length is checked against its limit as soon as it has arrived -- before the bytes it announces are
// waited for, let alone stored -- so a client announcing a 2 GiB key is turned away after 9 bytes.
Parse parse_request(const std::vector<uint8_t>& bytes, int64_t max_value_bytes, Request& req, size_t& used) {
  Cursor in(bytes);
  uint8_t command = 0;
  uint32_t key_count = 0;
  if (!in.u8(command)) return Parse::Incomplete;
  if (!known_command(command)) return Parse::Malformed;
  req.command = static_cast<Command>(command);
  if (!in.u32(key_count)) return Parse::Incomplete;
  if (!key_count_ok(req.command, key_count)) return Parse::Malformed;

  std::vector<std::pair<const uint8_t*, uint32_t>> keys;  // where each key lies in `bytes`
  keys.reserve(key_count);                                // at most kMaxKeys: checked above
  for (uint32_t i = 0; i < key_count; ++i) {
    uint32_t n = 0;
    const uint8_t* key = nullptr;
    if (!in.u32(n)) return Parse::Incomplete;
    if (n > kMaxKeyBytes) return Parse::Malformed;
    if (!in.take(n, key)) return Parse::Incomplete;
    keys.emplace_back(key, n);
  }

  const uint8_t* value = nullptr;
  uint32_t value_bytes = 0;
  if (req.command == Command::Set) {
    if (!in.u32(value_bytes)) return Parse::Incomplete;
    if (value_bytes > max_value_bytes) return Parse::Malformed;
    if (!in.take(value_bytes, value)) return Parse::Incomplete;
  } else if (req.command == Command::Get || req.command == Command::Add || req.command == Command::Wait) {
    if (!in.i64(req.number)) return Parse::Incomplete;
  }

  req.keys.clear();
  for (const auto& [at, n] : keys) req.keys.emplace_back(reinterpret_cast<const char*>(at), n);
  req.value.assign(value, value + value_bytes);
  used = in.used();
  return Parse::Complete;
}

// A counter's value is its decimal text ("3"), as in PyTorch; false for anything else.
bool parse_counter(const std::vector<uint8_t>& text, int64_t& value) {
  const char* first = reinterpret_cast<const char*>(text.data());
  const char* last = first + text.size();
  const auto [end, err] = std::from_chars(first, last, value);
  return err == std::errc() && end == last && !text.empty();
}

// 'key' for messages: escaped, since a key (or a list of missing keys) may come from the network
// and must not colour a terminal or start a fake log line; a long key is cut, so a 4 KiB key does
// not bury the rest of the message.
std::string quoted(const std::string& key) { return "'" + detail::printable(key, 80) + "'"; }
// 'a', 'b', 'c'; past eight keys, only a count of the rest.
std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) out += (i ? ", " : "") + quoted(keys[i]);
  if (keys.size() > 8) out += str(" and ", keys.size() - 8, " more");
  return out;
}

Deadline deadline_after(milliseconds timeout) {
  return deadline_in(std::clamp(timeout, milliseconds(0), milliseconds(kMaxHoldMs)));
}

}  // namespace parallel
}  // namespace ringgrad
