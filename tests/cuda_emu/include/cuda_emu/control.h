// cuda_emu/control.h: the emulator's own knobs, for tests that drive it directly (the planted-bug
// tests); everything else reads them from the environment once:
//
//   RINGGRAD_EMU_SCHEDULE  forward (default) | reverse | random | random:SEED
//       the order in which the blocks of a grid, and the runnable threads of a block between two
//       rendezvous points, are run. A shared-memory race -- a thread reading what another writes in
//       the same phase -- gives a different answer in different orders.
//   RINGGRAD_EMU_STREAMS   eager (default) | lazy | random | random:SEED
//       when queued work runs (src/streams.cpp): as it is queued, only when something forces it,
//       or at random moments in between. A missing stream wait or host synchronisation reads
//       stale or poisoned data in lazy and random.
//   RINGGRAD_EMU_DEVICES   how many emulated H200s (default 2, at most 16)
//   RINGGRAD_EMU_SMALL_DEVICE  1: each device has one SM of 256 threads and a grid at most 3 blocks
//       high and deep, so kernels that size their grids from the device's properties run every
//       grid-stride loop several times even on small tests
//   RINGGRAD_EMU_RACES     on (default) | off: the happens-before checker (src/races.h)
//   RINGGRAD_EMU_LOOP_REPORT  FILE: at exit, append which stride loops ran a second trip
//       (src/loop_trips.h; tools/loop_report.py reads it)
//   RINGGRAD_EMU_STACK_KB  stack per emulated thread (default 256)
//   RINGGRAD_EMU_EXCLUSIVE NAME: each device has contexts of one process at a time (lock files
//       $TMPDIR/ringgrad-emu-NAME-cudaN.lock), as in exclusive-process compute mode
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cuda_emu {

enum class Order { Forward, Reverse, Random };

struct Schedule {
  Order order = Order::Forward;
  uint64_t seed = 1;  // for Order::Random
};

// Parses the value of RINGGRAD_EMU_SCHEDULE; throws std::invalid_argument naming it otherwise.
Schedule parse_schedule(const std::string& text);
std::string describe(const Schedule& schedule);

// The schedule of every launch from now on (all host threads).
void set_schedule(const Schedule& schedule);
Schedule schedule();

enum class StreamMode { Eager, Lazy, Random };

struct StreamSettings {
  StreamMode mode = StreamMode::Eager;
  uint64_t seed = 1;  // for StreamMode::Random
};

// Parses the value of RINGGRAD_EMU_STREAMS; throws std::invalid_argument naming it otherwise.
StreamSettings parse_stream_settings(const std::string& text);
// The settings of this process (read from the environment once).
StreamSettings stream_settings();

// Kernel launches so far, all host threads together.
uint64_t launch_count();

// The devices this process has created a context on, in increasing order.
std::vector<int> context_devices();

}  // namespace cuda_emu
