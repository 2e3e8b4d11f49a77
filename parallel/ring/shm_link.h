// parallel/ring/shm_link.h: the ring's halves through shared memory -- neighbours on one host.
//
// Each rank creates one shared-memory *channel* for the data it receives (ShmRecv), and its previous
// rank maps it to send into (ShmSend). A channel is a ring buffer of kSlots slots: the sender copies a
// piece of its message into the next free slot and advances `head`; the receiver reduces (or copies)
// straight out of the slot and advances `tail`. head and tail are atomics in the shared page, each on
// its own cache line, so the two processes never write the same line. No system call is made per
// message while both sides keep up: a side with nothing to do spins, then yields the core, for some
// tens of microseconds, then sleeps on head or tail itself as a futex (futex.h), and the other side
// wakes it -- a system call made only when a flag in the page says that someone sleeps
// (RingLink::exchange).
//
// Cleanup: a channel is an anonymous memory file (memfd_create), never a name in /dev/shm. The
// previous rank opens it through /proc/<creator's pid>/fd/<fd> and maps it; then the creator closes
// its descriptor, and the memory disappears with the last process that maps it -- on a normal exit or
// a crash alike, whenever the crash comes: there is no name to be left behind. A peer that dies is
// noticed within about 20 ms (its pid is checked while waiting), and a peer that fails sets the
// channel's `aborted` flag, so neighbours report it at once instead of at their deadline.
#pragma once

#include <sys/types.h>

#include <string>

#include "parallel/ring/link.h"
#include <ringgrad/parallel/store.h>

namespace ringgrad {
namespace parallel {

struct ShmChannel;  // the shared layout, in shm_link.cpp

// Receives from `prev` through a channel this rank creates.
class ShmRecv final : public RecvHalf {
 public:
  // Creates the channel and publishes where it is ("pid:fd:cookie") under `keys`
  // (RingNeighbours::keys). `here`: this host, for messages (RingNeighbours).
  ShmRecv(Store& store, std::string keys, int rank, int prev, const std::string& here);
  ~ShmRecv() override;
  ShmRecv(const ShmRecv&) = delete;
  ShmRecv& operator=(const ShmRecv&) = delete;

  const char* name() const override { return "shm"; }
  void begin(uint64_t tag, void* into, size_t bytes, const OnReceived* on_received) override;
  bool progress() override;
  bool done() const override { return received_ == bytes_; }
  void check(bool timed_out, bool busy) override;
  void wait_ready(std::chrono::microseconds timeout) override;  // on the channel's head (futex.h)
  void abort(const std::string& reason) override;
  void accept(Deadline deadline) override;  // waits until prev mapped the channel, then closes its fd

 private:
  Store& store_;
  std::string keys_;
  int rank_, prev_;
  std::string prev_name_;  // "rank 3" or "rank 3 at 10.0.0.2"
  pid_t prev_pid_ = 0;
  ShmChannel* channel_ = nullptr;
  int fd_ = -1;  // the channel's memory file, open until prev has mapped it
  uint64_t tag_ = 0;
  uint8_t* into_ = nullptr;
  size_t bytes_ = 0, received_ = 0;
  const OnReceived* on_received_ = nullptr;
};

// Sends to `next` through the channel `next` created.
class ShmSend final : public SendHalf {
 public:
  ShmSend(Store& store, const std::string& keys, int rank, int next, const std::string& here);  // maps next's channel
  ~ShmSend() override;
  ShmSend(const ShmSend&) = delete;
  ShmSend& operator=(const ShmSend&) = delete;

  const char* name() const override { return "shm"; }
  void begin(uint64_t tag, const void* data, size_t bytes) override;
  bool progress() override;
  bool done() const override { return sent_ == bytes_; }
  void check(bool timed_out, bool busy) override;
  void wait_ready(std::chrono::microseconds timeout) override;  // on the channel's tail (futex.h)
  void abort(const std::string& reason) override;

 private:
  int rank_;
  std::string next_name_;
  pid_t next_pid_ = 0;
  ShmChannel* channel_ = nullptr;
  uint64_t tag_ = 0;
  const uint8_t* data_ = nullptr;
  size_t bytes_ = 0, sent_ = 0;
};

// This process's host, as far as sharing memory goes (shm_link.cpp says what it is made of), or
// RINGGRAD_HOST_ID when that is set and not empty.
std::string host_identity();

}  // namespace parallel
}  // namespace ringgrad
