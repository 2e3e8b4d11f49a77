// parallel/ring/futex.h: sleeping on a 32-bit word in shared memory until another process changes it.
//
// Shared memory has no file descriptor to poll, so a rank waiting for its neighbour used to nap in
// fixed steps; each nap costs a timer's wake-up and delays the neighbour's next step. A futex lets
// the kernel put the waiter to sleep on the word itself and wake it as soon as the other side says
// so. Without FUTEX_PRIVATE_FLAG the kernel keys the wait on the page behind the address, not the
// process's address space, so a waiter and a waker in different processes that map the same
// MAP_SHARED memory meet on the same word.
//
// The protocol that makes it safe (no lost wake-up) is the caller's (shm_link.cpp): the waiter
// announces itself in a flag, looks at the word once more, and sleeps only if it still holds what it
// saw; the writer changes the word, then wakes only if the flag says someone may be asleep. The
// kernel sleeps only while the word still equals `expected`, so a change that lands between the
// waiter's last look and its sleep makes the wait return at once.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace ringgrad {
namespace parallel {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free,
              "a futex is a plain 32-bit word");

// Sleeps while *word == expected, for at most `timeout`. It may return early (a wake-up, a signal,
// the word already changed): the caller looks again, as after any wait.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout) {
  if (timeout.count() <= 0) return;
  const timespec relative{static_cast<time_t>(timeout.count() / 1000000),
                          static_cast<long>(timeout.count() % 1000000) * 1000};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &relative, nullptr, 0);
}

// Wakes every process sleeping on `word` (there is at most one: the channel's other side).
inline void futex_wake(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace parallel
}  // namespace ringgrad
