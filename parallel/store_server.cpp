// parallel/store_server.cpp: TCPStore's server -- one poll() loop over a wake-up eventfd, the
// listener and every connection, served by a thread inside rank 0's process.
//
// The loop never blocks on one client: requests are parsed from what has arrived so far
// (store_protocol.cpp), replies go out as far as the socket takes them, and a get or wait whose keys
// are missing is held -- listed under a missing key, answered when it is set or its time is up.
#include "parallel/store_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <iostream>
#include <system_error>
#include <utility>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace parallel {
namespace {

using detail::str;
using std::chrono::milliseconds;

// How much the server reads from one connection per poll round, so one big set cannot starve the rest.
constexpr size_t kReadChunkBytes = 64 << 10;
constexpr size_t kReadRoundBytes = 1 << 20;
// A connection's emptied buffer keeps at most this much capacity. Every rank holds a connection
// for the whole job, mostly idle: reads used to grow c.in by a 64 KiB chunk each, so 1000 idle
// connections kept 64 MB (and after they closed, the freed chunks stayed in malloc's arena).
constexpr size_t kIdleBufferBytes = 4 << 10;

// Empties `buffer`, and frees its memory when it has grown past kIdleBufferBytes (a big set or get).
void release(std::vector<uint8_t>& buffer) {
  if (buffer.capacity() > kIdleBufferBytes)
    std::vector<uint8_t>().swap(buffer);
  else
    buffer.clear();
}

// Every rank holds one connection to the store, so a large job needs more descriptors than the
// usual soft limit of 1024: take what the hard limit allows, as servers do.
void raise_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);  // best effort: the accept error says what to do otherwise
  }
}

// 'key' in an error sent to a client: cut but not escaped, since the client escapes the whole
// message it receives (it cannot trust the peer to have done so) and would escape it twice.
std::string quoted_raw(const std::string& key) {
  return key.size() <= 80 ? "'" + key + "'" : "'" + key.substr(0, 77) + "...'";
}

}  // namespace

StoreServer::StoreServer(const TCPStoreOptions& options)
    : listener_(options.host(), options.port()), token_(options.token()), max_value_bytes_(options.max_value_bytes()) {
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
    count_memory();
  }
}

// Publishes what the connections hold, for connections() and buffered_bytes().
void StoreServer::count_memory() {
  size_t bytes = 0;
  for (const auto& [id, c] : conns_) bytes += c.in.capacity() + c.out.capacity();
  connections_.store(static_cast<int64_t>(conns_.size()));
  buffered_bytes_.store(static_cast<int64_t>(bytes));
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
    Socket s;
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
// Reads go through one buffer shared by all connections, so c.in grows by what arrived (a request
// is usually tens of bytes), not by a whole chunk.
void StoreServer::receive(Connection& c) {
  if (read_buffer_.empty()) read_buffer_.resize(kReadChunkBytes);
  for (size_t round = 0; round < kReadRoundBytes;) {
    size_t n = 0;
    try {
      n = c.socket.recv_some(read_buffer_.data(), read_buffer_.size(), "TCPStore server");
    } catch (const Error&) {
      c.read_closed = true;
      return;
    }
    if (n == 0) return;  // nothing more for now
    c.in.insert(c.in.end(), read_buffer_.begin(), read_buffer_.begin() + static_cast<std::ptrdiff_t>(n));
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
    release(c.out);  // a reply of a 64 MiB get must not stay allocated for an idle connection
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
  if (!tokens_equal(got, token_)) {
    c.dead = true;
    ++refused_token_;
    return false;
  }
  c.in.erase(c.in.begin(), c.in.begin() + 4 + n);
  if (c.in.empty()) release(c.in);
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
    if (c.in.empty()) release(c.in);
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
    case Command::Add: add(c, key, req.number); return;
    case Command::Check:
      put_u8(c.out, static_cast<uint8_t>(Status::Ok));
      put_u8(c.out, missing(req.keys).empty() ? 1 : 0);
      return;
    case Command::Delete:
      put_u8(c.out, static_cast<uint8_t>(Status::Ok));
      put_u8(c.out, data_.erase(key) > 0 ? 1 : 0);
      return;
    case Command::Ping: put_u8(c.out, static_cast<uint8_t>(Status::Ok)); return;
  }
}

void StoreServer::add(Connection& c, const std::string& key, int64_t delta) {
  int64_t current = 0;
  const auto it = data_.find(key);
  std::string problem;
  int64_t sum = 0;
  if (it != data_.end() && !parse_counter(it->second, current))
    problem = str("expected the value of ", quoted_raw(key), " to be an integer in decimal text, got ",
                  it->second.size(), " bytes that are not one");
  else if (__builtin_add_overflow(current, delta, &sum))
    problem = str("adding ", delta, " to ", current, " (the value of ", quoted_raw(key), ") overflows int64");
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

}  // namespace parallel
}  // namespace ringgrad
