"""Codec specs and the CPU backend's codec calls against NumPy references.

The FP8 group codec is re-implemented below in NumPy (scale in fp32, then an ml_dtypes cast
of the clamped quotient): the wire bytes must match it bit for bit, and the decoded values
must satisfy the error bound stated in codec.h against a float64 reference.
"""
import pickle

import ml_dtypes
import numpy as np
import pytest

from ccompress import _core
from ccompress._internal.errors import InvalidArgument
from helpers.codec_calls import DTYPES, check_decode_paths, decode_f32, encode, ptr

F32 = np.float32
FLT_MIN = np.finfo(np.float32).tiny
# fmt -> (ml_dtypes type, FP8_MAX, half-spacing at the top H, emin, mantissa bits)
FP8 = {
    "fp8_e4m3": (ml_dtypes.float8_e4m3fn, 448.0, 16.0, -6, 3),
    "fp8_e5m2": (ml_dtypes.float8_e5m2, 57344.0, 4096.0, -14, 2),
}


def ref_encode(x32, fmt, g):
    """NumPy group codec on float32 values: the wire bytes the library must produce."""
    dt, fmax = FP8[fmt][:2]
    n = x32.size
    xp = np.concatenate([x32, np.zeros(-n % g, np.float32)]).reshape(-1, g)
    amax = np.where(np.isfinite(xp), np.abs(xp), F32(0)).max(axis=1, initial=F32(0))
    s = np.maximum(amax / F32(fmax), FLT_MIN).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.clip(xp / s[:, None], -F32(fmax), F32(fmax)).astype(dt).view(np.uint8).copy()
    q[np.isnan(xp)] = 0x7F
    q[np.isinf(xp)] = 0x7F if fmt == "fp8_e4m3" else 0x7C
    q[np.isneginf(xp)] |= 0x80 if fmt == "fp8_e5m2" else 0
    pad = np.zeros(-n % 4, np.uint8)
    return np.concatenate([q.reshape(-1)[:n], pad, s[: -(-n // g)].view(np.uint8)])


def ref_decode(wire, fmt, g, n):
    """NumPy decode: float(q) * s in fp32."""
    dt = FP8[fmt][0]
    q = wire[:n].view(dt).astype(np.float32)
    s = wire[-(-n // 4) * 4:].view(np.float32)
    return q * np.repeat(s, g)[:n]


def to_dtype(x64, dtype):
    return x64.astype(np.float32).astype(DTYPES[dtype])


def make_data(rng, n, g):
    """Groups of very different magnitudes, some zeros, one all-zero group when possible."""
    scale = 10.0 ** rng.uniform(-4, 4, -(-n // g) or 1)
    x = rng.standard_normal(n) * np.repeat(scale, g)[:n]
    x[rng.random(n) < 0.02] = 0.0
    if n >= 3 * g:
        x[g:2 * g] = 0.0
    return x


def check_bound(fmt, g, x64, dec):
    """|x' - x| <= min(s*H, |x|*2^-(m+1) + s*2^(emin-m-1)) * (1 + 2^-16), s in float64."""
    _, fmax, h, emin, m = FP8[fmt]
    n = x64.size
    xp = np.concatenate([x64, np.zeros(-n % g)]).reshape(-1, g)
    amax = np.abs(xp).max(axis=1)
    s = np.repeat(np.maximum(amax / fmax, float(FLT_MIN)), g)[:n]
    bound = np.minimum(s * h, np.abs(x64) * 2.0 ** -(m + 1) + s * 2.0 ** (emin - m - 1))
    err = np.abs(dec.astype(np.float64) - x64)
    worst = np.argmax(err - bound * (1 + 2.0**-16)) if n else 0
    assert n == 0 or err[worst] <= bound[worst] * (1 + 2.0**-16), (
        f"element {worst}: x={x64[worst]} decoded={dec[worst]} bound={bound[worst]}")


@pytest.mark.parametrize("fmt", FP8)
@pytest.mark.parametrize("g", [16, 32, 128, 1000, 1024])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fp8_group_codec(fmt, g, dtype):
    rng = np.random.default_rng(g)
    codec = _core.Codec.parse(f"{fmt}:g{g}")
    for n in sorted({0, 1, 7, g - 1, g, g + 1, 997, 4099, 100003}):
        x = to_dtype(make_data(rng, n, g), dtype)
        x32 = x.astype(np.float32)
        assert codec.wire_bytes(n) == -(-n // 4) * 4 + 4 * -(-n // g)
        wire = encode(codec, x)
        ref = ref_encode(x32, fmt, g)
        bad = np.flatnonzero(wire != ref)
        assert bad.size == 0, f"n={n}: wire differs from NumPy at bytes {bad[:8]}"
        dec = decode_f32(codec, wire, n)
        assert np.array_equal(dec.view(np.uint32), ref_decode(ref, fmt, g, n).view(np.uint32))
        check_bound(fmt, g, x32.astype(np.float64), dec)


@pytest.mark.parametrize("fmt", FP8)
def test_fp8_floored_scale_groups(fmt):
    """Groups whose amax is below FP8_MAX * FLT_MIN use s = FLT_MIN (subnormal fp32 input)."""
    g = 32
    codec = _core.Codec.parse(f"{fmt}:g{g}")
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(g) * 1e-40, rng.standard_normal(g) * 1e-36,
                        np.full(g, 1.0625 * 2.0**-130), np.zeros(g)]).astype(np.float32)
    wire = encode(codec, x)
    assert np.array_equal(wire, ref_encode(x, fmt, g))
    scales = wire[-4 * 4:].view(np.float32)
    assert np.all(scales[[0, 2, 3]] == FLT_MIN)
    dec = decode_f32(codec, wire, x.size)
    check_bound(fmt, g, x.astype(np.float64), dec)
    if fmt == "fp8_e4m3":  # why codec.h does not bound floored groups by amax * u
        assert abs(float(dec[2 * g]) - float(x[2 * g])) > float(x[2 * g]) / 28


@pytest.mark.parametrize("fmt", FP8)
def test_fp8_huge_values_and_divisor(fmt):
    g = 16
    codec = _core.Codec.parse(f"{fmt}:g{g}")
    big = np.finfo(np.float32).max
    x = np.array([big, -big, big / 3, 1.0] * 4 + list(np.linspace(-7, 7, 16)), np.float32)
    dec = decode_f32(codec, encode(codec, x), x.size)
    assert np.isfinite(dec).all()
    check_bound(fmt, g, x.astype(np.float64), dec)
    for d in (4.0, 3.0):
        wire = encode(codec, x, divisor=d)
        assert np.array_equal(wire, ref_encode(x / F32(d), fmt, g))
        check_bound(fmt, g, x.astype(np.float64) / d, decode_f32(codec, wire, x.size))


@pytest.mark.parametrize("fmt", FP8)
def test_fp8_non_finite_policy(fmt):
    g = 64
    codec = _core.Codec.parse(f"{fmt}:g{g}")
    rng = np.random.default_rng(5)
    clean = rng.standard_normal(4 * g).astype(np.float32)
    clean[200] = 1e30  # finite and huge: it does set its group's scale
    x = clean.copy()
    x[[3, 70, 71, 140]] = [np.nan, np.inf, -np.inf, np.nan]
    clean[[3, 70, 71, 140]] = 0.0  # "as if absent": zero does not move the group's amax
    wire, wire_clean = encode(codec, x), encode(codec, clean)
    assert np.array_equal(wire, ref_encode(x, fmt, g))
    dec, dec_clean = decode_f32(codec, wire, x.size), decode_f32(codec, wire_clean, x.size)
    assert np.isnan(dec[[3, 140]]).all()
    if fmt == "fp8_e5m2":
        assert dec[70] == np.inf and dec[71] == -np.inf
    else:
        assert np.isnan(dec[[70, 71]]).all()
    others = np.setdiff1d(np.arange(x.size), [3, 70, 71, 140])
    assert np.array_equal(dec[others], dec_clean[others])
    assert np.isfinite(dec[others]).all() and dec[200] == pytest.approx(1e30, rel=1 / 16)


@pytest.mark.parametrize("spec", ["fp8_e4m3:g128", "fp8_e5m2:g32", "none", "bf16", "fp16"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_accumulate_decode_finalize(spec, dtype):
    rng = np.random.default_rng(11)
    n = 3001
    codec = _core.Codec.parse(spec).bind(dtype)
    x = to_dtype(rng.standard_normal(n) * 3, dtype)
    wire = encode(codec, x)
    if codec.kind == "raw":
        raw = DTYPES[codec.raw_dtype]
        want = x.astype(np.float32).astype(raw).astype(np.float32)
        assert np.array_equal(wire.view(raw).astype(np.float32), want)
    else:
        want = ref_decode(wire, codec.kind, codec.group, n)
    acc0 = check_decode_paths(codec, wire, n, want, rng)
    acc = acc0.copy()
    _core.load_accumulate(ptr(x), dtype, n, ptr(acc), False)
    assert np.array_equal(acc, acc0 + x.astype(np.float32))
    _core.load_accumulate(ptr(x), dtype, n, ptr(acc), True)
    assert np.array_equal(acc, x.astype(np.float32))
    for d in (1.0, 3.0):
        out = np.empty(n, DTYPES[dtype])
        _core.finalize(ptr(acc0), n, d, ptr(out), dtype)
        want = (acc0 / F32(d)).astype(DTYPES[dtype])
        assert np.array_equal(out.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("spec", ["fp8_e4m3:g128", "fp8_e5m2:g16", "none", "bf16", "fp16"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_reduce_encode(spec, dtype):
    rng = np.random.default_rng(13)
    n = 2 * 128 + 77
    codec = _core.Codec.parse(spec).bind(dtype)
    src = encode(codec, to_dtype(rng.standard_normal(n), dtype))
    x = to_dtype(rng.standard_normal(n) * 2, dtype)
    acc = np.empty(n, np.float32)
    _core.decode_accumulate(codec, ptr(src), n, ptr(acc), True)
    for d in (1.0, 4.0, 3.0):
        t = (acc + x.astype(np.float32)) / F32(d)  # decode(src) + x, then the divisor
        if codec.kind == "raw":
            want = t.astype(DTYPES[codec.raw_dtype]).view(np.uint8)
        else:
            want = ref_encode(t, codec.kind, codec.group)
        dst = np.zeros(codec.wire_bytes(n), np.uint8)
        _core.decode_reduce_encode(codec, ptr(src), ptr(x), dtype, n, d, ptr(dst))
        assert np.array_equal(dst, want)
        in_place = src.copy()
        _core.decode_reduce_encode(codec, ptr(in_place), ptr(x), dtype, n, d, ptr(in_place))
        assert np.array_equal(in_place, want)


def test_raw_codecs_round_trip_and_divisor():
    x = np.array([1.0, -2.5, 3.14159265, 1e-3, 65504.0, 65520.0, 1e6, -1e-8, np.inf, 0.0],
                 np.float32)
    for dtype in DTYPES:
        xs = x.astype(DTYPES[dtype]) if dtype != "float16" else x[:5].astype(np.float16)
        none = _core.Codec.parse("none").bind(dtype)
        wire = encode(none, xs)
        assert np.array_equal(wire, xs.view(np.uint8))  # a plain copy
        out = np.empty_like(xs)
        _core.decode(none, ptr(wire), xs.size, ptr(out), dtype)
        assert np.array_equal(out.view(np.uint8), xs.view(np.uint8))
    for spec, dt in (("bf16", ml_dtypes.bfloat16), ("fp16", np.float16)):
        c = _core.Codec.parse(spec)
        for d in (1.0, 3.0):
            wire = encode(c, x, d)
            with np.errstate(over="ignore"):
                assert np.array_equal(wire, (x / F32(d)).astype(dt).view(np.uint8))
    assert np.isinf(encode(_core.Codec.parse("fp16"), x).view(np.float16)[5])  # 65520 -> Inf


def test_codec_specs():
    P = _core.Codec.parse
    c = P("fp8_e4m3")
    assert (c.name, c.kind, c.group, c.align, c.unbound, c.raw_dtype) == (
        "fp8_e4m3:g128", "fp8_e4m3", 128, 128, False, None)
    assert P("fp8_e5m2:g1000").group == 1000 and P("fp8_e5m2:g16").name == "fp8_e5m2:g16"
    assert P("fp8_e4m3:g1024") == P("fp8_e4m3:g1024") != P("fp8_e5m2:g1024")
    assert P("fp8_e4m3:g128") == P("fp8_e4m3") and P("fp8_e4m3:g64") != P("fp8_e4m3")
    none = P("none")
    assert none.unbound and none.name == "none" and none.kind == "raw" and none.align == 1
    assert none.bind("bfloat16") == P("bf16") and none.bind("float16") == P("fp16")
    f32 = none.bind("float32")
    assert f32.raw_dtype == "float32" and f32 != none and f32.wire_bytes(5) == 20
    assert P("bf16").bind("float32") == P("bf16") and P("bf16").wire_bytes(5) == 10
    ids = {P(s).id for s in ["none", "bf16", "fp16", "fp8_e4m3:g16", "fp8_e4m3:g17",
                             "fp8_e5m2:g16"]} | {f32.id}
    assert len(ids) == 7
    assert hash(P("fp8_e4m3")) == hash(P("fp8_e4m3:g128"))
    for c in (P("fp8_e5m2:g48"), f32, none):
        assert pickle.loads(pickle.dumps(c)) == c
    assert not none.lossy("float32") and not f32.lossy("bfloat16") and not f32.lossy("float32")
    bf16 = P("bf16")
    assert bf16.lossy("float32") and bf16.lossy("float16") and not bf16.lossy("bfloat16")
    assert P("fp8_e4m3").lossy("float16")
    assert repr(P("fp8_e4m3")) == "Codec('fp8_e4m3:g128')" and repr(none) == "Codec('none')"
    for bad in ["", "fp8", "FP8_E4M3", "fp8_e4m3:g15", "fp8_e4m3:g1025", "fp8_e4m3:g",
                "fp8_e4m3:", "fp8_e4m3:g12a", "fp8_e4m3:128", "bf16:g128", "none:g128", "fp32",
                "fp8_e4m3:g128:x", "fp8_e4m3:g0128"]:
        with pytest.raises(InvalidArgument, match="valid codec specs"):
            P(bad)
    with pytest.raises(InvalidArgument, match="bind it to a dtype first"):
        none.wire_bytes(4)
    with pytest.raises(InvalidArgument):
        f32.bind("float64")


def test_pointer_calls_reject_unbound_codec_and_bad_dtype():
    x = np.zeros(4, np.float32)
    acc = np.zeros(4, np.float32)
    none = _core.Codec.parse("none")
    with pytest.raises(InvalidArgument, match="bind"):
        _core.encode(none, ptr(x), "float32", 4, 1.0, ptr(acc))
    with pytest.raises(InvalidArgument, match="bind"):
        _core.decode_accumulate(none, ptr(x), 4, ptr(acc), True)
    with pytest.raises(InvalidArgument, match="float64"):
        _core.load_accumulate(ptr(x), "float64", 4, ptr(acc), True)


def test_concurrent_encodes_agree():
    from concurrent.futures import ThreadPoolExecutor
    codec = _core.Codec.parse("fp8_e4m3:g128")
    x = np.random.default_rng(17).standard_normal(1 << 18).astype(np.float32)
    want = ref_encode(x, "fp8_e4m3", 128)
    with ThreadPoolExecutor(4) as pool:
        wires = list(pool.map(lambda _: encode(codec, x), range(8)))
    assert all(np.array_equal(w, want) for w in wires)
