#!/bin/sh
# Hydra's "ssh" for perf/emulated_net.py: `netns_exec.sh [ssh options] HOST COMMAND...` runs
# COMMAND inside the network namespace HOST (one of those the script created).
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;            # ssh options hydra may pass (-x, -q, ...)
    *) break ;;
  esac
done
host="$1"
shift
exec ip netns exec "$host" sh -c "$*"
