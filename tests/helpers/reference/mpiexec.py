"""Launching tests on real processes under mpiexec (the mpich wheel's, next to this Python,
else the one on PATH): the multi-process pytest suite in tests/mpi, and the scripts that
cannot be pytest tests (a rank that is killed, the soak's long run)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]
ROOT = TESTS.parent
REPORT_ENV = "CCOMPRESS_MPI_REPORT"


def mpiexec():
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def mpi_unusable():
    """Why MPI tests cannot run here, or None."""
    try:
        import mpi4py  # noqa: F401
        from ccompress import _mpi  # noqa: F401
    except ImportError as e:
        return str(e)
    return None if mpiexec() else "no mpiexec on PATH"


needs_mpi = pytest.mark.skipif(mpi_unusable() is not None,
                               reason=f"MPI unavailable: {mpi_unusable()}")


def under_mpiexec():
    """Whether this process is a rank started by mpiexec (MPICH's hydra or Open MPI)."""
    return any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "PMIX_RANK",
                                         "OMPI_COMM_WORLD_SIZE"))


def script_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + sys.path)
    return env


def run_pytest(nranks, paths, report_dir, timeout=600):
    """``mpiexec -n nranks python -m pytest -q <paths>`` from the repository root. Returns
    (exit code, output, {rank: report}), each rank's report written by tests/mpi/conftest.py
    into report_dir: the test ids that passed, failed and were skipped (with why)."""
    env = script_env()
    env[REPORT_ENV] = str(report_dir)
    cmd = [mpiexec(), "-n", str(nranks), sys.executable, "-m", "pytest", "-q",
           "-p", "no:cacheprovider", *[str(p) for p in paths]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)
    reports = {}
    for f in Path(report_dir).glob("rank*.json"):
        reports[int(f.stem[4:])] = json.loads(f.read_text())
    return proc.returncode, proc.stdout + proc.stderr, reports
