// tests/cuda_emu/planted_kernels.h: kernels with one planted bug each, and their correct twins --
// the proof that the emulator catches what it claims to (planted_bugs.cpp runs them).
#pragma once

#include <string>
#include <vector>

namespace planted {

// Runs case `name` ("<bug>" or "<bug>-fixed") and returns whether its result is right. A bug the
// emulator catches as a fault (or a sanitizer, as a report) never returns.
bool run(const std::string& name);
std::vector<std::string> names();

// The asynchronous ones (planted_async.cpp): `known` says whether `name` is one of them.
bool run_async(const std::string& name, bool* known);
std::vector<std::string> async_names();

}  // namespace planted
