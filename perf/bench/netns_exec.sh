#!/bin/sh
# Hydra's "ssh" for perf/bench/emulated_net.py: `netns_exec.sh [ssh options] HOST COMMAND...` runs
# COMMAND inside the network namespace HOST (one of those the script created), in a UTS
# namespace of its own whose host name is HOST, so that the ranks of one emulated node see
# one host (MPICH: shared memory inside a node, TCP between nodes).
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;            # ssh options hydra may pass (-x, -q, ...)
    *) break ;;
  esac
done
host="$1"
shift
exec ip netns exec "$host" unshare -u sh -c "hostname $host; $*"
