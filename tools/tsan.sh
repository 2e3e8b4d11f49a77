#!/usr/bin/env bash
# tools/tsan.sh: the threaded tests under ThreadSanitizer, built with clang 14 (CI's stage 3/5).
#
#   bash tools/tsan.sh            configure build-tsan/, build the threaded tests and their workers,
#                                 run them (each group's slowest test cases are listed at the end)
#
# What runs threads, and the tests that drive it: the autograd engine's device workers [engine],
# DataParallel's replicas [dp], DDP's communication thread and buckets [ddp] [bucket], the
# DataLoader's prefetch thread [data], the store server [store], rendezvous and process groups
# [process_group], the ring's transports [ring], and the caching allocator [allocator].
#
# Environment: RINGGRAD_TSAN_BUILD_DIR (default build-tsan), RINGGRAD_JOBS (compile jobs; default all cores).
# A race stops the test that found it with TSan's report (halt_on_error), which fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir="${RINGGRAD_TSAN_BUILD_DIR:-build-tsan}"
jobs="${RINGGRAD_JOBS:-$(nproc)}"
tag_names=(engine dp ddp bucket data store process_group ring allocator)
tags="$(printf '[%s],' "${tag_names[@]}")" && tags="${tags%,}"

# No CUDA and no emulator: TSan cannot follow the emulator's fibers, and the kernels' threads are
# the emulator's own. Examples and benchmarks have no threads of their own beyond the library's.
# -g1: line tables only. A report's stack trace keeps its file:line for every frame, and the build,
# without the full debug info nobody reads here, takes minutes less on two cores.
# Only what runs here is built: ringgrad_tests from the test files that name one of the tags
# (RINGGRAD_TEST_TAGS), and the test code at -O0 (RINGGRAD_TEST_OPTIMIZE): the library, where the
# threads are, keeps -O2; the tests' own code only drives it.
tag_list="$(IFS=';'; echo "${tag_names[*]}")"
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DRINGGRAD_SANITIZE=thread -DRINGGRAD_CUDA=OFF -DRINGGRAD_CUDA_EMU=OFF \
  -DRINGGRAD_BUILD_EXAMPLES=OFF -DRINGGRAD_BUILD_BENCH=OFF \
  -DRINGGRAD_TEST_OPTIMIZE=-O0 "-DRINGGRAD_TEST_TAGS=$tag_list"
cmake --build "$build_dir" -j "$jobs" --target ringgrad_tests ringgrad_dist_worker ringgrad_ddp_worker

# second_deadlock_stack: both stacks of a lock-order inversion; tools/tsan.supp: the reports known to
# be false, each with its reason. Options already set win.
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/tsan.supp}"
echo "tsan: running $tags (TSAN_OPTIONS=$TSAN_OPTIONS)"
# The selected test cases dealt out to three Catch2 processes by their earlier run time
# (tools/split_tests.py, from tests/ctest_costs.txt): a few multi-process ring tests take most of the
# time and wait much of it, so three processes keep both cores working. Each writes its own log.
processes=3
program="$build_dir/tests/ringgrad_tests"
# Catch2 2.x exits with the number of test cases it listed, not 0.
{ "$program" "$tags" --list-test-names-only || true; } | { grep -v '^$' || true; } >"$build_dir/tsan-all.txt"
selected=$(wc -l <"$build_dir/tsan-all.txt")
[[ $selected -gt 0 ]] || { echo "tsan: $program selected no test case for $tags" >&2; exit 1; }
python3 tools/split_tests.py "$processes" tests/ctest_costs.txt "$build_dir/tsan-list-" <"$build_dir/tsan-all.txt"
pids=()
started=()
for ((i = 0; i < processes; i++)); do
  # An empty list would select every test case: such a process is not started.
  if [[ ! -s "$build_dir/tsan-list-$i.txt" ]]; then : >"$build_dir/tsan-$i.log" && continue; fi
  "$program" --input-file "$build_dir/tsan-list-$i.txt" --warn NoTests --durations yes >"$build_dir/tsan-$i.log" 2>&1 &
  pids+=($!)
  started+=("$i")
done
failed=0
ran=0
for k in "${!pids[@]}"; do
  i=${started[$k]}
  if wait "${pids[$k]}"; then
    echo "tsan: process $i: $(tail -n 2 "$build_dir/tsan-$i.log" | tr -s '\n' ' ')"
    cases=$(sed -n 's/^All tests passed (.* in \([0-9]*\) test cases\{0,1\})$/\1/p' "$build_dir/tsan-$i.log")
    ran=$((ran + ${cases:-0}))
  else
    failed=1
    echo "tsan: process $i failed or raced; the end of its log ($build_dir/tsan-$i.log):" >&2
    tail -n 60 "$build_dir/tsan-$i.log" >&2
  fi
done
[[ $failed -eq 0 ]] || exit 1
cat "$build_dir"/tsan-[0-9]*.log >"$build_dir/tsan-durations.log"
python3 tools/ci_times.py tests "$build_dir/tsan-durations.log"
# Every selected test case ran once: a name the lists lost or mangled would otherwise pass unseen.
[[ $ran -eq $selected ]] || { echo "tsan: $selected test cases selected by $tags, but $ran ran" >&2; exit 1; }
echo "tsan: no race reported by any of $tags"
