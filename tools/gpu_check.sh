#!/usr/bin/env bash
# tools/gpu_check.sh: everything that needs a GPU, in one run of at most ~9 minutes, most informative
# first -- for a machine lent with a GPU for minutes (an NVIDIA H200 with nvcc 13, CMake and Ninja,
# without Eigen, Catch2 or nlohmann-json; tools/gpu_deps.sh packs those into .device-deps/).
#
#   bash tools/gpu_deps.sh     # here: fills .device-deps/ (carry it along)
#   bash tools/gpu_check.sh    # there: OUT=<folder> (default ./gpu-out)
#
# It refuses to start (exit 2) without .device-deps/: a lent machine has no Eigen, Catch2 or
# nlohmann-json, so the run would only reach configure. GPU_CHECK_DEPS names another such folder, or
# is `system` on a machine that has those packages installed.
#
# One time budget (GPU_CHECK_BUDGET_S, default 480 s) for the whole run. Each stage may use what is
# left, up to its own cap, and is skipped -- saying so -- when less than its minimum is left. Every
# stage runs even when an earlier one failed, except those that need the build. Exactly three files
# are written to $OUT, so that all of them come back from a lent machine:
#   summary.txt    one line per stage (status, seconds, what it found), then the failing tests
#   logs.tar.gz    every stage's log; re-packed after each stage, so a killed run still returns them
#   ctest.xml      JUnit XML of the main `ctest -L cuda` run
# The summary is printed last, so it ends the output of the run.
#
# Stages: probe (driver, GPUs, nvcc, cmake, where cuBLAS, NCCL and the profilers are) -> configure
# (an explicit NCCL path when only libnccl.so.2 is installed; warnings are not errors here, since a
# new nvcc or host compiler must not cost the run: the build stage counts them instead) -> build
# (ringgrad_cuda_test_programs and two benchmarks) -> programs (every test labelled cuda or
# multi-gpu has its program) -> no-exit (no CUDA object calls exit) -> smoke (the probe test: is the GPU usable at all) -> ctest
# (label cuda, per-test timeout, then --rerun-failed) -> cublas (GEMM, matmul and training tests with
# RINGGRAD_GEMM=cublas) -> memcheck, racecheck, synccheck (compute-sanitizer on the kernel tests) ->
# bench-gemm (all shapes, 4096^3 included) -> ncu (one native and one cuBLAS GEMM launch) ->
# dp-vs-ddp (--device cuda, with PyTorch's rows from the machine's python3).
#
# Environment: OUT, GPU_CHECK_BUDGET_S, GPU_CHECK_BUILD_DIR (default build-gpu), GPU_CHECK_JOBS
# (parallel ctest processes, default 4), GPU_CHECK_CMAKE_ARGS (extra configure arguments),
# GPU_CHECK_PYTHON (python with torch for PyTorch's rows, default python3), GPU_CHECK_DEPS (the
# dependency folder, default ./.device-deps; `system`: none).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deps="${GPU_CHECK_DEPS:-$PWD/.device-deps}"
if [[ ! -d "$deps/include/eigen3" && "$deps" != system ]]; then
  cat >&2 <<MSG
################################################################################################
gpu_check: NOT STARTED: $deps is missing.
The GPU machine has no Eigen, Catch2 or nlohmann-json, so the run would stop at configure.
  1. here, before the run:  bash tools/gpu_deps.sh
  2. name the folder in the run tool's carry:  carry: [".device-deps"]
(GPU_CHECK_DEPS=system runs without it, on a machine that has those packages installed.)
################################################################################################
MSG
  exit 2
fi

budget="${GPU_CHECK_BUDGET_S:-480}"
out="${OUT:-./gpu-out}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
build="${GPU_CHECK_BUILD_DIR:-build-gpu}"
jobs="${GPU_CHECK_JOBS:-4}"
python="${GPU_CHECK_PYTHON:-python3}"
summary="$out/summary.txt"
start_time=$SECONDS
failed=0
: > "$summary"
rm -f "$out/logs.tar.gz" "$out/ctest.xml"

say() { printf '%s\n' "$*" | tee -a "$summary"; }
left() { echo $(( budget - (SECONDS - start_time) )); }
pack() { tar -czf "$out/logs.tar.gz.tmp" -C "$logs" . && mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"; }

# stage NAME MIN_S MAX_S COMMAND...: runs COMMAND with its output in NAME.log, within what is left of
# the budget (at most MAX_S), or skips it when less than MIN_S is left. Returns the command's status.
stage() {
  local name="$1" min="$2" max="$3" remaining limit rc begin
  shift 3
  remaining=$(left)
  if (( remaining < min )); then
    say "$(printf '%-12s SKIPPED  %4s   %ss left of the budget, the stage needs %ss' "$name" "" "$remaining" "$min")"
    return 125
  fi
  limit=$(( remaining < max ? remaining : max ))
  printf '\n==== %s (up to %ss)\n' "$name" "$limit"
  begin=$SECONDS
  if declare -F "$1" >/dev/null; then  # a function of this script: timeout runs programs only
    timeout -k 5 "$limit" bash -c "$(declare -f "$1"); $(printf '%q ' "$@")" > "$logs/$name.log" 2>&1
  else
    timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1
  fi
  rc=$?
  local what="rc=$rc"
  (( rc == 124 || rc == 137 )) && what="TIMEOUT after ${limit}s"
  say "$(printf '%-12s %-8s %4ds   %s' "$name" "$([[ $rc -eq 0 ]] && echo ok || echo FAILED)" $((SECONDS - begin)) "$what")"
  tail -n 4 "$logs/$name.log"
  (( rc == 0 )) || failed=1
  pack
  return $rc
}

# ---- probe: what this machine has -----------------------------------------------------------------
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
probe() {
  echo "## date"; date -u
  echo "## nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi: not usable"
  echo "## nvcc"; nvcc --version 2>&1 || echo "nvcc: not found"
  echo "## cmake / ninja"; cmake --version | head -1; ninja --version
  echo "## tools"; for t in compute-sanitizer ncu cuobjdump "$python"; do printf '%s: %s\n' "$t" "$(command -v "$t" || echo missing)"; done
  echo "## cuBLAS"; ls /usr/local/cuda/lib64/libcublas.so* 2>/dev/null || ldconfig -p | grep -m2 libcublas
  echo "## NCCL"; printf 'header: %s\nlibrary: %s\n' "${nccl_header:-none}" "${nccl_library:-none}"
  echo "## torch"; "$python" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1
}
# NCCL: the toolkit's, or the nvidia-nccl wheel's libnccl.so.2 with the header carried in .device-deps.
nccl_header=""; nccl_library=""
for h in /usr/local/cuda/include/nccl.h /usr/include/nccl.h "$deps/include/nccl.h"; do
  [[ -f "$h" ]] && { nccl_header="$h"; break; }
done
nccl_library="$(ls /usr/local/cuda/lib64/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so 2>/dev/null | head -1)"
if [[ -z "$nccl_library" ]]; then
  wheel_dir="$("$python" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null)"
  nccl_library="$(ls "${wheel_dir:-/nonexistent}"/lib/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so.2 2>/dev/null | head -1)"
fi
export python nccl_header nccl_library
stage probe 5 30 probe
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
gpus=${gpus:-0}
say "$(printf '%-12s %s GPU(s); NCCL header %s, library %s' "gpus" "$gpus" "${nccl_header:-none}" "${nccl_library:-none}")"

# ---- configure and build ------------------------------------------------------------------------------
[[ "$deps" == system ]] && say "note: GPU_CHECK_DEPS=system: configuring against the system's packages"
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
            -DRINGGRAD_BUILD_EXAMPLES=OFF -DRINGGRAD_CUDA_EMU=OFF -DRINGGRAD_WERROR=OFF)
if [[ -d "$deps/include/eigen3" ]]; then
  cmake_args+=("-DCMAKE_PREFIX_PATH=$deps" "-DEigen3_DIR=$deps/share/eigen3/cmake" "-DCatch2_DIR=$deps/lib/cmake/Catch2"
               "-Dnlohmann_json_DIR=$deps/share/cmake/nlohmann_json")
  [[ -f /usr/include/zlib.h ]] || cmake_args+=("-DZLIB_INCLUDE_DIR=$deps/include" "-DZLIB_LIBRARY=$deps/lib/libz.a")
fi
if [[ -n "$nccl_header" && -n "$nccl_library" ]]; then
  cmake_args+=("-DNCCL_INCLUDE_DIR=$(dirname "$nccl_header")" "-DNCCL_LIBRARY=$nccl_library")
fi
read -r -a extra_args <<< "${GPU_CHECK_CMAKE_ARGS:-}"
cmake_args+=("${extra_args[@]}")
built=0
if stage configure 20 120 cmake "${cmake_args[@]}"; then
  targets=(ringgrad_cuda_test_programs bench_gemm_cuda dp_vs_ddp)
  stage build 60 300 cmake --build "$build" --target "${targets[@]}" -j "$(nproc)" && built=1
  # Warnings are not errors on this machine (a new compiler may bring new ones): count and show them.
  warnings=$(grep -c 'warning:' "$logs/build.log" 2>/dev/null || true)
  say "$(printf '%-12s %s compiler warnings%s' "warnings" "${warnings:-0}" \
        "$( (( ${warnings:-0} > 0 )) && echo " (the first: $(grep -m1 'warning:' "$logs/build.log" | cut -c1-160))")")"
fi
tests="$build/tests/ringgrad_cuda_tests"

if (( built )); then
  # A test whose program was not built is "Not Run" in ctest: name them before spending minutes.
  stage programs 5 30 "$python" tools/check_test_programs.py --build "$build" --labels '^(cuda|multi-gpu)$' \
    --programs "$build/cuda_test_programs.txt" --exist
  # ---- correctness, most informative first ------------------------------------------------------
  stage no-exit 5 30 ctest --test-dir "$build" -R '^cuda_objects_never_call_exit$' --output-on-failure
  # Catch: one argument, test names separated by commas; --warn NoTests fails a name that matches nothing.
  stage smoke 10 60 "$tests" --warn NoTests "cuda probe: a GPU is present,cuda probe: saxpy agrees with the CPU on odd sizes"
  label_args=(-L '^(cuda|multi-gpu)$')
  if (( gpus < 2 )); then
    label_args=(-L '^cuda$')
    say "note: fewer than 2 GPUs: the $(ctest --test-dir "$build" -N -L '^multi-gpu$' | grep -c 'Test *#') tests labelled multi-gpu (they need 2) are left out"
  fi
  stage ctest 60 240 ctest --test-dir "$build" "${label_args[@]}" --output-on-failure -j "$jobs" --timeout 120 \
    --output-junit "$out/ctest.xml"
  ctest_rc=$?
  if (( ctest_rc != 0 && ctest_rc != 125 )); then
    stage ctest-rerun 30 90 ctest --test-dir "$build" "${label_args[@]}" --rerun-failed --output-on-failure --timeout 120
  fi
  stage cublas 20 90 env RINGGRAD_GEMM=cublas ctest --test-dir "$build" "${label_args[@]}" \
    -R 'gemm|matmul|training|DataParallel' --output-on-failure -j "$jobs" --timeout 120
  if command -v compute-sanitizer >/dev/null; then
    # The kernel tests allocate with cudaMalloc directly, so memcheck's bounds are the exact sizes.
    stage memcheck 30 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$tests" --warn NoTests "[kernels]"
    stage racecheck 20 90 compute-sanitizer --tool racecheck --error-exitcode 1 "$tests" --warn NoTests \
      "gemm: padded and misaligned operands agree with the CPU,cuda kernels: sum and max over a dimension agree with the CPU"
    stage synccheck 15 60 compute-sanitizer --tool synccheck --error-exitcode 1 "$tests" --warn NoTests \
      "gemm: batched products with a stride 0 operand agree with the CPU"
  else
    say "note: compute-sanitizer not found: memcheck, racecheck and synccheck not run"
  fi

  # ---- speed ----------------------------------------------------------------------------------------
  stage bench-gemm 30 150 "$build/bench/bench_gemm_cuda" --json "$logs/bench_gemm_cuda.json"
  if command -v ncu >/dev/null; then
    ncu_args=(--clock-control none --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy)
    stage ncu 30 90 bash -c "ncu ${ncu_args[*]} '$build/bench/bench_gemm_cuda' --shape 4096,4096,4096 --impl native &&
      ncu ${ncu_args[*]} '$build/bench/bench_gemm_cuda' --shape 4096,4096,4096 --impl cublas"
  fi
  ddp_n=$(( gpus >= 2 ? gpus : 2 ))
  stage dp-vs-ddp 40 150 "$build/bench/dp_vs_ddp" --device cuda --devices "$ddp_n" --batch "$(( 1024 / ddp_n * ddp_n ))" \
    --python "$python" --scaling-model --json "$logs/dp_vs_ddp_cuda.json" --trace "$logs/dp_vs_ddp_traces"
fi

# ---- the summary, last ----------------------------------------------------------------------------
{
  echo
  echo "failing tests:"
  found=0
  # ctest-rerun (when it ran) holds the tests that failed twice; ctest's other failures passed again.
  main_log="$logs/ctest.log"
  [[ -f "$logs/ctest-rerun.log" ]] && main_log="$logs/ctest-rerun.log"
  for log in "$main_log" "$logs/cublas.log"; do
    [[ -f "$log" ]] && grep -q 'The following tests FAILED' "$log" || continue
    names="$(sed -n '/The following tests FAILED/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ')"
    count=$(printf '%s\n' "$names" | grep -c .)
    printf '%s\n' "$names" | head -n 40 | sed "s|^[[:space:]]*|  $(basename "$log" .log): |"
    (( count > 40 )) && echo "  $(basename "$log" .log): ... and $((count - 40)) more (logs.tar.gz)"
    found=1
  done
  if (( ! found )); then [[ -f "$logs/ctest.log" ]] && echo "  none" || echo "  none known: the tests did not run"; fi
  echo "total: $(( SECONDS - start_time ))s of a ${budget}s budget; logs in $out/logs.tar.gz"
} >> "$summary"
pack
echo
echo "==== summary ($out/summary.txt)"
cat "$summary"
exit $failed
