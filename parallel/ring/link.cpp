// parallel/ring/link.cpp: connecting the two halves, and exchange() as one loop over both.
#include "parallel/ring/link.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill(), which <csignal> need not declare

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <vector>

#include <ringgrad/core/base/error.h>
#include "parallel/ring/shm_link.h"
#include "parallel/ring/tcp_link.h"

namespace ringgrad {
namespace parallel {
namespace {

// How often a wait looks at the clock, the abort flags and the neighbours' pids.
constexpr std::chrono::milliseconds kCheckInterval(20);
// A rank waiting on shared memory alone spins kSpin, then yields the core until kYield, then sleeps
// on a futex. A neighbour on another core that is about to answer does so within the spin, with no
// system call; yielding lets a rank that shares this core run, while a free core keeps looking. The
// futex sleep is left for longer waits because waking a sleeper costs a system call and, on a VM, a
// halted virtual CPU's wake-up: tens of microseconds that a 4-byte all-reduce would pay each step.
constexpr std::chrono::microseconds kSpin(4), kYield(50);
// While both shared-memory halves are busy a rank sleeps on the receiving half's futex: data that
// arrives wakes it at once. Room to send does not (one futex at a time), so that sleep is cut at
// this: by then the next rank has at most drained part of the slots this rank filled, 2 MiB.
constexpr std::chrono::microseconds kSendNap(20);

// A process that was not running while it waited -- stopped by Ctrl-Z (ringrun stops the whole
// job), by a debugger, or on a paused VM -- must not find its deadline gone when it is continued:
// ranks stopped together carry on after `fg`. A wait looks at the clock every few milliseconds at
// most, so a gap longer than this between two looks is time spent stopped, and does not count. A
// neighbour that is stopped while this rank runs still times out on time.
constexpr std::chrono::milliseconds kStoppedGap(1000);

// Every exchange of one collective gets that collective's deadline, so the time stopped is kept
// against it for the exchanges still to come -- and the time between two of them (the reduction
// work of a step, a copy) is looked at too. One record per thread: each process group runs its
// collectives on a thread of its own (collective_queue.h), one collective at a time.
struct StoppedTime {
  Deadline deadline{};            // the collective's, as given
  Clock::duration stopped{};      // counted against it so far
  Clock::time_point last_seen{};  // the last look at the clock in one of its exchanges
};
thread_local StoppedTime t_stopped;

void pause_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

namespace {

// The state letter in /proc/<pid>/stat (R, S, T for a signal, t for a tracer, Z, ...), read after
// the last ')' since the command name in parentheses may itself hold spaces; 0 when unreadable.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : '\0';
}

}  // namespace

bool process_alive(pid_t pid) {
  if (pid <= 0) return true;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  return process_state(pid) != 'Z';
}

std::string stopped_note(const std::string& peer, pid_t pid) {
  if (pid <= 0) return "";
  const char state = process_state(pid);
  if (state != 'T' && state != 't') return "";
  return detail::str("; ", peer, " (pid ", pid, ") is stopped (SIGSTOP, Ctrl-Z or a debugger)");
}

void collective_started(Deadline deadline, Clock::time_point started) { t_stopped = {deadline, {}, started}; }

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
                        size_t recv_bytes, const OnReceived& on_received, Deadline collective_deadline) {
  if (send_bytes > 0) send_->begin(send_tag, send, send_bytes);
  if (recv_bytes > 0) recv_->begin(recv_tag, recv_into, recv_bytes, on_received ? &on_received : nullptr);
  bool sending = send_bytes > 0 && !send_->done(), receiving = recv_bytes > 0 && !recv_->done();
  int idle_rounds = 0;
  StoppedTime& stopped = t_stopped;
  if (stopped.deadline != collective_deadline) stopped = {collective_deadline, {}, Clock::now()};
  Deadline deadline = collective_deadline + stopped.stopped;
  auto last_check = Clock::now(), idle_since = last_check;
  // Reads the clock; a gap since the last look (in this exchange or the collective's previous one)
  // is time stopped, which moves the deadline on.
  auto look = [&] {
    const auto now = Clock::now();
    if (now - stopped.last_seen > kStoppedGap) {
      stopped.stopped += now - stopped.last_seen;
      deadline = collective_deadline + stopped.stopped;
    }
    stopped.last_seen = now;
    return now;
  };
  look();
  while (sending || receiving) {
    const auto seen = look();
    // Both halves every round: the receiving half is never starved by a sender with room to go on.
    const bool sent = sending && send_->progress();
    const bool received = receiving && recv_->progress();
    sending = sending && !send_->done();
    receiving = receiving && !recv_->done();
    if (sent || received) {
      idle_rounds = 0;
      continue;
    }

    // Neither could move: wait. Sockets are slept on in poll(), shared memory on a futex in the
    // channel's page (futex.h), after spinning and yielding a while; the neighbour wakes it. While a socket half
    // and a shared-memory half are both busy, neither sleep sees the other half, so the wait spins,
    // yields the core, then sleeps in ppoll() on the socket, looking at shared memory between naps.
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
    if (++idle_rounds == 1) idle_since = seen;
    if (memory_busy && count == 0) {
      const auto now = seen;
      if (now - idle_since < kSpin) {
        pause_cpu();
        continue;
      }
      if (now - idle_since < kYield) {
        sched_yield();
        continue;
      }
      // Until the next check is due (or the deadline), so a dead neighbour is still noticed.
      const auto until_check = std::chrono::duration_cast<std::chrono::microseconds>(
          std::min<Clock::time_point>(last_check + kCheckInterval, deadline) - now);
      if (receiving)
        recv_->wait_ready(sending ? std::min(until_check, kSendNap) : until_check);
      else
        send_->wait_ready(until_check);
    } else if (memory_busy && idle_rounds < 256) {
      pause_cpu();
      continue;
    } else if (memory_busy && idle_rounds < 512) {
      sched_yield();
      continue;
    } else if (memory_busy) {
      // A socket half is busy too, and the network is the slow side: sleep until the socket is
      // ready, for at most 200 us before looking at shared memory again. With 20 us naps the
      // wake-ups took the cycles of the TCP stack on a full machine: 2 hosts x 2 ranks on 2 cores,
      // 1 Gbit/s, 64 MB moved at 88 % of the link, with 200 us at 93 %, small messages as fast
      // (docs/multi_host.md).
      const timespec nap{0, 200000};
      ::ppoll(fds, count, &nap, nullptr);
    } else {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      ::poll(fds, count, static_cast<int>(std::clamp<long long>(left, 0, kCheckInterval.count())));
    }
    // EINTR and timeouts alike: look at the clock, the flags and the neighbours, then go round again.
    const auto now = look();
    if (now - last_check < kCheckInterval && now < deadline) continue;
    last_check = now;
    send_->check(now >= deadline, sending);
    recv_->check(now >= deadline, receiving);
  }
}

void RingLink::abort(const std::string& reason) {
  send_->abort(reason);
  recv_->abort(reason);
}

}  // namespace parallel
}  // namespace ringgrad
