#!/usr/bin/env bash
# tests/tools/gpu_check/test_gpu_check.sh: tools/gpu_check.sh's own logic, without a GPU. The
# programs it drives (nvidia-smi, nvcc, cmake, ctest, compute-sanitizer, ncu) are the stand-ins in
# fake_bin/, first on PATH; python3, timeout and tar are the real ones. Each case runs the whole
# script into a scratch folder and checks its exit status, its summary and what it leaves in OUT:
#   refuses     no dependency folder: exit 2 before any stage, nothing built
#   green       everything passes: exit 0, no stage FAILED, warnings counted, not errors
#   failing     a test fails twice: exit 1, the summary names it
#   unbuilt     a labelled test's program is not built: the programs stage fails and names the test
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/deps/include/eigen3"
export PATH="$here/fake_bin:$PATH" GPU_CHECK_BUDGET_S=120
failures=0

# run CASE [VAR=VALUE...]: gpu_check.sh with its output in $scratch/CASE/{out/,stdout}; sets $rc.
run() {
  local name="$1"; shift
  mkdir -p "$scratch/$name"
  env OUT="$scratch/$name/out" GPU_CHECK_BUILD_DIR="$scratch/$name/build" GPU_CHECK_DEPS="$scratch/deps" "$@" \
    bash "$root/tools/gpu_check.sh" > "$scratch/$name/stdout" 2>&1
  rc=$?
}
expect() {  # expect CASE DESCRIPTION COMMAND...: reports and counts a failed expectation
  local name="$1" what="$2"; shift 2
  if "$@"; then echo "ok    $name: $what"; else echo "FAIL  $name: $what"; failures=$((failures + 1)); fi
}
show() { echo "---- $1's output:"; cat "$scratch/$1/stdout"; }

run refuses GPU_CHECK_DEPS="$scratch/none"
expect refuses "exits 2" test "$rc" -eq 2
expect refuses "says why, loudly" grep -q 'NOT STARTED: .*none is missing' "$scratch/refuses/stdout"
expect refuses "names the carry" grep -q 'carry' "$scratch/refuses/stdout"
expect refuses "builds nothing" test ! -e "$scratch/refuses/build"
(( failures )) && show refuses

before=$failures
run green FAKE_WARNINGS=3
summary="$scratch/green/out/summary.txt"
expect green "exits 0" test "$rc" -eq 0
expect green "no stage failed" bash -c "! grep -q FAILED '$summary'"
expect green "the programs stage ran" grep -Eq '^programs +ok' "$summary"
expect green "warnings counted" grep -Eq '^warnings +3 compiler warnings' "$summary"
expect green "warnings are not errors" grep -rq 'RINGGRAD_WERROR=OFF' "$scratch/green/stdout" "$scratch/green/out"
expect green "no failing tests" grep -q '^  none$' "$summary"
expect green "exactly its three files" test "$(ls "$scratch/green/out" | tr '\n' ' ')" = "ctest.xml logs.tar.gz summary.txt "
expect green "the summary ends the output" bash -c "tail -n 1 '$scratch/green/stdout' | grep -q '^total: '"
(( failures > before )) && show green

before=$failures
run failing FAKE_FAIL=1
expect failing "exits 1" test "$rc" -eq 1
expect failing "ctest FAILED" grep -Eq '^ctest +FAILED' "$scratch/failing/out/summary.txt"
expect failing "names the test" grep -q 'ctest-rerun: 12 - gemm: a stand-in failure' "$scratch/failing/out/summary.txt"
(( failures > before )) && show failing

before=$failures
run unbuilt FAKE_UNBUILT=snippet_cuda
expect unbuilt "exits 1" test "$rc" -eq 1
expect unbuilt "programs FAILED" grep -Eq '^programs +FAILED' "$scratch/unbuilt/out/summary.txt"
expect unbuilt "names the test" grep -q 'docs_snippet_cuda: .*snippet_cuda was not built' "$scratch/unbuilt/stdout"
(( failures > before )) && show unbuilt

echo "gpu_check.sh: $failures failed expectation(s)"
exit $(( failures > 0 ))
