// tests/cuda_emu/src/races.cpp: the happens-before checker of races.h.
//
// Each allocation keeps its last write and, for each agent, its last read since then: a later
// access conflicts with the write (any access) or with the reads (a write), and is ordered after an
// earlier one exactly when its clock has counted that one's tick. Keeping only the last read per
// agent is enough: an agent's reads are ordered among themselves, so a write ordered after its
// last read is ordered after all of them. The granularity is the allocation, as in the CUDA Stream
// Sanitizer's tensors -- ringgrad's caching allocator gives every tensor block an allocation of its
// own -- so two streams using disjoint halves of one cudaMalloc would be reported too.
#include "races.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "state.h"

namespace cuda_emu {
namespace {

struct Use {
  uint64_t agent = 0, tick = 0;
  std::shared_ptr<const std::string> what;
};

struct History {
  bool written = false;
  Use write;
  std::map<uint64_t, Use> reads;  // by agent: the last read since the write
};

std::mutex g_races_mutex;
// Never destroyed, as every registry of the emulator: work may be queued during static destruction.
std::map<uintptr_t, History>& g_histories = *new std::map<uintptr_t, History>();

bool ordered(const Use& earlier, const VectorClock& later) { return later.at(earlier.agent) >= earlier.tick; }

std::string describe(const Region& r) {
  char address[32];
  std::snprintf(address, sizeof address, "%#llx", static_cast<unsigned long long>(r.base));
  return std::to_string(r.bytes) + " bytes of " +
         (r.device >= 0 ? "memory of cuda:" + std::to_string(r.device) : std::string("pinned host memory")) + " at " +
         address;
}

[[noreturn]] void report(const Region& r, const Use& earlier, bool earlier_writes, const std::string& later,
                         bool later_writes) {
  fatal("unordered accesses to the " + describe(r) + ": " + later + (later_writes ? " writes" : " reads") +
        " it, and " + *earlier.what + (earlier_writes ? " wrote" : " read") +
        " it before, with nothing that orders the two (no event that the later one's stream waits for, no "
        "synchronisation the host saw before queuing it), so a GPU may run them in either order or at once "
        "(RINGGRAD_EMU_RACES=off turns this check off)");
}

}  // namespace

bool races_checked() {
  static const bool on = [] {
    const char* env = std::getenv("RINGGRAD_EMU_RACES");
    const std::string value = env != nullptr ? env : "";
    if (value.empty() || value == "on") return true;
    if (value == "off") return false;
    fatal("RINGGRAD_EMU_RACES: expected on or off, got '" + value + "'");
  }();
  return on;
}

void check_accesses(const std::vector<MemoryAccess>& accesses, uint64_t agent, const VectorClock& clock,
                    const std::string& what) {
  if (!races_checked() || accesses.empty()) return;
  // One entry per allocation: an operation that reads and writes one (an in-place collective, a
  // kernel given the same tensor twice) writes it.
  std::map<uintptr_t, std::pair<Region, bool>> touched;
  for (const MemoryAccess& a : accesses) {
    Region r;
    if (a.ptr == nullptr || !find_region(a.ptr, 0, &r)) continue;
    auto [it, inserted] = touched.emplace(r.base, std::make_pair(r, a.writes));
    if (!inserted) it->second.second = it->second.second || a.writes;
  }
  if (touched.empty()) return;
  const auto name = std::make_shared<const std::string>(what);
  const Use use{agent, clock.at(agent), name};
  std::lock_guard<std::mutex> lock(g_races_mutex);
  for (const auto& [base, entry] : touched) {
    const auto& [region, writes] = entry;
    History& h = g_histories[base];
    if (h.written && !ordered(h.write, clock)) report(region, h.write, true, what, writes);
    if (writes) {
      for (const auto& [reader, read] : h.reads)
        if (!ordered(read, clock)) report(region, read, false, what, true);
      h.written = true;
      h.write = use;
      h.reads.clear();
    } else {
      h.reads[agent] = use;
    }
  }
}

void forget_accesses(const void* base) {
  std::lock_guard<std::mutex> lock(g_races_mutex);
  g_histories.erase(reinterpret_cast<uintptr_t>(base));
}

}  // namespace cuda_emu
