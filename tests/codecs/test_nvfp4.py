"""nvfp4 / hnvfp4 against the NumPy reference in reference/fourbit.py (the formulas of
cuda/src/codecs/nvfp4/nvfp4.cc): bit-exact wire bytes, exact sizes, the stated per-element bound,
the NaN/Inf policy, and all-reduce through every schedule against fp64."""
import ml_dtypes
import numpy as np
import pytest

import ccompress as cc
from ccompress._internal.errors import InvalidArgument
from helpers.common import lib_decode, lib_encode, rel_l2, same_bits
from helpers.reference import fourbit as ref

F32 = np.float32
SPECS = {  # spec -> reference kwargs
    "nvfp4": dict(rotation=0),
    "hnvfp4:g16": dict(rotation=16),
    "hnvfp4:g16:h64:rs": dict(rotation=64, rs=True),
    "hnvfp4:g16:h2": dict(rotation=2),
}
SIZES = [1, 2, 15, 16, 17, 31, 33, 100, 257, 1000, 4099]


def blocky(rng, n):
    """Blocks of very different magnitudes (down to E4M3-subnormal and zero block scales),
    zeros, and an all-zero block."""
    scale = 10.0 ** rng.uniform(-7, 3, -(-n // 16))
    x = rng.standard_normal(n) * np.repeat(scale, 16)[:n]
    x[rng.random(n) < 0.05] = 0.0
    if n >= 48:
        x[16:32] = 0.0
    return x.astype(F32)


def test_wire_bytes_exact():
    run_block = 1 << 16  # one fp32 run scale per piece of at most 65536 (Codec::run_block)
    for n in [0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 97, 101, 1009, 65536, 65537]:
        pieces = [run_block] * (n // run_block) + ([n % run_block] if n % run_block else [])
        want = sum(-(-(-(-m // 2) + -(-m // 16)) // 4) * 4 + 4 for m in pieces)
        assert want == sum(ref.wire_size(m, 16, 1) for m in pieces)
        for spec in list(SPECS) + ["nvfp4:sr", "hnvfp4:g16:h256"]:
            c = cc.Codec.parse(spec)
            assert c.wire_bytes(n) == want, (spec, n)
            if 0 < n < 5000:
                assert cc.Codec.parse(spec).encode(np.ones(n, F32)).size == want
    assert cc.Codec.parse("nvfp4").wire_bytes(1 << 20) * 8 / (1 << 20) == pytest.approx(4.5, abs=1e-3)


@pytest.mark.parametrize("spec", list(SPECS))
def test_wire_and_decode_match_numpy_bit_for_bit(rng, spec):
    for n in SIZES:
        x = blocky(rng, n)
        wire = lib_encode(spec, x)
        want = ref.encode(x, "e2m1", 16, **SPECS[spec])
        bad = np.flatnonzero(wire != want)
        assert bad.size == 0, f"{spec} n={n}: bytes {bad[:8]} differ"
        y = lib_decode(spec, wire, n)
        assert np.array_equal(y.view(np.uint32), ref.decode(wire, n, "e2m1", 16, **SPECS[spec])
                              .view(np.uint32)), (spec, n)


def test_e2m1_ties_to_even_and_saturation():
    # Run amax 2688 gives s = 1; a block with amax 6 then gets scale 1.0 and d = 1 exactly,
    # so y / d are the midpoints themselves.
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.2, 0.3, 5.5, 4.9]
    blk = np.array([6.0] + mids + [-m for m in mids[:4]], F32)
    x = np.concatenate([np.full(16, 2688.0, F32), blk])
    wire = lib_encode("nvfp4", x)
    codes = np.stack([wire[:16] & 15, wire[:16] >> 4], 1).reshape(-1)[16:32]
    want = [7, 0, 2, 2, 4, 4, 6, 6, 0, 1, 7, 6, 0, 8 | 2, 8 | 2, 8 | 4]
    assert list(codes) == want
    mags = np.abs(blk).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)  # independent RNE
    assert np.array_equal(codes & 7, mags)
    # Saturation: the block scale rounds down (RNE), so the largest |y/d| lands above 6.
    x = np.array([2688.0] + [0.0] * 15 + [6.3] + [1.0] * 15, F32)  # t = 1.05 -> E4M3 1.0
    y = cc.Codec.parse("nvfp4").roundtrip(x)
    assert y[16] == 6.0 and np.all(np.abs(y - x) <= np.maximum(1.0, np.abs(x)) / 4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("spec", ["nvfp4", "hnvfp4:g16"])
def test_input_dtypes(rng, spec, dtype):
    npd = {"float32": F32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
    x = (rng.standard_normal(1001) * 3).astype(npd)
    c = cc.Codec.parse(spec)
    x32 = x.astype(F32)
    want = ref.encode(x32, "e2m1", 16, **SPECS[spec])
    assert np.array_equal(c.encode(x), want)
    y = c.roundtrip(x)
    assert y.dtype == x.dtype and y.shape == x.shape
    dec = ref.decode(want, x.size, "e2m1", 16, **SPECS[spec])
    assert np.array_equal(y.astype(F32), dec.astype(npd).astype(F32))
    assert np.array_equal(c.decode(want, x.size, dtype).astype(F32), y.astype(F32))


def test_parse_and_names():
    P = cc.Codec.parse
    for spec, name, h in [("nvfp4", "nvfp4", 0), ("nvfp4:g16", "nvfp4", 0),
                          ("nvfp4:sr", "nvfp4:sr", 0), ("nvfp4:s8", "nvfp4", 0),
                          ("hnvfp4", "hnvfp4:g16", 16), ("hnvfp4:h16", "hnvfp4:g16", 16),
                          ("hnvfp4:g16", "hnvfp4:g16", 16),
                          ("hnvfp4:sr:h32:rs", "hnvfp4:g16:h32:rs:sr", 32),
                          ("hnvfp4:h2", "hnvfp4:g16:h2", 2)]:
        c = P(spec)
        assert c.name == name and P(c.name) == c and c.group == 16, spec
        assert c._c.kind == "nvfp4" and c._c.scale_bits == 8 and c._c.rotation == h
        assert c._c.stochastic == name.endswith(":sr") and c._c.random_signs == (":rs" in name)
    assert P("nvfp4") != P("hnvfp4") and P("nvfp4") != P("nvfp4:sr")
    # Slices are multiples of the run block, so every run scale covers the same elements.
    assert P("hnvfp4:g16:h64").group == 16 and P("hnvfp4:g16:h64")._c.align == 1 << 16
    for bad in ["nvfp4:g32", "nvfp4:g8", "nvfp4:h16", "nvfp4:rs", "nvfp4:s16", "nvfp4:s32",
                "hnvfp4:h3", "hnvfp4:h1", "hnvfp4:h512", "hnvfp4:g32", "hnvfp4:s16",
                "nvfp4:sr:sr", "nvfp4:x", "nvfp4:", "NVFP4", "nvfp"]:
        with pytest.raises(InvalidArgument):
            P(bad)


@pytest.mark.parametrize("spec", ["nvfp4", "hnvfp4:g16", "nvfp4:sr"])
def test_nan_inf_policy(rng, spec):
    n = 100  # blocks 0..6, the last of 4 elements (a rotation tail of 4 for hnvfp4)
    x = rng.standard_normal(n).astype(F32) * 5
    bad = {3: np.nan, 20: np.inf, 21: -np.inf, 98: np.nan}
    xb = x.copy()
    for i, v in bad.items():
        xb[i] = v
    y = cc.Codec.parse(spec).roundtrip(xb)
    rot = spec.startswith("h")
    # NaN marks exactly the non-finite elements (nvfp4) or their rotation blocks (hnvfp4).
    poisoned = {i // 16 * 16 + k for i in bad for k in range(16)} if rot else set(bad)
    if rot:
        poisoned = {i for i in poisoned if i < 96} | {96, 97, 98, 99}
    assert set(np.flatnonzero(np.isnan(y))) == poisoned
    # Everything else is encoded as if the poisoned elements were zeros (not in any amax).
    xz = xb.copy()
    xz[sorted(poisoned)] = 0
    yz = cc.Codec.parse(spec).roundtrip(xz)
    keep = np.setdiff1d(np.arange(n), sorted(poisoned))
    assert np.array_equal(y[keep], yz[keep])
    if rot:  # a rotated sum beyond fp32's range poisons only its own block too
        big = np.full(48, 1.0, F32)
        big[16:32] = 3e37
        assert set(np.flatnonzero(np.isnan(cc.Codec.parse(spec).roundtrip(big)))) == set(
            range(16, 32))


def _bound_rn(y, d, s, sr):
    """codec comment: |y' - y| <= (max(d, |y|) / k + s / 128)(1 + 2^-20), k = 4 (RN), 2 (SR)."""
    k = 2.0 if sr else 4.0
    return (np.maximum(d, np.abs(y)) / k + s / 128) * (1 + 2.0 ** -20)


@pytest.mark.parametrize("spec", ["nvfp4", "nvfp4:sr", "hnvfp4:g16", "hnvfp4:g16:h128:rs"])
def test_per_element_bound(rng, spec):
    kw = dict(rotation=0) if spec.startswith("nv") else SPECS.get(spec, dict(rotation=128, rs=True))
    sr = spec.endswith(":sr")
    for n in [16, 1000, 4099]:
        x = blocky(rng, n).astype(np.float64)
        wire = lib_encode(spec, x.astype(F32), 7, 3, 1, 0)
        xp = lib_decode(spec, wire, n).astype(np.float64)
        d, s = ref.steps(wire, n, 16)
        d, s = d.astype(np.float64), float(s)
        if not kw["rotation"]:
            b = _bound_rn(x, d, s, sr)
            assert np.all(np.abs(xp - x) <= b), float((np.abs(xp - x) / b).max())
            # ... and in terms of the block amax a: (17/96 a + s/128)(1 + 2^-20), 3/8 a for SR
            a = np.repeat(np.abs(np.pad(x, (0, -n % 16))).reshape(-1, 16).max(1), 16)[:n]
            assert np.all(np.abs(xp - x) <= ((3 / 8 if sr else 17 / 96) * a + s / 128) * (1 + 2.0 ** -20))
            continue
        y = ref.rotate(x.astype(F32), kw["rotation"], kw.get("rs", False)).astype(np.float64)
        by = _bound_rn(y, d, s, sr)
        for off, p in ref.rot_blocks(n, kw["rotation"]):
            sl = slice(off, off + p)
            rnd = 2.0 ** -24 * (p ** 0.5 + 1) * (np.log2(p) + 2) * (
                np.linalg.norm(x[sl]) + np.linalg.norm(xp[sl]))
            b = by[sl].sum() / p ** 0.5 + rnd
            assert np.all(np.abs(xp[sl] - x[sl]) <= b), (n, off, p)
        assert rel_l2(xp, x) < 0.15


# ---- all-reduce ----

ALGOS = ["ring", "two_shot", "tree", "one_shot"]
U = {"nvfp4": 17 / 96, "hnvfp4:g16": 17 / 96}


def allreduce_bound(parts, spec, algo, slice_elems, h):
    """Per element: in each run's coefficient domain (the same rotation blocks at every
    quantization) a quantization errs by <= u * M + s / 128 with M the group amax, and every
    quantized partial sum has group amax <= (sum over ranks of M) * (1 + u)^q; back in element
    space a block of p coefficients maps by p^-1/2 * sum. Plus fp32 sums and rotations."""
    from ccompress.bounds import quantizations
    nranks, n = parts.shape
    q = quantizations(algo, nranks)
    u = U[spec]
    grow = (1 + u) ** q
    x64 = parts.astype(np.float64)
    out = (nranks + 4) * 2.0 ** -23 * np.abs(x64).sum(axis=0)
    for lo, hi in ref.runs_of(n, nranks, algo, slice_elems):
        m = hi - lo
        c = np.stack([ref.rotate(parts[r, lo:hi], h) if h else parts[r, lo:hi]
                      for r in range(nranks)]).astype(np.float64)
        a = np.abs(np.pad(c, ((0, 0), (0, -m % 16)))).reshape(nranks, -1, 16).max(axis=2)
        S = np.repeat(a.sum(axis=0), 16)[:m]
        s = max(np.abs(c).max(axis=1).sum() * grow / 2688, 2.0 ** -126)
        cb = q * (u * S * grow + s / 128) * (1 + 2.0 ** -20) + 2.0 ** -16 * S
        if not h:
            out[lo:hi] += cb
            continue
        for off, p in ref.rot_blocks(m, h):
            out[lo + off: lo + off + p] += cb[off: off + p].sum() / p ** 0.5
    return out


@pytest.mark.parametrize("spec", ["nvfp4", "hnvfp4:g16"])
@pytest.mark.parametrize("algo", ALGOS)
def test_allreduce_every_algo(rng, spec, algo):
    h = SPECS[spec]["rotation"]
    for nranks, n in [(4, 0), (4, 1), (4, 17), (4, 1000), (4, 4099), (3, 777)]:
        parts = (rng.standard_normal((nranks, n)) * np.exp(rng.standard_normal((nranks, 1)))
                 ).astype(F32)
        res = cc.simulate.allreduce(list(parts), codec=spec, algo=algo, slice_elems=256)
        assert same_bits(res), (algo, n, "ranks differ")
        exact = parts.astype(np.float64).sum(axis=0)
        err = np.abs(res[0].astype(np.float64) - exact)
        bound = allreduce_bound(parts, spec, algo, 256, h)
        assert np.all(err <= bound), (n, float((err / bound).max()))
        if n >= 1000:
            assert rel_l2(res[0], exact) < {"ring": 0.25, "tree": 0.2}.get(algo, 0.17)


@pytest.mark.parametrize("spec", ["nvfp4", "hnvfp4:g16"])
def test_two_shot_is_the_composition_of_round_trips(rng, spec):
    """With one run per chunk, two_shot must equal: per chunk, the rank-order fp32 sum of each
    rank's round trip, round-tripped again (the same bytes every rank decodes)."""
    parts = rng.standard_normal((4, 1003)).astype(F32)
    res = cc.simulate.allreduce(list(parts), codec=spec, algo="two_shot", slice_elems=1 << 16)
    rt = cc.Codec.parse(spec).roundtrip
    want = np.empty(1003, F32)
    for c in range(4):
        lo, hi = cc.chunk_range(1003, 4, c)
        acc = rt(parts[0, lo:hi])
        for r in range(1, 4):
            acc = acc + rt(parts[r, lo:hi])
        want[lo:hi] = rt(acc)
    assert np.array_equal(res[0], want)
