// parallel/ring/link.h: what the ring algorithms need from the transports.
//
// In a ring every rank talks to exactly two others: it sends to the next rank on the ring and
// receives from the previous one. Every step of every ring algorithm is the same move -- send one
// block forward while receiving one block from behind -- so the link does that one thing well:
// exchange(). Sending and receiving progress at the same time (full duplex), and received data is
// handed to the algorithm piece by piece as it arrives, so reducing the first piece overlaps
// receiving the next.
//
// The two directions are separate halves, each with its own transport: shared memory to a
// neighbour on this host, TCP to one on another (a host's ranks sit next to each other on the ring,
// ring_order.h, so only the ranks at a host's two ends have a TCP half). A half never blocks: it
// moves what it can and says whether it did. exchange() drives both halves from one loop, and only
// when neither could move does it wait -- in poll() when every half still busy has a socket; on a
// futex in the shared page when only shared memory is busy (futex.h), after spinning and yielding
// for some tens of microseconds; in ppoll() with naps when a shared-memory half and a socket half
// are both busy.
//
// Each message carries a tag (collective number and step) and its length; the receiver checks both,
// so ranks that disagree on the order or the sizes of their collectives get an error naming the rank
// and both values instead of silently mixing data or waiting until the timeout.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "parallel/socket.h"
#include <ringgrad/parallel/store.h>

namespace ringgrad {
namespace parallel {

// Called for each received piece, in order: `data` holds bytes [offset, offset + bytes) of the
// message and stays valid only during the call.
using OnReceived = std::function<void(const uint8_t* data, size_t offset, size_t bytes)>;

// The sending half: messages to the next rank.
class SendHalf {
 public:
  virtual ~SendHalf() = default;
  virtual const char* name() const = 0;                                  // "shm" or "tcp"
  virtual void begin(uint64_t tag, const void* data, size_t bytes) = 0;  // a new message (bytes > 0)
  virtual bool progress() = 0;                                           // true when bytes moved
  virtual bool done() const = 0;                                         // the message is all out
  virtual int poll_fd() const { return -1; }  // a socket that polls POLLOUT when it can move; -1: none
  // Called while waiting: throws when the next rank aborted, or -- if `busy` (a message is under
  // way) -- died, or when `timed_out`: the caller's last look at the clock found the deadline past.
  // (The caller looks, not the half: a look taken here could count time this process was stopped
  // since the caller's, which exchange() leaves out of the deadline.)
  virtual void check(bool timed_out, bool busy) = 0;
  // A half with no socket (poll_fd() -1: shared memory): sleeps until the other side may have made
  // room -- it wakes this side -- or `timeout` passed. It may return early; the caller tries again.
  virtual void wait_ready(std::chrono::microseconds timeout) { (void)timeout; }
  virtual void abort(const std::string& reason) = 0;  // tell the next rank, and stop
};

// The receiving half: messages from the previous rank.
class RecvHalf {
 public:
  virtual ~RecvHalf() = default;
  virtual const char* name() const = 0;
  // A new message of `bytes` (> 0) that must carry `tag`. Bytes land in `into` when it is not null
  // (then on_received, if any, sees them there); otherwise on_received must consume them.
  virtual void begin(uint64_t tag, void* into, size_t bytes, const OnReceived* on_received) = 0;
  virtual bool progress() = 0;
  virtual bool done() const = 0;
  virtual int poll_fd() const { return -1; }  // polls POLLIN
  virtual void check(bool timed_out, bool busy) = 0;
  // As SendHalf's: sleeps until the other side may have sent something, or `timeout` passed.
  virtual void wait_ready(std::chrono::microseconds timeout) { (void)timeout; }
  virtual void abort(const std::string& reason) = 0;
  // The last step of connecting: after this rank's SendHalf is connected (see connect_ring_link).
  virtual void accept(Deadline deadline) = 0;
};

class RingLink {
 public:
  RingLink(std::unique_ptr<SendHalf> send, std::unique_ptr<RecvHalf> recv);
  // "shm", "tcp", or "shm+tcp" when the two halves differ (this rank is at the end of a host).
  std::string name() const;

  // Sends send_bytes from `send` to the next rank while receiving recv_bytes from the previous one.
  // The outgoing message is labelled send_tag; the incoming one must carry recv_tag (in a ring
  // step both are the step's tag). A side with 0 bytes is skipped: both ranks compute the same sizes.
  // Throws ringgrad::Error naming the peer rank on a deadline, a dead or aborted peer, or a
  // tag/length mismatch. Time this process spends stopped (Ctrl-Z, a debugger) while it waits does
  // not count against the deadline (link.cpp, kStoppedGap).
  void exchange(uint64_t send_tag, const void* send, size_t send_bytes, uint64_t recv_tag, void* recv_into,
                size_t recv_bytes, const OnReceived& on_received, Deadline collective_deadline);

  // After a failure: tell the neighbours (so they fail at once instead of at their deadline).
  void abort(const std::string& reason);

 private:
  std::unique_ptr<SendHalf> send_;
  std::unique_ptr<RecvHalf> recv_;
};

// Where this rank sits on the ring, and the transport of each of its two links ("shm" or "tcp").
struct RingNeighbours {
  int rank = 0, next = 0, prev = 0;
  std::string to_next = "tcp", from_prev = "tcp";
  std::string here;  // this host's address when the job spans hosts (for messages), else empty
  // The namespace of the ring's store keys ("<keys>/tcp/<rank>", "<keys>/shm/<rank>/channel", ...):
  // a group that connects several rings (ring_process_group.h) gives each its own, so that one
  // ring's addresses are never read as another's.
  std::string keys = "ring";
};

// "rank 3 at 10.0.0.2" when the host is known: across machines, it says where to look.
inline std::string peer_name(int rank, const std::string& host) {
  return host.empty() ? "rank " + std::to_string(rank) : "rank " + std::to_string(rank) + " at " + host;
}

// Connects this rank's two halves through the store; every rank of the ring calls it at once.
// master_addr picks the interface a TCP half listens on (the one that reaches it). It waits only for
// ranks of this ring in this same call, so ranks that connect several rings one after another, all in
// the same order, cannot wait in a circle either: within a ring a rank waits only for its two
// neighbours on that ring, and they are at the same ring in the same order.
std::unique_ptr<RingLink> connect_ring_link(Store& store, const RingNeighbours& ring, const std::string& master_addr,
                                            Deadline deadline);

// The neighbours' processes, when they are on this host (same pid namespace): a wait that times out
// says whether the neighbour is stopped rather than slow.
//
// False once `pid` has exited: gone (ESRCH) or a zombie until its parent reaps it. True for pid <= 0
// (unknown: on another host).
bool process_alive(pid_t pid);
// "; rank 3 (pid 123) is stopped (SIGSTOP, Ctrl-Z or a debugger)" when that process is stopped, else
// "" (pid <= 0 included), to end a timeout's message with.
std::string stopped_note(const std::string& peer, pid_t pid);

// Marks the start of a collective on the calling thread, the one that runs its exchanges: from then
// on, time this process spends stopped is not counted against `deadline` -- before its first
// exchange() too, which alone would miss a stop between the start and its first wait (link.cpp).
void collective_started(Deadline deadline, Clock::time_point started);

// "collective #12 step 3": the tag written for humans.
std::string describe_tag(uint64_t tag);
inline uint64_t make_tag(uint64_t collective, uint32_t step) { return (collective << 20) | step; }

}  // namespace parallel
}  // namespace ringgrad
