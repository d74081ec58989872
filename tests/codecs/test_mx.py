"""The MX codecs (mxfp8, mxfp8_e5m2, mxfp4; OCP Microscaling v1.0) against the NumPy reference
helpers/reference/mx.py: wire bytes bit for bit, decoded values within the bound stated in
cuda/src/codecs/mxfp8/mxfp8.h and mxfp4/mxfp4.h against float64, the E8M0 scale's clamping,
the non-finite policy, sizes, specs, and the accumulate / fused-hop calls."""
import ml_dtypes
import numpy as np
import pytest

import ccompress as cc
from ccompress import _core
from ccompress._internal.errors import InvalidArgument
from helpers.codec_calls import DTYPES, check_decode_paths, decode_f32, encode, ptr
from helpers.reference import mx

SPECS = list(mx.FORMATS)
SIZES = [0, 1, 2, 31, 32, 33, 63, 64, 100, 4097]


def make_data(rng, n):
    """Blocks of very different magnitudes (fp32 subnormal to near FLT_MAX), zeros, one
    all-zero block, exact powers of two (amax on a binade edge) and saturating values."""
    x = rng.standard_normal(n) * np.repeat(10.0 ** rng.uniform(-40, 37, -(-n // 32) or 1), 32)[:n]
    x[rng.random(n) < 0.03] = 0.0
    if n >= 96:
        x[32:64] = 0.0
        x[64:96] = np.ldexp(1.0, rng.integers(-149, 128, 32)) * rng.choice([-1, 1], 32)
    return np.clip(x, -3.4e38, 3.4e38)


def check_bound(spec, x64, dec):
    n = x64.size
    amax = np.repeat(mx.block_amax(x64), 32)[:n]
    bound = mx.U[spec] * amax + mx.floor_of(spec)
    err = np.abs(dec.astype(np.float64) - x64)
    worst = int(np.argmax(err - bound)) if n else 0
    assert n == 0 or err[worst] <= bound[worst], (
        f"{spec} element {worst}: x={x64[worst]} decoded={dec[worst]} bound={bound[worst]}")


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_wire_bytes_and_bound_match_reference(spec, dtype):
    rng = np.random.default_rng(3)
    codec = _core.Codec.parse(spec)
    for n in SIZES:
        big = float(ml_dtypes.finfo(DTYPES[dtype]).max)
        x = np.clip(make_data(rng, n), -big, big).astype(np.float32).astype(DTYPES[dtype])
        x32 = x.astype(np.float32)
        wire = encode(codec, x)
        assert wire.size == mx.wire_size(spec, n) == codec.wire_bytes(n)
        assert np.array_equal(wire, mx.encode(spec, x32)), (spec, dtype, n)
        dec = decode_f32(codec, wire, n)
        assert np.array_equal(dec.view(np.uint32), mx.decode(spec, wire, n).view(np.uint32))
        check_bound(spec, x32.astype(np.float64), dec)


@pytest.mark.parametrize("spec", SPECS)
def test_divisor_and_saturation(spec):
    """x / divisor is what is coded; a block maximum just below a power of two has a quotient
    past the element max, which saturates within the bound."""
    rng = np.random.default_rng(4)
    codec = _core.Codec.parse(spec)
    x = (rng.uniform(-1, 1, 320) * 2.0 ** 10).astype(np.float32)
    x[::32] = np.float32(2.0 ** 11 * (1 - 2.0 ** -20))
    for d in (1.0, 3.0):
        wire = encode(codec, x, d)
        y = (x / np.float32(d)).astype(np.float32)
        assert np.array_equal(wire, mx.encode(spec, y))
        check_bound(spec, y.astype(np.float64), decode_f32(codec, wire, x.size))


@pytest.mark.parametrize("spec", SPECS)
def test_e8m0_scale_codes_and_clamping(spec):
    codec = _core.Codec.parse(spec)
    emax = mx.FORMATS[spec][2]
    code_bytes = 16 if spec == "mxfp4" else 32
    for amax, want in ((1.0, 127 - emax), (1.5, 127 - emax), (2.0, 128 - emax),
                       (0.0, 0), (1e-45, 0), (2.0 ** (emax - 127), 0), (2.0 ** (emax - 126), 1),
                       (3.4e38, 254 - emax)):
        x = np.zeros(32, np.float32)
        x[5] = -amax
        wire = encode(codec, x)
        assert wire[code_bytes] == want, (amax, wire[code_bytes])
        dec = decode_f32(codec, wire, 32)
        assert np.all(np.isfinite(dec)) and np.all(dec[np.arange(32) != 5] == 0)
        check_bound(spec, x.astype(np.float64), dec)


@pytest.mark.parametrize("spec", SPECS)
def test_non_finite_policy(spec):
    """NaN and +-Inf leave their block's scale alone and stay in their own element: NaN is NaN,
    +-Inf is +-Inf in E5M2 and NaN otherwise (the fp8 / nvfp4 policy)."""
    rng = np.random.default_rng(5)
    codec = _core.Codec.parse(spec)
    clean = rng.standard_normal(128).astype(np.float32)
    x = clean.copy()
    bad = [3, 40, 41, 100]
    x[bad] = [np.nan, np.inf, -np.inf, np.nan]
    clean[bad] = 0.0
    wire = encode(codec, x)
    assert np.array_equal(wire, mx.encode(spec, x))
    dec, dec_clean = decode_f32(codec, wire, 128), decode_f32(codec, encode(codec, clean), 128)
    assert np.isnan(dec[[3, 100]]).all()
    if spec == "mxfp8_e5m2":
        assert dec[40] == np.inf and dec[41] == -np.inf
    else:
        assert np.isnan(dec[[40, 41]]).all()
    others = np.setdiff1d(np.arange(128), bad)
    assert np.array_equal(dec[others], dec_clean[others])


@pytest.mark.parametrize("spec", SPECS)
def test_nan_scale_byte_decodes_to_nan(spec):
    codec = _core.Codec.parse(spec)
    wire = encode(codec, np.ones(64, np.float32))
    first_scale = 32 if spec == "mxfp4" else 64  # after the codes
    wire[first_scale] = 255
    dec = decode_f32(codec, wire, 64)
    assert np.isnan(dec[:32]).all() and np.all(dec[32:] == 1)


def test_specs_sizes_and_options():
    for spec, bits in (("mxfp8", 8.25), ("mxfp8_e5m2", 8.25), ("mxfp4", 4.25)):
        c = cc.Codec(spec)
        assert c.name == spec and cc.Codec(f"{spec}:g32").name == spec
        assert c.wire_bytes(1 << 20) * 8 / (1 << 20) == bits
        assert _core.Codec.parse(spec).error_model()["u"] == mx.U[spec]
        for bad in (f"{spec}:g16", f"{spec}:sr", f"{spec}:h32", f"{spec}:s16"):
            with pytest.raises(InvalidArgument, match="32"):
                cc.Codec(bad)
    assert _core.Codec.parse("mxfp8").kind == "mxfp8"
    assert _core.Codec.parse("mxfp8_e5m2").kind == "mxfp8_e5m2"
    assert _core.Codec.parse("mxfp4").kind == "mxfp4"


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_accumulate_decode_and_decode_reduce_encode(spec, dtype):
    rng = np.random.default_rng(11)
    n = 3001
    codec = _core.Codec.parse(spec)
    x = (rng.standard_normal(n) * 3).astype(np.float32).astype(DTYPES[dtype])
    wire = encode(codec, x)
    want = mx.decode(spec, wire, n)
    check_decode_paths(codec, wire, n, want, rng)
    y = (rng.standard_normal(n) * 2).astype(np.float32).astype(DTYPES[dtype])
    for d in (1.0, 4.0, 3.0):
        t = (want + y.astype(np.float32)) / np.float32(d)  # decode(src) + x, then the divisor
        ref = mx.encode(spec, t.astype(np.float32))
        dst = np.zeros(codec.wire_bytes(n), np.uint8)
        _core.decode_reduce_encode(codec, ptr(wire), ptr(y), dtype, n, d, ptr(dst))
        assert np.array_equal(dst, ref)
        in_place = wire.copy()
        _core.decode_reduce_encode(codec, ptr(in_place), ptr(y), dtype, n, d, ptr(in_place))
        assert np.array_equal(in_place, ref)
