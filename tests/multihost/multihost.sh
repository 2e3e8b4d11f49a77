#!/usr/bin/env bash
# tests/multihost/multihost.sh SCENARIO: one multihost test, run inside tools/cluster.sh's cluster
# (CTest label `multihost`, see CMakeLists.txt here). Each emulated host runs one ringrun, as a real
# machine would: `ringrun --nnodes H --node-rank h --master-addr <host 0> ...`.
#
#   collectives    every collective of the ring, exact, across the hosts; shared memory between a
#                  host's ranks and TCP between hosts, in one ring; all_reduce hierarchical when the
#                  hosts have 2 or more ranks each
#   interleaved    the same with rank r on host r % H (Slurm's cyclic placement), started without
#                  ringrun: the ring still goes host by host
#   ddp            DDP (SGD and AdamW, float64) reproduces one process training on the global batch
#   gloo           every collective on the gloo backend (BACKEND=gloo), across the hosts
#   torchrun       the collectives under torchrun (TORCHRUN_PYTHON), one per host, its own rendezvous
#   mpirun         the collectives under Open MPI's mpirun (MPIRUN), started once on host 0, which
#                  reaches the other hosts through tools/netns_rsh_agent.sh; ranks placed round-robin
#                  (--map-by node), so the ring is reordered host by host
#   link_down      host 1's cable is unplugged in the middle of a stream of all-reduces
#   host_killed    host 1's ringrun is killed with SIGKILL (its ranks go with it)
#   rank_stopped   the last rank, on the last host, stops itself (SIGSTOP) mid-stream
#
# In the fault scenarios every host that is left must report the failure within the timeout, naming
# a rank and its host's address; every ringrun must exit non-zero; and no process, and no shared
# memory, may be left behind (see check_fault). Environment: RINGRUN, DIST_WORKER, DDP_WORKER (the programs), NPROC (ranks per host).
set -uo pipefail

scenario="${1:?usage: multihost.sh SCENARIO}"
read -ra hosts <<<"$RINGGRAD_CLUSTER_HOSTS"
read -ra addrs <<<"$RINGGRAD_CLUSTER_ADDRS"
read -ra links <<<"$RINGGRAD_CLUSTER_LINKS"
nhosts=${#hosts[@]}
nproc="${NPROC:-2}"
world=$((nhosts * nproc))
timeout_s=8  # each rank's deadline in the fault scenarios (ringrun --timeout)

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
shm_before="$(ls /dev/shm | grep -E '^ringgrad-[0-9a-f]+-[0-9]+$' | sort || true)"
RINGGRAD_JOB_TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
export RINGGRAD_JOB_TOKEN

fail() {
  echo "FAIL ($scenario): $*"
  for f in "$logs"/*.log; do
    echo "---- $(basename "$f")"
    cat "$f"
  done
  exit 1
}

# start_job TIMEOUT PROGRAM ARGS...: one ringrun per host, in the background (pids in ringruns).
# `ip netns exec` execs ringrun, so each pid is ringrun's own.
ringruns=()
start_job() {
  local timeout="$1"
  shift
  ringruns=()
  for ((h = 0; h < nhosts; h++)); do
    ip netns exec "${hosts[h]}" "$RINGRUN" --nnodes "$nhosts" --node-rank "$h" --nproc-per-node "$nproc" \
      --master-addr "${addrs[0]}" --master-port 29500 --timeout "$timeout" --grace-ms 2000 "$@" \
      >"$logs/host$h.log" 2>&1 &
    ringruns+=($!)
  done
}

# finish_job: every ringrun's exit status, in host order, into `statuses`; their time from `since`
# (seconds, as $SECONDS) to the last exit into `took`.
statuses=()
finish_job() {
  local since="$1"
  statuses=()
  for pid in "${ringruns[@]}"; do
    wait "$pid"
    statuses+=($?)
  done
  took=$((SECONDS - since))
}

# Waits (at most 60 s) until every rank printed "streaming".
wait_streaming() {
  local deadline=$((SECONDS + 60))
  while (($(cat "$logs"/host*.log | grep -c ': streaming$') < world)); do
    ((SECONDS < deadline)) || fail "the ranks did not all start streaming within 60 s"
    sleep 0.1
  done
}

# Nothing left: no process in any namespace (a moment for the last SIGKILLs), no new shared memory.
check_nothing_left() {
  local deadline=$((SECONDS + 5)) left
  while :; do
    left=""
    for ns in "${hosts[@]}"; do left+="$(ip netns pids "$ns" | tr '\n' ' ')"; done
    [[ -z "$left" ]] && break
    ((SECONDS < deadline)) || fail "processes left behind in the namespaces: $(echo $left)"
    sleep 0.1
  done
  # The ring's channels are anonymous memory files, never named in /dev/shm; a ringgrad-* name there
  # would be a leak (or, briefly, a program of an older ringgrad running beside this test).
  local new
  deadline=$((SECONDS + 5))
  while :; do
    new="$(comm -13 <(echo "$shm_before") <(ls /dev/shm | grep -E '^ringgrad-[0-9a-f]+-[0-9]+$' | sort || true))"
    [[ -z "$new" ]] && break
    ((SECONDS < deadline)) || fail "shared memory left behind: $new"
    sleep 0.1
  done
}

# The fault scenarios' common checks. Each host that is left reports the failure: a rank there failed
# with an error naming a rank and its host's address (the rank it waited for, or, from the store, the
# job's first failure), and its ringrun stopped the host's other ranks; every error any rank printed
# names a rank and host; every ringrun exited non-zero within the deadline and a margin. (A rank that
# its ringrun stops after a neighbour failed says nothing itself: the neighbour's error is the host's.)
check_fault() {  # check_fault HOSTS-LEFT...
  local limit=$((timeout_s + 10))
  for ((h = 0; h < nhosts; h++)); do
    ((statuses[h] != 0)) || fail "host $h's ringrun exited 0 after the fault"
  done
  ((took <= limit)) || fail "the job took ${took} s to fail after the fault (limit ${limit} s)"
  local named='rank [0-9]+ at 10\.213\.0\.[0-9]+'
  for h in "$@"; do
    grep -E "^\[rank [0-9]+\] error after .*$named" "$logs/host$h.log" >/dev/null ||
      fail "no rank on host $h reported an error naming a rank and its host"
  done
  local unnamed
  unnamed="$(cat "$logs"/host*.log | grep -E '^\[rank [0-9]+\] error after' | grep -Ev "$named" || true)"
  [[ -z "$unnamed" ]] || fail "an error names no rank and host: $unnamed"
  check_nothing_left
  echo "ok ($scenario): the hosts left ($*) each reported an error naming a rank and its host;" \
    "every ringrun exited non-zero (${statuses[*]}) within ${took} s of the fault"
}

case "$scenario" in
  collectives)
    start=$SECONDS
    start_job 60 "$DIST_WORKER" collectives
    finish_job "$start"
    for ((h = 0; h < nhosts; h++)); do ((statuses[h] == 0)) || fail "host $h's ringrun exited ${statuses[h]}"; done
    for ((r = 0; r < world; r++)); do
      grep -q "^\[rank $r\] rank $r: ok$" "$logs"/host*.log || fail "rank $r did not say ok"
      # One rank per host: TCP both ways. Else the first and last rank of a host have one link of
      # each kind, and the ranks between them shared memory both ways.
      local_rank=$((r % nproc))
      want=shm
      ((nproc == 1)) && want=tcp
      ((nproc > 1 && (local_rank == 0 || local_rank == nproc - 1))) && want=shm+tcp
      grep -q "^\[rank $r\] rank $r transport $want$" "$logs"/host*.log ||
        fail "rank $r: expected transport $want, got: $(grep -h "^\[rank $r\] rank $r transport" "$logs"/host*.log)"
      # Hosts of 2 or more ranks each: all_reduce goes hierarchical (RingOptions::algorithm "auto").
      want=flat
      ((nhosts > 1 && nproc > 1)) && want=hierarchical
      grep -q "^\[rank $r\] rank $r algorithm $want$" "$logs"/host*.log ||
        fail "rank $r: expected algorithm $want, got: $(grep -h "^\[rank $r\] rank $r algorithm" "$logs"/host*.log)"
    done
    check_nothing_left
    echo "ok (collectives): $world ranks on $nhosts hosts, every collective exact"
    ;;
  interleaved)
    # Rank r on host r % H, each started by hand with the variables a launcher would set.
    pids=()
    for ((r = 0; r < world; r++)); do
      h=$((r % nhosts))
      ip netns exec "${hosts[h]}" env RANK=$r WORLD_SIZE=$world LOCAL_RANK=$((r / nhosts)) \
        LOCAL_WORLD_SIZE=$nproc MASTER_ADDR="${addrs[0]}" MASTER_PORT=29500 RINGGRAD_TIMEOUT=60 \
        "$DIST_WORKER" collectives >"$logs/rank$r.log" 2>&1 &
      pids+=($!)
    done
    for ((r = 0; r < world; r++)); do
      wait "${pids[r]}" || fail "rank $r exited $?"
    done
    # Host by host: host 0's ranks (0, H, 2H, ...), then host 1's, ...
    want=""
    for ((h = 0; h < nhosts; h++)); do
      for ((r = h; r < world; r += nhosts)); do want+=" $r"; done
    done
    for ((r = 0; r < world; r++)); do
      grep -q "^rank $r: ok$" "$logs/rank$r.log" || fail "rank $r did not say ok"
      grep -q "^rank $r ring order$want$" "$logs/rank$r.log" ||
        fail "rank $r: expected ring order$want, got: $(grep -h 'ring order' "$logs/rank$r.log")"
    done
    check_nothing_left
    echo "ok (interleaved): rank r on host r % $nhosts, ring order$want, every collective exact"
    ;;
  ddp)
    start=$SECONDS
    for opt in sgd adamw; do
      start_job 60 "$DDP_WORKER" train "opt=$opt" cap=0 first_cap=0
      finish_job "$start"
      for ((h = 0; h < nhosts; h++)); do ((statuses[h] == 0)) || fail "$opt: host $h's ringrun exited ${statuses[h]}"; done
      [[ "$(cat "$logs"/host*.log | grep -c 'max relative difference')" == "$world" ]] ||
        fail "$opt: not every rank compared its model with the reference"
      echo "$opt: $(grep -h 'max relative difference' "$logs"/host*.log | head -1)"
    done
    check_nothing_left
    echo "ok (ddp): $world ranks on $nhosts hosts train as one process on the global batch"
    ;;
  gloo)
    start=$SECONDS
    BACKEND=gloo start_job 60 "$DIST_WORKER" collectives
    finish_job "$start"
    for ((h = 0; h < nhosts; h++)); do ((statuses[h] == 0)) || fail "host $h's ringrun exited ${statuses[h]}"; done
    for ((r = 0; r < world; r++)); do
      grep -q "^\[rank $r\] rank $r: ok$" "$logs"/host*.log || fail "rank $r did not say ok"
      grep -q "^\[rank $r\] rank $r transport gloo$" "$logs"/host*.log || fail "rank $r did not run on gloo"
    done
    check_nothing_left
    echo "ok (gloo): $world ranks on $nhosts hosts, every collective exact on the gloo backend"
    ;;
  torchrun)
    # torchrun's default (static) rendezvous: its agent on host 0 serves a TCPStore on the master
    # port, and ringgrad's store takes the next one. --redirects/--tee: see tests/parallel/test_ring.cpp.
    pids=()
    for ((h = 0; h < nhosts; h++)); do
      ip netns exec "${hosts[h]}" "${TORCHRUN_PYTHON:?}" -m torch.distributed.run --nnodes "$nhosts" --node_rank "$h" \
        --nproc_per_node "$nproc" --master_addr "${addrs[0]}" --master_port 29400 --redirects 1 --tee 1 \
        --log_dir "$logs/torchrun$h" --no_python "$DIST_WORKER" collectives >"$logs/host$h.log" 2>&1 &
      pids+=($!)
    done
    for ((h = 0; h < nhosts; h++)); do wait "${pids[h]}" || fail "torchrun on host $h exited $?"; done
    for ((r = 0; r < world; r++)); do
      grep -q "rank $r: ok$" "$logs"/host*.log || fail "rank $r did not say ok"
    done
    grep -q "uses port 29401" "$logs/host0.log" || fail "ringgrad's store did not take the port after the agent's"
    check_nothing_left
    echo "ok (torchrun): $world ranks on $nhosts hosts under torchrun's own rendezvous, every collective exact"
    ;;
  mpirun)
    host_list=""
    for a in "${addrs[@]}"; do host_list+="${host_list:+,}$a:$nproc"; done
    ip netns exec "${hosts[0]}" "${MPIRUN:?}" --allow-run-as-root --oversubscribe --host "$host_list" -np "$world" \
      --map-by node --mca plm_rsh_agent "$(dirname "${BASH_SOURCE[0]}")/../../tools/netns_rsh_agent.sh" \
      --mca oob_tcp_if_include eth0 --mca btl self,tcp --mca btl_tcp_if_include eth0 \
      -x MASTER_ADDR="${addrs[0]}" -x MASTER_PORT=29500 -x RINGGRAD_JOB_TOKEN -x RINGGRAD_CLUSTER_HOSTS \
      "$DIST_WORKER" collectives >"$logs/mpirun.log" 2>&1 || fail "mpirun exited $?"
    want=""  # --map-by node: rank r on host r % H, so the ring goes 0, H, 2H, ..., 1, H+1, ...
    for ((h = 0; h < nhosts; h++)); do
      for ((r = h; r < world; r += nhosts)); do want+=" $r"; done
    done
    for ((r = 0; r < world; r++)); do
      grep -q "rank $r: ok$" "$logs/mpirun.log" || fail "rank $r did not say ok"
      grep -q "rank $r ring order$want$" "$logs/mpirun.log" || fail "rank $r: expected ring order$want"
    done
    check_nothing_left
    echo "ok (mpirun): $world ranks on $nhosts hosts under mpirun, placed round-robin, ring order$want"
    ;;
  link_down)
    start_job "$timeout_s" "$DIST_WORKER" stream
    wait_streaming
    start=$SECONDS
    ip link set "${links[1]}" down
    finish_job "$start"
    check_fault $(seq 0 $((nhosts - 1)))
    ;;
  host_killed)
    start_job "$timeout_s" "$DIST_WORKER" stream
    wait_streaming
    start=$SECONDS
    kill -KILL "${ringruns[1]}"
    finish_job "$start"
    statuses[1]=137  # killed: its status is the signal's, as a shell reports it
    check_fault $(seq 0 $((nhosts - 1)) | grep -vx 1)
    ;;
  rank_stopped)
    # The stop scenario of dist_worker: the victim stops itself. KEEP_VICTIM: the ranks that fail do
    # not kill it (on one machine they can; across machines they could not), its ringrun does.
    export VICTIM=$((world - 1)) TIMEOUT_MS=$((timeout_s * 1000)) KEEP_VICTIM=1
    start=$SECONDS
    start_job "$timeout_s" "$DIST_WORKER" stop
    finish_job "$start"
    check_fault $(seq 0 $((nhosts - 1)))
    ;;
  *)
    echo "multihost.sh: unknown scenario '$scenario'"
    exit 2
    ;;
esac
