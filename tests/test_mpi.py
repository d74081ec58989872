"""Launches tests/mpi_checks.py under `mpiexec -n 4` with real processes."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _mpiexec():
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def _mpi_usable():
    try:
        import mpi4py  # noqa: F401
        from ccompress import _mpi  # noqa: F401
    except ImportError as e:
        return str(e)
    return None if _mpiexec() else "no mpiexec on PATH"


needs_mpi = pytest.mark.skipif(_mpi_usable() is not None,
                               reason=f"MPI unavailable: {_mpi_usable()}")


def run_under_mpiexec(script, nranks):
    """Runs tests/<script> on nranks processes; asserts it exits 0 and every rank said OK."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + sys.path)
    cmd = [_mpiexec(), "-n", str(nranks), sys.executable, str(HERE / script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=HERE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for r in range(nranks):
        assert f"OK {r}" in proc.stdout, out[-6000:]
    print(proc.stdout)


@needs_mpi
@pytest.mark.parametrize("nranks", [4, 3])
def test_mpiexec_real_processes(nranks):
    run_under_mpiexec("mpi_checks.py", nranks)
