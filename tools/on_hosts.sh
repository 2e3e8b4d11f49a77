#!/usr/bin/env bash
# tools/on_hosts.sh: one job across emulated hosts -- ringrun started once per host, as on a cluster.
#
#   bash tools/on_hosts.sh --hosts H --nproc-per-host P [--link-gbit B] [--ringrun PATH] -- PROGRAM [ARGS...]
#
# Makes H hosts with tools/cluster.sh (network namespaces on a bridge, links shaped to B Gbit/s;
# needs root and iproute2), then runs `ringrun --nnodes H --node-rank h --nproc-per-node P
# --master-addr <host 0> PROGRAM ARGS` inside host h, for every h, with one job token. Rank 0's
# output is passed through as it comes (without ringrun's "[rank 0] " prefix); every other rank's
# is kept, and shown only when the job fails. The environment reaches every rank, with
# RINGGRAD_CLUSTER_HOSTS and RINGGRAD_CLUSTER_ADDRS (cluster.sh) added, so a rank can reach the
# other hosts itself (bench_allreduce's mpirun reference does). bench_allreduce --hosts and
# dp_vs_ddp --hosts run through this script.
#
# Defaults: --ringrun build/tools/ringrun. Exit status: the job's (the first failed host's); 77
# when this machine cannot make namespaces (cluster.sh); 2 for bad usage.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ "${1:-}" == "--inside-cluster" ]]; then  # run by tools/cluster.sh, below
  nproc="$2" ringrun="$3"
  shift 3
  read -ra hosts <<<"$RINGGRAD_CLUSTER_HOSTS"
  read -ra addrs <<<"$RINGGRAD_CLUSTER_ADDRS"
  RINGGRAD_JOB_TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  export RINGGRAD_JOB_TOKEN
  logs="$(mktemp -d)"
  trap 'rm -rf "$logs"' EXIT
  pids=()
  for ((h = 0; h < ${#hosts[@]}; h++)); do
    # Host 0 writes to a pipe read below, the others to files: a pipe nobody reads would stall a rank.
    ip netns exec "${hosts[h]}" "$ringrun" --nnodes "${#hosts[@]}" --node-rank "$h" --nproc-per-node "$nproc" \
      --master-addr "${addrs[0]}" --master-port 29500 "$@" >"$logs/host$h.log" 2>&1 &
    pids+=($!)
  done
  # Rank 0's lines as they come; `tail --pid` ends when host 0's ringrun does.
  tail -n +1 -F --pid="${pids[0]}" "$logs/host0.log" 2>/dev/null | sed -un 's/^\[rank 0\] //p' &
  follower=$!
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || { s=$?; [[ $status -ne 0 ]] || status=$s; }; done
  wait "$follower" || true
  if [[ $status -ne 0 ]]; then
    echo "on_hosts.sh: the job failed (exit status $status); every host's output:" >&2
    for ((h = 0; h < ${#hosts[@]}; h++)); do
      echo "---- host $h (${addrs[h]})" >&2
      cat "$logs/host$h.log" >&2
    done
  fi
  exit "$status"
fi

usage() {
  sed -n '4p' "${BASH_SOURCE[0]}" | sed 's/^# *//'
}
hosts="" nproc="" link_gbit="" ringrun="build/tools/ringrun"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) hosts="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
    --nproc-per-host) nproc="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
    --link-gbit) link_gbit="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
    --ringrun) ringrun="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
    -h | --help) sed -n '2,16s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; break ;;
    *) echo "on_hosts.sh: unknown flag '$1' (expected --hosts, --nproc-per-host, --link-gbit, --ringrun, then -- PROGRAM)" >&2
       exit 2 ;;
  esac
done
if ! [[ "$hosts" =~ ^[1-9][0-9]*$ ]]; then
  echo "on_hosts.sh: --hosts: expected a positive number of hosts, got '$hosts'" >&2
  exit 2
fi
if ! [[ "$nproc" =~ ^[1-9][0-9]*$ ]]; then
  echo "on_hosts.sh: --nproc-per-host: expected a positive number of ranks per host, got '$nproc'" >&2
  exit 2
fi
[[ $# -gt 0 ]] || { echo "on_hosts.sh: expected -- PROGRAM [ARGS...] after the flags" >&2; exit 2; }
[[ -x "$ringrun" ]] || { echo "on_hosts.sh: --ringrun: $ringrun is not an executable (build the ringrun target)" >&2; exit 2; }
ringrun="$(cd "$(dirname "$ringrun")" && pwd)/$(basename "$ringrun")"
exec bash "$here/cluster.sh" --hosts "$hosts" ${link_gbit:+--link-gbit "$link_gbit"} -- \
  bash "${BASH_SOURCE[0]}" --inside-cluster "$nproc" "$ringrun" "$@"
