// tests/cuda_emu/src/scheduler.cpp: how a grid runs -- blocks one after another, the threads of a
// block as fibers, __syncthreads and warp collectives as rendezvous points, and the faults a GPU
// would hang or corrupt on (a barrier or a full-mask collective that some thread never reaches).
//
// A block runs in rounds: each round resumes every runnable thread once, in the schedule's order;
// a thread runs until it reaches a rendezvous point or returns. The last thread to reach a
// __syncthreads releases all of them; the last lane to reach a warp collective computes every
// lane's result and releases the warp. A round in which no thread could run, while some still wait,
// is a deadlock on a GPU: the emulator names the kernel, the block, the waiting thread and the thread
// it waits for, and stops.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "cuda_emu/control.h"
#include "cuda_emu/launch.h"
#include "fiber.h"
#include "loop_trips.h"
#include "state.h"
#include "streams.h"

namespace cuda_emu {
namespace {

enum class State { NotStarted, Ready, AtBarrier, AtWarp, Done };

enum class Collective { Shuffle, Vote, SyncWarp };

struct Thread {
  ThreadPosition position{};
  int linear = 0;  // x + y*bx + z*bx*by: warps are consecutive runs of 32 of these
  State state = State::NotStarted;
  Fiber fiber;
  // While at a rendezvous point:
  const char* waiting_at = "";
  Collective collective = Collective::Shuffle;
  Shuffle shuffle_kind = Shuffle::Index;
  Vote vote_kind = Vote::Ballot;
  unsigned mask = 0;
  uint64_t value = 0;
  int operand = 0, width = 32;
  uint64_t result = 0;
  ThreadTrips trips;  // its stride loops, for RINGGRAD_EMU_LOOP_REPORT
};

struct Block {
  const Launch* launch = nullptr;
  uint3 block_idx{};
  std::vector<Thread> threads;
  int at_barrier = 0;
  void (*run_thread)(void*) = nullptr;
  void* closure = nullptr;
};

thread_local Block* g_block = nullptr;
thread_local Thread* g_thread = nullptr;

std::mutex g_schedule_mutex;
Schedule g_schedule;
bool g_schedule_read = false;
std::atomic<uint64_t> g_launches{0};

size_t stack_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("RINGGRAD_EMU_STACK_KB");
    const long kb = env != nullptr ? std::strtol(env, nullptr, 10) : 256;
    if (kb < 16 || kb > 65536) fatal("RINGGRAD_EMU_STACK_KB: expected 16..65536 (KiB), got '" + std::string(env) + "'");
    return static_cast<size_t>(kb) * 1024;
  }();
  return bytes;
}

// Stacks of finished fibers, reused by the next thread to start on this host thread.
std::vector<std::unique_ptr<Stack>>& stack_pool() {
  thread_local std::vector<std::unique_ptr<Stack>> pool;
  return pool;
}

std::unique_ptr<Stack> take_stack() {
  auto& pool = stack_pool();
  if (pool.empty()) return std::make_unique<Stack>(stack_bytes());
  std::unique_ptr<Stack> s = std::move(pool.back());
  pool.pop_back();
  s->reset_for_reuse();
  return s;
}

std::string coords(uint3 v) {
  std::ostringstream out;
  out << '(' << v.x << ',' << v.y << ',' << v.z << ')';
  return out.str();
}

std::string where(const Block& b, const Thread& t) {
  return "kernel '" + std::string(b.launch->kernel) + "' block " + coords(b.block_idx) + " thread " +
         coords(t.position.thread_idx);
}

std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

[[noreturn]] void fault(const Block& b, const Thread& t, const std::string& what) { fatal(where(b, t) + ": " + what); }

void run_body(void* arg) {
  auto* b = static_cast<Block*>(arg);
  try {
    b->run_thread(b->closure);
  } catch (const std::exception& e) {
    fault(*b, *g_thread, std::string("threw ") + e.what());
  } catch (...) {
    fault(*b, *g_thread, "threw an exception");
  }
}

void resume(Block& b, Thread& t) {
  if (t.state == State::NotStarted) t.fiber.start(take_stack().release(), &run_body, &b);
  t.state = State::Ready;
  g_thread = &t;
  current_position = &t.position;
  if (current_launch_trips != nullptr) current_thread_trips = &t.trips;
  t.fiber.resume();
  g_thread = nullptr;
  current_position = nullptr;
  current_thread_trips = nullptr;
  if (t.fiber.finished()) {
    t.state = State::Done;
    stack_pool().emplace_back(t.fiber.stack());
  }
}

// ---- warp collectives -------------------------------------------------------------------------------
const char* collective_name(const Thread& t) {
  switch (t.collective) {
    case Collective::SyncWarp: return "__syncwarp";
    case Collective::Vote:
      return t.vote_kind == Vote::Ballot ? "__ballot_sync" : t.vote_kind == Vote::Any ? "__any_sync" : "__all_sync";
    case Collective::Shuffle:
      switch (t.shuffle_kind) {
        case Shuffle::Index: return "__shfl_sync";
        case Shuffle::Up: return "__shfl_up_sync";
        case Shuffle::Down: return "__shfl_down_sync";
        case Shuffle::Xor: return "__shfl_xor_sync";
      }
  }
  return "?";
}

bool same_collective(const Thread& a, const Thread& b) {
  return b.state == State::AtWarp && a.collective == b.collective && a.mask == b.mask &&
         (a.collective != Collective::Shuffle || a.shuffle_kind == b.shuffle_kind) &&
         (a.collective != Collective::Vote || a.vote_kind == b.vote_kind);
}

// The lane whose value `lane` receives, per CUDA's rules for segments of `width` lanes.
int source_lane(const Thread& t, int lane) {
  const int w = t.width, segment = lane & ~(w - 1);
  switch (t.shuffle_kind) {
    case Shuffle::Index: return segment + (t.operand & (w - 1));
    case Shuffle::Up: return lane - t.operand >= segment ? lane - t.operand : lane;
    case Shuffle::Down: return lane + t.operand < segment + w ? lane + t.operand : lane;
    case Shuffle::Xor: {
      const int src = lane ^ t.operand;
      return src >= segment && src < segment + w ? src : lane;
    }
  }
  return lane;
}

// Completes the collective `t` waits at, if every lane of its mask has arrived at the same one.
void try_complete(Block& b, Thread& t) {
  const int base = t.linear - t.linear % 32;
  for (int lane = 0; lane < 32; ++lane) {
    if ((t.mask >> lane & 1u) == 0) continue;
    const int i = base + lane;
    if (i >= static_cast<int>(b.threads.size()) || !same_collective(t, b.threads[static_cast<size_t>(i)])) return;
  }
  unsigned ballot = 0;
  for (int lane = 0; lane < 32; ++lane)
    if ((t.mask >> lane & 1u) && b.threads[static_cast<size_t>(base + lane)].value != 0) ballot |= 1u << lane;
  for (int lane = 0; lane < 32; ++lane) {
    if ((t.mask >> lane & 1u) == 0) continue;
    Thread& l = b.threads[static_cast<size_t>(base + lane)];
    if (t.collective == Collective::Shuffle) {
      const int src = source_lane(l, lane);
      if ((t.mask >> src & 1u) == 0)
        fault(b, l,
              std::string(collective_name(l)) + " with mask " + hex(t.mask) + " reads lane " + std::to_string(src) +
                  ", which is not in the mask (its value is undefined)");
      l.result = b.threads[static_cast<size_t>(base + src)].value;
    } else if (t.collective == Collective::Vote) {
      l.result = t.vote_kind == Vote::Ballot ? ballot : t.vote_kind == Vote::Any ? (ballot != 0) : (ballot == t.mask);
    }
    l.state = State::Ready;
  }
}

void arrive_at_warp(Collective collective, unsigned mask) {
  Block& b = *g_block;
  Thread& t = *g_thread;
  const int lane = t.linear % 32;
  t.collective = collective;
  t.mask = mask;
  t.state = State::AtWarp;
  if ((mask >> lane & 1u) == 0)
    fault(b, t,
          std::string(collective_name(t)) + " with mask " + hex(mask) + " called by lane " + std::to_string(lane) +
              ", which is not in the mask");
  try_complete(b, t);
  t.fiber.yield();
}

// ---- a deadlock, explained --------------------------------------------------------------------------
std::string state_of(const Thread& t) {
  switch (t.state) {
    case State::Done: return "has returned";
    case State::AtBarrier: return std::string("waits at ") + t.waiting_at;
    case State::AtWarp: return std::string("waits at ") + collective_name(t) + " with mask " + hex(t.mask);
    default: return "is runnable";
  }
}

[[noreturn]] void report_deadlock(const Block& b) {
  for (const Thread& t : b.threads) {
    if (t.state == State::AtBarrier) {
      for (const Thread& o : b.threads)
        if (o.state != State::AtBarrier)
          fault(b, t,
                std::string(t.waiting_at) + " is never reached by every thread of the block: thread " +
                    coords(o.position.thread_idx) + " " + state_of(o));
    }
    if (t.state == State::AtWarp) {
      const int base = t.linear - t.linear % 32;
      for (int lane = 0; lane < 32; ++lane) {
        if ((t.mask >> lane & 1u) == 0) continue;
        const int i = base + lane;
        if (i >= static_cast<int>(b.threads.size()))
          fault(b, t,
                std::string(collective_name(t)) + " with mask " + hex(t.mask) + " names lane " + std::to_string(lane) +
                    ", which does not exist (the block has " + std::to_string(b.threads.size()) + " threads)");
        const Thread& o = b.threads[static_cast<size_t>(i)];
        if (!same_collective(t, o))
          fault(b, t,
                std::string(collective_name(t)) + " with mask " + hex(t.mask) +
                    " is never reached by every lane of the mask: lane " + std::to_string(lane) + " (thread " +
                    coords(o.position.thread_idx) + ") " + state_of(o));
      }
    }
  }
  fatal("kernel '" + std::string(b.launch->kernel) + "' block " + coords(b.block_idx) + ": no thread can run");
}

// ---- orders -------------------------------------------------------------------------------------------
void arrange(std::vector<int>& order, const Schedule& s, std::mt19937_64& rng) {
  std::iota(order.begin(), order.end(), 0);
  if (s.order == Order::Reverse) std::reverse(order.begin(), order.end());
  if (s.order == Order::Random) std::shuffle(order.begin(), order.end(), rng);
}

void run_block(Block& b, const Schedule& s, std::mt19937_64& rng) {
  const dim3 bd = b.launch->block;
  const int n = static_cast<int>(bd.x * bd.y * bd.z);
  if (b.threads.size() != static_cast<size_t>(n)) b.threads = std::vector<Thread>(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Thread& t = b.threads[static_cast<size_t>(i)];
    t.state = State::NotStarted;
    t.linear = i;
    t.trips.passes.clear();
    const unsigned u = static_cast<unsigned>(i);
    t.position = ThreadPosition{uint3{u % bd.x, u / bd.x % bd.y, u / (bd.x * bd.y)}, b.block_idx, bd, b.launch->grid};
  }
  b.at_barrier = 0;
  std::vector<int> order(static_cast<size_t>(n));
  int done = 0;
  while (done < n) {
    arrange(order, s, rng);
    bool ran = false;
    for (int i : order) {
      Thread& t = b.threads[static_cast<size_t>(i)];
      if (t.state != State::NotStarted && t.state != State::Ready) continue;
      resume(b, t);
      ran = true;
      if (t.state == State::Done) ++done;
    }
    if (!ran && done < n) report_deadlock(b);
  }
}

bool valid_configuration(const Launch& l, std::string* why) {
  const dim3 g = l.grid, bd = l.block;
  std::ostringstream out;
  if (g.x == 0 || g.y == 0 || g.z == 0 || bd.x == 0 || bd.y == 0 || bd.z == 0) {
    out << "a zero dimension";
  } else if (const unsigned most = small_device() ? 3u : 65535u; g.x > 2147483647u || g.y > most || g.z > most) {
    out << "grid " << g.x << 'x' << g.y << 'x' << g.z << " beyond (2^31-1)x" << most << 'x' << most
        << (small_device() ? " (RINGGRAD_EMU_SMALL_DEVICE)" : "");
  } else if (bd.x > 1024u || bd.y > 1024u || bd.z > 64u || static_cast<uint64_t>(bd.x) * bd.y * bd.z > 1024u) {
    out << "block " << bd.x << 'x' << bd.y << 'x' << bd.z << " beyond 1024 threads (or 1024x1024x64)";
  } else if (l.shared_bytes > 48 * 1024) {
    out << "dynamic shared memory of " << l.shared_bytes << " bytes beyond 48 KiB";
  } else {
    return true;
  }
  *why = out.str();
  return false;
}

}  // namespace

void outside_kernel() { fatal("threadIdx, blockIdx, blockDim or gridDim read outside a kernel"); }

void syncthreads(const char* what) {
  Block& b = *g_block;
  Thread& t = *g_thread;
  t.state = State::AtBarrier;
  t.waiting_at = what;
  if (++b.at_barrier == static_cast<int>(b.threads.size())) {
    for (Thread& o : b.threads) o.state = State::Ready;
    b.at_barrier = 0;
  }
  t.fiber.yield();
}

void syncwarp(unsigned mask) { arrive_at_warp(Collective::SyncWarp, mask); }

uint64_t shuffle(Shuffle kind, unsigned mask, uint64_t bits, int operand, int width) {
  Thread& t = *g_thread;
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fault(*g_block, t, "a shuffle's width must be a power of 2 in 1..32, got " + std::to_string(width));
  t.shuffle_kind = kind;
  t.value = bits;
  t.operand = operand;
  t.width = width;
  arrive_at_warp(Collective::Shuffle, mask);
  return t.result;
}

unsigned vote(Vote kind, unsigned mask, bool predicate) {
  Thread& t = *g_thread;
  t.vote_kind = kind;
  t.value = predicate ? 1 : 0;
  arrive_at_warp(Collective::Vote, mask);
  return static_cast<unsigned>(t.result);
}

// Runs every block of a launch that run_grid() checked and queued, when its stream gets to it.
void run_blocks(const Launch& l, void (*run_thread)(void*), void* closure, uint64_t launch_index) {
  const Schedule s = schedule();
  std::mt19937_64 rng(s.seed * 0x9e3779b97f4a7c15ull + launch_index);
  const dim3 g = l.grid;
  const uint64_t blocks = static_cast<uint64_t>(g.x) * g.y * g.z;
  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (s.order == Order::Reverse) std::reverse(order.begin(), order.end());
  if (s.order == Order::Random) std::shuffle(order.begin(), order.end(), rng);
  Block b;
  b.launch = &l;
  b.run_thread = run_thread;
  b.closure = closure;
  g_block = &b;
  LaunchTrips trips;
  if (loop_report_enabled()) current_launch_trips = &trips;
  for (uint64_t k : order) {
    b.block_idx = uint3{static_cast<unsigned>(k % g.x), static_cast<unsigned>(k / g.x % g.y),
                        static_cast<unsigned>(k / (static_cast<uint64_t>(g.x) * g.y))};
    run_block(b, s, rng);
  }
  g_block = nullptr;
  current_launch_trips = nullptr;
  add_launch_trips(l.kernel, trips);
}

void run_grid(const Launch& l, void (*run_thread)(void*), std::shared_ptr<void> closure,
              const std::vector<MemoryAccess>& accesses) {
  const uint64_t launch_index = g_launches.fetch_add(1, std::memory_order_relaxed) + 1;
  if (g_block != nullptr) fatal("kernel '" + std::string(l.kernel) + "' launched from inside a kernel");
  std::string why;
  if (!valid_configuration(l, &why)) {
    fail(cudaErrorInvalidConfiguration, "launch of '" + std::string(l.kernel) + "': " + why);
    return;
  }
  if (use_context(l.kernel) != cudaSuccess) return;
  int device = -1;
  if (!stream_device(l.stream, &device)) {
    fail(cudaErrorInvalidResourceHandle, "launch of '" + std::string(l.kernel) + "' on a stream that does not exist");
    return;
  }
  if (device != current_device()) {
    fail(cudaErrorInvalidResourceHandle, "launch of '" + std::string(l.kernel) +
                                             "' on a stream of cuda:" + std::to_string(device) +
                                             " while cuda:" + std::to_string(current_device()) + " is current");
    return;
  }
  // Checked now, as a GPU checks a launch; run when the stream gets to it, with its own copy of the
  // launch and of the arguments.
  enqueue(
      l.stream, "kernel '" + std::string(l.kernel) + "'",
      [l, run_thread, closure, launch_index] { run_blocks(l, run_thread, closure.get(), launch_index); }, accesses);
}

void check_kernel_pointer(const Launch& l, int parameter, const void* ptr) {
  if (ptr == nullptr) return;
  Region r;
  const std::string what = "kernel '" + std::string(l.kernel) + "' parameter " + std::to_string(parameter);
  if (!find_region(ptr, 0, &r))
    fatal(what + " is a pointer to host memory that is neither device memory nor pinned (" +
          std::to_string(reinterpret_cast<uintptr_t>(ptr)) + "): an illegal address on a GPU");
  const int device = current_device();
  if (r.device >= 0 && r.device != device && !peer_access_enabled(device, r.device))
    fatal(what + " points into the memory of cuda:" + std::to_string(r.device) +
          ", which cuda:" + std::to_string(device) + " has no peer access to");
}

bool parse_random(const std::string& text, uint64_t* seed) {
  if (text == "random") return true;
  if (text.rfind("random:", 0) != 0 || text.size() == 7 || text.find_first_not_of("0123456789", 7) != std::string::npos)
    return false;
  *seed = std::stoull(text.substr(7));
  return true;
}

Schedule parse_schedule(const std::string& text) {
  Schedule s;
  if (text.empty() || text == "forward") return s;
  if (text == "reverse") {
    s.order = Order::Reverse;
    return s;
  }
  if (parse_random(text, &s.seed)) {
    s.order = Order::Random;
    return s;
  }
  throw std::invalid_argument("RINGGRAD_EMU_SCHEDULE: expected forward, reverse, random or random:SEED, got '" + text +
                              "'");
}

std::string describe(const Schedule& s) {
  switch (s.order) {
    case Order::Forward: return "forward";
    case Order::Reverse: return "reverse";
    case Order::Random: return "random:" + std::to_string(s.seed);
  }
  return "?";
}

void set_schedule(const Schedule& s) {
  std::lock_guard<std::mutex> lock(g_schedule_mutex);
  g_schedule = s;
  g_schedule_read = true;
}

Schedule schedule() {
  std::lock_guard<std::mutex> lock(g_schedule_mutex);
  if (!g_schedule_read) {
    const char* env = std::getenv("RINGGRAD_EMU_SCHEDULE");
    try {
      g_schedule = parse_schedule(env != nullptr ? env : "");
    } catch (const std::invalid_argument& e) {
      fatal(e.what());
    }
    g_schedule_read = true;
  }
  return g_schedule;
}

uint64_t launch_count() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace cuda_emu
