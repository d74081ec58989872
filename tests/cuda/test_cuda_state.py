"""CUDA backend reports and state: the NaN/Inf counts of every collective and error-feedback
residuals kept in device memory, each equal to the host path's (counts equal, residuals and
results the same bits), and nonfinite="raise" on a device communicator. GPU tests skip with
the reason when no device is visible."""
import numpy as np
import pytest

import ccompress as cc
from ccompress import _core
from ccompress._internal.arrays import numpy_dtype
from helpers.common import gaussian_parts, run_on_threads, same_bits_or_nan
from helpers.cuda_helpers import (DeviceBuffer, cuda_or_reason, device_run, framework_cases, host_ptr,
                          to_device, to_host)

CUDA, WHY = cuda_or_reason()
gpu = pytest.mark.skipif(CUDA is None, reason=str(WHY))

DTYPES = ["float32", "bfloat16", "float16"]


def plant_nonfinite(rng, a, k):
    """A copy of the 1-D array ``a`` with NaN, +Inf and -Inf at k random places."""
    a = a.copy()
    idx = rng.choice(a.size, size=min(k, a.size), replace=False)
    a[idx] = np.resize(np.array([np.nan, np.inf, -np.inf], np.float32), idx.size).astype(a.dtype)
    return a


def counter(start=0):
    return DeviceBuffer.of(np.array([start], np.int64))


def read_counter(c):
    return int(c.download(np.zeros(1, np.int64))[0])


# ---- kernels against the host ----

@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_count_nonfinite_kernel_matches_host(rng, dtype):
    backend = CUDA.Backend(0)
    item = numpy_dtype(dtype).itemsize
    for n in (1, 7, 8, 4099, 300001):
        x = plant_nonfinite(rng, gaussian_parts(rng, 1, n + 1, dtype)[0], 1 + n // 50)
        want = sum(_core.count_nonfinite(host_ptr(x) + off * item, dtype, n)[0] for off in (0, 1))
        xd, c = DeviceBuffer.of(x), counter(5)
        backend.count_nonfinite(xd.ptr, dtype, n, c.ptr)  # aligned: vector loads
        backend.count_nonfinite(xd.ptr + item, dtype, n, c.ptr)  # one element off: scalar loads
        backend.synchronize()
        assert read_counter(c) == 5 + want, f"{dtype} n={n}"


@gpu
def test_feedback_residual_kernel_matches_numpy(rng):
    backend = CUDA.Backend(0)
    for n in (3, 8, 4099, 100003):
        v = plant_nonfinite(rng, rng.standard_normal(n + 1).astype(np.float32), 1 + n // 100)
        d = (v + rng.standard_normal(n + 1).astype(np.float32) * 1e-3).astype(np.float32)
        d[rng.integers(0, n + 1)] = np.nan
        v[0], d[0] = 3e38, -3e38  # finite operands, their difference overflows: dropped too
        for off in (0, 1):  # aligned, then one element off (the scalar path)
            vv, dd = v[off:off + n], d[off:off + n]
            with np.errstate(over="ignore", invalid="ignore"):
                diff = vv - dd  # float32 arithmetic, rounded to nearest like the kernel
            keep = np.isfinite(vv) & np.isfinite(dd) & np.isfinite(diff)
            want = np.where(keep, diff, np.float32(0)).astype(np.float32)
            vd, ddv, rd, c = DeviceBuffer.of(v), DeviceBuffer.of(d), DeviceBuffer((n + 1) * 4), counter()
            backend.feedback_residual(vd.ptr + 4 * off, ddv.ptr + 4 * off, n, rd.ptr + 4 * off, c.ptr)
            backend.synchronize()
            got = rd.download(np.zeros(n + 1, np.float32))[off:off + n]
            assert same_bits_or_nan([got, want]), f"n={n} offset {off}"
            assert read_counter(c) == int((~keep).sum())


# ---- the counts and residuals of whole collectives on virtual ranks of one GPU ----

@gpu
@pytest.mark.parametrize("codec,algo", [("none", "one_shot"), ("fp8_e4m3:g32", "ring"),
                                        ("hint8", "two_shot"), ("nvfp4", "tree")])
def test_loopback_nonfinite_counts_match_host(rng, codec, algo):
    ranks, n, dtype = 3, 5003, "bfloat16"
    parts = np.stack([plant_nonfinite(rng, p, 2 + r)
                      for r, p in enumerate(gaussian_parts(rng, ranks, n, dtype))])

    def host(c):
        y = c.allreduce(parts[c.rank], codec=codec, algo=algo, step=0)
        s1 = dict(c.last_stats)
        rs = c.reduce_scatter(parts[c.rank], codec=codec, step=0)
        return y, rs, s1, dict(c.last_stats)

    want = cc.run_inproc(ranks, host, slice_elems=1024)

    def call(dr, r):
        x, y = DeviceBuffer.of(parts[r]), DeviceBuffer(parts[r].nbytes)
        rs = DeviceBuffer(want[r][1].nbytes)
        s1 = device_run(dr, "allreduce", x.ptr, y.ptr, n, dtype, codec, algo=algo, op="sum",
                        slice_elems=1024)
        s2 = device_run(dr, "reduce_scatter", x.ptr, rs.ptr, n, dtype, codec, op="sum",
                        slice_elems=1024)
        return y.download(parts[r]), rs.download(want[r][1]), s1, s2

    got = run_on_threads(CUDA.loopback_group(ranks, 0), call)
    for r in range(ranks):
        assert same_bits_or_nan([got[r][0], want[r][0]]) and same_bits_or_nan([got[r][1], want[r][1]])
        for k in (2, 3):
            for key in ("nonfinite_in", "nonfinite_out"):
                assert got[r][k][key] == want[r][k][key], f"rank {r} {key}: {got[r][k]}"
        assert got[r][2]["nonfinite_in"] == 2 + r  # the planted elements, against NumPy
        assert got[r][2]["nonfinite_out"] == np.count_nonzero(
            ~np.isfinite(want[r][0].astype(np.float32)))


@gpu
@pytest.mark.parametrize("codec,algo", [("fp8_e4m3:g128", "two_shot"), ("hint8:g32", "one_shot"),
                                        ("nvfp4", "two_shot"), ("fp8_e5m2:g64:sr", "two_shot")])
def test_loopback_error_feedback_matches_host(rng, codec, algo):
    """Three steps with worker and server residuals in device memory: results, residuals and
    the count of NaN/Inf kept out of them are those of the host collective."""
    ranks, n, steps = 3, 4001, 3
    inputs = [gaussian_parts(rng, ranks, n) + np.float32(0.3) for _ in range(steps)]
    inputs[1][0, 17] = np.nan  # never enters a residual; counted

    def host(c):
        ef = cc.ErrorFeedback()
        ys = [c.allreduce(x[c.rank], codec=codec, algo=algo, op="avg", error_feedback=ef, step=t)
              for t, x in enumerate(inputs)]
        return ys, ef.worker_residual, ef.server_residual, ef.nonfinite

    want = cc.run_inproc(ranks, host, slice_elems=1024, seed=5)

    def call(dr, r):
        lo, hi = cc.chunk_range(n, ranks, r)
        w = DeviceBuffer.of(np.zeros(n, np.float32))
        s = DeviceBuffer.of(np.zeros(hi - lo, np.float32))
        ys, dropped = [], 0
        for t, x in enumerate(inputs):
            xd, yd = DeviceBuffer.of(x[r]), DeviceBuffer(x[r].nbytes)
            stats = device_run(dr, "allreduce", xd.ptr, yd.ptr, n, "float32", codec, algo=algo,
                               op="avg", slice_elems=1024, seed=5, step=t,
                               worker_residual=w.ptr, server_residual=s.ptr)
            dropped += stats["feedback_nonfinite"]
            ys.append(yd.download(x[r]))
        return (ys, w.download(np.zeros(n, np.float32)),
                s.download(np.zeros(hi - lo, np.float32)), dropped)

    got = run_on_threads(CUDA.loopback_group(ranks, 0), call)
    assert want[0][3] > 0  # the NaN was kept out of rank 0's residual on the host
    for r in range(ranks):
        for t in range(steps):
            assert same_bits_or_nan([got[r][0][t], want[r][0][t]]), f"rank {r} step {t}"
        assert same_bits_or_nan([got[r][1], want[r][1]]), f"rank {r} worker residual"
        assert same_bits_or_nan([got[r][2], want[r][2]]), f"rank {r} server residual"
        assert got[r][3] == want[r][3]


# ---- through the Communicator, on CuPy / PyTorch arrays ----

@gpu
@pytest.mark.parametrize("lib", framework_cases())
def test_communicator_error_feedback_and_raise_on_device(rng, lib):
    ranks, n, codec = 2, 3001, "fp8_e4m3:g128"
    parts = gaussian_parts(rng, ranks, n) + np.float32(0.3)
    bad = parts.copy()
    bad[:, 5] = np.inf  # in rank 0's chunk only: reduce_scatter must add the ranks' counts

    def host(c):
        ef = cc.ErrorFeedback()
        return [c.allreduce(parts[c.rank], codec=codec, algo="two_shot", error_feedback=ef)
                for _ in range(3)]

    want = cc.run_inproc(ranks, host)

    def fn(c):
        ef = cc.ErrorFeedback()
        x = to_device(lib, parts[c.rank])
        ys = [to_host(lib, c.allreduce(x, codec=codec, algo="two_shot", error_feedback=ef))
              for _ in range(2)]
        # the state moves to the host and back: a checkpoint taken on the device resumes there
        resumed = cc.ErrorFeedback()
        resumed.load_state_dict(ef.state_dict())
        ys.append(to_host(lib, c.allreduce(x, codec=codec, algo="two_shot", error_feedback=resumed)))
        assert np.isfinite(resumed.worker_residual).all() and resumed.worker_residual.any()
        xb = to_device(lib, bad[c.rank])
        for call in (c.allreduce, c.reduce_scatter):
            with pytest.raises(cc.NonFiniteError):
                call(xb, codec=codec, nonfinite="raise")
        stats = c.last_stats
        c.allreduce(x, codec=codec)  # still usable
        return ys, stats

    got = cc.run_cuda_loopback(ranks, fn)
    for r in range(ranks):
        for t in range(3):
            assert same_bits_or_nan([got[r][0][t], want[r][t]]), f"rank {r} step {t}"
        assert got[r][1]["nonfinite_in"] == 1
