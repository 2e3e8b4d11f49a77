#!/usr/bin/env bash
# tests/fuzz/run_fuzz.sh: builds and runs the libFuzzer targets for CTest (tests/fuzz/CMakeLists.txt).
#
#   run_fuzz.sh build CXX SOURCE_DIR INCLUDE_DIR LIBRARY OUT_DIR [LINK_ARGS...]
#                                                                   compile fuzz_safetensors, fuzz_store
#   run_fuzz.sh seeds BINARY SEED_DIR                               run every seed once
#   run_fuzz.sh run BINARY SEED_DIR WORK_DIR SECONDS                fuzz for SECONDS from the seeds
#
# Only the code under test is compiled with clang's coverage and sanitizers (-fsanitize=fuzzer,
# address,undefined); the rest of the library comes from LIBRARY, the main build's libringgrad.a
# (GCC), so no second build of the whole library is needed.
set -euo pipefail

mode="${1:-}"
case "$mode" in
  build)
    cxx="$2" src="$3" include="$4" lib="$5" out="$6"
    shift 6
    link_args=("$@")  # what LIBRARY itself needs: the CUDA runtime in a CUDA build
    flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
           -fno-sanitize-recover=undefined -I"$src" -I"$include")
    build_one() {  # name, sources...
      local name="$1"
      shift
      local bin="$out/$name"
      # Up to date: newer than its sources, the library and this script.
      if [[ -x "$bin" ]]; then
        local stale=0 f
        for f in "$@" "$lib" "${BASH_SOURCE[0]}"; do [[ "$f" -nt "$bin" ]] && stale=1; done
        [[ $stale -eq 0 ]] && { echo "fuzz: $name is up to date"; return 0; }
      fi
      echo "fuzz: compiling $name with $cxx"
      "$cxx" "${flags[@]}" -o "$bin.tmp" "$@" "$lib" ${link_args[@]+"${link_args[@]}"} -lz -pthread && mv "$bin.tmp" "$bin"
    }
    build_one fuzz_safetensors "$src/tests/fuzz/fuzz_safetensors.cpp" "$src/nn/safetensors.cpp" "$src/nn/file_io.cpp" &
    a=$!
    build_one fuzz_store "$src/tests/fuzz/fuzz_store.cpp" "$src/parallel/store_protocol.cpp" \
      "$src/parallel/store_server.cpp" "$src/parallel/store_client.cpp" "$src/parallel/socket.cpp" &
    b=$!
    status=0
    wait "$a" || status=1
    wait "$b" || status=1
    exit "$status"
    ;;
  seeds)
    bin="$2" seeds="$3"
    # Given files (not a folder), libFuzzer runs each once and stops at the first failure.
    shopt -s nullglob
    files=("$seeds"/*)
    [[ ${#files[@]} -gt 0 ]] || { echo "fuzz: no seeds in $seeds" >&2; exit 1; }
    exec "$bin" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 "${files[@]}"
    ;;
  run)
    bin="$2" seeds="$3" work="$4" seconds="$5"
    # New inputs go to WORK_DIR (the build tree); the checked-in seeds are only read. A crash is
    # saved as WORK_DIR/crash-<sha1>: rerun it with `BINARY WORK_DIR/crash-<sha1>`.
    mkdir -p "$work/corpus"
    exec "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$seeds"
    ;;
  *)
    echo "usage: run_fuzz.sh build|seeds|run ..." >&2
    exit 2
    ;;
esac
