// tests/cuda_emu/src/pinned_guard.cpp: the pages of pinned buffers under queued copies, protected
// with mprotect, and the SIGSEGV handler that names the copy when the host touches one
// (pinned_guard.h says why).
//
// Each queued copy's guard is a page range and a mode; a page's protection is the strictest of the
// guards over it (none: a queued copy writes it; read-only: copies only read it). The handler runs
// on the thread that touched the page: it looks the address up (the registry's lock is never held
// while a guarded page is touched, so it can be taken there), writes one line to stderr and aborts.
// A fault at any other address goes to the handler that was there before (AddressSanitizer's, or
// the default action).
#include "pinned_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace cuda_emu {
namespace {

constexpr uintptr_t kPage = 4096;

struct Guard {
  uint64_t handle;
  uintptr_t first, end;  // whole pages [first, end)
  bool writes;
  std::string what;
};

std::mutex g_mutex;
// Never destroyed: a copy may run during static destruction.
std::vector<Guard>& g_guards = *new std::vector<Guard>();
uint64_t g_next_handle = 0;
struct sigaction g_previous;
bool g_installed = false;

// The protection of every page in [first, end) from the guards over it; with g_mutex held.
void protect_range(uintptr_t first, uintptr_t end) {
  uintptr_t run_start = first;
  int run_mode = -1;
  for (uintptr_t page = first; page <= end; page += kPage) {
    int mode = PROT_READ | PROT_WRITE;
    if (page < end) {
      for (const Guard& g : g_guards) {
        if (page < g.first || page >= g.end) continue;
        mode = g.writes ? PROT_NONE : (mode == PROT_NONE ? PROT_NONE : PROT_READ);
      }
    }
    if (page == end || (run_mode != -1 && mode != run_mode)) {
      if (run_mode != -1 && page > run_start)
        (void)::mprotect(reinterpret_cast<void*>(run_start), page - run_start, run_mode);
      run_start = page;
    }
    run_mode = mode;
  }
}

void on_fault(int signal, siginfo_t* info, void* context) {
  const auto at = reinterpret_cast<uintptr_t>(info->si_addr);
  // The registry is changed only between touches of guarded memory, and only briefly: wait for it.
  bool locked = false;
  for (int tries = 0; !locked && tries < 1000000; ++tries) {
    locked = g_mutex.try_lock();
    if (!locked) ::sched_yield();
  }
  for (const Guard& g : g_guards) {
    if (at < g.first || at >= g.end) continue;
    char line[768];
    const int n = std::snprintf(line, sizeof line,
                                "cuda emulator: the host touched pinned memory at %p while the queued %s still %s it "
                                "(the GPU %s it when its stream gets there): wait for the copy -- synchronise the "
                                "stream, or an event recorded after the copy -- before the host %s the buffer\n",
                                info->si_addr, g.what.c_str(), g.writes ? "writes" : "reads",
                                g.writes ? "writes" : "reads", g.writes ? "reads or reuses" : "writes or reuses");
    if (n > 0) (void)::write(2, line, static_cast<size_t>(std::min(n, static_cast<int>(sizeof line) - 1)));
    std::abort();
  }
  if (locked) g_mutex.unlock();
  // Not a guarded page: whoever handled SIGSEGV before.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signal);
    return;
  }
  ::signal(SIGSEGV, SIG_DFL);  // the fault repeats on return, and kills the process as it would have
}

void install_handler() {
  if (g_installed) return;
  struct sigaction action = {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, &g_previous);
  g_installed = true;
}

}  // namespace

uint64_t guard_pinned(const void* p, size_t n, bool writes, const std::string& what) {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kPage - 1) / kPage * kPage;
  const uintptr_t end = (begin + n) / kPage * kPage;
  if (first >= end) return 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  install_handler();
  const uint64_t handle = ++g_next_handle;
  g_guards.push_back(Guard{handle, first, end, writes, what});
  protect_range(first, end);
  return handle;
}

void unguarded(const void* p, size_t n, uint64_t finished, const std::function<void()>& access) {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = begin / kPage * kPage;
  const uintptr_t end = (begin + n + kPage - 1) / kPage * kPage;
  std::lock_guard<std::mutex> lock(g_mutex);  // held throughout: no guard may come back meanwhile
  if (finished != 0) {
    const auto it =
        std::find_if(g_guards.begin(), g_guards.end(), [&](const Guard& g) { return g.handle == finished; });
    if (it != g_guards.end()) g_guards.erase(it);
  }
  if (!g_installed) {  // nothing was ever guarded
    access();
    return;
  }
  (void)::mprotect(reinterpret_cast<void*>(first), end - first, PROT_READ | PROT_WRITE);
  access();
  protect_range(first, end);
}

}  // namespace cuda_emu
