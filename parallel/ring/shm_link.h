// parallel/ring/shm_link.h: the ring through POSIX shared memory -- ranks on one host.
//
// Each rank creates one shared-memory *channel* for the data it receives, and maps the channel of
// the next rank to send into it. A channel is a ring buffer of kSlots slots: the sender copies a
// piece of its message into the next free slot and advances `head`; the receiver reduces (or copies)
// straight out of the slot and advances `tail`. head and tail are atomics in the shared page, each on
// its own cache line, so the two processes never write the same line. No system call is made per
// message; a waiting side spins briefly, then yields, then sleeps in short naps.
//
// Cleanup: once both sides have mapped a channel its name is unlinked, so the memory disappears
// with the last process that maps it -- on a normal exit or a crash alike. A peer that dies is
// noticed within about 20 ms (its pid is checked while waiting), and a peer that fails sets the
// channel's `aborted` flag, so neighbours report it at once instead of at their deadline.
#pragma once

#include <sys/types.h>

#include <string>

#include "parallel/ring/link.h"
#include <ringgrad/parallel/store.h>

namespace ringgrad {
namespace parallel {

class ShmLink final : public RingLink {
 public:
  ShmLink(Store& store, int rank, int size, Deadline deadline);
  ~ShmLink() override;
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  const char* name() const override { return "shm"; }
  void exchange(uint64_t send_tag, const void* send, size_t send_bytes, uint64_t recv_tag, void* recv_into,
                size_t recv_bytes, const OnReceived& on_received, Deadline deadline) override;
  void abort(const std::string& reason) override;

  struct Channel;  // the shared layout, in shm_link.cpp

 private:
  void wait_a_little(int& idle_rounds, Deadline deadline, uint64_t tag, bool receiving);

  int rank_, next_rank_, prev_rank_;
  pid_t next_pid_ = 0, prev_pid_ = 0;
  Channel* in_ = nullptr;   // mine: prev writes, I read
  Channel* out_ = nullptr;  // next's: I write, next reads
  std::string in_name_;
  bool in_unlinked_ = false;
  Clock::time_point last_liveness_check_{};
};

// True when every rank published the same host identity (hostname and boot id) in the store:
// then shared memory can connect them.
bool all_ranks_on_this_host(Store& store, int rank, int size);

}  // namespace parallel
}  // namespace ringgrad
