"""ccompress.torch under torchrun (CPU, gloo, no MPI): launches the worker scripts of
tests/torchrun/ with `python -m torch.distributed.run --standalone` and checks that every
rank finished (each prints "OK <rank>"), or, for the fault checks, that every surviving rank
raised within the communicator's timeout instead of hanging."""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torchrun tests need PyTorch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "torchrun"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(WORKERS)] + sys.path)
    env["OMP_NUM_THREADS"] = "1"
    for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"):
        env.pop(k, None)  # a test run under mpiexec must not make the workers look like one
    return env


def torchrun(script, nproc, *args, timeout=420):
    """Runs tests/torchrun/<script> on nproc processes; returns the completed process."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "--monitor-interval=1", str(WORKERS / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(),
                          cwd=HERE)


def assert_ok(proc, nproc):
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    for r in range(nproc):
        assert f"OK {r}" in proc.stdout, out[-8000:]
    print(proc.stdout)


@pytest.mark.parametrize("nproc", [2, 4])
def test_from_torch_matches_simulate(nproc):
    """Every algo x codec through from_torch: simulate's bits, the fp64 bound, identical ranks."""
    assert_ok(torchrun("comm_checks.py", nproc), nproc)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_env_ranks(script, nproc, *args):
    """nproc processes with env:// variables set by hand (what torchrun sets), without
    torchrun's agent, which would stop the survivors itself once one rank dies."""
    port = _free_port()
    procs = []
    for r in range(nproc):
        env = _env()
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   LOCAL_RANK=str(r), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc))
        procs.append(subprocess.Popen([sys.executable, str(WORKERS / script), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, cwd=HERE))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    return procs, outs


@pytest.mark.parametrize("fault", ["silent", "killed"])
def test_stopped_peer_makes_others_raise(fault):
    """The last rank stops answering (sleeps, or exits) in the middle of the calls: every
    other rank raises (CollectiveTimeout for a silent peer) within the timeout, and its
    communicator then refuses further calls."""
    nproc = 3
    t0 = time.monotonic()
    procs, outs = launch_env_ranks("fault_checks.py", nproc, fault)
    elapsed = time.monotonic() - t0
    for r in range(nproc - 1):
        assert procs[r].returncode == 0, f"rank {r}:\n{outs[r][-4000:]}"
        assert f"RAISED {r}" in outs[r], outs[r][-4000:]
        assert f"OK {r}" in outs[r], outs[r][-4000:]
        print(outs[r])
    assert elapsed < 120, f"the survivors took {elapsed:.0f} s"
