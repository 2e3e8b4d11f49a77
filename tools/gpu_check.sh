#!/usr/bin/env bash
# tools/gpu_check.sh: everything that needs a GPU, in one run, for a machine lent with one (an NVIDIA
# H200, sm_90, with nvcc 13, CMake and Ninja, but without Eigen, Catch2 or nlohmann-json).
#
#   bash tools/gpu_deps.sh     # on a Debian machine that has those packages: fills .device-deps/
#   bash tools/gpu_check.sh    # on the GPU machine, with .device-deps/ carried along
#
# Stages, each logged to $OUT (default ./gpu-out), each run even when an earlier one failed (so one
# run collects as much as it can); the exit status is non-zero if any failed:
#   nvidia-smi.txt        the GPU, driver and CUDA versions
#   configure.log         CMake with -DRINGGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90, dependencies
#                         found in .device-deps/ through CMAKE_PREFIX_PATH
#   build.log             the CUDA tests (docs/snippets/cuda.cpp too) and the GPU benchmarks only (the CPU tests run in CI)
#   ctest.log, ctest.xml  ctest -L cuda: every CUDA test (JUnit XML too)
#   ctest-cublas.log      the backend's GEMM tests again with RINGGRAD_GEMM=cublas
#   bench_gemm_cuda.txt   the GEMM benchmark (ringgrad vs cuBLAS vs CPU); .json the same rows
#   bench_allreduce_nccl.txt  NCCL's all-reduce, with 2 or more GPUs
#   dp_vs_ddp_cuda.txt    bench/dp_vs_ddp --device cuda; .json, and dp_vs_ddp_traces/ (Chrome traces)
#   micro_cuda.txt/.json  the Google Benchmark GPU microbenchmarks, where libbenchmark was found
#   summary.txt           one line per stage: name, exit status, seconds
#
# Environment: OUT (output folder), GPU_CHECK_BUILD_DIR (default build-gpu), GPU_CHECK_JOBS (parallel
# ctest processes, default 4), GPU_CHECK_FULL_BENCH=1 (all benchmark shapes, not --quick),
# GPU_CHECK_CONFIGURE_ONLY=1 (stop after configuring), GPU_CHECK_CMAKE_ARGS, GPU_CHECK_CARRIED_ZLIB=1.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out="${OUT:-./gpu-out}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build="${GPU_CHECK_BUILD_DIR:-build-gpu}"
jobs="${GPU_CHECK_JOBS:-4}"
deps="$PWD/.device-deps"
: > "$out/summary.txt"
failed=0

# stage NAME LOG TIMEOUT_S COMMAND...: runs the command with output to $out/LOG, records the outcome.
stage() {
  local name="$1" log="$2" limit="$3"
  shift 3
  local start=$SECONDS rc
  printf '\n==== %s\n' "$name"
  timeout "$limit" "$@" > "$out/$log" 2>&1
  rc=$?
  printf '%-16s rc=%-3d %4ds  %s\n' "$name" "$rc" $((SECONDS - start)) "$log" | tee -a "$out/summary.txt"
  tail -n 5 "$out/$log"
  [[ $rc -eq 0 ]] || failed=1
  return $rc
}

[[ -d "$deps/include/eigen3" ]] || { echo "gpu_check: $deps is missing; run tools/gpu_deps.sh first" >&2; exit 2; }
if command -v nvidia-smi >/dev/null; then
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1
else
  echo "nvidia-smi not found" > "$out/nvidia-smi.txt"
fi

cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
            -DRINGGRAD_BUILD_EXAMPLES=OFF "-DCMAKE_PREFIX_PATH=$deps"
            "-DEigen3_DIR=$deps/share/eigen3/cmake" "-DCatch2_DIR=$deps/lib/cmake/Catch2"
            "-Dnlohmann_json_DIR=$deps/share/cmake/nlohmann_json")
if [[ ! -f /usr/include/zlib.h || "${GPU_CHECK_CARRIED_ZLIB:-0}" == 1 ]]; then  # the IDX reader needs zlib
  cmake_args+=("-DZLIB_INCLUDE_DIR=$deps/include" "-DZLIB_LIBRARY=$deps/lib/libz.a")
fi
# Extra CMake arguments, e.g. GPU_CHECK_CMAKE_ARGS="-DCMAKE_IGNORE_PREFIX_PATH=/usr" to prove that
# nothing but .device-deps/ supplies the dependencies (how this script was checked without a GPU).
read -r -a extra_args <<< "${GPU_CHECK_CMAKE_ARGS:-}"
cmake_args+=("${extra_args[@]}")
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

if ! stage configure configure.log 300 cmake "${cmake_args[@]}"; then
  :
elif [[ "${GPU_CHECK_CONFIGURE_ONLY:-0}" == 1 ]]; then
  grep -E '^(Eigen3|Catch2|nlohmann_json)_DIR|^ZLIB_(INCLUDE_DIR|LIBRARY_RELEASE|LIBRARY)' "$build/CMakeCache.txt" |
    tee "$out/found.txt"
elif
   stage build build.log 600 cmake --build "$build" --target ringgrad_cuda_tests snippet_cuda bench_gemm_cuda bench_allreduce dp_vs_ddp -j "$(nproc)"; then
  stage ctest ctest.log 900 ctest --test-dir "$build" -L cuda --output-on-failure -j "$jobs" --timeout 300 \
    --output-junit "$out/ctest.xml"
  stage ctest-cublas ctest-cublas.log 300 env RINGGRAD_GEMM=cublas \
    ctest --test-dir "$build" -L cuda -R "cuda backend: gemm" --output-on-failure -j "$jobs" --timeout 300
  bench_args=(--json "$out/bench_gemm_cuda.json")
  [[ "${GPU_CHECK_FULL_BENCH:-0}" == 1 ]] || bench_args+=(--quick)
  stage bench bench_gemm_cuda.txt 600 "$build/bench/bench_gemm_cuda" "${bench_args[@]}"
  # NCCL's all-reduce needs one GPU per rank: only on a machine with two or more.
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [[ "${gpus:-0}" -ge 2 ]]; then
    stage bench-nccl bench_allreduce_nccl.txt 300 "$build/bench/bench_allreduce" --backend nccl --nproc "$gpus" \
      --no-references --json "$out/bench_allreduce_nccl.json"
  fi
  # The main benchmark on GPUs: DP over the GPUs, DDP with one process per GPU (NCCL), or with one
  # GPU, two processes sharing it over the ring -- every mode checked against single.
  ddp_n=$(( gpus >= 2 ? gpus : 2 ))
  stage dp-vs-ddp dp_vs_ddp_cuda.txt 300 "$build/bench/dp_vs_ddp" --device cuda --devices "$ddp_n" \
    --batch "$(( 1024 / ddp_n * ddp_n ))" --no-torch --model --json "$out/dp_vs_ddp_cuda.json" --trace "$out/dp_vs_ddp_traces"
fi

# Google Benchmark microbenchmarks (bench/micro_cuda.cpp): after a good build, where CMake found libbenchmark-dev.
if grep -qE '^build +rc=0 ' "$out/summary.txt" && cmake --build "$build" --target bench_micro_cuda > "$out/build_micro_cuda.log" 2>&1; then stage micro-cuda micro_cuda.txt 300 "$build/bench/bench_micro_cuda" --benchmark_format=json "--benchmark_out=$out/micro_cuda.json"; fi

echo
cat "$out/summary.txt"
exit $failed
