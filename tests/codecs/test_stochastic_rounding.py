"""Stochastic rounding (`:sr`) of fp8_e4m3 / fp8_e5m2, nvfp4 / hnvfp4 and hint4.

The noise of element i of a run is sr_uniform(seed, step, rank, index + i) (stochastic.h), so:
the bytes are a function of (seed, step, rank, element index) alone (NumPy reference below,
bit for bit), and the rounding is unbiased: the mean of k round trips with different steps
converges to the input, its error shrinking like 1 / sqrt(k)."""
import ml_dtypes
import numpy as np
import pytest

import ccompress as cc
from ccompress._internal.errors import InvalidArgument
from helpers.common import lib_decode as decode, lib_encode as encode, same_bits
from helpers.reference import fourbit as ref

F32 = np.float32
FLT_MIN = np.finfo(np.float32).tiny
# fmt -> (ml_dtypes type, FP8_MAX, mantissa bits, fp32 biased exponent of min normal / max)
FP8 = {"fp8_e4m3": (ml_dtypes.float8_e4m3fn, 448.0, 3, 121, 135),
       "fp8_e5m2": (ml_dtypes.float8_e5m2, 57344.0, 2, 113, 142)}
SR_SPECS = ["fp8_e4m3:g128:sr", "fp8_e5m2:g32:sr", "nvfp4:sr", "hnvfp4:g16:sr", "hint4:g16:sr",
            "hint4:g32:s16:sr"]


def ref_fp8_sr(x, fmt, g, seed, step, rank, index):
    """Per group s = max(amax / FP8_MAX, FLT_MIN); y = x / s; |y| goes to the lower or upper
    FP8 neighbour: with t = min(|y|, FP8_MAX) / spacing (spacing that of |y|'s binade, clamped
    to the normal range), up to (floor(t) + 1) * spacing when u < t - floor(t), else down;
    Inf keeps its code (E5M2) or becomes NaN."""
    dt, fmax, m, emin, emax = FP8[fmt]
    n = x.size
    xp = np.concatenate([x, np.zeros(-n % g, F32)]).reshape(-1, g)
    amax = np.where(np.isfinite(xp), np.abs(xp), F32(0)).max(axis=1)
    s = np.maximum(amax / F32(fmax), FLT_MIN).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (xp / s[:, None]).reshape(-1)[:n]
        a = np.abs(y)
        e = np.clip(a.view(np.uint32) >> 23, emin, emax).astype(np.int64)
        spacing = np.ldexp(F32(1), e - 127 - m).astype(F32)
        u = ref.sr_uniform(seed, step, rank, index + np.arange(n))
        t = (np.minimum(a, F32(fmax)) / spacing).astype(F32)  # exact: spacing is 2^k
        k = np.floor(t)
        r = ((k + (u < (t - k))) * spacing).astype(F32)
        q = np.copysign(r, y).astype(dt).view(np.uint8).copy()
    q[np.isnan(x)] = 0x7F
    q[np.isinf(x)] = 0x7F if fmt == "fp8_e4m3" else 0x7C
    q[np.isneginf(x)] |= 0x80 if fmt == "fp8_e5m2" else 0
    return np.concatenate([q, np.zeros(-n % 4, np.uint8), s[: -(-n // g)].view(np.uint8)])


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_sr_bytes_match_numpy(rng, fmt):
    for n, g in [(1, 16), (17, 16), (1000, 128), (4099, 64)]:
        x = (rng.standard_normal(n) * np.repeat(10.0 ** rng.uniform(-30, 30, -(-n // g)), g)[:n]
             ).astype(F32)
        x[rng.random(n) < 0.05] = 0
        if n > 10:
            x[[3, 5, 9]] = [np.nan, np.inf, -np.inf]
        ctx = (12345, 7, 3, 1 << 40)
        spec = f"{fmt}:g{g}:sr"
        wire = encode(spec, x, *ctx)
        want = ref_fp8_sr(x, fmt, g, *ctx)
        bad = np.flatnonzero(wire != want)
        assert bad.size == 0, f"{spec} n={n}: bytes {bad[:8]} differ"


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_sr_bytes_at_the_draw_boundary(rng, fmt):
    """Values one dropped-mantissa step either side of their draw (u < frac or not): each group
    holds FP8_MAX (so s = 1 and y = x) and normals whose dropped bits D are N >> (m+1) - 1,
    N >> (m+1) and N >> (m+1) + 1 for the draw N * 2^-24 of their element, every binade from
    FP8's smallest normal to its largest; every 4th group also has values below the normal
    range (zeros, FP8 and fp32 subnormals), which the 8-lane kernels code another way."""
    _, fmax, m, emin, emax = FP8[fmt]
    g, groups, ctx = 128, 48, (99, 5, 1, 0)
    n = g * groups
    drop = 23 - m
    nd = ref.sr_uniform(*ctx[:3], ctx[3] + np.arange(n)).astype(np.float64) * 2.0 ** 24
    d = (nd.astype(np.int64) >> (m + 1)) + rng.integers(-1, 2, n)
    d = np.clip(d, 0, (1 << drop) - 1)
    e = rng.integers(emin, emax + 1, n)
    bits = (e << 23) | (rng.integers(0, 1 << m, n) << drop) | d
    x = bits.astype(np.uint32).view(F32).copy()
    x = np.minimum(x, F32(fmax)) * rng.choice([F32(-1), F32(1)], n)
    x[::g] = fmax
    small = np.flatnonzero((np.arange(n) // g) % 4 == 3)
    pick = small[rng.random(small.size) < 0.1]
    x[pick] = rng.choice([0.0, -0.0, 2.0 ** (emin - 128), 3.0 * 2.0 ** (emin - 131), 1e-40],
                         pick.size).astype(F32)
    x[small[small % g == 0]] = fmax
    spec = f"{fmt}:g{g}:sr"
    wire = encode(spec, x, *ctx)
    want = ref_fp8_sr(x, fmt, g, *ctx)
    bad = np.flatnonzero(wire != want)
    assert bad.size == 0, f"{spec}: bytes {bad[:8]} differ"


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_sr_error_is_within_twice_the_rounding_bound(rng, fmt):
    """codec.h: the round-to-nearest bound min(s H, |x| 2^-(m+1) + s 2^(emin-m-1))(1 + 2^-16)
    doubles under :sr (an error up to a whole FP8 step instead of half of one)."""
    _, fmax, m, _, _ = FP8[fmt]
    top, emin = (16.0, -6) if fmt == "fp8_e4m3" else (4096.0, -14)
    g = 64
    x = (rng.standard_normal(64 * 200) * np.repeat(10.0 ** rng.uniform(-20, 20, 200), g)).astype(F32)
    for step in range(4):
        y = decode(f"{fmt}:g{g}:sr", encode(f"{fmt}:g{g}:sr", x, seed=1, step=step), x.size)
        s = np.repeat(np.maximum(np.abs(x).reshape(-1, g).max(1) / F32(fmax), FLT_MIN), g)
        x64, s = x.astype(np.float64), s.astype(np.float64)
        rn = np.minimum(s * top, np.abs(x64) * 2.0 ** -(m + 1) + s * 2.0 ** (emin - m - 1))
        assert np.all(np.abs(y - x64) <= 2 * rn * (1 + 2.0 ** -16))


def test_parse_and_names():
    P = cc.Codec.parse
    for spec, name in [("fp8_e4m3:sr", "fp8_e4m3:g128:sr"), ("fp8_e5m2:sr:g64", "fp8_e5m2:g64:sr"),
                       ("fp8_e4m3:g128", "fp8_e4m3:g128"), ("nvfp4:sr", "nvfp4:sr"),
                       ("hint4:sr", "hint4:g16:sr")]:
        c = P(spec)
        assert c.name == name and P(name) == c and c._c.stochastic == name.endswith(":sr")
    assert P("fp8_e4m3:sr") != P("fp8_e4m3") and P("fp8_e4m3:sr")._c.id != P("fp8_e4m3")._c.id
    for bad in ["fp8_e4m3:sr:sr", "fp8_e4m3:rs", "fp8_e4m3:h16", "fp8_e5m2:s8", "bf16:rs",
                "none:sr", "fp8_e4m3:srr"]:
        with pytest.raises(InvalidArgument):
            P(bad)


@pytest.mark.parametrize("spec", SR_SPECS)
def test_same_seed_and_step_same_bytes(rng, spec):
    x = rng.standard_normal(1000).astype(F32)
    a = encode(spec, x, seed=5, step=9, rank=2, index=64)
    assert np.array_equal(a, encode(spec, x, seed=5, step=9, rank=2, index=64))
    for other in [dict(seed=6, step=9, rank=2, index=64), dict(seed=5, step=10, rank=2, index=64),
                  dict(seed=5, step=9, rank=3, index=64), dict(seed=5, step=9, rank=2, index=80)]:
        assert not np.array_equal(a, encode(spec, x, **other)), other
    # Without :sr the context is ignored.
    plain = spec[: -len(":sr")]
    assert np.array_equal(encode(plain, x, seed=1, step=2), encode(plain, x))


def test_fp8_noise_follows_the_element_not_the_slice(rng):
    """A run that starts at element 256 (ctx.index = 256) draws the same noise as those
    elements did inside the whole tensor, so slicing never changes an FP8 byte."""
    x = rng.standard_normal(1024).astype(F32)
    whole = encode("fp8_e4m3:g128:sr", x, seed=3, step=4)
    part = encode("fp8_e4m3:g128:sr", x[256:], seed=3, step=4, index=256)
    assert np.array_equal(part[:768], whole[256:1024])
    assert np.array_equal(part[768:], whole[1024 + 8:])  # the scales of groups 2..7


@pytest.mark.parametrize("spec", SR_SPECS)
def test_mean_of_roundings_converges_like_inverse_sqrt(rng, spec):
    n, k = 2048, 1024
    x = (rng.standard_t(4, n) * np.exp(rng.standard_normal(n))).astype(F32)
    acc = np.zeros(n)
    err = {}
    for step in range(k):
        acc += decode(spec, encode(spec, x, seed=11, step=step), n)
        if step + 1 in (16, 64, 256, 1024):
            err[step + 1] = np.sqrt(np.mean((acc / (step + 1) - x) ** 2))
    one = np.sqrt(np.mean((decode(spec, encode(spec, x, seed=11), n) - x) ** 2))
    # Independent unbiased roundings: rms(mean_k - x) = rms(one rounding) / sqrt(k) (+-20%).
    for kk, e in err.items():
        assert 0.8 < e * np.sqrt(kk) / one < 1.25, (kk, e * np.sqrt(kk) / one)
    assert err[1024] < err[16] / 6
    # Round-to-nearest, by contrast, repeats its (biased) error whatever the step.
    plain = spec[: -len(":sr")]
    rn = decode(plain, encode(plain, x, step=5), n)
    assert np.array_equal(rn, decode(plain, encode(plain, x, step=6), n))


@pytest.mark.parametrize("spec", ["fp8_e4m3:g128:sr", "nvfp4:sr", "hint4:g16:sr"])
def test_allreduce_sr_is_deterministic_and_unbiased(rng, spec):
    parts = rng.standard_normal((4, 1000)).astype(F32)
    exact = parts.astype(np.float64).sum(axis=0)

    def run(step, seed=7, algo="two_shot"):
        res = cc.run_inproc(4, lambda c: c.allreduce(parts[c.rank], codec=spec, algo=algo,
                                                     step=step), seed=seed, slice_elems=256)
        assert same_bits(res), (spec, step)
        return res[0].astype(np.float64)

    first = run(0)
    assert np.array_equal(first, run(0)) and not np.array_equal(first, run(1))
    assert not np.array_equal(first, run(0, seed=8))
    for algo in ("ring", "tree", "one_shot"):
        run(3, algo=algo)
    k = 128
    mean = sum(run(s) for s in range(k)) / k
    one = np.sqrt(np.mean((first - exact) ** 2))
    assert np.sqrt(np.mean((mean - exact) ** 2)) < 2 * one / np.sqrt(k)
