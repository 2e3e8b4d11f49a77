#!/usr/bin/env bash
# tools/cluster.sh: a small cluster of emulated hosts on this machine, for the multihost tests and
# benchmarks. Needs root and iproute2 (Debian's iproute2; CI runs as root).
#
#   bash tools/cluster.sh [--hosts H] [--link-gbit B] -- COMMAND [ARGS...]
#
# Each host is a Linux network namespace with one interface, eth0, at 10.213.0.(i+1)/24, cabled by a
# veth pair to a bridge of this run's own in the root namespace: a switch with H ports. With
# --link-gbit, every host's cable is shaped to B Gbit/s in each direction (a tbf qdisc on both ends
# of its veth pair), as a NIC of that speed would be; latency stays the loopback's (no netem here).
# Only the namespaces' addresses are used, and the root namespace has none on the bridge, so no
# traffic leaves the cluster.
#
# COMMAND runs in the root namespace, without RINGGRAD_HOST_ID (each namespace is its own host), with
#   RINGGRAD_CLUSTER_HOSTS   the namespaces' names, host 0 first, space-separated
#   RINGGRAD_CLUSTER_ADDRS   their addresses, in the same order
#   RINGGRAD_CLUSTER_LINKS   each host's interface on the bridge side (for `ip link set ... down`)
# so `ip netns exec "${hosts[1]}" prog` runs prog on host 1. When COMMAND ends -- or this script is
# interrupted -- every process left in the namespaces is killed and the namespaces, cables and bridge
# are removed. Names carry this script's pid (rg<pid>h<i>, rg<pid>br), so runs side by side never
# meet, and a run that was killed with SIGKILL (no trap runs) is cleaned up by the next one.
#
# Exit status: COMMAND's; 77 (CTest's skip code) when this machine cannot make namespaces; 2 for bad
# usage.
set -euo pipefail

hosts=2
link_gbit=""
usage() {
  sed -n '2,24s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
  echo "flags: --hosts H (2 to 32; default: 2), --link-gbit B (Gbit/s per host and direction; default: unshaped)"
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) hosts="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
    --link-gbit) link_gbit="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "cluster.sh: unknown flag '$1' (expected --hosts, --link-gbit, or -- COMMAND)" >&2; exit 2 ;;
  esac
done
if ! [[ "$hosts" =~ ^[0-9]+$ ]] || ((hosts < 2 || hosts > 32)); then
  echo "cluster.sh: --hosts: expected 2 to 32, got '$hosts'" >&2
  exit 2
fi
if [[ -n "$link_gbit" ]] && ! { [[ "$link_gbit" =~ ^[0-9]+(\.[0-9]+)?$ ]] &&
  awk -v g="$link_gbit" 'BEGIN { exit !(g >= 0.001) }'; }; then
  echo "cluster.sh: --link-gbit: expected a number of Gbit/s, at least 0.001, got '$link_gbit'" >&2
  exit 2
fi
if [[ $# -eq 0 ]]; then
  echo "cluster.sh: expected -- COMMAND after the flags" >&2
  exit 2
fi

if [[ $EUID -ne 0 ]]; then
  echo "cluster.sh: skipped: network namespaces need root (this is uid $EUID)" >&2
  exit 77
fi
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "cluster.sh: skipped: needs iproute2's ip and tc (apt-get install iproute2)" >&2
  exit 77
fi

# A namespace's processes, killed before it goes: a namespace with live processes in it would
# otherwise outlive `ip netns del` (the name goes, the namespace stays as long as they run).
remove_namespace() {
  local ns="$1" pids
  pids="$(ip netns pids "$ns" 2>/dev/null || true)"
  if [[ -n "$pids" ]]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
  fi
  ip netns del "$ns" 2>/dev/null || true
}

# Leftovers of runs that are gone (killed with SIGKILL): their pid no longer runs this script, or it
# is this run's own pid, reused (this run has made nothing yet).
owner_gone() {
  local pid="$1"
  [[ "$pid" == "$$" || ! -r "/proc/$pid/cmdline" ]] || ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'cluster\.sh'
}
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^rg[0-9]+h[0-9]+$' || true); do
  pid="${ns#rg}"
  pid="${pid%%h*}"
  if owner_gone "$pid"; then remove_namespace "$ns"; fi
done
for bridge in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^rg[0-9]+br$' || true); do
  pid="${bridge#rg}"
  pid="${pid%br}"
  if owner_gone "$pid"; then ip link del "$bridge" 2>/dev/null || true; fi
done

id="rg$$"
bridge="${id}br"
names=()
addrs=()
links=()
child=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  if [[ -n "$child" ]]; then kill -TERM "$child" 2>/dev/null || true; fi
  for ns in "${names[@]}"; do remove_namespace "$ns"; done
  ip link del "$bridge" 2>/dev/null || true  # takes the cables' bridge ends with it
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# tbf needs a bucket of at least one timer tick's worth of bytes at the rate, and at least one of
# the 64 KiB segments that veth hands over with offloads on: 2 ms at the rate, 256 KiB at the least.
shape() {  # shape NETNS-PREFIX... DEV
  local dev="${*: -1}" rate_kbit burst
  rate_kbit="$(awk -v g="$link_gbit" 'BEGIN { printf "%d", g * 1000000 }')"
  burst="$(awk -v k="$rate_kbit" 'BEGIN { b = k * 1000 / 8 * 0.002; if (b < 262144) b = 262144; printf "%d", b }')"
  "${@:1:$#-1}" tc qdisc add dev "$dev" root tbf rate "${rate_kbit}kbit" burst "$burst" latency 50ms
}

ip link add "$bridge" type bridge
ip link set "$bridge" up
for ((i = 0; i < hosts; i++)); do
  ns="${id}h${i}"
  cable="${id}v${i}"
  addr="10.213.0.$((i + 1))"
  ip netns add "$ns"
  names+=("$ns")
  ip link add "$cable" type veth peer name eth0 netns "$ns"
  ip link set "$cable" master "$bridge" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  if [[ -n "$link_gbit" ]]; then
    shape ip netns exec "$ns" eth0  # what the host sends
    shape "$cable"                  # what it receives
  fi
  addrs+=("$addr")
  links+=("$cable")
done

# Each namespace is a host of its own: an inherited RINGGRAD_HOST_ID (which tests set to emulate
# hosts without namespaces) would make them all one host, and the ring would use shared memory
# between them instead of the shaped links.
unset RINGGRAD_HOST_ID
export RINGGRAD_CLUSTER_HOSTS="${names[*]}"
export RINGGRAD_CLUSTER_ADDRS="${addrs[*]}"
export RINGGRAD_CLUSTER_LINKS="${links[*]}"
echo "cluster.sh: $hosts hosts (${addrs[*]}), links ${link_gbit:-unshaped}${link_gbit:+ Gbit/s}" >&2
# In the background, so that a signal to this script acts at once (bash runs a trap only between
# commands, and `wait` is interrupted by one): the trap ends COMMAND and removes the cluster.
set +e
"$@" &
child=$!
wait "$child"
status=$?
child=""
set -e
exit "$status"
