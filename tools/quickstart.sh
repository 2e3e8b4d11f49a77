#!/usr/bin/env bash
# tools/quickstart.sh: the README's quick start, from a fresh Debian 12 machine to a result.
#
#   bash tools/quickstart.sh demo   install what is missing, build, train an MLP on Fashion-MNIST (the main job)
#   bash tools/quickstart.sh test   install what is missing, build, run every test but the GPU ones
#
# Environment:
#   RINGGRAD_SANITIZE=address,undefined   build with those sanitizers, in build-sanitize/ (RelWithDebInfo)
#   RINGGRAD_CUDA=AUTO|ON|OFF             passed to CMake (default AUTO: on when nvcc is found)
#   RINGGRAD_BUILD_DIR=dir                build somewhere else than build/ (or build-sanitize/)
#   RINGGRAD_JOBS=n                       parallel compile and test jobs (default: all cores)
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
packages=(build-essential cmake ninja-build libeigen3-dev catch2 zlib1g-dev nlohmann-json3-dev dataset-fashion-mnist)
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
cmake_args=(-G Ninja)
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
  # The main job: an MLP on the real Fashion-MNIST data (dataset-fashion-mnist, installed above).
  stage "build: fashion_mnist"
  cmake --build "$build_dir" --target fashion_mnist -j "$jobs"
  stage "demo: $build_dir/examples/fashion_mnist --epochs 15"
  "$build_dir/examples/fashion_mnist" --epochs 15
else
  stage "build: everything"
  cmake --build "$build_dir" -j "$jobs"
  stage "test: ctest, all labels but cuda (those need a GPU)"
  # Last on purpose: the output ends with CTest's summary, which .ci/run relies on.
  ctest --test-dir "$build_dir" --output-on-failure -LE cuda -j "$jobs"
fi
