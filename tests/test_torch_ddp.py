"""The DDP communication hook: on in-process ranks with DDP's bucket interface (buffer,
index), and with real DistributedDataParallel over gloo under mpiexec
(tests/torch_mpi_checks.py)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the ccompress.torch "
                                            "tests need it; ccompress itself does not)")

import ccompress as cc  # noqa: E402
from ccompress.torch import ddp_comm_hook  # noqa: E402
from test_mpi import _mpi_usable, _mpiexec  # noqa: E402
from torch_helpers import check_reduced, rank_tensor, same_bits  # noqa: E402

HERE = Path(__file__).resolve().parent
N = 4


class Bucket:
    """What DDP hands a hook: a flat gradient buffer and the bucket's index."""

    def __init__(self, buffer, index):
        self._buffer, self._index = buffer, index

    def buffer(self):
        return self._buffer

    def index(self):
        return self._index


@pytest.mark.parametrize("codec", ["none", "hint8", "fp8_e4m3:g128"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("async_op", [None, False])
def test_hook_averages_buckets(codec, dtype, async_op):
    sizes = (5000, 777)  # two buckets, reduced in index order as DDP does

    def body(comm):
        hook = ddp_comm_hook(codec=codec, error_feedback=False, comm=comm, algo="two_shot",
                             async_op=async_op)
        bufs = [rank_tensor(comm.rank, (n,), dtype, seed=i) for i, n in enumerate(sizes)]
        futs = [hook(None, Bucket(b, i)) for i, b in enumerate(bufs)]
        outs = [f.wait() for f in futs]
        assert all(o is b for o, b in zip(outs, bufs)), "the hook must average in place"
        return outs

    res = cc.run_inproc(N, body)
    for i, n in enumerate(sizes):
        outs = [r[i] for r in res]
        assert same_bits(outs), f"bucket {i}: ranks differ"
        assert outs[0].dtype == dtype
        parts = [rank_tensor(r, (n,), dtype, seed=i) for r in range(N)]
        check_reduced(outs[0], parts, codec, "two_shot", op="avg", what=f"bucket {i}")


def test_hook_errors():
    with pytest.raises(cc.InvalidArgument):
        ddp_comm_hook(codec="fp8_e4m3:g7")
    with pytest.raises(cc.InvalidArgument, match="unknown algo"):
        ddp_comm_hook(codec="none", algo="butterfly")
    if not hasattr(cc, "ErrorFeedback"):
        with pytest.raises(cc.Unsupported, match="error_feedback=False"):
            ddp_comm_hook(codec="hint8", error_feedback=True)

    def body(comm):
        hook = ddp_comm_hook(codec="none", error_feedback=False, comm=comm)
        with pytest.raises(cc.InvalidArgument, match="float64"):
            hook(None, Bucket(torch.zeros(8, dtype=torch.float64), 0))
        # Ranks that disagree on the codec: the future carries the MismatchError.
        bad = ddp_comm_hook(codec="bf16" if comm.rank == 1 else "none", error_feedback=False,
                            comm=comm)
        with pytest.raises(cc.MismatchError):
            bad(None, Bucket(torch.ones(100), 0)).wait()
        return True

    assert cc.run_inproc(2, body) == [True, True]


@pytest.mark.skipif(_mpi_usable() is not None, reason=f"MPI unavailable: {_mpi_usable()}")
def test_ddp_gloo_under_mpiexec():
    """Real DistributedDataParallel over gloo, 4 processes: see torch_mpi_checks.py."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE)] + sys.path),
               OMP_NUM_THREADS="1")
    cmd = [_mpiexec(), "-n", str(N), sys.executable, str(HERE / "torch_mpi_checks.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=HERE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for r in range(N):
        assert f"OK {r}" in proc.stdout, out[-6000:]
    print(proc.stdout)
