"""TACO (`taco:gG`, `taco_e5m2:gG`; format in cuda/src/codecs/taco/taco.h) against the NumPy
reference in tests/helpers/reference/taco.py (written from docs/algorithms.md, "TACO"): the same fp32
operations in the same order, so the wire bytes and decoded values must match bit for bit.
"""
import ml_dtypes
import numpy as np
import pytest

import ccompress as cc
from ccompress import _core
from ccompress._internal.errors import InvalidArgument
from helpers.common import lib_decode as decode, lib_encode as encode, rel_l2, same_bits
from helpers.reference.taco import (F32, FMT, SIZES, mixed_data, rot_blocks, taco_ref_decode,
                            taco_ref_encode)

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
