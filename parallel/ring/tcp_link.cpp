// parallel/ring/tcp_link.cpp: the two TCP halves: connecting, and moving bytes without blocking.
#include "parallel/ring/tcp_link.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <ringgrad/core/base/error.h>

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
  store.set(keys + "/tcp/" + std::to_string(rank), me + ":" + std::to_string(listener_->port()));
}

void TcpRecv::accept(Deadline deadline) {
  // Accept until the previous rank shows up with the right token; anything else is closed. Each
  // candidate gets a few seconds to introduce itself, not the whole setup deadline: a stray client
  // that connects and says nothing (a port scanner, a stuck process) must not hold up the real peer
  // queued behind it in the listen backlog.
  while (!from_prev_.valid()) {
    Socket candidate = listener_->accept(deadline, "ring: waiting for rank " + std::to_string(prev_) + " to connect");
    const Deadline introduction = std::min(deadline, Clock::now() + kIntroductionLimit);
    uint32_t who = 0;
    bool introduced = check_token(candidate, token_, introduction);
    if (introduced) {
      try {
        candidate.recv_all(&who, sizeof(who), introduction, "ring: reading the connecting rank");
      } catch (const Error&) {
        introduced = false;
      }
    }
    if (introduced && who == static_cast<uint32_t>(prev_)) {
      const std::string peer = candidate.peer();
      prev_name_ = peer_name(prev_, peer.substr(0, peer.rfind(':')));  // "address:port", an ephemeral port
      from_prev_ = std::move(candidate);
    } else {
      std::fprintf(stderr,
                   "ring: rank %d closed a connection from %s that did not introduce itself as rank %d with "
                   "this job's token within %lld ms\n",
                   rank_, candidate.peer().c_str(), prev_, static_cast<long long>(kIntroductionLimit.count()));
    }
  }
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

void TcpRecv::check(Deadline deadline, bool busy) {
  if (!busy || Clock::now() < deadline) return;
  throw Error(detail::str("ring: timed out at ", describe_tag(tag_), " waiting for data from ", prev_name_, " (",
                          received_, "/", total_, " bytes in)"));
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
  const std::string address = store.get_string(keys + "/tcp/" + std::to_string(next));
  const size_t colon = address.rfind(':');
  RINGGRAD_CHECK(colon != std::string::npos, "ring: rank ", next, " published a malformed address '",
                 detail::printable(address),
                 "'");  // text from the store: escaped
  next_name_ = peer_name(next, address.substr(0, colon));
  to_next_ = connect_to(address.substr(0, colon), std::stoi(address.substr(colon + 1)), deadline,
                        "ring: connecting to " + next_name_);
  send_token(to_next_, job_token(), deadline);
  const auto my_rank = static_cast<uint32_t>(rank);
  to_next_.send_all(&my_rank, sizeof(my_rank), deadline, "ring: introducing rank " + std::to_string(rank));
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

void TcpSend::check(Deadline deadline, bool busy) {
  if (!busy || Clock::now() < deadline) return;
  throw Error(detail::str("ring: timed out at ", describe_tag(header_.tag), " waiting for ", next_name_,
                          " to take data (", sent_, "/", total_, " bytes out)"));
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
