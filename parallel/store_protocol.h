// parallel/store_protocol.h: TCPStore's wire format -- what the server (store_server.cpp) and the
// client (store_client.cpp) both need to agree on. PRIVATE to the library: not part of the public
// API (parallel/store.h is), and free to change with every version, since both ends ship together.
//
// Why a file of its own: the framing, the limits and the handshake constants are the contract
// between the two sides; kept here, one place says what travels, and neither side can drift.
//
// Requests, after the job token when there is one (see store.h for the framing):
//   command     keys      payload              result after an ok status
//   1 set       1         [u32 n][n bytes]     -
//   2 get       1         [i64 hold_ms]        [u32 n][n bytes]       held until the key exists
//   3 add       1         [i64 delta]          [i64 new value]
//   4 wait      0..1024   [i64 hold_ms]        -                      held until every key exists
//   5 check     0..1024   -                    [u8 1 if every key exists, else 0]
//   6 delete    1         -                    [u8 1 if the key existed, else 0]
//   7 ping      0         -                    -                      the handshake: the token was accepted
// Status: 0 ok; 1 error, then [u32 n][message]; 2 timed out (a get or wait held for hold_ms), then
// [u32 count] and the keys still missing, each [u32 n][bytes].
//
// The server holds a get or wait itself -- the connection is listed under a missing key and answered
// when that key is set -- so one waiting client never blocks the loop, and the timeout reply keeps
// the connection in step. The client's own deadline is a little later, for a server that is stuck.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/socket.h"

namespace ringgrad {
namespace parallel {

enum class Command : uint8_t { Set = 1, Get = 2, Add = 3, Wait = 4, Check = 5, Delete = 6, Ping = 7 };
enum class Status : uint8_t { Ok = 0, Error = 1, TimedOut = 2 };

constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxKeys = 1024;
// The longest a get or wait may be held (30 days): keeps deadline arithmetic far from overflow.
constexpr int64_t kMaxHoldMs = int64_t{30} * 24 * 3600 * 1000;
// How long past its own timeout a client waits for the server's "timed out" reply before it
// concludes that the server itself is stuck.
constexpr std::chrono::milliseconds kReplyGrace(2000);
// A new connection must present its job token within this time, or it is closed.
constexpr std::chrono::milliseconds kHandshakeLimit(5000);

// Encoding, all little-endian.
void put_u8(std::vector<uint8_t>& out, uint8_t v);
void put_u32(std::vector<uint8_t>& out, uint32_t v);
void put_i64(std::vector<uint8_t>& out, int64_t v);
// [u32 n][n bytes]; callers have checked n against its limit, which is far below 4 GiB.
void put_bytes(std::vector<uint8_t>& out, const void* data, size_t n);
void put_string(std::vector<uint8_t>& out, const std::string& s);
uint32_t load_u32(const uint8_t* p);
int64_t load_i64(const uint8_t* p);

// The request header: command, key count, keys. The command's payload follows.
std::vector<uint8_t> request_header(Command command, const std::vector<std::string>& keys);

struct Request {
  Command command = Command::Ping;
  std::vector<std::string> keys;
  std::vector<uint8_t> value;  // set
  int64_t number = 0;          // add: the delta; get, wait: how long the server may hold it (ms)
};

enum class Parse { Incomplete, Malformed, Complete };

// Parses one request from the front of `bytes` into `req` and sets `used` to its length. Every
// length is checked against its limit as soon as it has arrived -- before the bytes it announces are
// waited for, let alone stored -- so a client announcing a 2 GiB key is turned away after 9 bytes.
Parse parse_request(const std::vector<uint8_t>& bytes, int64_t max_value_bytes, Request& req, size_t& used);

// A counter's value is its decimal text ("3"), as in PyTorch; false for anything else.
bool parse_counter(const std::vector<uint8_t>& text, int64_t& value);

// Shared by both sides' messages and deadlines.
// 'key' for messages, escaped (detail::printable); a long key is cut, so a 4 KiB key does not bury
// the rest of the message.
std::string quoted(const std::string& key);
// 'a', 'b', 'c'; past eight keys, only a count of the rest.
std::string quoted(const std::vector<std::string>& keys);
// A deadline `timeout` from now, clamped to [0, kMaxHoldMs].
Deadline deadline_after(std::chrono::milliseconds timeout);

}  // namespace parallel
}  // namespace ringgrad
