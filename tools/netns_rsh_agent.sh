#!/usr/bin/env bash
# tools/netns_rsh_agent.sh: Open MPI's "ssh" into an emulated host (tools/cluster.sh).
#
#   mpirun --mca plm_rsh_agent tools/netns_rsh_agent.sh --host 10.213.0.1:2,10.213.0.2:2 ...
#
# mpirun starts its daemon on each remote host by running `AGENT HOST COMMAND...`, as it would run
# ssh. Here HOST is an emulated host's address: the agent finds the namespace that has it
# (RINGGRAD_CLUSTER_HOSTS names them) and runs COMMAND there through a shell, as sshd would.
host="${1:?usage: netns_rsh_agent.sh HOST COMMAND...}"
shift
for ns in ${RINGGRAD_CLUSTER_HOSTS:?netns_rsh_agent.sh runs inside tools/cluster.sh}; do
  if ip -n "$ns" -o addr show | grep -q "inet $host/"; then exec ip netns exec "$ns" sh -c "$*"; fi
done
echo "netns_rsh_agent.sh: no emulated host has the address $host (hosts: $RINGGRAD_CLUSTER_HOSTS)" >&2
exit 255
