"""Stochastic rounding of the plain casts: bf16:sr and fp16:sr."""
import ml_dtypes
import numpy as np
import pytest

import ccompress as cc
from ccompress.bounds import allreduce_error_bound
from helpers.common import same_bits

NP = {"bf16:sr": ml_dtypes.bfloat16, "fp16:sr": np.float16}


def encode(spec, x, step=0, seed=0, rank=0, index=0):
    from ccompress import _core
    c = _core.Codec.parse(spec)
    out = np.empty(c.wire_bytes(x.size), np.uint8)
    _core.encode(c, x.ctypes.data, "float32", x.size, 1.0, out.ctypes.data, seed=seed,
                 step=step, rank=rank, index=index)
    return out.view(NP[spec])


def neighbours(spec, x):
    """The representable values just below and above |x| (same sign), by NumPy."""
    dt = NP[spec]
    near = x.astype(dt).astype(np.float64)
    up = np.nextafter(near.astype(dt), np.array(np.inf, dt)).astype(np.float64)
    down = np.nextafter(near.astype(dt), np.array(-np.inf, dt)).astype(np.float64)
    lo = np.where(near <= x, near, down)
    hi = np.where(near >= x, near, up)
    return lo, hi


@pytest.mark.parametrize("spec", ["bf16:sr", "fp16:sr"])
def test_result_is_a_neighbour_and_mean_is_unbiased(rng, spec):
    x = (rng.standard_normal(4096) * 3).astype(np.float32)
    if spec == "fp16:sr":
        x[:64] *= 1e-6  # subnormal halves
    lo, hi = neighbours(spec, x.astype(np.float64))
    runs = np.stack([encode(spec, x, step=k).astype(np.float64) for k in range(400)])
    assert np.all((runs == lo) | (runs == hi))
    spacing = np.maximum(hi - lo, 1e-300)
    # The mean of k roundings approaches x: its error is about spacing * 0.5 / sqrt(k).
    assert np.all(np.abs(runs.mean(axis=0) - x) <= 0.2 * spacing + 1e-30)
    assert np.mean(np.abs(runs.mean(axis=0) - x) / spacing) < 0.03


@pytest.mark.parametrize("spec", ["bf16:sr", "fp16:sr"])
def test_deterministic_from_seed_step_rank_index(rng, spec):
    x = rng.standard_normal(1000).astype(np.float32)
    a = encode(spec, x, seed=3, step=7, rank=1, index=100)
    assert np.array_equal(a.view(np.uint16), encode(spec, x, seed=3, step=7, rank=1,
                                                    index=100).view(np.uint16))
    assert not np.array_equal(a.view(np.uint16), encode(spec, x, seed=3, step=8, rank=1,
                                                        index=100).view(np.uint16))
    # A part of a run encodes like those elements inside the whole run.
    part = encode(spec, x[200:], seed=3, step=7, rank=1, index=300)
    assert np.array_equal(part.view(np.uint16), a[200:].view(np.uint16))


def test_edges():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 70000.0, 65504.0, -1e-30], np.float32)
    h = encode("fp16:sr", x).astype(np.float64)
    assert h[0] == 0 and h[2] == np.inf and h[3] == -np.inf and np.isnan(h[4])
    assert h[5] == np.inf and h[6] == 65504.0 and h[7] == 0
    b = encode("bf16:sr", x).astype(np.float64)
    assert b[2] == np.inf and b[3] == -np.inf and np.isnan(b[4]) and b[5] in (69632.0, 70144.0)


def test_names_and_errors():
    assert cc.Codec.parse("bf16:sr").name == "bf16:sr"
    assert cc.Codec.parse("fp16:sr") != cc.Codec.parse("fp16")
    for bad in ("none:sr", "bf16:g32", "fp16:sr:sr"):
        with pytest.raises(cc.InvalidArgument):
            cc.Codec.parse(bad)


@pytest.mark.parametrize("spec", ["bf16:sr", "fp16:sr"])
@pytest.mark.parametrize("algo", ["ring", "two_shot", "tree", "one_shot"])
def test_allreduce_within_bound(rng, spec, algo):
    parts = rng.standard_normal((4, 3001)).astype(np.float32)
    res = cc.simulate.allreduce(list(parts), codec=spec, algo=algo)
    assert same_bits(res)
    err = np.abs(res[0] - parts.astype(np.float64).sum(axis=0))
    assert np.all(err <= allreduce_error_bound(parts, spec, algo))
