// tests/cuda_emu/planted_bugs.cpp: the emulator catches each planted bug of planted_kernels.cpp, and
// passes each correct twin. Every case runs as its own process (cuda_emu_planted), since a caught
// bug ends the process, as a fault would end a GPU context.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

namespace {

struct Outcome {
  int exit_code = -1;  // -1: killed by a signal (abort)
  std::string output;  // stdout and stderr
};

// `races`: RINGGRAD_EMU_RACES, whether the happens-before checker runs.
Outcome run_planted(const std::string& name, const std::string& schedule, const std::string& streams = "eager",
                    const std::string& races = "on") {
  const std::string command = "RINGGRAD_EMU_SCHEDULE=" + schedule + " RINGGRAD_EMU_STREAMS=" + streams +
                              " RINGGRAD_EMU_RACES=" + races + " '" + RINGGRAD_CUDA_EMU_PLANTED_PATH "' " + name +
                              " 2>&1";
  Outcome out;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t got = 0;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) out.output.append(buf, got);
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

bool sanitized_with(const std::string& name) {
  const char* list = RINGGRAD_CUDA_EMU_SANITIZE;
  return std::string(list).find(name) != std::string::npos;
}

}  // namespace

TEST_CASE("cuda emulator: a missing __syncthreads gives a wrong sum in some schedule order", "[cuda-emu]") {
  int wrong = 0;
  for (const char* order : {"forward", "reverse", "random:7"}) {
    const Outcome fixed = run_planted("missing-sync-fixed", order);
    INFO(order << ", fixed: " << fixed.output);
    CHECK(fixed.exit_code == 0);
    const Outcome bug = run_planted("missing-sync", order);
    INFO(order << ", planted: " << bug.output);
    CHECK((bug.exit_code == 0 || bug.exit_code == 1));
    wrong += bug.exit_code == 1;
  }
  CHECK(wrong >= 1);
}

TEST_CASE("cuda emulator: a full-mask shuffle that half the warp skips stops with the missing lane", "[cuda-emu]") {
  const Outcome fixed = run_planted("partial-warp-shuffle-fixed", "forward");
  INFO(fixed.output);
  CHECK(fixed.exit_code == 0);
  for (const char* order : {"forward", "reverse"}) {
    const Outcome bug = run_planted("partial-warp-shuffle", order);
    INFO(order << ": " << bug.output);
    CHECK(bug.exit_code != 0);
    CHECK(bug.output.find("kernel 'warp_sum' block (0,0,0)") != std::string::npos);
    CHECK(bug.output.find("__shfl_xor_sync with mask 0xffffffff is never reached by every lane of the mask") !=
          std::string::npos);
    CHECK(bug.output.find("has returned") != std::string::npos);
  }
}

TEST_CASE("cuda emulator: a __syncthreads that half the block skips stops with the missing thread", "[cuda-emu]") {
  const Outcome fixed = run_planted("divergent-barrier-fixed", "forward");
  INFO(fixed.output);
  CHECK(fixed.exit_code == 0);
  const Outcome bug = run_planted("divergent-barrier", "forward");
  INFO(bug.output);
  CHECK(bug.exit_code != 0);
  CHECK(bug.output.find("kernel 'scaled_copy' block (0,0,0) thread (0,0,0): __syncthreads is never reached by every "
                        "thread of the block: thread (128,0,0) has returned") != std::string::npos);
}

namespace {

// The correct twin passes everywhere; the planted bug is caught only in a build with `sanitizer`.
void expect_sanitizer_report(const std::string& name, const char* sanitizer, const char* why_unchecked,
                             std::initializer_list<const char*> needles) {
  const Outcome fixed = run_planted(name + "-fixed", "forward");
  INFO(fixed.output);
  CHECK(fixed.exit_code == 0);
  if (!sanitized_with(sanitizer)) {
    WARN("not a " << sanitizer << "-sanitizer build (RINGGRAD_SANITIZE): " << why_unchecked
                  << "; CI runs this test with the sanitizer");
    return;
  }
  const Outcome bug = run_planted(name, "forward");
  INFO(bug.output);
  CHECK(bug.exit_code != 0);
  for (const char* needle : needles) CHECK(bug.output.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("cuda emulator: a vector load one past the end is a heap-buffer-overflow under ASan", "[cuda-emu]") {
  expect_sanitizer_report("vector-off-by-one", "address", "the planted overflow reads unchecked memory",
                          {"heap-buffer-overflow", "copy_vectors"});
}

TEST_CASE("cuda emulator: a misaligned float4 load is reported under UBSan", "[cuda-emu]") {
  expect_sanitizer_report("vector-misaligned", "undefined", "x86 loads misaligned float4s silently",
                          {"misaligned address", "float4"});
}

// Asynchronous bugs: right when streams run work at once (eager), wrong when they run it as late as
// CUDA allows (lazy); the twin with the missing synchronisation is right in every mode. The
// happens-before checker is off for the bugs here, to show what lazy streams find on their own.
TEST_CASE("cuda emulator: lazy streams catch a missing stream wait or host synchronisation", "[cuda-emu]") {
  for (const char* bug :
       {"host-read-before-sync", "staging-without-wait", "peer-copy-without-wait", "blocking-copy-skips-stream"}) {
    for (const char* streams : {"eager", "lazy", "random:3", "random:11"}) {
      const Outcome fixed = run_planted(std::string(bug) + "-fixed", "forward", streams);
      INFO(bug << "-fixed, " << streams << ": " << fixed.output);
      CHECK(fixed.exit_code == 0);
    }
    const Outcome eager = run_planted(bug, "forward", "eager", "off");
    INFO(bug << ", eager: " << eager.output);
    CHECK(eager.exit_code == 0);  // invisible when work runs at once: why the lazy mode exists
    const Outcome lazy = run_planted(bug, "forward", "lazy", "off");
    INFO(bug << ", lazy: " << lazy.output);
    CHECK(lazy.exit_code == 1);
    CHECK(lazy.output.find(": wrong") != std::string::npos);
  }
}

// The same bug class through memory reuse: a pinned staging buffer written by its next user while
// the copy that sends it is still queued. Without the guard on pinned memory the GPU would receive
// the new values (a wrong result, some time later); with it the first write stops the program.
TEST_CASE("cuda emulator: a pinned buffer reused while its copy is queued stops at the first write, naming the copy",
          "[cuda-emu]") {
  for (const char* streams : {"eager", "lazy", "random:3"}) {
    const Outcome fixed = run_planted("pinned-reused-before-copy-fixed", "forward", streams);
    INFO(streams << ": " << fixed.output);
    CHECK(fixed.exit_code == 0);
  }
  const Outcome eager = run_planted("pinned-reused-before-copy", "forward", "eager");
  INFO("eager: " << eager.output);
  CHECK(eager.exit_code == 0);  // the copy ran at the call
  const Outcome lazy = run_planted("pinned-reused-before-copy", "forward", "lazy");
  INFO("lazy: " << lazy.output);
  CHECK(lazy.exit_code != 0);
  CHECK(lazy.output.find("the host touched pinned memory at") != std::string::npos);
  CHECK(lazy.output.find("while the queued cudaMemcpyAsync of 16384 bytes from pinned host memory to memory of "
                         "cuda:0 still reads it") != std::string::npos);
}

// The same bugs through the happens-before checker: it judges the order the program gave the two
// operations, not the order they happened to run in, so it stops each one in every mode -- eager
// too, where the numbers come out right -- naming both operations. The host's own reads (the first
// bug of the lazy test above) are not GPU operations; the poisoned buffer finds those.
TEST_CASE("cuda emulator: the happens-before checker names both operations of an unordered pair, in every mode",
          "[cuda-emu]") {
  struct Case {
    const char* bug;
    const char* later;    // the operation queued second, and what it does to the allocation
    const char* earlier;  // the one it is not ordered after
  };
  const Case cases[] = {
      {"staging-without-wait",
       "cudaMemcpyAsync of 4000 bytes from memory of cuda:0 to pinned host memory on stream 2 of cuda:0 reads it",
       "kernel 'fill_value' on stream 1 of cuda:0 wrote it before"},
      {"peer-copy-without-wait",
       "cudaMemcpyPeerAsync of 4000 bytes from cuda:0 to cuda:1 on stream 2 of cuda:1 reads it",
       "kernel 'fill_value' on stream 1 of cuda:0 wrote it before"},
      {"blocking-copy-skips-stream",
       "cudaMemcpy of 4000 bytes from memory of cuda:0 to pageable host memory on the legacy stream of cuda:0 reads it",
       "kernel 'fill_value' on stream 1 of cuda:0 wrote it before"},
      {"collective-freed-in-flight", "kernel 'fill_value' on stream 1 of cuda:0 writes it",
       "ncclAllReduce #1 of rank 0 on stream 2 of cuda:0 wrote it before"},
  };
  for (const Case& c : cases) {
    for (const char* streams : {"eager", "lazy", "random:3"}) {
      const Outcome fixed = run_planted(std::string(c.bug) + "-fixed", "forward", streams);
      INFO(c.bug << "-fixed, " << streams << ": " << fixed.output);
      CHECK(fixed.exit_code == 0);
      const Outcome bug = run_planted(c.bug, "forward", streams);
      INFO(c.bug << ", " << streams << ": " << bug.output);
      CHECK(bug.exit_code != 0);
      CHECK(bug.output.find("unordered accesses to the 4000 bytes of memory of cuda:0 at ") != std::string::npos);
      CHECK(bug.output.find(std::string(c.later) + ", and " + c.earlier) != std::string::npos);
    }
  }
  // Off, the checker says nothing and the eager run is right: the check, not the mode, caught it.
  const Outcome off = run_planted("collective-freed-in-flight", "forward", "eager", "off");
  INFO("off: " << off.output);
  CHECK(off.exit_code == 0);
}
