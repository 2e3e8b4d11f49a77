// parallel/store.cpp: TCPStore -- the key-value server thread and its clients.
//
// Read it in three parts: the wire format (encoding, and the parser that reads one request from the
// bytes received so far), the server (one poll() loop over a wake-up eventfd, the listener and every
// connection), and the client (one connection per TCPStore object, one request at a time).
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
#include "parallel/store.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "parallel/socket.h"

namespace ringgrad {
namespace parallel {
namespace {

using detail::str;
using net::Clock;
using net::Deadline;
using std::chrono::milliseconds;

// ---- wire format -------------------------------------------------------------------------------

enum class Command : uint8_t { Set = 1, Get = 2, Add = 3, Wait = 4, Check = 5, Delete = 6, Ping = 7 };
enum class Status : uint8_t { Ok = 0, Error = 1, TimedOut = 2 };

constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxKeys = 1024;
// The longest a get or wait may be held (30 days): keeps deadline arithmetic far from overflow.
constexpr int64_t kMaxHoldMs = int64_t{30} * 24 * 3600 * 1000;
// How long past its own timeout a client waits for the server's "timed out" reply before it
// concludes that the server itself is stuck.
constexpr milliseconds kReplyGrace(2000);
// A new connection must present its job token within this time, or it is closed.
constexpr milliseconds kHandshakeLimit(5000);
// How much the server reads from one connection per poll round, so one big set cannot starve the rest.
constexpr size_t kReadChunkBytes = 64 << 10;
constexpr size_t kReadRoundBytes = 1 << 20;

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

struct Request {
  Command command = Command::Ping;
  std::vector<std::string> keys;
  std::vector<uint8_t> value;  // set
  int64_t number = 0;          // add: the delta; get, wait: how long the server may hold it (ms)
};

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

enum class Parse { Incomplete, Malformed, Complete };

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

// 'key' for messages; a long key is cut, so a 4 KiB key does not bury the rest of the message.
std::string quoted(const std::string& key) {
  return key.size() <= 80 ? "'" + key + "'" : "'" + key.substr(0, 77) + "...'";
}
// 'a', 'b', 'c'; past eight keys, only a count of the rest.
std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) out += (i ? ", " : "") + quoted(keys[i]);
  if (keys.size() > 8) out += str(" and ", keys.size() - 8, " more");
  return out;
}

Deadline deadline_after(milliseconds timeout) {
  return net::deadline_in(std::clamp(timeout, milliseconds(0), milliseconds(kMaxHoldMs)));
}

// ---- server ------------------------------------------------------------------------------------

// One client connection, as the server sees it.
struct Connection {
  explicit Connection(net::Socket s) : socket(std::move(s)) {}
  net::Socket socket;
  bool authenticated = false;  // has presented the job token, or none is required
  bool dead = false;           // closed at the end of this poll round
  // The client shut its sending side (or its connection broke): what it sent is still served, and
  // the connection closes once nothing is held or left to send.
  bool read_closed = false;
  std::vector<uint8_t> in;     // received, not yet parsed
  std::vector<uint8_t> out;    // the reply being sent
  size_t out_sent = 0;
  // A get or wait that cannot be answered yet. It is listed in the server's waiters under
  // `waiting_on`, one of its missing keys, and answered when that key is set or `deadline` passes.
  std::optional<Request> held;
  std::string waiting_on;
  Clock::time_point deadline;  // of the held request, or of the token handshake
};

class StoreServer {
 public:
  explicit StoreServer(const TCPStoreOptions& options);
  ~StoreServer();  // wakes the loop, waits for the thread, closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return listener_.port(); }
  // Connections closed so far for a wrong job token, and for presenting none within the handshake
  // limit (a stopped client, a port scanner): a rendezvous that times out says so.
  int64_t refused_token() const { return refused_token_.load(); }
  int64_t refused_silent() const { return refused_silent_.load(); }

 private:
  using ConnId = uint64_t;  // never reused, unlike fds, so a stale waiter entry cannot hit a newcomer

  void run();
  int next_timeout_ms() const;
  void accept_all();
  void handle(ConnId id, short revents);
  void receive(Connection& c);
  void flush(Connection& c);
  bool authenticate(Connection& c);
  void serve(ConnId id, Connection& c);
  void execute(ConnId id, Connection& c, Request req);
  void add(Connection& c, const std::string& key, int64_t delta);
  void hold(ConnId id, Connection& c, Request req);
  void try_release(ConnId id, Connection& c);
  void wake_waiters(const std::string& key);
  void expire_deadlines();
  void unlist(ConnId id, Connection& c);
  void close_dead();
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  net::Listener listener_;
  std::string token_;
  int64_t max_value_bytes_;
  int wake_fd_ = -1;  // the destructor writes here to wake poll()
  std::atomic<int64_t> refused_token_{0}, refused_silent_{0};  // written by the server thread only
  bool accept_failure_reported_ = false;

  // Touched by the server thread only, so they need no lock.
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  std::map<ConnId, Connection> conns_;
  std::unordered_map<std::string, std::vector<ConnId>> waiters_;  // key -> connections held on it
  ConnId next_id_ = 0;

  std::thread thread_;  // last: starts once everything above exists
};

// Every rank holds one connection to the store, so a large job needs more descriptors than the
// usual soft limit of 1024: take what the hard limit allows, as servers do.
void raise_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);  // best effort: the accept error says what to do otherwise
  }
}

StoreServer::StoreServer(const TCPStoreOptions& options)
    : listener_(options.host, options.port), token_(options.token), max_value_bytes_(options.max_value_bytes) {
  raise_fd_limit();
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  RINGGRAD_CHECK(wake_fd_ >= 0, "TCPStore server: cannot create an eventfd: ", std::system_category().message(errno));
  thread_ = std::thread([this] { run(); });
}

StoreServer::~StoreServer() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t ignored = ::write(wake_fd_, &one, sizeof one);  // cannot fail: counter far from full
  thread_.join();
  ::close(wake_fd_);
}

void StoreServer::run() {
  std::vector<pollfd> fds;
  std::vector<ConnId> ids;  // ids[i] owns fds[i + 2]
  for (;;) {
    fds.assign({{wake_fd_, POLLIN, 0}, {listener_.fd(), POLLIN, 0}});
    ids.clear();
    for (const auto& [id, c] : conns_) {
      // While a reply is going out, read nothing more: a client that does not read its replies
      // cannot make us buffer without limit. Hang-ups and errors are reported either way.
      // A half-closed client has nothing more to read (poll would report its EOF forever).
      const short events = !c.out.empty() ? POLLOUT : c.read_closed ? 0 : POLLIN;
      fds.push_back({c.socket.fd(), events, 0});
      ids.push_back(id);
    }
    if (::poll(fds.data(), fds.size(), next_timeout_ms()) < 0) {
      if (errno == EINTR) continue;
      // Cannot happen with valid fds. Stop rather than spin, and close every connection, so each
      // client hears of it at once instead of at its deadline.
      std::cerr << "ringgrad TCPStore server: poll failed (" << std::system_category().message(errno)
                << "); stopping\n";
      waiters_.clear();
      conns_.clear();
      return;
    }
    if (fds[0].revents != 0) return;  // the destructor is waiting for us
    if (fds[1].revents != 0) accept_all();
    for (size_t i = 2; i < fds.size(); ++i)
      if (fds[i].revents != 0) handle(ids[i - 2], fds[i].revents);
    expire_deadlines();
    close_dead();
  }
}

// Until the nearest held request or handshake expires; -1 (forever) when there is none.
int StoreServer::next_timeout_ms() const {
  std::optional<Clock::time_point> nearest;
  for (const auto& [id, c] : conns_)
    if (c.held || !c.authenticated) nearest = nearest ? std::min(*nearest, c.deadline) : c.deadline;
  if (!nearest) return -1;
  const int64_t ms = std::chrono::ceil<milliseconds>(*nearest - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

void StoreServer::accept_all() {
  for (;;) {
    net::Socket s;
    try {
      s = listener_.try_accept();
      if (!s.valid()) return;
      s.set_nodelay();
    } catch (const Error& e) {
      // Out of fds, most likely: the connection stays in the backlog. Pause briefly, so the loop
      // does not spin on a listener that stays readable, and keep serving the others -- but say so
      // once: the clients left in the backlog only see a handshake that nobody answers.
      if (!accept_failure_reported_) {
        accept_failure_reported_ = true;
        std::cerr << "ringgrad TCPStore server: " << e.what() << "; clients wait in the backlog (out of file "
                  << "descriptors? raise `ulimit -n`)\n";
      }
      std::this_thread::sleep_for(milliseconds(10));
      return;
    }
    Connection c(std::move(s));
    c.authenticated = token_.empty();
    c.deadline = Clock::now() + kHandshakeLimit;
    conns_.emplace(next_id_++, std::move(c));
  }
}

void StoreServer::handle(ConnId id, short revents) {
  Connection& c = conns_.at(id);
  try {
    if (revents & (POLLIN | POLLHUP | POLLERR)) receive(c);
    if (revents & POLLOUT) flush(c);
    serve(id, c);
  } catch (const std::exception&) {
    // The client closed its end, or its requests could not be served (out of memory): drop this
    // connection only; the others never notice.
    c.dead = true;
  }
}

// Appends what the client has sent to c.in, at most kReadRoundBytes per round. When the client has
// closed its end, marks it read_closed: the complete requests it sent before are still answered
// (a client may send its last request and half-close), a truncated one is dropped.
void StoreServer::receive(Connection& c) {
  for (size_t round = 0; round < kReadRoundBytes;) {
    const size_t old_size = c.in.size();
    c.in.resize(old_size + kReadChunkBytes);
    size_t n = 0;
    try {
      n = c.socket.recv_some(c.in.data() + old_size, kReadChunkBytes, "TCPStore server");
    } catch (const Error&) {
      c.in.resize(old_size);
      c.read_closed = true;
      return;
    }
    c.in.resize(old_size + n);
    if (n == 0) return;  // nothing more for now
    round += n;
  }
}

// Sends as much of c's reply as the socket takes now; poll() reports when the rest can go.
void StoreServer::flush(Connection& c) {
  try {
    while (c.out_sent < c.out.size()) {
      const size_t n = c.socket.send_some(c.out.data() + c.out_sent, c.out.size() - c.out_sent, "TCPStore server");
      if (n == 0) return;
      c.out_sent += n;
    }
    c.out.clear();
    c.out_sent = 0;
  } catch (const Error&) {
    c.dead = true;
  }
}

// Reads the job token, [u32 n][n bytes], from the front of c.in. True once it has been presented;
// c is marked dead as soon as it cannot be (a wrong length -- an oversized one included -- is
// refused before its bytes are read).
bool StoreServer::authenticate(Connection& c) {
  if (c.in.size() < 4) return false;
  const uint32_t n = load_u32(c.in.data());
  if (n != token_.size()) {
    c.dead = true;
    ++refused_token_;
    return false;
  }
  if (c.in.size() < 4 + size_t{n}) return false;
  const std::string got(c.in.begin() + 4, c.in.begin() + 4 + n);
  if (!net::tokens_equal(got, token_)) {
    c.dead = true;
    ++refused_token_;
    return false;
  }
  c.in.erase(c.in.begin(), c.in.begin() + 4 + n);
  c.authenticated = true;
  return true;
}

// Answers c's requests in order, until one is incomplete, is held, or its reply cannot all go out now.
void StoreServer::serve(ConnId id, Connection& c) {
  if (c.dead || (!c.authenticated && !authenticate(c))) return;
  while (!c.dead) {
    if (c.held) {
      // Our client sends nothing while its request is held: anything else is not our protocol.
      if (!c.in.empty()) c.dead = true;
      return;
    }
    if (!c.out.empty()) return;
    Request req;
    size_t used = 0;
    const Parse parsed = parse_request(c.in, max_value_bytes_, req, used);
    if (parsed == Parse::Incomplete) return;
    if (parsed == Parse::Malformed) {
      c.dead = true;  // no reply: a peer that speaks another protocol would not understand one
      return;
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(used));
    execute(id, c, std::move(req));
    flush(c);
  }
}

void StoreServer::execute(ConnId id, Connection& c, Request req) {
  const std::string key = req.keys.empty() ? std::string() : req.keys[0];
  switch (req.command) {
    case Command::Set:
      data_[key] = std::move(req.value);
      put_u8(c.out, static_cast<uint8_t>(Status::Ok));
      wake_waiters(key);
      return;
    case Command::Get:
    case Command::Wait:
      hold(id, c, std::move(req));  // answered at once when its keys exist
      return;
    case Command::Add:
      add(c, key, req.number);
      return;
    case Command::Check:
      put_u8(c.out, static_cast<uint8_t>(Status::Ok));
      put_u8(c.out, missing(req.keys).empty() ? 1 : 0);
      return;
    case Command::Delete:
      put_u8(c.out, static_cast<uint8_t>(Status::Ok));
      put_u8(c.out, data_.erase(key) > 0 ? 1 : 0);
      return;
    case Command::Ping:
      put_u8(c.out, static_cast<uint8_t>(Status::Ok));
      return;
  }
}

void StoreServer::add(Connection& c, const std::string& key, int64_t delta) {
  int64_t current = 0;
  const auto it = data_.find(key);
  std::string problem;
  int64_t sum = 0;
  if (it != data_.end() && !parse_counter(it->second, current))
    problem = str("expected the value of ", quoted(key), " to be an integer in decimal text, got ",
                  it->second.size(), " bytes that are not one");
  else if (__builtin_add_overflow(current, delta, &sum))
    problem = str("adding ", delta, " to ", current, " (the value of ", quoted(key), ") overflows int64");
  if (!problem.empty()) {
    put_u8(c.out, static_cast<uint8_t>(Status::Error));
    put_string(c.out, problem);
    return;
  }
  const std::string text = std::to_string(sum);
  data_[key].assign(text.begin(), text.end());
  put_u8(c.out, static_cast<uint8_t>(Status::Ok));
  put_i64(c.out, sum);
  wake_waiters(key);
}

void StoreServer::hold(ConnId id, Connection& c, Request req) {
  c.deadline = Clock::now() + milliseconds(std::clamp<int64_t>(req.number, 0, kMaxHoldMs));
  c.held = std::move(req);
  try_release(id, c);
}

// Answers c's held get or wait if every key it needs exists; otherwise lists c under a missing key.
void StoreServer::try_release(ConnId id, Connection& c) {
  const std::vector<std::string> absent = missing(c.held->keys);
  if (!absent.empty()) {
    c.waiting_on = absent[0];
    waiters_[absent[0]].push_back(id);
    return;
  }
  put_u8(c.out, static_cast<uint8_t>(Status::Ok));
  if (c.held->command == Command::Get) {
    const std::vector<uint8_t>& value = data_.at(c.held->keys[0]);
    put_bytes(c.out, value.data(), value.size());
  }
  c.held.reset();
}

// A key was set: look again at every request held on it. Each is answered, or -- a wait still
// lacking other keys -- listed under the next one it lacks.
void StoreServer::wake_waiters(const std::string& key) {
  const auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const std::vector<ConnId> ids = std::move(it->second);
  waiters_.erase(it);
  for (const ConnId id : ids) {
    const auto found = conns_.find(id);
    if (found == conns_.end() || found->second.dead || !found->second.held) continue;
    Connection& c = found->second;
    c.waiting_on.clear();
    try_release(id, c);
    flush(c);
  }
}

// Answers held requests whose time is up ("timed out", with the keys still missing), and closes
// connections that have not presented their token in time.
void StoreServer::expire_deadlines() {
  const Clock::time_point now = Clock::now();
  for (auto& [id, c] : conns_) {
    if (c.dead || now < c.deadline) continue;
    if (!c.authenticated) {
      c.dead = true;
      ++refused_silent_;
      continue;
    }
    if (!c.held) continue;
    unlist(id, c);
    try {
      const std::vector<std::string> absent = missing(c.held->keys);
      put_u8(c.out, static_cast<uint8_t>(Status::TimedOut));
      put_u32(c.out, static_cast<uint32_t>(absent.size()));
      for (const std::string& key : absent) put_string(c.out, key);
      c.held.reset();
      flush(c);
    } catch (const std::exception&) {
      c.dead = true;  // out of memory for the reply: drop this client rather than the server
    }
  }
}

void StoreServer::unlist(ConnId id, Connection& c) {
  if (c.waiting_on.empty()) return;
  const auto it = waiters_.find(c.waiting_on);
  if (it != waiters_.end()) {
    std::vector<ConnId>& ids = it->second;
    ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    if (ids.empty()) waiters_.erase(it);
  }
  c.waiting_on.clear();
}

void StoreServer::close_dead() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    Connection& c = it->second;
    // A half-closed client is closed once everything it asked is answered -- and at once if it is
    // waiting in a get or wait: our clients never half-close while waiting, and a peer that reset
    // the connection (which poll reports as a hang-up every round, whatever it is asked) can never
    // read the answer, so holding it would only spin the loop and keep its fd.
    if (c.read_closed && (c.held || c.out.empty())) c.dead = true;
    if (c.dead) {
      unlist(it->first, it->second);
      it = conns_.erase(it);  // the Socket closes its fd
    } else {
      ++it;
    }
  }
}

std::vector<std::string> StoreServer::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> absent;
  for (const std::string& key : keys)
    if (data_.count(key) == 0) absent.push_back(key);
  return absent;
}

// ---- client helpers ----------------------------------------------------------------------------

// Reads the result fields of one reply, each with the exchange's deadline and description.
struct ReplyReader {
  const net::Socket& socket;
  Deadline deadline;
  const std::string& what;

  uint8_t u8() const {
    uint8_t v = 0;
    socket.recv_all(&v, 1, deadline, what);
    return v;
  }
  uint32_t u32() const {
    uint8_t b[4];
    socket.recv_all(b, sizeof b, deadline, what);
    return load_u32(b);
  }
  int64_t i64() const {
    uint8_t b[8];
    socket.recv_all(b, sizeof b, deadline, what);
    return load_i64(b);
  }
  // [u32 n][n bytes], refusing an n over `max_bytes` before allocating for it.
  std::vector<uint8_t> bytes(uint64_t max_bytes) const {
    const uint32_t n = u32();
    RINGGRAD_CHECK(n <= max_bytes, what, ": the store's reply announces ", n, " bytes, over the limit of ", max_bytes,
                   " (a store of another version, or not a store at all, at ", socket.peer(), "?)");
    std::vector<uint8_t> out(n);
    socket.recv_all(out.data(), n, deadline, what);
    return out;
  }
  std::string text(uint64_t max_bytes) const {
    const std::vector<uint8_t> b = bytes(max_bytes);
    return std::string(b.begin(), b.end());
  }
};

void check_key(const std::string& what, const std::string& key) {
  RINGGRAD_CHECK(key.size() <= kMaxKeyBytes, what, ": expected a key of at most ", kMaxKeyBytes, " bytes, got ",
                 key.size(), " bytes");
}

void check_keys(const std::string& what, const std::vector<std::string>& keys) {
  RINGGRAD_CHECK(keys.size() <= kMaxKeys, what, ": expected at most ", kMaxKeys, " keys in one call, got ",
                 keys.size());
  for (const std::string& key : keys) check_key(what, key);
}

}  // namespace

// ---- client ------------------------------------------------------------------------------------

struct TCPStore::Impl {
  TCPStoreOptions options;
  std::unique_ptr<StoreServer> server;  // on the is_server process only
  int port = 0;                         // where the store listens (the server's, when port 0 was asked)
  std::string address;                  // "host:port", for messages
  std::mutex mutex;                     // one exchange at a time on `socket`
  net::Socket socket;  // last, so it closes before the server stops; reopened after a failed exchange

  // What came back for a get or wait: ok, or "timed out" with the keys still missing.
  struct Outcome {
    bool timed_out = false;
    std::vector<std::string> missing;
  };

  void connect(milliseconds timeout);
  template <typename ReadResult>
  Outcome exchange(const std::string& what, const std::vector<uint8_t>& request, milliseconds timeout,
                   milliseconds reply_timeout, ReadResult read_result);
  [[noreturn]] void throw_timed_out(const std::string& what, milliseconds timeout, const Outcome& outcome) const;
};

// Opens the connection and shakes hands: the job token, then a ping the server answers only if it
// accepted the token. A failed handshake is reported once, here, as what was seen -- the store
// closed the connection (a store refuses a wrong token that way), nothing answered, or something
// answered that is not a store -- and not later as a mystery on the first get.
void TCPStore::Impl::connect(milliseconds timeout) {
  const Deadline deadline = deadline_after(timeout);
  std::optional<net::WaitReporter> reporter;
  if (options.report_waiting) {
    reporter.emplace([this, timeout](milliseconds waited) {
      std::fprintf(stderr, "rendezvous: waiting for rank 0's store at %s: nothing listens there yet (%lld s of %lld s)\n",
                   address.c_str(), static_cast<long long>(waited.count() / 1000),
                   static_cast<long long>(timeout.count() / 1000));
    });
  }
  net::Socket s = net::connect_to(options.host, port, deadline, "TCPStore: connecting to the store",
                                  reporter ? &*reporter : nullptr);
  s.set_nodelay();
  // A live store answers the handshake in microseconds, so it gets a short limit of its own rather
  // than the whole timeout: whatever stays silent that long is not a store that will answer.
  const Deadline handshake = std::min(deadline, Clock::now() + kHandshakeLimit);
  const milliseconds handshake_ms = std::min(kHandshakeLimit, std::chrono::ceil<milliseconds>(handshake - Clock::now()));
  const std::string ours = options.token.empty() ? "sends none" : str("sends one of ", options.token.size(), " bytes");
  uint8_t status = 0xff;
  switch (net::handshake(s, options.token, request_header(Command::Ping, {}), handshake, status)) {
    case net::Handshake::Answered:
      break;
    case net::Handshake::Closed:
      throw Error(str("TCPStore: the store at ", address, " did not accept this connection: it closed it without ",
                      "answering the handshake, as a ringgrad store does when the job token differs. Every process ",
                      "of a job must use the same RINGGRAD_JOB_TOKEN, and this one ", ours));
    case net::Handshake::Silent:
      throw Error(str("TCPStore: connected to ", address, ", but nothing answered the handshake within ",
                      handshake_ms.count(), " ms: the process listening there is not a ringgrad store, or it is ",
                      "stopped (a rank 0 suspended by Ctrl-Z or SIGSTOP accepts connections but never answers); ",
                      "check MASTER_ADDR and MASTER_PORT"));
  }
  // Whatever answered is not a store of ours: an HTTP server, say, behind a mistyped port.
  RINGGRAD_CHECK(status == static_cast<uint8_t>(Status::Ok), "TCPStore: expected a TCPStore at ", address,
                 ", but it answered the handshake with byte ", int{status}, " instead of status 0; do MASTER_ADDR ",
                 "and MASTER_PORT point at another service?");
  socket = std::move(s);
}

// One request and its reply. Holds the lock throughout. If the exchange does not finish -- the
// store closed, a deadline passed -- the connection is closed: part of the reply may still be on
// its way, and the next call starts on a fresh connection rather than read it as its own.
template <typename ReadResult>
TCPStore::Impl::Outcome TCPStore::Impl::exchange(const std::string& what, const std::vector<uint8_t>& request,
                                                 milliseconds timeout, milliseconds reply_timeout,
                                                 ReadResult read_result) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!socket.valid()) connect(timeout);  // the store's timeout now, which diagnostics may have shortened
  Outcome outcome;
  Status status = Status::Ok;
  std::string message;
  try {
    const Deadline deadline = deadline_after(reply_timeout);
    socket.send_all(request.data(), request.size(), deadline, what);
    const ReplyReader reply{socket, deadline, what};
    status = static_cast<Status>(reply.u8());
    if (status == Status::Ok) {
      read_result(reply);
    } else if (status == Status::Error) {
      message = reply.text(1 << 20);
    } else if (status == Status::TimedOut) {
      outcome.timed_out = true;
      const uint32_t n = reply.u32();
      RINGGRAD_CHECK(n <= kMaxKeys, what, ": the store's reply lists ", n, " missing keys, over the limit of ",
                     kMaxKeys);
      for (uint32_t i = 0; i < n; ++i) outcome.missing.push_back(reply.text(kMaxKeyBytes));
    } else {
      throw Error(str(what, ": expected reply status 0, 1 or 2 from the store at ", address, ", got ", int(status)));
    }
  } catch (const Error&) {
    socket.close();
    throw;
  }
  RINGGRAD_CHECK(status != Status::Error, what, ": ", message, " (store at ", address, ")");
  return outcome;
}

void TCPStore::Impl::throw_timed_out(const std::string& what, milliseconds timeout, const Outcome& outcome) const {
  const std::string still_missing = outcome.missing.empty() ? "" : "; still missing: " + quoted(outcome.missing);
  throw Error(str(what, ": timed out after ", timeout.count(), " ms", still_missing, " (store at ", address, ")"));
}

TCPStore::TCPStore(const TCPStoreOptions& options) : impl_(std::make_unique<Impl>()) {
  RINGGRAD_CHECK(options.max_value_bytes >= 0 && options.max_value_bytes <= UINT32_MAX,
                 "TCPStore: expected max_value_bytes in [0, 4294967295] (lengths travel as u32), got ",
                 options.max_value_bytes);
  RINGGRAD_CHECK(options.token.size() <= net::kMaxTokenBytes, "TCPStore: expected a job token of at most ",
                 net::kMaxTokenBytes, " bytes, got ", options.token.size());
  impl_->options = options;
  set_timeout(options.timeout);
  if (options.is_server) impl_->server = std::make_unique<StoreServer>(options);
  impl_->port = impl_->server ? impl_->server->port() : options.port;
  impl_->address = str(options.host, ":", impl_->port);
  impl_->connect(options.timeout);  // the server process is a client too, like every rank
}

TCPStore::~TCPStore() = default;

int TCPStore::port() const { return impl_->port; }

TCPStore::Refused TCPStore::refused_connections() const {
  if (!impl_->server) return {};
  return {impl_->server->refused_token(), impl_->server->refused_silent()};
}

void TCPStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  const std::string what = "TCPStore set(" + quoted(key) + ")";
  check_key(what, key);
  RINGGRAD_CHECK(static_cast<int64_t>(value.size()) <= impl_->options.max_value_bytes, what,
                 ": expected a value of at most ", impl_->options.max_value_bytes,
                 " bytes (TCPStoreOptions::max_value_bytes), got ", value.size(), " bytes");
  std::vector<uint8_t> request = request_header(Command::Set, {key});
  put_bytes(request, value.data(), value.size());
  impl_->exchange(what, request, timeout(), timeout(), [](const ReplyReader&) {});
}

std::vector<uint8_t> TCPStore::get(const std::string& key) {
  const std::string what = "TCPStore get(" + quoted(key) + ")";
  check_key(what, key);
  std::vector<uint8_t> request = request_header(Command::Get, {key});
  put_i64(request, timeout().count());
  std::vector<uint8_t> value;
  const uint64_t max_bytes = static_cast<uint64_t>(impl_->options.max_value_bytes);
  const Impl::Outcome outcome = impl_->exchange(what, request, timeout(), timeout() + kReplyGrace,
                                                [&](const ReplyReader& reply) { value = reply.bytes(max_bytes); });
  if (outcome.timed_out) impl_->throw_timed_out(what, timeout(), Impl::Outcome{});
  return value;
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  const std::string what = "TCPStore add(" + quoted(key) + ", " + std::to_string(delta) + ")";
  check_key(what, key);
  std::vector<uint8_t> request = request_header(Command::Add, {key});
  put_i64(request, delta);
  int64_t sum = 0;
  impl_->exchange(what, request, timeout(), timeout(), [&](const ReplyReader& reply) { sum = reply.i64(); });
  return sum;
}

void TCPStore::wait(const std::vector<std::string>& keys) {
  const std::string what = "TCPStore wait([" + quoted(keys) + "])";
  check_keys(what, keys);
  std::vector<uint8_t> request = request_header(Command::Wait, keys);
  put_i64(request, timeout().count());
  const Impl::Outcome outcome = impl_->exchange(what, request, timeout(), timeout() + kReplyGrace, [](const ReplyReader&) {});
  if (outcome.timed_out) impl_->throw_timed_out(what, timeout(), outcome);
}

std::vector<std::string> TCPStore::wait_for(const std::vector<std::string>& keys, milliseconds limit) {
  const std::string what = "TCPStore wait_for([" + quoted(keys) + "])";
  check_keys(what, keys);
  std::vector<uint8_t> request = request_header(Command::Wait, keys);
  put_i64(request, limit.count());
  const Impl::Outcome outcome = impl_->exchange(what, request, timeout(), limit + kReplyGrace, [](const ReplyReader&) {});
  return outcome.timed_out ? outcome.missing : std::vector<std::string>{};
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  const std::string what = "TCPStore check([" + quoted(keys) + "])";
  check_keys(what, keys);
  bool all_exist = false;
  impl_->exchange(what, request_header(Command::Check, keys), timeout(), timeout(),
                  [&](const ReplyReader& reply) { all_exist = reply.u8() != 0; });
  return all_exist;
}

bool TCPStore::delete_key(const std::string& key) {
  const std::string what = "TCPStore delete_key(" + quoted(key) + ")";
  check_key(what, key);
  bool existed = false;
  impl_->exchange(what, request_header(Command::Delete, {key}), timeout(), timeout(),
                  [&](const ReplyReader& reply) { existed = reply.u8() != 0; });
  return existed;
}

}  // namespace parallel
}  // namespace ringgrad
