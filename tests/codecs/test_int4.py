"""hint4 against the NumPy reference in reference/fourbit.py (the formulas of
cuda/src/codecs/hint4/hint4.cc): bit-exact wire bytes, exact sizes, the stated per-element bound,
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
    "hint4:g16": dict(group=16, rotation=16),
    "hint4:g32:s16": dict(group=32, rotation=32, scale_bits=16),
    "hint4:g16:h64:rs": dict(group=16, rotation=64, rs=True),
    "hint4:g64:h16": dict(group=64, rotation=16),
    "hint4:g16:h2:sr": dict(group=16, rotation=2, sr=True),
    "hint4:g128:s16:sr": dict(group=128, rotation=128, scale_bits=16, sr=True),
}


def kw_enc(spec):
    return SPECS[spec]


def kw_dec(spec):
    return {k: v for k, v in SPECS[spec].items() if k != "sr"}


def heavy(rng, n):
    """Student-t rows with a few outlier channels, groups of very different magnitudes, zeros."""
    x = rng.standard_t(3, n) * np.repeat(10.0 ** rng.uniform(-6, 3, -(-n // 64)), 64)[:n]
    x[rng.random(n) < 0.01] *= 50
    x[rng.random(n) < 0.05] = 0.0
    return x.astype(F32)


RUN_BLOCK = 1 << 16


def test_wire_bytes_exact():
    for n in [0, 1, 2, 3, 15, 16, 17, 31, 33, 97, 101, 127, 1009, 65536, 65537]:
        for spec, g, sb in [("hint4:g16", 16, 1), ("hint4:g32:s16", 32, 2), ("hint4:g64", 64, 1),
                            ("hint4:g256:s16:sr", 256, 2), ("hint4:g16:h256", 16, 1)]:
            # One fp32 run scale per piece of at most 65536 elements (Codec::run_block).
            pieces = [RUN_BLOCK] * (n // RUN_BLOCK) + ([n % RUN_BLOCK] if n % RUN_BLOCK else [])
            want = sum(-(-(-(-m // 2) + -(-m // g) * sb) // 4) * 4 + 4 for m in pieces)
            assert cc.Codec.parse(spec).wire_bytes(n) == want, (spec, n)
            assert want == sum(ref.wire_size(m, g, sb) for m in pieces), (spec, n)
            if 0 < n < 5000:
                assert cc.Codec.parse(spec).encode(np.ones(n, F32)).size == want
    bits = {s: cc.Codec.parse(s).wire_bytes(1 << 20) * 8 / (1 << 20)
            for s in ["hint4:g16", "hint4:g32:s16", "hint4:g32"]}
    assert bits == pytest.approx({"hint4:g16": 4.5, "hint4:g32:s16": 4.5, "hint4:g32": 4.25},
                                 abs=1e-3)


@pytest.mark.parametrize("spec", list(SPECS))
def test_wire_and_decode_match_numpy_bit_for_bit(rng, spec):
    for n in [1, 2, 15, 16, 17, 33, 100, 257, 1000, 4099]:
        x = heavy(rng, n)
        ctx = (11, 5, 2, 1000)
        wire = lib_encode(spec, x, *ctx)
        want = ref.encode(x, "int4", ctx=ctx, **kw_enc(spec))
        bad = np.flatnonzero(wire != want)
        assert bad.size == 0, f"{spec} n={n}: bytes {bad[:8]} differ"
        y = lib_decode(spec, wire, n)
        assert np.array_equal(y.view(np.uint32),
                              ref.decode(wire, n, "int4", **kw_dec(spec)).view(np.uint32))


def test_int4_grid_ties_and_twos_complement():
    # Coefficients c with dyadic entries: x = WHT(c) / 4 and its rotation WHT(x) / 4 = c are
    # exact in fp32, so the library quantizes exactly c. Block 0 (amax 3136 = 7 * 448) sets
    # s = 1; block 1 has amax 7, scale 1.0 and d = 1, so its ties are the values themselves.
    c1 = [7.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -7.0, 3.5, -3.5, 6.5, 0.25, 0.0, 4.0, 5.5, -6.5]
    c = np.array([3136.0] + [0.0] * 15 + c1, F32)
    x = ref.rotate(c, 16, inverse=True)
    assert np.array_equal(ref.rotate(x, 16), c)
    wire = lib_encode("hint4:g16", x)
    codes = np.stack([wire[:16] & 15, wire[:16] >> 4], 1).reshape(-1)[16:]
    want = [7, 0, 2, 2, 0, 14, 14, 9, 4, 12, 6, 0, 0, 4, 6, 10]  # RNE, two's complement
    assert list(codes) == want and list(ref.int4_rn(np.array(c1, F32))) == want
    values = np.array([q - 16 if q >= 8 else q for q in want], F32)
    assert np.array_equal(cc.Codec.parse("hint4:g16").roundtrip(x)[16:],
                          ref.rotate(values, 16, inverse=True))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_input_dtypes(rng, dtype):
    npd = {"float32": F32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
    x = (rng.standard_normal(1001) * 3).astype(npd)
    c = cc.Codec.parse("hint4:g16")
    want = ref.encode(x.astype(F32), "int4", group=16, rotation=16)
    assert np.array_equal(c.encode(x), want)
    y = c.roundtrip(x)
    assert y.dtype == x.dtype and y.shape == x.shape
    dec = ref.decode(want, x.size, "int4", group=16, rotation=16)
    assert np.array_equal(y.astype(F32), dec.astype(npd).astype(F32))


def test_parse_and_names():
    P = cc.Codec.parse
    for spec, name, g, h, sb in [
            ("hint4", "hint4:g16", 16, 16, 8), ("hint4:g16", "hint4:g16", 16, 16, 8),
            ("hint4:g32", "hint4:g32", 32, 32, 8), ("hint4:g32:h32:s8", "hint4:g32", 32, 32, 8),
            ("hint4:g16:h64", "hint4:g16:h64", 16, 64, 8),
            ("hint4:s16:g32", "hint4:g32:s16", 32, 32, 16),
            ("hint4:sr:rs:g64:h128", "hint4:g64:h128:rs:sr", 64, 128, 8),
            ("hint4:g256:h2", "hint4:g256:h2", 256, 2, 8)]:
        c = P(spec)
        assert c.name == name and P(c.name) == c, spec
        assert (c.group, c._c.rotation, c._c.scale_bits, c._c.kind) == (g, h, sb, "hint4")
    assert P("hint4:g16") != P("hint4:g16:sr") and P("hint4:g16") != P("hint4:g16:rs")
    for bad in ["hint4:g8", "hint4:g24", "hint4:g512", "hint4:h1", "hint4:h3", "hint4:h512",
                "hint4:s32", "hint4:s4", "hint4:g16:g16", "hint4:x", "hint4:", "int4", "HINT4"]:
        with pytest.raises(InvalidArgument):
            P(bad)


@pytest.mark.parametrize("spec", ["hint4:g16", "hint4:g64:h16", "hint4:g16:sr"])
def test_nan_inf_policy(rng, spec):
    n = 100  # rotation blocks of 16 (0..95) and a tail block of 4 (96..99)
    x = rng.standard_normal(n).astype(F32) * 5
    bad = {3: np.nan, 20: np.inf, 21: -np.inf, 98: np.nan}
    xb = x.copy()
    for i, v in bad.items():
        xb[i] = v
    y = cc.Codec.parse(spec).roundtrip(xb)
    poisoned = set(range(0, 32)) | {96, 97, 98, 99}
    assert set(np.flatnonzero(np.isnan(y))) == poisoned
    xz = xb.copy()
    xz[sorted(poisoned)] = 0
    keep = np.setdiff1d(np.arange(n), sorted(poisoned))
    assert np.array_equal(y[keep], cc.Codec.parse(spec).roundtrip(xz)[keep])


U = {(8, False): 17 / 224, (16, False): (1 + 2.0 ** -11) / 14,
     (8, True): 9 / 56, (16, True): (1 + 2.0 ** -10) / 7}


@pytest.mark.parametrize("spec", list(SPECS))
def test_per_element_bound(rng, spec):
    kw = kw_enc(spec)
    g, h, sb, sr = kw["group"], kw["rotation"], kw.get("scale_bits", 8), kw.get("sr", False)
    for n in [16, 1000, 4099]:
        x = heavy(rng, n)
        wire = lib_encode(spec, x, 1, 2, 3, 4)
        xp = lib_decode(spec, wire, n).astype(np.float64)
        d, s = ref.steps(wire, n, g, sb)
        d, s = d.astype(np.float64), float(s)
        y = ref.rotate(x, h, kw.get("rs", False)).astype(np.float64)
        # codec comment, per coefficient: |y' - y| <= (d / 2 + s / 128)(1 + 2^-20) (SR: d
        # instead of d / 2), and <= (u * a + s / 128)(1 + 2^-20) with a the group amax of y.
        yp = ref.decode(wire, n, "int4", group=g, scale_bits=sb).astype(np.float64)  # unrotated
        ey = np.abs(yp - y)
        by = ((d if sr else d / 2) + s / 128) * (1 + 2.0 ** -20)
        a = np.repeat(np.abs(np.pad(y, (0, -n % g))).reshape(-1, g).max(1), g)[:n]
        assert np.all(ey <= by) and np.all(ey <= (U[sb, sr] * a + s / 128) * (1 + 2.0 ** -20))
        x = x.astype(np.float64)
        for off, p in ref.rot_blocks(n, h):
            sl = slice(off, off + p)
            rnd = 2.0 ** -24 * (p ** 0.5 + 1) * (np.log2(p) + 2) * (
                np.linalg.norm(x[sl]) + np.linalg.norm(xp[sl]))
            assert np.all(np.abs(xp[sl] - x[sl]) <= by[sl].sum() / p ** 0.5 + rnd), (n, off, p)


ALGOS = ["ring", "two_shot", "tree", "one_shot"]


@pytest.mark.parametrize("spec", ["hint4:g16", "hint4:g32:s16"])
@pytest.mark.parametrize("algo", ALGOS)
def test_allreduce_every_algo(rng, spec, algo):
    from ccompress.bounds import quantizations
    g = cc.Codec.parse(spec).group
    sb = cc.Codec.parse(spec)._c.scale_bits
    u, cmax = U[sb, False], 7 * (448 if sb == 8 else 32768)
    for nranks, n in [(4, 0), (4, 1), (4, 17), (4, 1000), (4, 4099), (3, 777)]:
        parts = (rng.standard_normal((nranks, n)) * np.exp(rng.standard_normal((nranks, 1)))
                 ).astype(F32)
        res = cc.simulate.allreduce(list(parts), codec=spec, algo=algo, slice_elems=256)
        assert same_bits(res), (algo, n, "ranks differ")
        exact = parts.astype(np.float64).sum(axis=0)
        err = np.abs(res[0].astype(np.float64) - exact)
        # Coefficient-domain bound as in test_nvfp4.allreduce_bound, groups of g.
        q = quantizations(algo, nranks)
        grow = (1 + u) ** q
        bound = (nranks + 4) * 2.0 ** -23 * np.abs(parts.astype(np.float64)).sum(axis=0)
        for lo, hi in ref.runs_of(n, nranks, algo, 256):
            m = hi - lo
            c = np.abs(np.stack([ref.rotate(parts[r, lo:hi], g) for r in range(nranks)])
                       .astype(np.float64))
            S = np.repeat(np.pad(c, ((0, 0), (0, -m % g))).reshape(nranks, -1, g).max(2).sum(0),
                          g)[:m]
            s = max(c.max(axis=1).sum() * grow / cmax, 2.0 ** -126)
            cb = q * (u * S * grow + s / 128) * (1 + 2.0 ** -20) + 2.0 ** -16 * S
            for off, p in ref.rot_blocks(m, g):
                bound[lo + off: lo + off + p] += cb[off: off + p].sum() / p ** 0.5
        assert np.all(err <= bound), (n, float((err / bound).max()))
        if n >= 1000:
            assert rel_l2(res[0], exact) < {"ring": 0.2, "tree": 0.17}.get(algo, 0.15)
