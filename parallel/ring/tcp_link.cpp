// parallel/ring/tcp_link.cpp: the two TCP halves: connecting, and moving bytes without blocking.
#include "parallel/ring/tcp_link.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <ringgrad/core/base/error.h>
#include "parallel/ring/shm_link.h"

namespace ringgrad {
namespace parallel {
namespace {

constexpr size_t kScratchBytes = 256 << 10;  // a piece handed to on_received: fits in L2 while reduced
constexpr int kSocketBufferBytes = 4 << 20;
// How long a connecting peer has to present the job token and its rank (as the store's handshake).
constexpr std::chrono::milliseconds kIntroductionLimit(5000);

// A header with this tag carries, instead of data, the reason a neighbour gave up (at most
// kMaxAbortReason bytes of text): ranks further along the ring then report the real cause.
constexpr uint64_t kAbortTag = ~uint64_t{0};
constexpr uint64_t kMaxAbortReason = 1024;

// This host as a number (FNV-1a of host_identity()), sent along with a pid: a pid is only worth
// looking at in /proc when the process is on this host.
uint64_t host_hash() {
  uint64_t hash = 1469598103934665603ull;
  for (const char c : host_identity()) hash = (hash ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return hash;
}

}  // namespace

std::string local_address_towards(const std::string& host) {
  // A UDP "connect" sends nothing: it only asks the kernel which route, and so which local address,
  // packets to `host` would take.
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  RINGGRAD_CHECK(getaddrinfo(host.c_str(), "9", &hints, &found) == 0 && found != nullptr,
                 "ring: cannot resolve MASTER_ADDR '", host, "'");
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  const bool ok = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  freeaddrinfo(found);
  if (fd >= 0) ::close(fd);
  RINGGRAD_CHECK(ok, "ring: cannot find the local address that reaches '", host, "': ", std::strerror(errno));
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return text;
}

// ---- receiving -----------------------------------------------------------------------------------

TcpRecv::TcpRecv(Store& store, const std::string& keys, int rank, int prev, const std::string& master_addr)
    : rank_(rank), prev_(prev), prev_name_(peer_name(prev, "")), token_(job_token()) {
  const std::string me = local_address_towards(master_addr);
  listener_.emplace(me, 0);
  // "address:port pid host": the pid and host let the previous rank say, when it times out waiting
  // on this one, that this process is stopped (when it is on the same host).
  store.set(keys + "/tcp/" + std::to_string(rank),
            detail::str(me, ":", listener_->port(), " ", ::getpid(), " ", std::hex, host_hash()));
}

namespace {

// A connection to the listener that has not yet said who it is: what it sent so far, and how long
// it has to finish.
struct Newcomer {
  Socket socket;
  Deadline until;
  std::string said;
};

// What the previous rank says first: [u32 length][job token] when the job has one (send_token), then
// its identity: [u32 rank][u32 pid][u64 host_hash()]. All little-endian, as the token's length.
constexpr size_t kIdentityBytes = 16;
struct Identity {
  uint32_t rank = 0, pid = 0;
  uint64_t host = 0;
};

uint64_t little_endian(const char* bytes, size_t n) {
  uint64_t value = 0;
  for (size_t i = 0; i < n; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return value;
}

std::string encode_identity(const Identity& id) {
  std::string out(kIdentityBytes, '\0');
  const uint64_t fields[] = {id.rank, id.pid, id.host};
  const size_t widths[] = {4, 4, 8};
  for (size_t f = 0, at = 0; f < 3; at += widths[f], ++f)
    for (size_t i = 0; i < widths[f]; ++i) out[at + i] = static_cast<char>(fields[f] >> (8 * i));
  return out;
}

Identity decode_identity(const char* bytes) {
  return {static_cast<uint32_t>(little_endian(bytes, 4)), static_cast<uint32_t>(little_endian(bytes + 4, 4)),
          little_endian(bytes + 8, 8)};
}

size_t introduction_bytes(const std::string& token) { return (token.empty() ? 0 : 4 + token.size()) + kIdentityBytes; }

// Reads what `n` sent without blocking, never past its introduction; false when it broke the
// protocol or hung up (close it).
bool read_introduction(Newcomer& n, const std::string& token, size_t length) {
  const size_t had = n.said.size();
  n.said.resize(length);
  try {
    n.said.resize(had + n.socket.recv_some(&n.said[had], length - had, "ring: reading an introduction"));
  } catch (const Error&) {
    return false;  // closed or reset
  }
  // A token of another length is refused as soon as its length is in, before reading on.
  return token.empty() || n.said.size() < 4 || little_endian(n.said.data(), 4) == token.size();
}

}  // namespace

void TcpRecv::accept(Deadline deadline) {
  // Accept until the previous rank shows up with the right token and its rank; anything else is
  // closed. The newcomers are read side by side, each with a few seconds to introduce itself: stray
  // clients that connect and say nothing (a port scanner, a stuck process, a flood of them) then
  // cost the real peer nothing, however many there are, instead of a few seconds each one after
  // the other. At most kMaxNewcomers are held (make_room says which one goes), and at most
  // kAcceptsPerRound taken at a time, so that those held are heard -- and the deadline looked at --
  // between batches of a flood.
  constexpr size_t kMaxNewcomers = 64, kAcceptsPerRound = 16;
  const size_t length = introduction_bytes(token_);
  std::vector<Newcomer> newcomers;
  int refused = 0;
  std::string first_refused;
  auto refuse = [&](Newcomer& n) {
    if (!n.socket.valid()) return;  // refused already, or the peer (moved out)
    if (refused++ == 0) first_refused = n.socket.peer();
    n.socket.close();
  };
  // Reads what `n` has sent; takes it as the previous rank once its whole introduction is in and
  // right, refuses it as soon as something is wrong.
  auto hear = [&](Newcomer& n) {
    if (!read_introduction(n, token_, length)) return refuse(n);
    if (n.said.size() < length) return;
    const Identity who = decode_identity(n.said.data() + length - kIdentityBytes);
    const bool ours = (token_.empty() || tokens_equal(n.said.substr(4, token_.size()), token_)) &&
                      who.rank == static_cast<uint32_t>(prev_);
    if (!ours) return refuse(n);
    const std::string peer = n.socket.peer();
    prev_name_ = peer_name(prev_, peer.substr(0, peer.rfind(':')));  // "address:port", an ephemeral port
    if (who.host == host_hash()) prev_pid_ = static_cast<pid_t>(who.pid);
    from_prev_ = std::move(n.socket);
  };
  // Full: the oldest newcomer that has said nothing goes (it had the most time to speak), else the
  // oldest. One that has started its introduction -- the real peer, whose bytes follow its
  // connection at once -- goes only when all 64 have.
  auto make_room = [&](std::vector<Newcomer>& held) {
    auto silent = std::find_if(held.begin(), held.end(), [](const Newcomer& n) { return n.said.empty(); });
    auto out = silent != held.end() ? silent : held.begin();
    refuse(*out);
    held.erase(out);
  };
  const std::string what = "ring: waiting for rank " + std::to_string(prev_) + " to connect";
  const auto waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  auto closed_note = [&] {
    return refused == 0 ? std::string()
                        : detail::str(" (closed ", refused, " other connection", refused == 1 ? "" : "s", ")");
  };
  WaitReporter reporter([&](std::chrono::milliseconds waited) {
    std::fprintf(stderr, "%s: %lld ms so far%s\n", what.c_str(), static_cast<long long>(waited.count()),
                 closed_note().c_str());
  });
  while (!from_prev_.valid()) {
    const auto now = Clock::now();
    for (Newcomer& n : newcomers)
      if (now >= n.until && !from_prev_.valid()) {
        hear(n);  // what it sent meanwhile (this rank may have been stopped): the peer is never refused unheard
        if (n.socket.valid() && !from_prev_.valid()) refuse(n);
      }
    if (from_prev_.valid()) break;
    newcomers.erase(
        std::remove_if(newcomers.begin(), newcomers.end(), [](const Newcomer& n) { return !n.socket.valid(); }),
        newcomers.end());
    if (now >= deadline)
      throw Error(detail::str(what, ": timed out after ", waited_ms, " ms waiting for a connection on ",
                              listener_->host(), ":", listener_->port(), closed_note()));
    Deadline wake = std::min(deadline, reporter.next_report());
    std::vector<pollfd> fds{{listener_->fd(), POLLIN, 0}};
    for (const Newcomer& n : newcomers) {
      fds.push_back({n.socket.fd(), POLLIN, 0});
      wake = std::min(wake, n.until);
    }
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(wait_ms, 0, 1000))) < 0 && errno != EINTR)
      throw Error(detail::str(what, ": poll failed: ", std::strerror(errno)));
    reporter.poll();
    for (size_t i = 1; i < fds.size() && !from_prev_.valid(); ++i)
      if (fds[i].revents != 0) hear(newcomers[i - 1]);
    if (from_prev_.valid() || !(fds[0].revents & POLLIN)) continue;
    // Everything waiting in the backlog, each heard at once: the real peer sent its introduction
    // right after connecting, so it is usually complete already -- and taken before a burst of
    // strangers behind it could push it out.
    for (size_t taken = 0; taken < kAcceptsPerRound && !from_prev_.valid(); ++taken) {
      Socket s = listener_->try_accept();
      if (!s.valid()) break;
      s.set_nonblocking(true);
      if (newcomers.size() == kMaxNewcomers) make_room(newcomers);
      newcomers.push_back({std::move(s), Clock::now() + kIntroductionLimit, {}});
      hear(newcomers.back());
    }
  }
  for (Newcomer& n : newcomers) refuse(n);  // still silent when the peer came
  if (refused > 0)
    std::fprintf(stderr,
                 "ring: rank %d closed %d connection%s (the first from %s) that did not introduce %s as rank %d "
                 "with this job's token in time\n",
                 rank_, refused, refused == 1 ? "" : "s", detail::printable(first_refused).c_str(),
                 refused == 1 ? "itself" : "themselves", prev_);
  listener_.reset();  // nobody else may connect
  what_ = "ring: receiving from " + prev_name_;
  from_prev_.set_nodelay();
  from_prev_.set_buffer_sizes(kSocketBufferBytes);
  from_prev_.set_nonblocking(true);
  scratch_.resize(kScratchBytes);
}

void TcpRecv::begin(uint64_t tag, void* into, size_t bytes, const OnReceived* on_received) {
  tag_ = tag;
  into_ = static_cast<uint8_t*>(into);
  bytes_ = bytes;
  total_ = sizeof(TcpMessageHeader) + bytes;
  received_ = scratch_fill_ = scratch_offset_ = 0;
  on_received_ = on_received;
}

bool TcpRecv::progress() {
  const std::string& what = what_;
  if (received_ < sizeof(TcpMessageHeader)) {
    const size_t got = from_prev_.recv_some(reinterpret_cast<uint8_t*>(&header_) + received_,
                                            sizeof(TcpMessageHeader) - received_, what);
    received_ += got;
    if (received_ == sizeof(TcpMessageHeader) && header_.tag == kAbortTag) {
      std::string reason(std::min(header_.bytes, kMaxAbortReason), '\0');
      from_prev_.recv_all(reason.data(), reason.size(), deadline_in(std::chrono::seconds(1)), what);
      throw Error(detail::str("ring: ", prev_name_, " aborted (", reason, ") during ", describe_tag(tag_)));
    }
    if (received_ == sizeof(TcpMessageHeader)) {
      RINGGRAD_CHECK(header_.tag == tag_ && header_.bytes == bytes_, "ring: ", prev_name_, " sent ", header_.bytes,
                     " bytes for ", describe_tag(header_.tag), ", but this rank (", rank_, ") expected ", bytes_,
                     " bytes for ", describe_tag(tag_),
                     " -- do all ranks run the same collectives, in the same order, on tensors of the same size?");
    }
    return got > 0;
  }
  const size_t at = received_ - sizeof(TcpMessageHeader);
  if (into_ != nullptr) {
    const size_t got = from_prev_.recv_some(into_ + at, bytes_ - at, what);
    received_ += got;
    if (on_received_ != nullptr && got > 0) (*on_received_)(into_ + at, at, got);
    return got > 0;
  }
  const size_t room = std::min(scratch_.size() - scratch_fill_, bytes_ - at);
  const size_t got = from_prev_.recv_some(scratch_.data() + scratch_fill_, room, what);
  received_ += got;
  scratch_fill_ += got;
  // Hand over whole pieces (whole elements: the pieces are a multiple of every element size).
  if (scratch_fill_ > 0 && (scratch_fill_ == scratch_.size() || received_ == total_)) {
    (*on_received_)(scratch_.data(), scratch_offset_, scratch_fill_);
    scratch_offset_ += scratch_fill_;
    scratch_fill_ = 0;
  }
  return got > 0;
}

void TcpRecv::check(bool timed_out, bool busy) {
  if (!busy || !timed_out) return;
  throw Error(detail::str("ring: timed out at ", describe_tag(tag_), " waiting for data from ", prev_name_, " (",
                          received_, "/", total_, " bytes in)", stopped_note(prev_name_, prev_pid_)));
}

void TcpRecv::abort(const std::string& reason) {
  (void)reason;  // said forward, by the sending half; this one just hangs up
  // Shutting the connection down makes the previous rank's next write fail at once, so it reports
  // this rank instead of waiting for its deadline.
  if (from_prev_.valid()) ::shutdown(from_prev_.fd(), SHUT_RDWR);
}

// ---- sending -------------------------------------------------------------------------------------

TcpSend::TcpSend(Store& store, const std::string& keys, int rank, int next, Deadline deadline)
    : next_name_(peer_name(next, "")) {
  // The next rank's listener is up before it publishes it, and the kernel completes a connection
  // into its backlog before it calls accept(), so connecting never waits for the next rank's own
  // connecting: no rank waits in a circle.
  // "address:port pid host" (TcpRecv's constructor); text from the store, so escaped in messages.
  const std::string published = store.get_string(keys + "/tcp/" + std::to_string(next));
  const size_t space = published.find(' ');
  const size_t colon = published.rfind(':', space);
  int port = 0, pid = 0, used = 0;
  unsigned long long next_host = 0;
  const bool ok = space != std::string::npos && colon != std::string::npos && colon > 0 &&
                  std::sscanf(published.c_str() + colon, ":%d %d %llx%n", &port, &pid, &next_host, &used) == 3 &&
                  colon + static_cast<size_t>(used) == published.size() && port > 0 && port < 65536;
  RINGGRAD_CHECK(ok, "ring: rank ", next, " published a malformed address '", detail::printable(published),
                 "' (expected address:port pid host)");
  const std::string host = published.substr(0, colon);
  next_name_ = peer_name(next, host);
  if (next_host == host_hash()) next_pid_ = static_cast<pid_t>(pid);
  to_next_ = connect_to(host, port, deadline, "ring: connecting to " + next_name_);
  send_token(to_next_, job_token(), deadline);
  const std::string me = encode_identity({static_cast<uint32_t>(rank), static_cast<uint32_t>(::getpid()), host_hash()});
  to_next_.send_all(me.data(), me.size(), deadline, "ring: introducing rank " + std::to_string(rank));
  to_next_.set_nodelay();
  to_next_.set_buffer_sizes(kSocketBufferBytes);
  to_next_.set_nonblocking(true);
  what_ = "ring: sending to " + next_name_;
}

void TcpSend::begin(uint64_t tag, const void* data, size_t bytes) {
  header_ = {tag, bytes};
  data_ = static_cast<const uint8_t*>(data);
  bytes_ = bytes;
  total_ = sizeof(TcpMessageHeader) + bytes;
  sent_ = 0;
}

bool TcpSend::progress() {
  const std::string& what = what_;
  // The header goes first; both come out of one stream position.
  const size_t moved = sent_ < sizeof(TcpMessageHeader)
                           ? to_next_.send_some(reinterpret_cast<const uint8_t*>(&header_) + sent_,
                                                sizeof(TcpMessageHeader) - sent_, what)
                           : to_next_.send_some(data_ + (sent_ - sizeof(TcpMessageHeader)), total_ - sent_, what);
  sent_ += moved;
  return moved > 0;
}

void TcpSend::check(bool timed_out, bool busy) {
  if (!busy || !timed_out) return;
  throw Error(detail::str("ring: timed out at ", describe_tag(header_.tag), " waiting for ", next_name_,
                          " to take data (", sent_, "/", total_, " bytes out)", stopped_note(next_name_, next_pid_)));
}

void TcpSend::abort(const std::string& reason) {
  // If the stream to the next rank sits between two messages, say why we stop: the next rank reads
  // it where it expects a header and reports the cause. (Mid-message it would read as data, so then
  // it is not sent, and the next rank sees only the closed connection.) Best effort, 100 ms at most.
  if (to_next_.valid() && (sent_ == 0 || sent_ == total_)) {
    try {
      const std::string text = reason.substr(0, kMaxAbortReason);
      const TcpMessageHeader header{kAbortTag, text.size()};
      const Deadline soon = deadline_in(std::chrono::milliseconds(100));
      const std::string telling = "ring: telling " + next_name_;
      to_next_.send_all(&header, sizeof(header), soon, telling);
      to_next_.send_all(text.data(), text.size(), soon, telling);
    } catch (const std::exception&) {
    }
  }
  if (to_next_.valid()) ::shutdown(to_next_.fd(), SHUT_RDWR);
}

}  // namespace parallel
}  // namespace ringgrad
