"""ccompress.jax's CUDA path.

On a GPU or the CUDA emulator (cuda/emu; scripts/sanitize.sh runs this file there, where jax
is absent): the implementation function of the CUDA XLA FFI handlers (``_cuda.jax_run``,
what a handler runs once it has decoded XLA's call: jax_ffi::run_cuda) on device
communicators registered under the ids that compiled programs name, on virtual ranks of one
device. Its results are bit-identical on every rank and to Communicator's NumPy path (the
bits of the CPU handlers) for the same inputs, each lossy one within its relative L2 bound
of the fp64 mean; error feedback too; bad calls raise typed errors on every rank.

On a GPU with a CUDA jaxlib only (skips elsewhere; perf/gpu_check.sh runs it there): a
jitted ccompress.jax call on a GPU array lowers to the CUDA handler and gives the NumPy
path's bits.
"""
import numpy as np
import pytest

import ccompress as cc
from helpers.common import gaussian_parts, rel_l2, run_on_threads, same_bits
from helpers.cuda_helpers import DeviceBuffer, cuda_or_reason

CUDA, WHY = cuda_or_reason()
gpu = pytest.mark.skipif(CUDA is None, reason=str(WHY))

SLICE, SEED = 1024, 5
# Relative L2 error of the all-reduce (op="avg") against the fp64 mean, per codec (as
# tests/jax/test_jax_multiprocess.py's BOUNDS).
BOUNDS = {"none": 1e-6, "fp8_e4m3:g128": 8e-2, "hint8": 2e-2, "nvfp4": 0.25, "hint4": 0.25}


def _registered(ranks):
    """A loopback group of `ranks` device ranks, each registered as ccompress.jax registers a
    device communicator; (ranks, ids)."""
    group = CUDA.loopback_group(ranks, 0)
    ids = [CUDA.jax_register(r, 60.0, SLICE, SEED, 0) for r in group]
    return group, ids


def _release(ids):
    for i in ids:
        assert CUDA.jax_unregister(i)


@gpu
@pytest.mark.parametrize("codec", sorted(BOUNDS))
def test_cuda_handler_allreduce_same_bits_as_numpy_path(rng, codec):
    ranks, n = 3, 1501
    parts = gaussian_parts(rng, ranks, n, "float32")
    group, ids = _registered(ranks)
    want = cc.run_inproc(ranks, lambda c: [c.allreduce(parts[c.rank], codec=codec, algo=a,
                                                       op="avg", step=k)
                                           for k, a in enumerate(("ring", "two_shot"))],
                         slice_elems=SLICE, seed=SEED)

    def call(dr, r):
        x = DeviceBuffer.of(parts[r])
        outs = []
        for algo in ("ring", "two_shot"):  # the entry's step counter numbers them 0, 1
            y = DeviceBuffer(parts[r].nbytes)
            CUDA.jax_run("allreduce", ids[r], x.ptr, y.ptr, n, n, "float32", codec, algo, "avg")
            outs.append(y.download(np.empty_like(parts[r])))
        return outs

    got = run_on_threads(group, call)
    _release(ids)
    mean = parts.astype(np.float64).mean(axis=0)
    for k in range(2):
        assert same_bits([g[k] for g in got]), (codec, k, "ranks disagree")
        assert same_bits([got[0][k], want[0][k]]), (codec, k, "differs from the NumPy path")
        assert rel_l2(got[0][k], mean) <= BOUNDS[codec], (codec, k)


@gpu
def test_cuda_handler_reduce_scatter_all_gather_and_feedback_same_bits(rng):
    ranks, n, codec = 3, 2000, "fp8_e4m3:g128"
    parts = gaussian_parts(rng, ranks, n, "bfloat16")
    xs32 = gaussian_parts(rng, ranks, n, "float32")
    group, ids = _registered(ranks)

    def host(c):
        ef = cc.ErrorFeedback()
        rs = c.reduce_scatter(parts[c.rank], codec=codec, step=0)
        ag = c.allgather(parts[c.rank], codec=codec, step=1)
        fb = [c.allreduce(xs32[c.rank] * (1 + k), codec=codec, algo="two_shot", op="avg",
                          error_feedback=ef, step=2 + k) for k in range(2)]
        return rs, ag, fb, ef.worker_residual, ef.server_residual

    want = cc.run_inproc(ranks, host, slice_elems=SLICE, seed=SEED)

    def call(dr, r):
        lo, hi = cc.chunk_range(n, ranks, r)
        x = DeviceBuffer.of(parts[r])
        rs, ag = DeviceBuffer((hi - lo) * 2), DeviceBuffer(ranks * n * 2)
        CUDA.jax_run("reduce_scatter", ids[r], x.ptr, rs.ptr, n, hi - lo, "bfloat16", codec,
                     "", "sum")
        CUDA.jax_run("allgather", ids[r], x.ptr, ag.ptr, n, ranks * n, "bfloat16", codec)
        worker = DeviceBuffer.of(np.zeros(n, np.float32))
        server = DeviceBuffer.of(np.zeros(hi - lo, np.float32))
        fb = []
        for k in range(2):
            xk = DeviceBuffer.of((xs32[r] * (1 + k)).astype(np.float32))
            yk = DeviceBuffer(n * 4)
            CUDA.jax_run("allreduce", ids[r], xk.ptr, yk.ptr, n, n, "float32", codec,
                         "two_shot", "avg", worker=worker.ptr, server=server.ptr)
            fb.append(yk.download(np.empty(n, np.float32)))
        return (rs.download(np.empty(hi - lo, parts.dtype)),
                ag.download(np.empty(ranks * n, parts.dtype)), fb,
                worker.download(np.empty(n, np.float32)),
                server.download(np.empty(hi - lo, np.float32)))

    got = run_on_threads(group, call)
    _release(ids)
    for r in range(ranks):
        g, w = got[r], want[r]
        assert same_bits([g[0], w[0]]) and same_bits([g[1], np.asarray(w[1]).reshape(-1)])
        for k in range(2):
            assert same_bits([g[2][k], w[2][k]]), ("feedback", r, k)
        assert same_bits([g[3], w[3]]) and same_bits([g[4], w[4]])
        assert np.any(g[3] != 0)
    for k in range(2):
        assert same_bits([g[2][k] for g in got])


@gpu
def test_cuda_handler_bad_calls_typed_errors_on_every_rank(rng):
    ranks, n = 2, 1000
    parts = gaussian_parts(rng, ranks, n, "float32")
    group, ids = _registered(ranks)

    def call(dr, r):
        # one element more than the calls read, so that no call reads past them
        x = DeviceBuffer.of(np.append(parts[r], np.float32(0)))
        y = DeviceBuffer((n + 1) * 4)
        errors = []
        for kw in ({"codec": "hint8" if r == 0 else "bf16"},  # codecs differ between ranks
                   {"n": n + r},                              # shapes differ
                   {"out_elems": n + 1 if r == 0 else n}):    # a bad output on rank 0 only
            args = {"n": n, "out_elems": n, "codec": "hint8", **kw}
            if "n" in kw:
                args["out_elems"] = kw["n"]
            try:
                CUDA.jax_run("allreduce", ids[r], x.ptr, y.ptr, args["n"], args["out_elems"],
                             "float32", args["codec"], "ring", "sum")
                errors.append(None)
            except cc.CCompressError as e:
                errors.append((type(e).__name__, str(e)))
        CUDA.jax_run("allreduce", ids[r], x.ptr, y.ptr, n, n, "float32", "hint8", "ring", "sum")
        return errors, y.download(np.empty(n, np.float32))

    got = run_on_threads(group, call)
    assert same_bits([g[1] for g in got])  # still usable after the errors
    for r, (errors, _) in enumerate(got):
        assert errors[0][0] == "MismatchError" and "bf16" in errors[0][1], errors[0]
        assert errors[1][0] == "MismatchError", errors[1]
        want = "InvalidArgument" if r == 0 else "MismatchError"
        assert errors[2][0] == want, errors[2]
    assert "the output holds 1001 elements" in got[0][0][2][1]
    _release(ids)
    x = DeviceBuffer.of(parts[0])
    with pytest.raises(cc.InvalidArgument, match="not registered"):
        CUDA.jax_run("allreduce", ids[0], x.ptr, x.ptr, n, n, "float32", "none")
    host = cc.Communicator.inproc(1)[0]
    with pytest.raises(TypeError):  # a host transport is no device rank
        CUDA.jax_register(host._t, 60.0, 0, 0, 0)


def _cuda_jax():
    """(jax, ccompress.jax) where jaxlib has a CUDA backend and ccompress its CUDA handlers,
    else skip."""
    jax = pytest.importorskip("jax")
    ccj = pytest.importorskip("ccompress.jax")
    from ccompress.jax._primitive import cuda_handlers

    if CUDA is None or cuda_handlers() is None:
        pytest.skip("needs a GPU, a CUDA jaxlib and ccompress._cuda with its JAX handlers")
    return jax, ccj


def test_jit_on_gpu_array_runs_cuda_handler(rng):
    """A GPU machine with jax[cuda]: a jitted call on a GPU array runs the CUDA handler on
    XLA's stream, on a one-rank NCCL communicator; the NumPy path's bits."""
    jax, ccj = _cuda_jax()
    import jax.numpy as jnp

    comm = cc.Communicator.from_nccl(unique_id=cc.nccl_unique_id(), rank=0, size=1,
                                     slice_elems=SLICE, seed=SEED)
    host = cc.Communicator.inproc(1, slice_elems=SLICE, seed=SEED)[0]
    x = gaussian_parts(rng, 1, 5000, "float32")[0]
    xg = jax.device_put(jnp.asarray(x), jax.devices("cuda")[0])
    f = jax.jit(lambda v: ccj.allreduce(v, codec="hint8", algo="ring", op="avg", comm=comm))
    assert "ccompress_allreduce" in f.lower(xg).as_text()
    y = np.asarray(f(xg))
    want = host.allreduce(x, codec="hint8", algo="ring", op="avg", step=0)
    assert same_bits([y, want])
    assert rel_l2(y, x.astype(np.float64)) <= BOUNDS["hint8"]
    comm.close()
