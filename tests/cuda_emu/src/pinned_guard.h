// tests/cuda_emu/src/pinned_guard.h: pinned host memory that a queued copy still uses, protected from
// the host (memory.cpp guards every copy to or from pinned memory; pinned_guard.cpp).
//
// A GPU reads a pinned source, or writes a pinned destination, when its stream gets to the copy,
// not at the call. Host code that writes the source before then (reusing a staging buffer, as a
// caching allocator hands it to the next user) sends the new bytes; host code that reads the
// destination before then reads whatever was there. While such a copy is queued, its pages are
// read-only (the copy reads them) or inaccessible (it writes them), and a touch stops the program
// with a message naming the copy and what the host did, instead of a wrong number much later.
// Only pages wholly inside the buffer can be protected (pinned buffers start on a page; the tail of
// the last page may hold other memory), so the bytes of a buffer's last partial page are unguarded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace cuda_emu {

// Guards the whole pages of [p, p + n) while the copy `what` is queued: read-only when it only reads
// them (`writes` false), inaccessible when it writes them. Returns a handle (0: no whole page to guard).
uint64_t guard_pinned(const void* p, size_t n, bool writes, const std::string& what);
// The emulator's own access to pinned memory [p, p + n): ends the guard `finished` (0: none; the
// copy about to run), lifts every guard over those pages while `access` runs, then restores the
// guards of the copies still queued there.
void unguarded(const void* p, size_t n, uint64_t finished, const std::function<void()>& access);

}  // namespace cuda_emu
