// tests/cuda_emu/src/races.h: the happens-before checker -- two operations that touch the same
// allocation, at least one of them writing, with nothing that orders them (races.cpp).
//
// On a GPU two streams run at the same time, so a kernel on one stream and a copy on another that
// use the same buffer are ordered only by what the program says: an event recorded on one and
// waited for by the other, or the host waiting for the first before it queues the second. The
// emulator's lazy and random modes find a missing order when the run they happen to make gives a
// wrong number; this checker finds it from the order itself, at the call that queues the second
// operation, in every mode -- eager included, where the numbers are always right.
//
// Vector clocks, as in ThreadSanitizer and PyTorch's CUDA Stream Sanitizer: every stream counts the
// operations queued on it, and carries a clock -- for every stream, how many of its operations are
// known to happen before the stream's next one. Queuing on a stream ticks its own entry; a wait
// (cudaStreamWaitEvent, or the waits of the legacy stream) merges in the clock the event recorded;
// the host merges in a stream's or event's clock when it learns that the work is done (a
// synchronize, a query that answers done, a blocking call, cudaFree), and everything the host queues
// afterwards inherits what it knows. The host is one agent, as in the CUDA Stream Sanitizer: host
// threads order themselves with their own locks, which ThreadSanitizer checks.
//
// Two simplifications make it miss some races, never report one that is not there:
//   - every blocking call (cudaMemcpy, cudaMemset, cudaMemcpyPeer) counts as a host synchronisation
//     with its stream, since the emulator runs it to the end before returning. CUDA promises that
//     only for copies to the host: a pageable host-to-device cudaMemcpy may return before its DMA
//     lands, and a kernel on a non-blocking stream queued right after it is, strictly, unordered.
//   - with one host clock, what any host thread learns (the NCCL watchdog seeing an event done)
//     orders what every other thread queues afterwards; a thread that forgot its own wait is then
//     caught only when it queues before the watchdog looks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cuda_emu/launch.h"

namespace cuda_emu {

// For each agent (a stream's number), how many of its operations are known to have happened.
class VectorClock {
 public:
  uint64_t at(uint64_t agent) const {
    const auto it = ticks_.find(agent);
    return it == ticks_.end() ? 0 : it->second;
  }
  uint64_t tick(uint64_t agent) { return ++ticks_[agent]; }
  void join(const VectorClock& other) {
    for (const auto& [agent, ticks] : other.ticks_) {
      uint64_t& mine = ticks_[agent];
      if (ticks > mine) mine = ticks;
    }
  }

 private:
  std::map<uint64_t, uint64_t> ticks_;
};

// Whether the checker runs: unless RINGGRAD_EMU_RACES=off.
bool races_checked();

// Called with the streams' lock held, as operation number `tick` of `agent` (whose clock, `clock`,
// already counts it) is queued: checks each access against the earlier accesses of its allocation
// and stops the program naming both operations of an unordered pair, then records the accesses.
// `what` names the operation and its stream. Pointers outside every allocation (pageable host
// memory, null) are not tracked.
void check_accesses(const std::vector<MemoryAccess>& accesses, uint64_t agent, const VectorClock& clock,
                    const std::string& what);

// An allocation at `base` was freed (after every queued operation ran): its history ends.
void forget_accesses(const void* base);

}  // namespace cuda_emu
