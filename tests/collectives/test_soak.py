"""Bounded soak (tests/helpers/soak.py) in-process and under mpiexec: hundreds of mixed calls, each
checked against its bound and for bit-identical outputs on every rank, with flat memory."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ccompress as cc
from helpers.soak import RSS_TOLERANCE, _agree, soak
from helpers.reference.mpiexec import mpi_unusable, mpiexec, script_env

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def test_soak_inproc():
    res = cc.run_inproc(4, lambda c: soak(c, iterations=200, seed=11), timeout=120)
    assert all(r["iterations"] == 200 and r["calls"] > 200 for r in res)
    grew = res[0]["rss_end"] - res[0]["rss_start"]  # one process: every rank sees the same
    assert grew <= RSS_TOLERANCE, f"resident memory grew by {grew >> 20} MiB"


@pytest.mark.skipif(mpi_unusable() is not None, reason=f"MPI unavailable: {mpi_unusable()}")
def test_soak_mpi():
    env = script_env()
    cmd = [mpiexec(), "-n", "3", sys.executable, str(HELPERS / "soak.py"), "--iterations", "200",
           "--seed", "12"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=HELPERS)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for r in range(3):
        assert f"SOAK OK {r}" in proc.stdout, out[-6000:]
    print(proc.stdout)


@pytest.mark.parametrize("case", ["out_of_bound", "different_bits"])
def test_soak_check_fails_on_every_rank(case):
    """The soak's per-iteration check is not vacuous: one rank out of bound, or one rank
    holding other bits, makes every rank raise."""
    call = {"kind": "allreduce"}

    def body(c):
        y = np.arange(5, dtype=np.float32) + (c.rank == 1 and case == "different_bits")
        with pytest.raises(AssertionError, match="out of bound" if case == "out_of_bound"
                           else "different bits"):
            _agree(c, 0, call, y, ok=not (c.rank == 1 and case == "out_of_bound"))
        return True

    assert cc.run_inproc(3, body) == [True] * 3
