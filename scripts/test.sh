#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh), then runs the test suite: python -m pytest -q on
# CCOMPRESS_TEST_JOBS pytest-xdist workers, with any extra arguments passed through
# (bash scripts/test.sh -k allreduce -x), and the 15 slowest tests listed at the end (CI time
# is budgeted). Exits with pytest's
# code; "no tests collected" (pytest's 5) is a failure too.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
export PATH="$ROOT/.venv/bin:$PATH"  # mpiexec from the mpich wheel, for the MPI tests
rc=0
# pytest-xdist workers: CCOMPRESS_TEST_JOBS, default the cores up to 4 (a test may launch 4
# ranks of its own); 0 runs every test in this process.
JOBS="${CCOMPRESS_TEST_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
python -m pytest -q -n "$JOBS" --durations=15 "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test] ERROR: pytest collected no tests" >&2
fi
exit "$rc"
