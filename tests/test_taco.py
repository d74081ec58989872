"""TACO (`taco:gG`, `taco_e5m2:gG`; format in cuda/src/codecs/taco/taco.h) against a NumPy
reference written from ALGORITHMS.md §1: the same fp32 operations in the same order, so the
wire bytes and decoded values must match bit for bit. The rotation and noise helpers here are
shared with test_hint8.py.
"""
import ml_dtypes
import numpy as np
import pytest

import ccompress as cc
from ccompress import _core
from ccompress._errors import InvalidArgument
from conftest import lib_decode as decode, lib_encode as encode, rel_l2, same_bits

F32 = np.float32
# base name -> (ml_dtypes type, FP8_MAX, mantissa bits, exponent bias)
FMT = {"taco": (ml_dtypes.float8_e4m3fn, 448.0, 3, 7),
       "taco_e5m2": (ml_dtypes.float8_e5m2, 57344.0, 2, 15)}
SIZES = [0, 1, 2, 3, 5, 7, 31, 32, 33, 97, 127, 128, 129, 255, 257, 1000, 4099]


# ---- reference pieces shared with test_hint8.py ----

def rot_blocks(n, h):
    """(offset, length) of the rotation blocks: full blocks of h, then n % h by its bits."""
    out = [(b * h, h) for b in range(n // h)]
    off, tail, p = n // h * h, n % h, h // 2
    while p:
        if tail & p:
            out.append((off, p))
            off += p
        p //= 2
    return out


def n_groups(n, g):
    return n // g + bin(n % g).count("1")


def wht_norm(p):
    lg = p.bit_length() - 1
    s = F32(0.5 ** (lg // 2))
    return F32(s * F32(0.70710678118654752)) if lg % 2 else s


def wht(v):
    """Normalised WHT of each row of v (float32, rows of a power-of-two length)."""
    v = np.array(v, dtype=F32, copy=True)
    rows, p = v.shape
    span = 1
    while span < p:
        w = v.reshape(rows, p // (2 * span), 2, span)
        a, b = w[:, :, 0, :].copy(), w[:, :, 1, :].copy()
        w[:, :, 0, :] = a + b
        w[:, :, 1, :] = a + (-b)
        span *= 2
    return v * wht_norm(p)


def sr_uniform(seed, step, rank, idx):
    """codecs/stochastic.h's hash, in uint64 arrays (which wrap silently)."""
    u = lambda x: np.asarray(x, dtype=np.uint64)  # noqa: E731

    def mix(z):
        z = (z ^ (z >> u(30))) * u(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> u(27))) * u(0x94D049BB133111EB)
        return z ^ (z >> u(31))

    h = mix(u(seed) ^ u(0x243F6A8885A308D3))
    h = mix(h ^ u(step))
    h = mix(h ^ u(rank & 0xFFFFFFFF))
    h = mix(h ^ np.asarray(idx, dtype=np.int64).astype(np.uint64))
    return (h >> u(40)).astype(F32) * F32(2.0 ** -24)


def abs_bits(v):
    return (np.asarray(v, F32).view(np.uint32) & 0x7FFFFFFF).astype(np.int64)


# ---- the TACO reference ----

def fp8_sr(t, u, fmt):
    """Stochastic FP8 rounding of t (finite): between the neighbours of min(|t|, max)."""
    dt, fmax, m, bias = FMT[fmt]
    a = np.minimum(np.abs(t), F32(fmax)).astype(F32)
    e = np.clip(a.view(np.uint32) >> 23, 128 - bias, np.array(F32(fmax)).view(np.uint32) >> 23)
    spacing = ((e - m) << 23).astype(np.uint32).view(F32)
    tt = a / spacing
    k = np.floor(tt)
    r = (k + (u < tt - k).astype(F32)) * spacing
    return np.copysign(r, t).astype(dt)


def taco_ref_encode(x, fmt, g, sr=None):
    """Wire bytes of x (float32) per codecs/taco/taco.h; sr = (seed, step, rank, index) or None."""
    dt, fmax = FMT[fmt][:2]
    n = x.size
    q = np.zeros(n, np.uint8)
    pairs = np.zeros((n_groups(n, g), 2), F32)
    for gi, (off, p) in enumerate(rot_blocks(n, g)):
        v = x[off:off + p].astype(F32)
        w = min(32, p)
        sq = (v * v).reshape(p // w, w)
        lanes = np.zeros(w, F32)
        for row in sq:  # each lane in slot order, then the pairwise fold
            lanes = lanes + row
        off_l = w // 2
        while off_l:
            lanes[:off_l] = lanes[:off_l] + lanes[off_l:2 * off_l]
            off_l //= 2
        with np.errstate(over="ignore", invalid="ignore"):
            a = np.clip(F32(fmax) / np.sqrt(lanes[0] / F32(p) + F32(1e-6)), F32(1e-3), F32(1e3))
            y = wht((a * v)[None])[0]
        amax = abs_bits(y).max()
        if amax >= 0x7F800000:  # non-finite group: NaN scales, zero codes
            pairs[gi] = np.nan
            continue
        s = np.clip(np.array(amax, np.uint32).view(F32) / F32(fmax), F32(1e-12), F32(1e6))
        t = y / s
        if sr is None:
            q[off:off + p] = np.clip(t, -fmax, fmax).astype(dt).view(np.uint8)
        else:
            seed, step, rank, index = sr
            u = sr_uniform(seed, step, rank, index + off + np.arange(p))
            q[off:off + p] = fp8_sr(t, u, fmt).view(np.uint8)
        pairs[gi] = (a, s)
    pad = np.zeros(-n % 4, np.uint8)
    return np.concatenate([q, pad, pairs.reshape(-1).view(np.uint8)])


def taco_ref_decode(wire, n, fmt, g):
    dt = FMT[fmt][0]
    pairs = wire[(n + 3) // 4 * 4:].view(F32).reshape(-1, 2)
    out = np.empty(n, F32)
    for gi, (off, p) in enumerate(rot_blocks(n, g)):
        v = wire[off:off + p].view(dt).astype(F32) * pairs[gi, 1]
        out[off:off + p] = wht(v[None])[0] / pairs[gi, 0]
    return out


def mixed_data(rng, n):
    """Gaussian with per-32 scales over 1e-3..1e3 and a few outliers: stresses both scales."""
    x = rng.standard_normal(n) * np.exp(rng.uniform(-7, 7, (n + 31) // 32)).repeat(32)[:n]
    x[rng.integers(0, max(n, 1), n // 50)] *= 50
    return x.astype(F32)


@pytest.mark.parametrize("fmt", ["taco", "taco_e5m2"])
@pytest.mark.parametrize("g", [32, 128, 512])
def test_wire_and_decode_bit_exact(rng, fmt, g):
    codec = _core.Codec.parse(f"{fmt}:g{g}")
    for n in SIZES:
        x = mixed_data(rng, n)
        wire = encode(codec, x)
        ref = taco_ref_encode(x, fmt, g)
        assert wire.size == ref.size == codec.wire_bytes(n)
        np.testing.assert_array_equal(wire, ref, err_msg=f"n={n}")
        np.testing.assert_array_equal(decode(codec, wire, n), taco_ref_decode(ref, n, fmt, g))


def test_wire_bytes_formula():
    for g in (32, 64, 128, 256, 512):
        c = cc.Codec.parse(f"taco:g{g}")
        for n in list(range(0, 1100)) + [65536, 65537, 10 ** 7 + 19]:
            # payload, padding to 4, an (a, s) fp32 pair per block (the tail by its bits)
            assert c.wire_bytes(n) == (n + 3) // 4 * 4 + 8 * (n // g + bin(n % g).count("1"))
    assert cc.Codec.parse("taco").wire_bytes(128 * 1000) == 128 * 1000 * 17 // 16  # 1 + 8/G


def test_parse_and_name():
    for spec, name in [("taco", "taco:g128"), ("taco:g64", "taco:g64"),
                       ("taco:sr:g32", "taco:g32:sr"), ("taco_e5m2", "taco_e5m2:g128"),
                       ("taco_e5m2:g512:sr", "taco_e5m2:g512:sr")]:
        c = cc.Codec.parse(spec)
        assert c.name == name and cc.Codec.parse(name) == c
        assert c._c.rotation == c.group and c._c.kind == "taco"
    assert cc.Codec.parse("taco") != cc.Codec.parse("taco_e5m2")
    assert cc.Codec.parse("taco:sr") != cc.Codec.parse("taco")
    for bad in ["taco:g16", "taco:g48", "taco:g1024", "taco:h128", "taco:rs", "taco:s16",
                "taco:g128:g64", "taco:x", "taco:g", "taco_e4m3"]:
        with pytest.raises(InvalidArgument):
            cc.Codec.parse(bad)


@pytest.mark.parametrize("fmt", ["taco", "taco_e5m2"])
def test_error_bound_per_group(rng, fmt):
    """|x' - x| over a group <= (2^-(m+1) ||y|| + sqrt(p) * sub * s) / a, with y = WHT(a x),
    m the mantissa bits, sub = half the smallest subnormal spacing (the RNE error of each
    code), against float64 — plus 1e-5 relative for the fp32 rotation roundings."""
    dt, fmax, m, bias = FMT[fmt]
    x = mixed_data(rng, 128 * 64 + 77)
    codec = cc.Codec.parse(f"{fmt}:g128")
    out = codec.roundtrip(x).astype(np.float64)
    wire = codec.encode(x)
    pairs = wire[(x.size + 3) // 4 * 4:].view(F32).reshape(-1, 2).astype(np.float64)
    for gi, (off, p) in enumerate(rot_blocks(x.size, 128)):
        a, s = pairs[gi]
        xg = x[off:off + p].astype(np.float64)
        bound = (2.0 ** -(m + 1) * np.linalg.norm(a * xg) + np.sqrt(p) * 2.0 ** (-bias - m) * s) / a
        err = np.linalg.norm(out[off:off + p] - xg)
        assert err <= bound * (1 + 1e-5) + 1e-5 * np.linalg.norm(xg)


@pytest.mark.parametrize("dtype", [F32, np.float16, ml_dtypes.bfloat16])
def test_input_dtypes(rng, dtype):
    codec = cc.Codec.parse("taco:g128")
    for n in (1, 130, 1000):
        x = (rng.standard_normal(n) * 3).astype(dtype)
        ref = taco_ref_encode(x.astype(F32), "taco", 128)  # 16-bit loads are exact
        np.testing.assert_array_equal(codec.encode(x), ref)
        y = codec.roundtrip(x)
        assert y.dtype == x.dtype
        np.testing.assert_array_equal(y.view(np.uint8), taco_ref_decode(ref, n, "taco", 128)
                                      .astype(dtype).view(np.uint8))


def test_nonfinite_poisons_only_its_group(rng):
    codec = _core.Codec.parse("taco:g32")
    x = mixed_data(rng, 32 * 6 + 11)
    x[40] = np.nan
    x[100] = np.inf
    x[196] = -np.inf  # in the tail block of 8 (192..199)
    wire = encode(codec, x)
    np.testing.assert_array_equal(wire, taco_ref_encode(x, "taco", 32))
    out = decode(codec, wire, x.size)
    bad = np.zeros(x.size, bool)
    for lo, hi in [(32, 64), (96, 128), (192, 200)]:
        bad[lo:hi] = True
    assert np.isnan(out[bad]).all() and np.isfinite(out[~bad]).all()
    clean = x.copy()
    clean[~np.isfinite(clean)] = 0
    ref = decode(codec, encode(codec, clean), x.size)
    np.testing.assert_array_equal(out[~bad], ref[~bad])  # other groups never see it
    assert (wire[32:64] == 0).all()


@pytest.mark.parametrize("fmt", ["taco", "taco_e5m2"])
def test_stochastic_rounding(rng, fmt):
    x = mixed_data(rng, 2048 + 45)
    codec = _core.Codec.parse(f"{fmt}:g128:sr")
    # bit-exact with the reference noise, at an arbitrary place in a collective
    ctx = (7, 3, 2, 1000)
    np.testing.assert_array_equal(encode(codec, x, *ctx), taco_ref_encode(x, fmt, 128, sr=ctx))
    # the noise of element i comes from index + i: a run that starts 128 later matches
    tail = np.ascontiguousarray(x[128:])
    np.testing.assert_array_equal(encode(codec, tail, 7, 3, 2, 1128)[:tail.size],
                                  encode(codec, x, *ctx)[128:x.size])
    # unbiased: the mean of k decodes approaches x like 1/sqrt(k); round-to-nearest does not
    rn_codec = _core.Codec.parse(f"{fmt}:g128")
    rn = decode(rn_codec, encode(rn_codec, x), x.size)
    runs = np.stack([decode(codec, encode(codec, x, 1, k), x.size) for k in range(400)])
    runs = runs.astype(np.float64)
    single = rel_l2(runs[0], x)
    e100, e400 = rel_l2(runs[:100].mean(0), x), rel_l2(runs.mean(0), x)
    assert single < 2.5 * rel_l2(rn, x)
    assert 1.5 < e100 / e400 < 2.7  # 1/sqrt(k): ratio 2
    assert e400 < 2.0 * single / np.sqrt(400)
    assert e400 < 0.25 * rel_l2(rn, x)


@pytest.mark.parametrize("algo", ["ring", "two_shot", "tree", "one_shot"])
@pytest.mark.parametrize("spec", ["taco:g128", "taco_e5m2:g64:sr"])
def test_allreduce(rng, algo, spec):
    """Bit-identical ranks; error against float64 within the triangle-inequality bound: each
    of Q quantizations errs by <= e1 = 2^-(m+1) (+ subnormal slack) of its input, and every
    input is a partial sum of norm <= sum_r ||x_r||."""
    nranks, n = 4, 5000 + 17
    parts = [(rng.standard_normal(n) * np.exp(rng.standard_normal())).astype(F32)
             for _ in range(nranks)]
    ref = np.sum(parts, axis=0, dtype=np.float64)
    res = cc.simulate.allreduce(parts, codec=spec, algo=algo)
    assert same_bits(res)
    q = {"ring": nranks - 1, "two_shot": 2, "tree": 3, "one_shot": 1}[algo]
    e1 = 2.0 ** -(FMT[spec.split(":")[0]][2] + 1) * (2 if ":sr" in spec else 1) * 1.01
    bound = q * e1 * (1 + e1) ** q * sum(np.linalg.norm(p) for p in parts) / np.linalg.norm(ref)
    err = rel_l2(res[0], ref)
    assert err <= bound
    if spec == "taco:g128":  # and the level measured on Gaussians: ~2.6% per quantization
        assert err < 0.03 * np.sqrt(q)
