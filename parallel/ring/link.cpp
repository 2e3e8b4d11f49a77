// parallel/ring/link.cpp: connecting the two halves, and exchange() as one loop over both.
#include "parallel/ring/link.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <thread>
#include <vector>

#include <ringgrad/core/base/error.h>
#include "parallel/ring/shm_link.h"
#include "parallel/ring/tcp_link.h"

namespace ringgrad {
namespace parallel {
namespace {

// How often a wait looks at the clock, the abort flags and the neighbours' pids.
constexpr std::chrono::milliseconds kCheckInterval(20);

}  // namespace

std::string describe_tag(uint64_t tag) { return detail::str("collective #", tag >> 20, " step ", tag & 0xfffff); }

RingLink::RingLink(std::unique_ptr<SendHalf> send, std::unique_ptr<RecvHalf> recv)
    : send_(std::move(send)), recv_(std::move(recv)) {}

std::string RingLink::name() const {
  const std::string out = send_->name(), in = recv_->name();
  return out == in ? out : std::min(out, in) + "+" + std::max(out, in);
}

std::unique_ptr<RingLink> connect_ring_link(Store& store, const RingNeighbours& ring, const std::string& master_addr,
                                            Deadline deadline) {
  // Three steps, in an order that never waits in a circle: open the receiving end and publish
  // where it is; connect to the next rank's (published by it in its own first step); then wait
  // for the previous rank to have connected to ours.
  std::unique_ptr<RecvHalf> recv;
  if (ring.from_prev == "shm")
    recv = std::make_unique<ShmRecv>(store, ring.keys, ring.rank, ring.prev, ring.here);
  else
    recv = std::make_unique<TcpRecv>(store, ring.keys, ring.rank, ring.prev, master_addr);
  std::unique_ptr<SendHalf> send;
  if (ring.to_next == "shm")
    send = std::make_unique<ShmSend>(store, ring.keys, ring.rank, ring.next, ring.here);
  else
    send = std::make_unique<TcpSend>(store, ring.keys, ring.rank, ring.next, deadline);
  recv->accept(deadline);
  return std::make_unique<RingLink>(std::move(send), std::move(recv));
}

void RingLink::exchange(uint64_t send_tag, const void* send, size_t send_bytes, uint64_t recv_tag, void* recv_into,
                        size_t recv_bytes, const OnReceived& on_received, Deadline deadline) {
  if (send_bytes > 0) send_->begin(send_tag, send, send_bytes);
  if (recv_bytes > 0) recv_->begin(recv_tag, recv_into, recv_bytes, on_received ? &on_received : nullptr);
  bool sending = send_bytes > 0 && !send_->done(), receiving = recv_bytes > 0 && !recv_->done();
  int idle_rounds = 0;
  auto last_check = Clock::now();
  while (sending || receiving) {
    // Both halves every round: the receiving half is never starved by a sender with room to go on.
    const bool sent = sending && send_->progress();
    const bool received = receiving && recv_->progress();
    sending = sending && !send_->done();
    receiving = receiving && !recv_->done();
    if (sent || received) {
      idle_rounds = 0;
      continue;
    }

    // Neither could move: wait. Sockets can be slept on in poll(); shared memory cannot, so while
    // a shared-memory half is busy the wait spins (a neighbour on another core answers within
    // nanoseconds), then yields the core (ranks may outnumber cores), then naps, looking at the
    // sockets between naps.
    pollfd fds[2];
    nfds_t count = 0;
    bool memory_busy = false;
    if (sending) {
      if (send_->poll_fd() >= 0)
        fds[count++] = {send_->poll_fd(), POLLOUT, 0};
      else
        memory_busy = true;
    }
    if (receiving) {
      if (recv_->poll_fd() >= 0)
        fds[count++] = {recv_->poll_fd(), POLLIN, 0};
      else
        memory_busy = true;
    }
    ++idle_rounds;
    if (memory_busy && idle_rounds < 256) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    if (memory_busy && idle_rounds < 512) {
      sched_yield();
      continue;
    }
    if (memory_busy) {
      if (count > 0) {
        // A socket half is busy too, and the network is the slow side: sleep until the socket is
        // ready, for at most 200 us before looking at shared memory again. With 20 us, as for
        // shared memory alone, the wake-ups took the cycles of the TCP stack on a full machine:
        // 2 hosts x 2 ranks on 2 cores, 1 Gbit/s, 64 MB moved at 88 % of the link, with 200 us at
        // 93 %, small messages as fast (docs/multi_host.md).
        const timespec nap{0, 200000};
        ::ppoll(fds, count, &nap, nullptr);
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    } else {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      ::poll(fds, count, static_cast<int>(std::clamp<long long>(left, 0, kCheckInterval.count())));
    }
    // EINTR and timeouts alike: look at the clock, the flags and the neighbours, then go round again.
    const auto now = Clock::now();
    if (now - last_check < kCheckInterval && now < deadline) continue;
    last_check = now;
    send_->check(deadline, sending);
    recv_->check(deadline, receiving);
  }
}

void RingLink::abort(const std::string& reason) {
  send_->abort(reason);
  recv_->abort(reason);
}

}  // namespace parallel
}  // namespace ringgrad
