#!/usr/bin/env bash
# bench/allreduce_hosts.sh: bench_allreduce across emulated hosts, with links of a chosen speed.
#
#   bash bench/allreduce_hosts.sh [--hosts H] [--nproc P] [--link-gbit B] [--build DIR] [-- FLAGS...]
#
# Makes H hosts with tools/cluster.sh (network namespaces on a bridge; needs root and iproute2),
# starts one ringrun per host, each running P ranks of DIR/bench/bench_allreduce FLAGS, and prints
# rank 0's table (nccl-tests columns: size, count, time, algbw, busbw, #wrong). busbw across hosts
# is bounded by the link: B Gbit/s is B/8 GB/s. Defaults: 2 hosts, 1 rank each, unshaped links,
# build directory `build`, FLAGS `--transport auto --min-bytes 64K --max-bytes 64M --no-references`
# (auto: shared memory inside a host, TCP between hosts).
# Example, 2 hosts x 2 ranks at 2.5 Gbit/s:
#
#   bash bench/allreduce_hosts.sh --hosts 2 --nproc 2 --link-gbit 2.5
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ "${1:-}" == "--inside-cluster" ]]; then  # run by tools/cluster.sh, below
  shift
  nproc="$1" build="$2"
  shift 2
  read -ra hosts <<<"$RINGGRAD_CLUSTER_HOSTS"
  read -ra addrs <<<"$RINGGRAD_CLUSTER_ADDRS"
  RINGGRAD_JOB_TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  export RINGGRAD_JOB_TOKEN
  logs="$(mktemp -d)"
  trap 'rm -rf "$logs"' EXIT
  pids=()
  for ((h = 0; h < ${#hosts[@]}; h++)); do
    ip netns exec "${hosts[h]}" "$build/tools/ringrun" --nnodes "${#hosts[@]}" --node-rank "$h" \
      --nproc-per-node "$nproc" --master-addr "${addrs[0]}" --master-port 29500 \
      "$build/bench/bench_allreduce" "$@" >"$logs/host$h.log" 2>&1 &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  sed -n 's/^\[rank 0\] //p' "$logs/host0.log"
  if [[ $status -ne 0 ]]; then
    echo "allreduce_hosts.sh: the job failed (status $status); every host's output:" >&2
    for f in "$logs"/host*.log; do
      echo "---- $(basename "$f")" >&2
      cat "$f" >&2
    done
  fi
  exit "$status"
fi

hosts=2 nproc=1 link_gbit="" build="build"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) hosts="${2:?--hosts needs a value}"; shift 2 ;;
    --nproc) nproc="${2:?--nproc needs a value}"; shift 2 ;;
    --link-gbit) link_gbit="${2:?--link-gbit needs a value}"; shift 2 ;;
    --build) build="${2:?--build needs a value}"; shift 2 ;;
    -h | --help) sed -n '2,15s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; break ;;
    *) echo "allreduce_hosts.sh: unknown flag '$1' (expected --hosts, --nproc, --link-gbit, --build, or -- FLAGS)" >&2; exit 2 ;;
  esac
done
if ! [[ "$nproc" =~ ^[1-9][0-9]*$ ]]; then
  echo "allreduce_hosts.sh: --nproc: expected a positive number of ranks per host, got '$nproc'" >&2
  exit 2
fi
build="$(cd "$build" 2>/dev/null && pwd)" || { echo "allreduce_hosts.sh: --build: no such directory" >&2; exit 2; }
for program in tools/ringrun bench/bench_allreduce; do
  [[ -x "$build/$program" ]] || { echo "allreduce_hosts.sh: $build/$program is not built" >&2; exit 2; }
done
[[ $# -gt 0 ]] || set -- --transport auto --min-bytes 64K --max-bytes 64M --no-references
exec bash "$here/../tools/cluster.sh" --hosts "$hosts" ${link_gbit:+--link-gbit "$link_gbit"} -- \
  bash "${BASH_SOURCE[0]}" --inside-cluster "$nproc" "$build" "$@"
