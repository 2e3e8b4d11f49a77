// tests/cuda_emu/planted_main.cpp: cuda_emu_planted CASE -- runs one planted-bug kernel (or its
// correct twin) on the emulator; prints "right" and exits 0, or prints "wrong" and exits 1. A bug
// caught as a fault or by a sanitizer ends the process before that, with the diagnosis on stderr.
// RINGGRAD_EMU_SCHEDULE picks the order and RINGGRAD_EMU_STREAMS when queued work runs, as for
// every emulated program.
#include <cstdio>
#include <string>

#include "planted_kernels.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cuda_emu_planted CASE\ncases:");
    for (const std::string& n : planted::names()) std::fprintf(stderr, " %s", n.c_str());
    for (const std::string& n : planted::async_names()) std::fprintf(stderr, " %s", n.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  const bool right = planted::run(argv[1]);
  std::printf("%s: %s\n", argv[1], right ? "right" : "wrong");
  return right ? 0 : 1;
}
