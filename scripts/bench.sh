#!/usr/bin/env bash
# Sets up .venv with the core alone (scripts/setup.sh --core: no test tools, no torch), then
# runs the 4-rank compressed all-reduce benchmark on the CPU over MPI: MPI_Allreduce as the
# baseline, then none / bf16 / fp8_e4m3:g128 codecs with the two_shot and ring schedules,
# 1 MiB to 64 MiB of float32 per rank. A few minutes on
# a 2-core machine (4 ranks oversubscribe it, which is fine). Columns: perf/README.md. On one
# machine the ranks talk through shared memory, faster than the codecs: the output says how to
# read it and ends with the cost model's times over 1, 10 and 100 Gbit/s links (marked MODEL;
# --link-gbps picks the rates).
#
#   bash scripts/bench.sh                 # the default sweep
#   NP=8 bash scripts/bench.sh -e 16M     # other rank count; extra args go to ccompress-perf
# The rows are also written to build/bench-allreduce.json.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh --core  # the benchmark needs ccompress, mpi4py and mpiexec, not the test tools or torch
export PATH="$ROOT/.venv/bin:$PATH"
mkdir -p build
set -x
exec mpiexec -n "${NP:-4}" ccompress-perf allreduce -b 1M -e 64M -f 4 -n 5 -w 2 \
  --codec none --codec bf16 --codec fp8_e4m3:g128 --algo two_shot --algo ring \
  --json build/bench-allreduce.json "$@"
