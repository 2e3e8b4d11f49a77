#!/usr/bin/env bash
# tools/tidy.sh: clang-tidy 14 over the library's sources, with the checks in .clang-tidy (CI's stage 2/5).
#
#   bash tools/tidy.sh                 configure build-tidy/ (for its compile_commands.json), tidy every
#                                      library source: core/, kernels/ (less kernels/cuda/), nn/, parallel/
#   bash tools/tidy.sh FILE...         tidy just these sources (a quick check while fixing)
#
# Any finding fails the run (.clang-tidy sets WarningsAsErrors), in a library .cpp or in a header of
# the library it includes. kernels/cuda/ and parallel/nccl/ are left out: clang-tidy would need the
# CUDA toolkit's compilation flags for them, and nvcc compiles them with warnings as errors instead.
#
# Environment: RINGGRAD_TIDY_BUILD_DIR (default build-tidy), RINGGRAD_JOBS (default all cores),
# RINGGRAD_TIDY_CACHE (where clean results are kept, default ~/.cache/ringgrad-tidy; empty: none, and
# tools/tidy_passed.txt, the record of the tree's clean sources that every run updates, is not read).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir="${RINGGRAD_TIDY_BUILD_DIR:-build-tidy}"
jobs="${RINGGRAD_JOBS:-$(nproc)}"

# Configure only: clang-tidy needs the compile commands and the include root's links, not objects.
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DRINGGRAD_CUDA=OFF -DRINGGRAD_CUDA_EMU=OFF \
  -DRINGGRAD_BUILD_TESTS=OFF -DRINGGRAD_BUILD_EXAMPLES=OFF -DRINGGRAD_BUILD_BENCH=OFF >/dev/null

if [[ $# -gt 0 ]]; then
  sources=("$@")
else
  mapfile -t sources < <(git ls-files 'core/*.cpp' 'kernels/*.cpp' 'nn/*.cpp' 'parallel/*.cpp' |
    grep -v -e '^kernels/cuda/' -e '^parallel/nccl/')
fi
# A source that passed before exactly as it is now (the same clang-tidy, .clang-tidy, flags, and text
# with every header expanded) passes again: tools/tidy_cache.py keeps those results, and only the
# others are checked. Every source is still checked on every run, by running clang-tidy or by that
# record; a finding is never recorded. The record is kept in ~/.cache and, for the sources as they are
# in the tree, in tools/tidy_passed.txt, which a clean clone (CI's) reads: commit it with your change.
python3 tools/tidy_cache.py unchecked "$build_dir" "${sources[@]}" >"$build_dir/tidy-unchecked.txt"
mapfile -t unchecked <"$build_dir/tidy-unchecked.txt"
echo "tidy: ${#sources[@]} sources, ${#unchecked[@]} to check now, $jobs at a time (checks: .clang-tidy);" \
  "$((${#sources[@]} - ${#unchecked[@]})) passed before exactly as they are now"
# run-clang-tidy exits non-zero when any file had a finding; its log keeps only the findings.
status=0
if [[ ${#unchecked[@]} -gt 0 ]]; then
  run-clang-tidy-14 -quiet -p "$build_dir" -j "$jobs" "${unchecked[@]/#/$PWD/}" >"$build_dir/tidy.log" 2>&1 || status=$?
  grep -v -e '^Suppressed [0-9]* warnings' -e '^Use -header-filter' -e 'warnings\? generated' \
    -e '^clang-tidy-14 .* -p=' -e '^[0-9]* warnings\? treated as error' "$build_dir/tidy.log" || true
fi
[[ $status -eq 0 ]] || { echo "tidy: findings above (fix them, or disable a check in .clang-tidy with the reason)" >&2; exit 1; }
if [[ ${#unchecked[@]} -gt 0 ]]; then python3 tools/tidy_cache.py passed "$build_dir" "${unchecked[@]}"; fi
echo "tidy: no findings in ${#sources[@]} sources"
