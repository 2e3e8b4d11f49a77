#!/usr/bin/env bash
# tools/quickstart.sh: the README's quick start, from a fresh Debian 12 machine to a result.
#
#   bash tools/quickstart.sh demo   install what is missing, build, then the main job: Fashion-MNIST on one
#                                   device, with DP on 2 devices and with DDP on 2 processes, side by side,
#                                   then bench/dp_vs_ddp (table, JSON, CSV, traces, PNGs in build/demo/)
#   bash tools/quickstart.sh test   install what is missing, build, run every test but the GPU ones (the
#                                   CUDA kernels still run, on the kernel emulator: label cuda-emu)
#
# Environment:
#   RINGGRAD_SANITIZE=address,undefined   build with those sanitizers, in build-sanitize/ (RelWithDebInfo)
#   RINGGRAD_CUDA=AUTO|ON|OFF             passed to CMake (default AUTO: on when nvcc is found)
#   RINGGRAD_BUILD_DIR=dir                build somewhere else than build/ (or build-sanitize/)
#   RINGGRAD_JOBS=n                       parallel compile and test jobs (default: all cores)
#   RINGGRAD_CPU_ARCH=level               -march= for the library (default native here; CMake's own default
#                                         is the portable x86-64-v2)
#   RINGGRAD_DEMO_EPOCHS=n                epochs of each Fashion-MNIST run in the demo (default 4)
#
# Packages are installed with apt-get only when dpkg says one is missing (as root, or through sudo).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: bash tools/quickstart.sh demo|test" >&2
  exit 2
}
[[ $# -eq 1 ]] || usage
mode="$1"
[[ "$mode" == demo || "$mode" == test ]] || usage

stage() { printf '\n==== %s\n' "$*"; }

# --- 1. Debian packages -----------------------------------------------------------------------------
# libbenchmark-dev: the Google Benchmark microbenchmarks; python3-matplotlib: bench/plot.py's PNGs;
# openmpi-bin: the test that starts a job with Open MPI's mpirun; clang-14, libclang-rt-14-dev: clang
# and its libFuzzer, for the fuzz tests (tests/fuzz/); libgloo-dev: the "gloo" process-group backend.
packages=(build-essential cmake ninja-build libeigen3-dev catch2 zlib1g-dev nlohmann-json3-dev dataset-fashion-mnist
          libbenchmark-dev python3-matplotlib openmpi-bin clang-14 libclang-rt-14-dev libgloo-dev)
missing=()
for p in "${packages[@]}"; do
  # dpkg-query fails for a package it never heard of; a removed one still reports its status.
  status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  stage "packages: all present (${packages[*]})"
else
  stage "packages: installing ${missing[*]}"
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "quickstart: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# --- 2. configure -----------------------------------------------------------------------------------
jobs="${RINGGRAD_JOBS:-$(nproc)}"
# A local build, for this machine's benchmarks: the library's CPU code tuned for this CPU (the CMake
# default is a portable x86-64-v2). RINGGRAD_CPU_ARCH in the environment wins.
cmake_args=(-G Ninja -DRINGGRAD_CPU_ARCH="${RINGGRAD_CPU_ARCH:-native}")
if [[ -n "${RINGGRAD_CUDA:-}" ]]; then cmake_args+=(-DRINGGRAD_CUDA="$RINGGRAD_CUDA"); fi
if [[ -n "${RINGGRAD_SANITIZE:-}" ]]; then
  build_dir="${RINGGRAD_BUILD_DIR:-build-sanitize}"
  cmake_args+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DRINGGRAD_SANITIZE="$RINGGRAD_SANITIZE")
  # Stop at the first report, with a stack trace. Leaks are checked too: LeakSanitizer works in
  # CI's container, but it cannot run under a tracer (gdb, strace, some sandboxes), where it stops
  # with "LeakSanitizer does not work under ptrace"; run with ASAN_OPTIONS=detect_leaks=0 there.
  # protect_shadow_gap=0 lets the CUDA driver map its memory inside an ASan process.
  # Options already in the environment win.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:protect_shadow_gap=0}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
  stage "configure: $build_dir (RelWithDebInfo, sanitizers: $RINGGRAD_SANITIZE)"
else
  build_dir="${RINGGRAD_BUILD_DIR:-build}"
  cmake_args+=(-DCMAKE_BUILD_TYPE=Release)
  stage "configure: $build_dir (Release)"
fi
cmake -S . -B "$build_dir" "${cmake_args[@]}"

# --- 3. build and run -------------------------------------------------------------------------------
if [[ "$mode" == demo ]]; then
  # The main job. Part 1: the same training (MLP 784-1024-1024-10, batch 128, seed 0) three ways,
  # with the test accuracies side by side. Part 2: bench/dp_vs_ddp, which explains the differences.
  stage "build: fashion_mnist, ringrun, dp_vs_ddp, bench_micro"
  targets=(fashion_mnist ringrun dp_vs_ddp)
  # bench_micro exists only when Google Benchmark was found at configure time.
  if ninja -C "$build_dir" -t targets all 2>/dev/null | grep -q '^bench_micro:'; then targets+=(bench_micro); fi
  cmake --build "$build_dir" --target "${targets[@]}" -j "$jobs"
  out="$build_dir/demo"
  mkdir -p "$out"
  epochs="${RINGGRAD_DEMO_EPOCHS:-4}"
  train() {  # name, command...: runs one training, shows and keeps its output
    local name="$1"; shift
    stage "demo 1/2, $name: $*"
    "$@" 2>&1 | tee "$out/fashion_mnist_$name.log"
  }
  train single "$build_dir/examples/fashion_mnist" --epochs "$epochs"
  train dp "$build_dir/examples/fashion_mnist" --epochs "$epochs" --dp cpu:0,cpu:1
  train ddp "$build_dir/tools/ringrun" --nproc-per-node 2 "$build_dir/examples/fashion_mnist" --epochs "$epochs" --ddp
  stage "demo 1/2: the same model, global batch and seed, trained three ways"
  printf '%-36s %s\n' "run" "result"
  for name in single dp ddp; do
    case "$name" in
      single) what="one device (cpu:0)" ;;
      dp) what="DataParallel, cpu:0 + cpu:1" ;;
      ddp) what="DistributedDataParallel, 2 processes" ;;
    esac
    printf '%-36s %s\n' "$what" "$(grep -m1 '# test accuracy' "$out/fashion_mnist_$name.log" | sed 's/^.*# //')"
  done

  stage "demo 2/2: $build_dir/bench/dp_vs_ddp (where the time goes, and why)"
  bench_args=(--json "$out/dp_vs_ddp.json" --csv "$out/dp_vs_ddp.csv" --trace "$out/traces" --model)
  if [[ " ${targets[*]} " == *" bench_micro "* ]]; then bench_args+=(--micro); fi
  "$build_dir/bench/dp_vs_ddp" "${bench_args[@]}"
  if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    /usr/bin/python3 bench/plot.py "$out/dp_vs_ddp.json" --out "$out/plots" \
      --trace "$out/traces/dp.trace.json" --trace "$out/traces/ddp-bucketed-25MB.trace.json"
  else
    echo "(no PNGs: /usr/bin/python3 cannot import matplotlib; apt-get install python3-matplotlib)"
  fi
  stage "results in $out/: dp_vs_ddp.json and .csv, traces/*.trace.json (open in https://ui.perfetto.dev), plots/*.png, fashion_mnist_*.log"
else
  stage "build: everything"
  cmake --build "$build_dir" -j "$jobs"
  stage "test: ctest, every test but those labelled cuda and multi-gpu (they need GPUs; cuda-emu runs them on the CPU)"
  # Last on purpose: the output ends with CTest's summary, which .ci/run relies on. Anchored: a bare
  # 'cuda' would also leave out cuda-emu, the same tests on the kernel emulator.
  ctest --test-dir "$build_dir" --output-on-failure -LE '^(cuda|multi-gpu)$' -j "$jobs"
fi
