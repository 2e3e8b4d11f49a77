// parallel/socket.cpp: TCP with deadlines, on plain POSIX calls.
//
// Three habits run through the file:
//   - No call waits past its deadline. send/recv always go with MSG_DONTWAIT, whatever the socket's
//     mode, and the waiting is done by poll() with the milliseconds left.
//   - No call raises SIGPIPE: every send carries MSG_NOSIGNAL, so writing to a dead peer is an
//     error we can report ("connection closed by peer"), not a signal that kills the process.
//   - Every fd is created close-on-exec, so a process the job forks never inherits a connection
//     (which would keep it open after its owner died, hiding the death from the peer).
// Every call is retried when a signal interrupts it (EINTR).
#include "parallel/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <system_error>
#include <thread>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace parallel {
namespace {

using detail::str;
using std::chrono::milliseconds;

std::string errno_text(int err) { return std::system_category().message(err); }  // thread-safe, unlike strerror

// Milliseconds left until the deadline, as poll() wants them: rounded up (rounding down would wake
// poll a fraction early and spin), 0 once passed, capped to fit an int.
int ms_left(Deadline deadline) {
  const int64_t left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

// The time from now to the deadline in whole milliseconds: taken when a call starts, it is how long
// the call will have waited if it times out (a fresh deadline_in(3000ms) reports 3000, not 2999).
int64_t budget_ms(Deadline deadline) {
  const std::chrono::duration<double, std::milli> left = deadline - Clock::now();
  return std::max<int64_t>(0, static_cast<int64_t>(std::llround(left.count())));
}

// Waits until fd is ready for `events` or the deadline passes; false on timeout. Errors and hang-ups
// count as ready: the send or recv that follows reports them with the peer's name.
bool wait_ready(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc > 0) return true;
    if (rc == 0 && Clock::now() >= deadline) return false;
    if (rc < 0 && errno != EINTR) throw Error(str("poll on a socket failed: ", errno_text(errno)));
  }
}

// A reset or a broken pipe means the same as an orderly close: the peer is gone (a crashed process's
// sockets are closed by its kernel, with a reset when unread data was left).
bool peer_gone(int err) { return err == ECONNRESET || err == EPIPE || err == ENOTCONN; }

std::string progress(const char* verb, size_t done, size_t n) {
  return str(" (", verb, " ", done, " of ", n, " bytes)");
}

[[noreturn]] void throw_closed(const std::string& what, const std::string& peer, const char* verb, size_t done,
                               size_t n) {
  throw Error(str(what, ": connection closed by peer ", peer, progress(verb, done, n),
                  ": the other side closed it, or its process exited"));
}

// "10.0.0.2:29500", or "[::1]:29500" for IPv6, from a socket address.
std::string address_text(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST] = "?";
  char port[NI_MAXSERV] = "?";
  ::getnameinfo(addr, len, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
  return addr->sa_family == AF_INET6 ? str("[", host, "]:", port) : str(host, ":", port);
}

std::string host_port(const std::string& host, int port) { return str(host, ":", port); }

// getaddrinfo's answer, freed at scope exit.
struct AddrInfoDeleter {
  void operator()(addrinfo* list) const { ::freeaddrinfo(list); }
};
using AddrList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Resolves host:port for TCP. Returns null and sets *gai_error when the name does not resolve.
AddrList resolve(const std::string& host, int port, int* gai_error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  *gai_error = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  return AddrList(*gai_error == 0 ? list : nullptr);
}

int new_socket(int family, const std::string& what) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw Error(str(what, ": cannot create a socket: ", errno_text(errno)));
  return fd;
}

// One connection attempt to one address. Returns 0 and fills `out` when connected, else the errno
// (ETIMEDOUT when the deadline passed while the handshake was still in flight).
int try_connect_once(const addrinfo& addr, Deadline deadline, const std::string& peer, const std::string& what,
                     Socket& out) {
  Socket s(new_socket(addr.ai_family, what), peer);
  // A non-blocking connect answers EINPROGRESS, and an interrupted one (EINTR) carries on by itself:
  // either way poll() tells when it has finished, and SO_ERROR how.
  const int rc = ::connect(s.fd(), addr.ai_addr, addr.ai_addrlen);
  if (rc < 0 && errno != EINPROGRESS && errno != EINTR) return errno;
  if (rc < 0) {
    if (!wait_ready(s.fd(), POLLOUT, deadline)) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len) < 0) return errno;
    if (err != 0) return err;
  }
  s.set_nonblocking(false);  // connected sockets are handed out in blocking mode; our calls never block anyway
  out = std::move(s);
  return 0;
}

// The peer is not listening yet (or its backlog overflowed): worth another try.
bool worth_retrying(int err) { return err == ECONNREFUSED || err == ECONNRESET; }

void encode_u32(uint32_t v, uint8_t out[4]) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t decode_u32(const uint8_t in[4]) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace

// ---- Socket ------------------------------------------------------------------------------------

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_), peer_(std::move(other.peer_)) { other.fd_ = -1; }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    peer_ = std::move(other.peer_);
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  // Not retried on EINTR: Linux has released the fd by then, and a retry could close a fd that
  // another thread has just been given.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::send_all(const void* data, size_t n, Deadline deadline, const std::string& what) const {
  RINGGRAD_CHECK(valid(), what, ": cannot send on a closed socket");
  const int64_t waited_ms = budget_ms(deadline);
  const char* bytes = static_cast<const char*>(data);
  size_t sent = 0;
  while (sent < n) {
    const ssize_t k = ::send(fd_, bytes + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0) {
      sent += static_cast<size_t>(k);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd_, POLLOUT, deadline))
        throw Error(str(what, ": timed out after ", waited_ms, " ms sending to ", peer_, progress("sent", sent, n)));
    } else if (peer_gone(errno)) {
      throw_closed(what, peer_, "sent", sent, n);
    } else if (errno != EINTR) {
      throw Error(str(what, ": send to ", peer_, " failed: ", errno_text(errno), progress("sent", sent, n)));
    }
  }
}

void Socket::recv_all(void* data, size_t n, Deadline deadline, const std::string& what) const {
  RINGGRAD_CHECK(valid(), what, ": cannot receive on a closed socket");
  const int64_t waited_ms = budget_ms(deadline);
  char* bytes = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    const ssize_t k = ::recv(fd_, bytes + got, n - got, MSG_DONTWAIT);
    if (k > 0) {
      got += static_cast<size_t>(k);
    } else if (k == 0 || peer_gone(errno)) {
      throw_closed(what, peer_, "received", got, n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd_, POLLIN, deadline))
        throw Error(
            str(what, ": timed out after ", waited_ms, " ms waiting for ", peer_, progress("received", got, n)));
    } else if (errno != EINTR) {
      throw Error(str(what, ": recv from ", peer_, " failed: ", errno_text(errno), progress("received", got, n)));
    }
  }
}

size_t Socket::send_some(const void* data, size_t n, const std::string& what) const {
  RINGGRAD_CHECK(valid(), what, ": cannot send on a closed socket");
  for (;;) {
    const ssize_t k = ::send(fd_, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (peer_gone(errno)) throw_closed(what, peer_, "sent", 0, n);
    if (errno != EINTR) throw Error(str(what, ": send to ", peer_, " failed: ", errno_text(errno)));
  }
}

size_t Socket::recv_some(void* data, size_t n, const std::string& what) const {
  RINGGRAD_CHECK(valid(), what, ": cannot receive on a closed socket");
  if (n == 0) return 0;  // recv of 0 bytes returns 0, which would read as "closed"
  for (;;) {
    const ssize_t k = ::recv(fd_, data, n, MSG_DONTWAIT);
    if (k > 0) return static_cast<size_t>(k);
    if (k == 0 || peer_gone(errno)) throw_closed(what, peer_, "received", 0, n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) throw Error(str(what, ": recv from ", peer_, " failed: ", errno_text(errno)));
  }
}

void Socket::set_nodelay() const {
  const int on = 1;
  if (::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) < 0)
    throw Error(str("socket to ", peer_, ": cannot set TCP_NODELAY: ", errno_text(errno)));
}

void Socket::set_buffer_sizes(int bytes) const {
  // The kernel may clamp the sizes (net.core.wmem_max/rmem_max); that is not an error.
  if (::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) < 0 ||
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) < 0)
    throw Error(str("socket to ", peer_, ": cannot set buffer sizes to ", bytes, " bytes: ", errno_text(errno)));
}

void Socket::set_nonblocking(bool on) const {
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) < 0)
    throw Error(str("socket to ", peer_, ": cannot change O_NONBLOCK: ", errno_text(errno)));
}

// ---- Listener ----------------------------------------------------------------------------------

Listener::Listener(const std::string& host, int port) : host_(host) {
  RINGGRAD_CHECK(port >= 0 && port <= 65535, "Listener: expected a port in [0, 65535] (0 = any free port), got ", port);
  const std::string where = host_port(host, port);
  int gai_error = 0;
  const AddrList addrs = resolve(host, port, &gai_error);
  RINGGRAD_CHECK(addrs, "Listener: cannot resolve host '", host, "': ", ::gai_strerror(gai_error));

  // The first address only: binding to a second family when the first fails would silently serve on
  // an address the clients were not told about.
  const addrinfo& addr = *addrs;
  socket_ = Socket(new_socket(addr.ai_family, "Listener on " + where), where);
  // SO_REUSEADDR lets a restarted job bind a port whose old connections linger in TIME_WAIT; Linux
  // still refuses it while another socket listens there, so "already in use" is still reported.
  const int on = 1;
  ::setsockopt(socket_.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (::bind(socket_.fd(), addr.ai_addr, addr.ai_addrlen) < 0) {
    const int err = errno;
    if (err == EADDRINUSE)
      throw Error(str("Listener: cannot listen on ", where,
                      ": address already in use (another process, perhaps an "
                      "earlier job, holds this port; pick another port, or 0 for any free one)"));
    throw Error(str("Listener: cannot bind ", where, ": ", errno_text(err)));
  }
  if (::listen(socket_.fd(), SOMAXCONN) < 0)
    throw Error(str("Listener: cannot listen on ", where, ": ", errno_text(errno)));

  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(socket_.fd(), reinterpret_cast<sockaddr*>(&bound), &len) < 0)
    throw Error(str("Listener on ", where, ": getsockname failed: ", errno_text(errno)));
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

Socket Listener::try_accept() const {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    // The listener is non-blocking; the accepted socket is not (accept4 does not pass O_NONBLOCK on).
    const int fd = ::accept4(socket_.fd(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd >= 0) return Socket(fd, address_text(reinterpret_cast<sockaddr*>(&addr), len));
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Socket();
    // A client that gave up between its SYN and our accept: skip it and look for the next one.
    if (errno == EINTR || errno == ECONNABORTED) continue;
    throw Error(str("Listener on ", host_port(host_, port_), ": accept failed: ", errno_text(errno)));
  }
}

Socket Listener::accept(Deadline deadline, const std::string& what) const {
  const int64_t waited_ms = budget_ms(deadline);
  for (;;) {
    Socket s = try_accept();
    if (s.valid()) return s;
    if (!wait_ready(socket_.fd(), POLLIN, deadline))
      throw Error(
          str(what, ": timed out after ", waited_ms, " ms waiting for a connection on ", host_port(host_, port_)));
  }
}

// ---- connect -----------------------------------------------------------------------------------

Socket connect_to(const std::string& host, int port, Deadline deadline, const std::string& what,
                  WaitReporter* reporter) {
  const std::string peer = host_port(host, port);
  const int64_t waited_ms = budget_ms(deadline);
  milliseconds pause(10);  // between attempts, doubling up to 200 ms: prompt, without hammering
  for (;;) {
    int gai_error = 0;
    const AddrList addrs = resolve(host, port, &gai_error);
    // EAI_AGAIN: the resolver is briefly unavailable, worth retrying; any other failure is final.
    RINGGRAD_CHECK(addrs || gai_error == EAI_AGAIN, what, ": cannot resolve host '", host,
                   "': ", ::gai_strerror(gai_error));
    std::string why = str("cannot resolve host '", host, "': ", ::gai_strerror(gai_error));
    if (addrs) {
      // Try every address the name has (localhost may be ::1 and 127.0.0.1; the server binds one).
      int err = 0;
      for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
        Socket s;
        err = try_connect_once(*a, deadline, peer, what, s);
        if (err == 0) return s;
        if (!worth_retrying(err)) break;
      }
      if (err == ETIMEDOUT)
        throw Error(str(what, ": could not connect to ", peer, " within ", waited_ms, " ms: no answer"));
      RINGGRAD_CHECK(worth_retrying(err), what, ": cannot connect to ", peer, ": ", errno_text(err));
      why = errno_text(err) + " (nothing listens there yet; is the server running?)";
    }
    if (Clock::now() >= deadline)
      throw Error(str(what, ": could not connect to ", peer, " within ", waited_ms, " ms: ", why));
    if (reporter != nullptr) reporter->poll();
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, milliseconds(200));
  }
}

Handshake handshake(const Socket& socket, const std::string& token, const std::vector<uint8_t>& hello,
                    Deadline deadline, uint8_t& answer) {
  try {
    send_token(socket, token, deadline);
    socket.send_all(hello.data(), hello.size(), deadline, "handshake");
  } catch (const Error&) {
    return Handshake::Closed;  // the kernel buffers a few bytes; failing to send them means it hung up
  }
  for (;;) {
    pollfd p{socket.fd(), POLLIN, 0};
    const int ready = ::poll(&p, 1, ms_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return Handshake::Silent;
    const ssize_t n = ::recv(socket.fd(), &answer, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    return n == 1 ? Handshake::Answered : Handshake::Closed;  // 0: an orderly close; < 0: a reset
  }
}

// ---- job token ---------------------------------------------------------------------------------

std::string job_token() {
  const char* token = std::getenv("RINGGRAD_JOB_TOKEN");
  return token != nullptr ? token : "";
}

void send_token(const Socket& socket, const std::string& token, Deadline deadline) {
  if (token.empty()) return;
  RINGGRAD_CHECK(token.size() <= kMaxTokenBytes, "send_token: expected a job token of at most ", kMaxTokenBytes,
                 " bytes, got ", token.size(), " bytes");
  std::string message(4, '\0');
  encode_u32(static_cast<uint32_t>(token.size()), reinterpret_cast<uint8_t*>(&message[0]));
  message += token;
  socket.send_all(message.data(), message.size(), deadline, "sending the job token");
}

bool check_token(const Socket& socket, const std::string& expected, Deadline deadline) {
  if (expected.empty()) return true;
  try {
    uint8_t length[4];
    socket.recv_all(length, sizeof length, deadline, "reading the job token");
    // A length that differs from ours (an oversized one included) is refused before reading on.
    const uint32_t n = decode_u32(length);
    if (n > kMaxTokenBytes || n != expected.size()) return false;
    std::string got(n, '\0');
    socket.recv_all(&got[0], n, deadline, "reading the job token");
    return tokens_equal(got, expected);
  } catch (const Error&) {
    return false;  // closed, or silent until the deadline: a missing token
  }
}

bool tokens_equal(const std::string& got, const std::string& expected) {
  if (got.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < got.size(); ++i) diff |= static_cast<unsigned char>(got[i] ^ expected[i]);
  return diff == 0;
}

}  // namespace parallel
}  // namespace ringgrad
