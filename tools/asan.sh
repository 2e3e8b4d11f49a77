#!/usr/bin/env bash
# tools/asan.sh: the library and its tests under AddressSanitizer + UndefinedBehaviorSanitizer (GCC),
# CI's stage 4/5.
#
#   bash tools/asan.sh            configure build-asan/, build the library, tests, docs snippets and
#                                 ringrun, run their tests
#
# Without nvcc: the CUDA kernels run on the kernel emulator, in one schedule order. Left to the
# release stage, which runs them right after: the examples and benchmarks (programs over the same
# library, whose tests are mostly about their flags), the fuzzers (sanitizer builds of their own)
# the layer check (no compiled code) and the multihost jobs (the same ring and store code as the
# TCP tests here, run as whole jobs in network namespaces). `RINGGRAD_SANITIZE=address,undefined bash
# tools/quickstart.sh test` is the same check over everything, for a local run.
#
# Environment: RINGGRAD_ASAN_BUILD_DIR (default build-asan), RINGGRAD_JOBS (default all cores).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir="${RINGGRAD_ASAN_BUILD_DIR:-build-asan}"
jobs="${RINGGRAD_JOBS:-$(nproc)}"

# -g1: line tables only. A report's stack trace keeps its file:line for every frame, and the build,
# without the full debug info nobody reads here, takes minutes less on two cores.
# RINGGRAD_TEST_OPTIMIZE=-O0: the test programs' own code unoptimised (the library, the emulated
# kernels and the emulator keep -O2). Catch2's assertions under ASan + UBSan are most of this build's
# compile time at -O2, and at -O0 every one of their memory accesses is still checked.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DRINGGRAD_SANITIZE=address,undefined \
  -DRINGGRAD_CUDA=OFF -DRINGGRAD_BUILD_EXAMPLES=OFF -DRINGGRAD_BUILD_BENCH=OFF -DRINGGRAD_TEST_OPTIMIZE=-O0
cmake --build "$build_dir" -j "$jobs"

# Stop at the first report, with a stack trace; leaks are checked too (see tools/quickstart.sh for
# where LeakSanitizer cannot run). Options already set win.
export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:protect_shadow_gap=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
ctest --test-dir "$build_dir" --output-on-failure -LE '^(cuda|multi-gpu|fuzz|arch|multihost)$' -j "$jobs"
