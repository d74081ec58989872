"""GPU arrays through the adapters, on the caller's stream: CuPy arrays and torch CUDA
tensors (tp_all_reduce, the DDP hook, the ``ccompress`` torch.distributed backend's
collectives) on virtual ranks sharing one GPU (the CUDA loopback group), and the CuPy
example under mpiexec with one GPU per rank. Skipped, with the reason, without CuPy, torch
with CUDA, the CUDA collectives, or a GPU."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ccompress as cc
from ccompress.bounds import allreduce_error_bound
from helpers.common import gaussian_parts, same_bits, same_bits_or_nan

ROOT = Path(__file__).resolve().parents[2]
N = 2


def _gpus(module):
    try:
        if module == "cupy":
            import cupy

            return cupy.cuda.runtime.getDeviceCount()
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # no driver, no library
        return 0


def _needs(module, gpus=1):
    try:
        __import__(module)
    except ImportError:
        return pytest.mark.skipif(True, reason=f"{module} is not installed (GPU adapter test)")
    if gpus == 1 and not hasattr(cc, "run_cuda_loopback"):
        return pytest.mark.skipif(True, reason="this ccompress has no one-GPU loopback group "
                                  "(cc.run_cuda_loopback) for device arrays")
    return pytest.mark.skipif(_gpus(module) < gpus, reason=f"this test needs {gpus} CUDA "
                              f"device(s) visible to {module}")


def _run_on_gpu(fn):
    """``fn(comm)`` on N virtual ranks sharing CUDA device 0, one thread each."""
    return cc.run_cuda_loopback(N, fn)


def _check(y, parts, codec, op="sum", algo="two_shot"):
    ref = np.asarray(parts, np.float64).sum(axis=0) / (len(parts) if op == "avg" else 1)
    bound = allreduce_error_bound(parts, codec, algo, op=op)
    assert np.all(np.abs(np.asarray(y, np.float64) - ref) <= bound)


@_needs("cupy")
@pytest.mark.parametrize("codec", ["none", "bf16", "hint8", "taco:g128"])
def test_cupy_allreduce_on_callers_stream(rng, codec):
    import cupy as cp

    parts = gaussian_parts(rng, N, 100_003)

    def body(comm):
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            x = cp.asarray(parts[comm.rank]) * 1.0  # a kernel on s, not synchronised
            y = comm.allreduce(x, codec=codec, algo="two_shot", stream=s.ptr)
            z = y * 2.0  # queued behind the collective
        s.synchronize()
        return cp.asnumpy(y), cp.asnumpy(z)

    res = _run_on_gpu(body)
    ys = [r[0] for r in res]
    assert same_bits(ys)
    _check(ys[0], parts, codec)
    assert np.array_equal(res[0][1], ys[0] * 2)
    if codec in ("none", "bf16"):  # the CPU backend is the oracle of the CUDA one
        assert same_bits_or_nan([ys[0], cc.simulate.allreduce(list(parts), codec=codec,
                                                              algo="two_shot")[0]])


@_needs("torch")
@pytest.mark.parametrize("codec", ["none", "hint8"])
def test_torch_cuda_tp_and_hook(rng, codec):
    import torch

    from ccompress.torch import ddp_comm_hook, tp_all_reduce
    from helpers.torch_helpers import Bucket

    parts = gaussian_parts(rng, N, 50_001)

    def body(comm):
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            x = torch.from_numpy(parts[comm.rank]).cuda().requires_grad_()
            y = tp_all_reduce(x, codec=codec, group=comm)
            algo = comm.last_stats["algo"]  # "auto" chose it; the bound is that algorithm's
            y.backward(torch.ones_like(y))
            hook = ddp_comm_hook(codec=codec, comm=comm, error_feedback=False, algo="two_shot")
            buf = torch.from_numpy(parts[comm.rank]).cuda()
            avg = hook(None, Bucket(buf, 0)).wait()
        s.synchronize()
        assert avg is buf and x.grad.eq(1).all()
        return y.detach().cpu().numpy(), avg.cpu().numpy(), algo

    res = _run_on_gpu(body)
    assert same_bits([r[0] for r in res]) and same_bits([r[1] for r in res])
    _check(res[0][0], parts, codec, algo=res[0][2])
    _check(res[0][1], parts, codec, op="avg")


@_needs("torch")
@pytest.mark.parametrize("codec", ["hint8", "fp8_e4m3:g128"])
def test_torch_cuda_backend_on_virtual_ranks(codec):
    """The backend's compressed collectives and a delegated one on CUDA tensors, one
    CompressedProcessGroup per virtual rank over its CUDA loopback communicator (comm=),
    on a side stream (helpers/torch_backend/virtual_ranks.py; its CPU twin runs in CI:
    tests/pytorch/test_torch_backend_virtual.py)."""
    from helpers.torch_backend.virtual_ranks import run_backend

    run_backend(cc.run_cuda_loopback, N, "cuda", codec)


@_needs("cupy", gpus=2)  # one GPU per rank
def test_cupy_example_under_mpiexec():
    from helpers.reference.mpiexec import mpiexec

    cmd = [mpiexec(), "-n", "2", sys.executable, str(ROOT / "examples" / "cupy_allreduce.py"),
           "--n", "1000000"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    err = float(proc.stdout.split("relative L2 error ")[1].split(";")[0])
    assert err < 2e-2, proc.stdout  # hint8 errs ~0.6% on Gaussian data
