// parallel/ring/tcp_link.cpp: setting up the two connections, and exchange() as one poll() loop.
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

// Every message starts with this header, so the receiver can check it belongs to the step it is in.
struct MessageHeader {
  uint64_t tag;
  uint64_t bytes;
};

// A header with this tag carries, instead of data, the reason a neighbour gave up (at most
// kMaxAbortReason bytes of text): ranks further along the ring then report the real cause.
constexpr uint64_t kAbortTag = ~uint64_t{0};
constexpr uint64_t kMaxAbortReason = 1024;

// "rank 3 at 10.0.0.2": across machines, the host says where to look.
std::string peer_name(int rank, const std::string& host) {
  return host.empty() ? detail::str("rank ", rank) : detail::str("rank ", rank, " at ", host);
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

TcpLink::TcpLink(Store& store, int rank, int size, const std::string& master_addr, Deadline deadline)
    : rank_(rank), next_rank_((rank + 1) % size), prev_rank_((rank + size - 1) % size) {
  const std::string token = job_token();
  const std::string me = local_address_towards(master_addr);
  Listener listener(me, 0);
  store.set("ring/tcp/" + std::to_string(rank), me + ":" + std::to_string(listener.port()));

  // Connect forward first: the kernel completes a connection into the peer's listen backlog before
  // the peer calls accept(), so every rank can connect, then accept, without waiting in a circle.
  const std::string next = store.get_string("ring/tcp/" + std::to_string(next_rank_));
  const size_t colon = next.rfind(':');
  RINGGRAD_CHECK(colon != std::string::npos, "ring: rank ", next_rank_, " published a malformed address '", next, "'");
  next_host_ = next.substr(0, colon);
  to_next_ = connect_to(next_host_, std::stoi(next.substr(colon + 1)), deadline,
                        "ring: connecting to " + peer_name(next_rank_, next_host_));
  send_token(to_next_, token, deadline);
  const auto my_rank = static_cast<uint32_t>(rank);
  to_next_.send_all(&my_rank, sizeof(my_rank), deadline, "ring: introducing rank " + std::to_string(rank));

  // Accept until the previous rank shows up with the right token; anything else is closed. Each
  // candidate gets a few seconds to introduce itself, not the whole setup deadline: a stray client
  // that connects and says nothing (a port scanner, a stuck process) must not hold up the real peer
  // queued behind it in the listen backlog.
  while (!from_prev_.valid()) {
    Socket candidate =
        listener.accept(deadline, "ring: waiting for rank " + std::to_string(prev_rank_) + " to connect");
    const Deadline introduction = std::min(deadline, Clock::now() + kIntroductionLimit);
    uint32_t who = 0;
    bool introduced = check_token(candidate, token, introduction);
    if (introduced) {
      try {
        candidate.recv_all(&who, sizeof(who), introduction, "ring: reading the connecting rank");
      } catch (const Error&) {
        introduced = false;
      }
    }
    if (introduced && who == static_cast<uint32_t>(prev_rank_)) {
      const std::string peer = candidate.peer();
      prev_host_ = peer.substr(0, peer.rfind(':'));  // "address:port": the port is an ephemeral one
      from_prev_ = std::move(candidate);
    } else {
      std::fprintf(stderr,
                   "ring: rank %d closed a connection from %s that did not introduce itself as rank %d with "
                   "this job's token within %lld ms\n",
                   rank, candidate.peer().c_str(), prev_rank_, static_cast<long long>(kIntroductionLimit.count()));
    }
  }
  for (Socket* s : {&to_next_, &from_prev_}) {
    s->set_nodelay();
    s->set_buffer_sizes(kSocketBufferBytes);
    s->set_nonblocking(true);
  }
  scratch_.resize(kScratchBytes);
}

void TcpLink::exchange(uint64_t send_tag, const void* send, size_t send_bytes, uint64_t recv_tag, void* recv_into,
                       size_t recv_bytes, const OnReceived& on_received, Deadline deadline) {
  const MessageHeader out_header{send_tag, send_bytes};
  MessageHeader in_header{};
  // Progress counters run over header + payload, one stream per direction.
  const size_t send_total = send_bytes ? sizeof(MessageHeader) + send_bytes : 0;
  const size_t recv_total = recv_bytes ? sizeof(MessageHeader) + recv_bytes : 0;
  size_t sent = 0, received = 0;
  size_t scratch_fill = 0, scratch_offset = 0;  // payload bytes in scratch_, and where they start
  const std::string next = peer_name(next_rank_, next_host_), prev = peer_name(prev_rank_, prev_host_);
  const std::string to_next = "ring: sending to " + next, from_prev = "ring: receiving from " + prev;

  send_at_boundary_ = true;  // nothing of this message has gone out yet
  while (sent < send_total || received < recv_total) {
    pollfd fds[2];
    int count = 0, send_slot = -1, recv_slot = -1;
    if (sent < send_total) {
      fds[count] = {to_next_.fd(), POLLOUT, 0};
      send_slot = count++;
    }
    if (received < recv_total) {
      fds[count] = {from_prev_.fd(), POLLIN, 0};
      recv_slot = count++;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      throw Error(
          detail::str("ring: timed out at ", describe_tag(recv_total > received ? recv_tag : send_tag), " ",
                      received < recv_total ? "waiting for data from " + prev : "waiting for " + next + " to take data",
                      " (", received, "/", recv_total, " bytes in, ", sent, "/", send_total, " out)"));
    }
    if (::poll(fds, static_cast<nfds_t>(count), static_cast<int>(std::min<long long>(left, 100))) < 0) {
      if (errno == EINTR) continue;
      throw Error(detail::str("ring: poll failed: ", std::strerror(errno)));
    }
    if (send_slot >= 0 && fds[send_slot].revents) {
      // The header goes first; both come out of one stream position.
      if (sent < sizeof(MessageHeader)) {
        sent += to_next_.send_some(reinterpret_cast<const uint8_t*>(&out_header) + sent, sizeof(MessageHeader) - sent,
                                   to_next);
        send_at_boundary_ = sent == 0;
      } else {
        const size_t at = sent - sizeof(MessageHeader);
        sent += to_next_.send_some(static_cast<const uint8_t*>(send) + at, send_bytes - at, to_next);
        send_at_boundary_ = sent == send_total;
      }
    }
    if (recv_slot >= 0 && fds[recv_slot].revents) {
      if (received < sizeof(MessageHeader)) {
        received += from_prev_.recv_some(reinterpret_cast<uint8_t*>(&in_header) + received,
                                         sizeof(MessageHeader) - received, from_prev);
        if (received == sizeof(MessageHeader) && in_header.tag == kAbortTag) {
          std::string reason(std::min(in_header.bytes, kMaxAbortReason), '\0');
          from_prev_.recv_all(reason.data(), reason.size(), deadline_in(std::chrono::seconds(1)), from_prev);
          throw Error(detail::str("ring: ", prev, " aborted (", reason, ") during ", describe_tag(recv_tag)));
        }
        if (received == sizeof(MessageHeader)) {
          RINGGRAD_CHECK(in_header.tag == recv_tag && in_header.bytes == recv_bytes, "ring: ", prev, " sent ",
                         in_header.bytes, " bytes for ", describe_tag(in_header.tag), ", but this rank (", rank_,
                         ") expected ", recv_bytes, " bytes for ", describe_tag(recv_tag),
                         " -- do all ranks run the same collectives, in the same order, on tensors of the same size?");
        }
      } else if (recv_into != nullptr) {
        const size_t at = received - sizeof(MessageHeader);
        const size_t got = from_prev_.recv_some(static_cast<uint8_t*>(recv_into) + at, recv_bytes - at, from_prev);
        received += got;
        if (on_received && got) on_received(static_cast<const uint8_t*>(recv_into) + at, at, got);
      } else {
        const size_t at = received - sizeof(MessageHeader);
        const size_t room = std::min(scratch_.size() - scratch_fill, recv_bytes - at);
        const size_t got = from_prev_.recv_some(scratch_.data() + scratch_fill, room, from_prev);
        received += got;
        scratch_fill += got;
        // Hand over whole pieces (whole elements: the pieces are a multiple of every element size).
        if (scratch_fill == scratch_.size() || received == recv_total) {
          on_received(scratch_.data(), scratch_offset, scratch_fill);
          scratch_offset += scratch_fill;
          scratch_fill = 0;
        }
      }
    }
  }
}

void TcpLink::abort(const std::string& reason) {
  // If the stream to the next rank sits between two messages, say why we stop: the next rank reads
  // it where it expects a header and reports the cause. (Mid-message it would read as data, so then
  // it is not sent, and the next rank sees only the closed connection.) Best effort, 100 ms at most.
  if (send_at_boundary_ && to_next_.valid()) {
    try {
      const std::string text = reason.substr(0, kMaxAbortReason);
      const MessageHeader header{kAbortTag, text.size()};
      const Deadline soon = deadline_in(std::chrono::milliseconds(100));
      const std::string telling = "ring: telling " + peer_name(next_rank_, next_host_);
      to_next_.send_all(&header, sizeof(header), soon, telling);
      to_next_.send_all(text.data(), text.size(), soon, telling);
    } catch (const std::exception&) {
    }
  }
  // Shutting both connections down makes the neighbours' next read or write fail at once, so they
  // report this rank instead of waiting for their deadline.
  if (to_next_.valid()) ::shutdown(to_next_.fd(), SHUT_RDWR);
  if (from_prev_.valid()) ::shutdown(from_prev_.fd(), SHUT_RDWR);
}

}  // namespace parallel
}  // namespace ringgrad
