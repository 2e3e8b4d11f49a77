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
#   RINGGRAD_DEMO_EPOCHS=n                epochs of each Fashion-MNIST run in the demo (default 6)
#   RINGGRAD_DEMO_BATCH=n                 their global batch (default 512; the learning rate is 0.05 * n / 128)
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
# The test programs' own code at -O1 (the library keeps the build type's flags): it only drives the
# library, and builds in less time than at -O3.
cmake_args=(-G Ninja -DRINGGRAD_CPU_ARCH="${RINGGRAD_CPU_ARCH:-native}" -DRINGGRAD_TEST_OPTIMIZE=-O1)
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
  # The main job. Part 1: the same training (MLP 784-1024-1024-10, global batch 512, seed 0) three ways,
  # each with where its time went, then the three side by side. Part 2: bench/dp_vs_ddp, which explains
  # the differences step by step.
  # Why batch 512 (256 per rank) and not 128: DP's parameter copies and DDP's all-reduce cost the same
  # per step whatever the batch, so at 64 rows per rank they are a large share of a short step and the
  # comparison shows mostly that fixed cost. With the learning rate scaled as the batch (0.05 * 512 / 128
  # = 0.2), 6 epochs reach about 89% test accuracy in less time than 4 epochs at batch 128 took.
  stage "build: fashion_mnist, ringrun, dp_vs_ddp, bench_micro"
  targets=(fashion_mnist ringrun dp_vs_ddp)
  # bench_micro exists only when Google Benchmark was found at configure time.
  if ninja -C "$build_dir" -t targets all 2>/dev/null | grep -q '^bench_micro:'; then targets+=(bench_micro); fi
  cmake --build "$build_dir" --target "${targets[@]}" -j "$jobs"
  out="$build_dir/demo"
  mkdir -p "$out"
  epochs="${RINGGRAD_DEMO_EPOCHS:-6}"
  batch="${RINGGRAD_DEMO_BATCH:-512}"
  lr="$(awk -v b="$batch" 'BEGIN { print 0.05 * b / 128 }')"
  job=(--batch-size "$batch" --lr "$lr")
  train() {  # name, command...: runs one training, shows and keeps its output, notes its wall-clock time
    local name="$1"; shift
    stage "demo 1/2, $name: $*"
    local start; start="$(date +%s.%N)"
    "$@" 2>&1 | tee "$out/fashion_mnist_$name.log"
    echo "$(date +%s.%N) - $start" | bc > "$out/fashion_mnist_$name.wall"
  }
  fm="$build_dir/examples/fashion_mnist"
  train single "$fm" --epochs "$epochs" "${job[@]}"
  train dp "$fm" --epochs "$epochs" "${job[@]}" --dp cpu:0,cpu:1
  train ddp "$build_dir/tools/ringrun" --nproc-per-node 2 "$fm" --epochs "$epochs" "${job[@]}" --ddp
  # One epoch on one device restricted to one thread: the baseline bench/dp_vs_ddp's speed-up is
  # measured against (each of its devices gets one core), for the per-step comparison only.
  train one-core "$fm" "${job[@]}" --epochs 1 --threads 1

  stage "demo 1/2: the same model, global batch and seed, trained three ways (seconds of wall-clock time)"
  # Each run's own rows (fashion_mnist prints them at the end): "# per step: N steps ..., X ms each
  # (median Y ms)" and "#   this process|rank 0  start-up train eval data other total". The ratios use
  # the median step, which other programs on the machine disturb less than the mean.
  field() {  # name, extended regex: the first line of that run's log that matches, less ringrun's prefix
    awk -v re="$2" '{ sub(/^\[rank 0\] /, "") } $0 ~ re { print; exit }' "$out/fashion_mnist_$1.log"
  }
  printf '%-34s %8s %6s %8s %7s %7s %6s %6s %9s %6s %7s %7s\n' run "test acc" steps "ms/step" median \
    train eval data start-up other total wall
  for name in single dp ddp one-core; do
    case "$name" in
      single) what="one device (cpu:0), both cores" ;;
      dp) what="DataParallel, cpu:0 + cpu:1" ;;
      ddp) what="DDP, 2 processes (rank 0)" ;;
      one-core) what="one device, one core, 1 epoch" ;;
    esac
    acc="$(field "$name" '# test accuracy' | awk '{print $4}')"
    step="$(field "$name" '# per step:' |
      sed -E 's/^# per step: ([0-9]+) steps.*, ([0-9.]+) ms each \(median ([0-9.]+) ms\).*$/\1 \2 \3/')"
    row="$(field "$name" '^#   (this process|rank 0) ' | sed -E 's/^#   (this process|rank 0) +//')"
    # shellcheck disable=SC2086,SC2046  # word splitting is wanted: the fields of $step and $row
    printf '%-34s %8s %6s %8s %7s %7s %6s %6s %9s %6s %7s %7.1f\n' "$what" "$acc" $step \
      $(echo "$row" | awk '{print $2, $3, $4, $1, $5, $6}') "$(cat "$out/fashion_mnist_$name.wall")"
  done
  ms() { field "$1" '# per step:' | sed -E 's/^.*\(median ([0-9.]+) ms\).*$/\1/'; }
  total() { field "$1" '^#   (this process|rank 0) ' | awk '{print $NF}'; }
  awk -v s="$(ms single)" -v p="$(ms dp)" -v d="$(ms ddp)" -v o="$(ms one-core)" \
      -v ts="$(total single)" -v tp="$(total dp)" -v td="$(total ddp)" 'BEGIN {
    printf "median step against one device on both cores: DataParallel %.2fx its time, DDP %.2fx\n", p / s, d / s
    printf "median step against one device on one core (bench/dp_vs_ddp'"'"'s baseline): DataParallel %.2fx as fast,", o / p
    printf " DDP %.2fx, one device on both cores %.2fx\n", o / d, o / s
    printf "end to end (total) against one device on both cores: DataParallel %.2fx its time, DDP %.2fx\n", tp / ts, td / ts
    if (o / s < 1.3)
      printf "(one device ran only %.2fx faster on two cores than on one: other programs were using the cores, so these\n ratios measure them too; on a quiet machine it is about 1.9x)\n", o / s
  }'

  stage "demo 2/2: $build_dir/bench/dp_vs_ddp (where the time goes, and why)"
  bench_args=(--batch "$batch" --json "$out/dp_vs_ddp.json" --csv "$out/dp_vs_ddp.csv" --trace "$out/traces" --scaling-model)
  if [[ " ${targets[*]} " == *" bench_micro "* ]]; then bench_args+=(--micro); fi
  "$build_dir/bench/dp_vs_ddp" "${bench_args[@]}"
  if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    /usr/bin/python3 bench/plot.py "$out/dp_vs_ddp.json" --out "$out/plots" \
      --trace "$out/traces/dp.trace.json" --trace "$out/traces/ddp-bucketed-25MB.trace.json"
  else
    echo "(no PNGs: /usr/bin/python3 cannot import matplotlib; apt-get install python3-matplotlib)"
  fi
  # The same modes on a GPT: 52 parameter tensors from 1 KB to 1 MB, ready one block at a time, where
  # the bucket caps give different steps (the MLP's 6 tensors cannot show that). Fewer steps: a GPT
  # step is about 0.4 s on one core.
  stage "demo 2/2, the GPT: $build_dir/bench/dp_vs_ddp --model gpt (what the bucket size trades)"
  "$build_dir/bench/dp_vs_ddp" --model gpt --steps 10 --warmup 3 --json "$out/dp_vs_ddp_gpt.json" \
    --csv "$out/dp_vs_ddp_gpt.csv" --trace "$out/traces_gpt"
  stage "what two logical devices on two cores can and cannot show"
  cat <<'TEXT'
cpu:0 and cpu:1 (DataParallel) and the two DDP ranks run on the same two cores, with the same caches
and memory bandwidth, and the one-device run already splits its GEMMs over both cores. So neither
adds compute: per step they can at best about match one device on both cores, and they pay for what
they add. DataParallel copies all 1.86 M parameters to cpu:1 and sums the gradients on cpu:0 every
step; DDP all-reduces 7.4 MB of gradients every step through shared memory, and those copies and
additions run on the same two cores as backward, so overlapping them hides the waiting, not the work.
Against one device on one core (the baseline of bench/dp_vs_ddp's speed-up column above, where each
device gets one core) both are faster: that is the scaling devices with compute of their own (GPUs,
machines) show, but here each device's core is one the single device could have used. What is real
here: the result (DP and DDP train the same model as one device on the same global batch, and
bench/dp_vs_ddp checks the parameters: column max|diff|), the mechanics (scatter, replicate, gather;
buckets, the ring all-reduce, DistributedSampler) and the structure of the communication and its
overlap with backward (its traces). A speed-up needs devices with compute of their own.
TEXT
  stage "results in $out/: dp_vs_ddp.json and .csv (dp_vs_ddp_gpt.* for the GPT), traces/*.trace.json and traces_gpt/ (open in https://ui.perfetto.dev), plots/*.png, fashion_mnist_*.log"
else
  stage "build: everything"
  cmake --build "$build_dir" -j "$jobs"
  stage "test: ctest, every test but those labelled cuda and multi-gpu (they need GPUs; cuda-emu runs them on the CPU)"
  # Last on purpose: the output ends with CTest's summary, which .ci/run relies on. Anchored: a bare
  # 'cuda' would also leave out cuda-emu, the same tests on the kernel emulator.
  ctest --test-dir "$build_dir" --output-on-failure -LE '^(cuda|multi-gpu)$' -j "$jobs"
fi
