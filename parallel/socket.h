/// @file
/// parallel/socket.h: the few TCP operations the store and the ring need, with deadlines.
///
/// Everything here blocks with a deadline and throws ringgrad::Error when it passes, naming what was
/// being done and with whom ("TCPStore get('rank0/addr'): timed out after 30000 ms waiting for
/// 127.0.0.1:29500"). A peer that closes its end (because it crashed: the kernel closes a dead
/// process's sockets) is reported at once, not at the deadline. Sockets are plain POSIX fds with
/// RAII ownership; nothing is left open on an error path.
///
/// Job token: when RINGGRAD_JOB_TOKEN is set (ringrun sets a random one per job), every connection --
/// to the store and between ring neighbours -- starts with the connecting side sending it, and the
/// accepting side closes any connection whose first message is not exactly that token. This keeps a
/// stray process (or another job on the same port) from joining or corrupting a job.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ringgrad {
namespace parallel {

using Clock = std::chrono::steady_clock;  ///< the clock of every deadline
using Deadline = Clock::time_point;       ///< when a blocking call gives up

/// The deadline `timeout` from now.
inline Deadline deadline_in(std::chrono::milliseconds timeout) { return Clock::now() + timeout; }

/// A connected TCP socket that owns its file descriptor (closed by the destructor; move-only). Every
/// blocking call takes a Deadline and throws ringgrad::Error naming `what` and the peer when it passes.
class Socket {
 public:
  Socket() = default;  ///< invalid: no descriptor
  /// Takes ownership of `fd`; `peer` ("host:port") names the other side in messages.
  explicit Socket(int fd, std::string peer = "") : fd_(fd), peer_(std::move(peer)) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept;             ///< takes other's descriptor, leaving it invalid
  Socket& operator=(Socket&& other) noexcept;  ///< closes this one's descriptor, then takes other's
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }                     ///< the descriptor, -1 when invalid
  bool valid() const { return fd_ >= 0; }            ///< holds a descriptor
  const std::string& peer() const { return peer_; }  ///< "host:port", for messages
  void close();                                      ///< closes the descriptor (if any); the socket becomes invalid

  ///@{
  /// Sends / receives exactly n bytes. Throws (naming `what` and the peer) on timeout, on a closed
  /// connection or on any socket error. recv_all of a connection closed before the first byte says
  /// "closed by peer".
  void send_all(const void* data, size_t n, Deadline deadline, const std::string& what) const;
  void recv_all(void* data, size_t n, Deadline deadline, const std::string& what) const;
  ///@}

  ///@{
  /// Non-blocking single attempts for the ring's full-duplex loop: return the bytes moved (0 when
  /// the call would block); throw on a closed connection or an error.
  size_t send_some(const void* data, size_t n, const std::string& what) const;
  size_t recv_some(void* data, size_t n, const std::string& what) const;
  ///@}

  void set_nodelay() const;                ///< TCP_NODELAY: small messages (store, latency) go out at once
  void set_buffer_sizes(int bytes) const;  ///< SO_SNDBUF/SO_RCVBUF: large transfers keep the link busy
  void set_nonblocking(bool on) const;     ///< O_NONBLOCK on or off (for send_some/recv_some)

 private:
  int fd_ = -1;
  std::string peer_;
};

/// A listening socket bound to `host` (an address or name; "127.0.0.1" by default in the callers,
/// never INADDR_ANY unless host is "0.0.0.0"), on `port` (0 picks a free one, see port()).
/// Binding a port in use throws "address already in use" with host:port.
class Listener {
 public:
  Listener(const std::string& host, int port);       ///< binds and listens; throws as the class says
  int port() const { return port_; }                 ///< the bound port (the one picked for port 0)
  const std::string& host() const { return host_; }  ///< as given
  int fd() const { return socket_.fd(); }            ///< the listening descriptor, for poll()
  /// Waits for one connection until the deadline.
  Socket accept(Deadline deadline, const std::string& what) const;
  /// One connection already waiting, or an invalid Socket when there is none: never blocks. For a
  /// server whose poll() loop has just seen the listener readable.
  Socket try_accept() const;

 private:
  Socket socket_;
  std::string host_;
  int port_ = 0;
};

/// Keeps a long wait from being silent: poll() it from the waiting loop and it calls `report` (with
/// the time waited so far) at a slow rhythm -- first after kFirstReport, then every kReportEvery --
/// so a user sees who is being waited for long before any timeout, without a screenful of lines.
class WaitReporter {
 public:
  static constexpr std::chrono::milliseconds kFirstReport{5000};   ///< the first report, after 5 s
  static constexpr std::chrono::milliseconds kReportEvery{15000};  ///< then one every 15 s
  /// Starts the clock now.
  explicit WaitReporter(std::function<void(std::chrono::milliseconds waited)> report)
      : report_(std::move(report)), start_(Clock::now()), next_(start_ + kFirstReport) {}
  /// Calls `report` if its time has come; cheap otherwise.
  void poll() {
    const Clock::time_point now = Clock::now();
    if (now < next_) return;
    next_ = now + kReportEvery;
    report_(std::chrono::duration_cast<std::chrono::milliseconds>(now - start_));
  }
  /// How long a waiting loop may sleep before it should poll() again.
  Clock::time_point next_report() const { return next_; }

 private:
  std::function<void(std::chrono::milliseconds)> report_;
  Clock::time_point start_, next_;
};

/// Connects to host:port, retrying while the peer is not listening yet (connection refused), until
/// the deadline; then throws naming `what` and host:port. `reporter`, when given, is polled between
/// attempts.
Socket connect_to(const std::string& host, int port, Deadline deadline, const std::string& what,
                  WaitReporter* reporter = nullptr);

/// The connecting side's handshake: sends the token and `hello`, then waits until `deadline` for a
/// one-byte answer. Says what happened rather than throwing, so the caller can name the likely cause.
enum class Handshake { Answered, Closed, Silent };
/// See Handshake: `answer` receives the byte when the result is Handshake::Answered.
Handshake handshake(const Socket& socket, const std::string& token, const std::vector<uint8_t>& hello,
                    Deadline deadline, uint8_t& answer);

/// Longest token check_token accepts.
constexpr size_t kMaxTokenBytes = 256;

/// The job token from RINGGRAD_JOB_TOKEN, or "" when unset (then no token is exchanged).
std::string job_token();
/// Connecting side: sends [u32 length][token bytes] (nothing when the token is empty).
void send_token(const Socket& socket, const std::string& token, Deadline deadline);
/// Accepting side: reads and compares the token (at most 256 bytes are accepted). Returns false --
/// and the caller closes the connection -- on a wrong, missing or oversized token.
bool check_token(const Socket& socket, const std::string& expected, Deadline deadline);
/// Compares two tokens in time that depends only on their lengths, so a stray peer cannot guess the
/// token byte by byte from how fast it is refused. (For servers that read the token themselves.)
bool tokens_equal(const std::string& got, const std::string& expected);

}  // namespace parallel
}  // namespace ringgrad
