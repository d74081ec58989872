"""Scalar conversions of cuda/src/codecs against ml_dtypes / NumPy.

FP8 encoding must equal the hardware's cvt.rn.satfinite: round to nearest even, finite
overflow and +-Inf clamp to +-max, NaN -> 0x7F. ml_dtypes rounds the same way but turns
overflow into NaN (E4M3) or Inf (E5M2), so the reference clamps to +-max first.
"""
import ml_dtypes
import numpy as np
import pytest

from ccompress import _core

F32 = np.float32
FMTS = {
    "e4m3": (ml_dtypes.float8_e4m3fn, 448.0, 0x7E, -6, 3),
    "e5m2": (ml_dtypes.float8_e5m2, 57344.0, 0x7B, -14, 2),
}
ALL_CODES = np.arange(256, dtype=np.uint8)


def ref_fp8(x, fmt):
    """ml_dtypes RNE cast of x clamped to +-max, with NaN as 0x7F."""
    dt, fmax = FMTS[fmt][:2]
    with np.errstate(invalid="ignore"):
        q = np.clip(x, -F32(fmax), F32(fmax)).astype(dt).view(np.uint8).copy()
    q[np.isnan(x)] = 0x7F
    return q


def finite_codes(fmt):
    """(codes, values) of every finite code, non-negative ones ascending."""
    dt = FMTS[fmt][0]
    vals = ALL_CODES.view(dt).astype(np.float64)
    keep = np.isfinite(vals) & (ALL_CODES < 0x80)
    return ALL_CODES[keep], vals[keep]


@pytest.mark.parametrize("fmt", FMTS)
def test_every_code_decodes_like_ml_dtypes(fmt):
    got = _core._fp8_to_float(ALL_CODES, fmt)
    want = ALL_CODES.view(FMTS[fmt][0]).astype(np.float32)
    assert got.dtype == np.float32
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))  # +-0 too
    assert nan.sum() == (2 if fmt == "e4m3" else 6)


@pytest.mark.parametrize("fmt", FMTS)
def test_every_finite_code_reencodes_to_itself(fmt):
    vals = _core._fp8_to_float(ALL_CODES, fmt)
    fin = np.isfinite(vals)
    assert np.array_equal(_core._fp8_from_float(vals[fin], fmt), ALL_CODES[fin])


@pytest.mark.parametrize("fmt", FMTS)
def test_ties_between_neighbours_go_to_even(fmt):
    codes, vals = finite_codes(fmt)
    lo, hi = vals[:-1], vals[1:]
    mid = ((lo + hi) / 2).astype(np.float32)
    assert np.array_equal(mid.astype(np.float64), (lo + hi) / 2)  # midpoints are exact
    even = np.where(codes[:-1] % 2 == 0, codes[:-1], codes[1:]).astype(np.uint8)
    for sign in (1, -1):
        m = F32(sign) * mid
        sb = np.uint8(0x80 if sign < 0 else 0)
        assert np.array_equal(_core._fp8_from_float(m, fmt), even | sb)
        above = np.nextafter(mid, F32(np.inf)) * F32(sign)
        below = np.nextafter(mid, F32(0)) * F32(sign)
        assert np.array_equal(_core._fp8_from_float(above, fmt), codes[1:] | sb)
        assert np.array_equal(_core._fp8_from_float(below, fmt), codes[:-1] | sb)
    # The set includes subnormal ties (first codes) and the subnormal/normal boundary.
    assert (codes[:-1] < 8).sum() >= 3


@pytest.mark.parametrize("fmt", FMTS)
def test_special_values(fmt):
    _, fmax, max_code, emin, m = FMTS[fmt]
    tiny = 2.0 ** (emin - m)
    top_half_spacing = 2.0 ** (np.floor(np.log2(fmax)) - m - 1)
    cases = [
        (0.0, 0x00), (-0.0, 0x80),
        (tiny, 0x01), (-tiny, 0x81),
        (tiny / 2, 0x00), (-tiny / 2, 0x80),  # tie between 0 and the smallest subnormal -> 0
        (tiny * 0.5000001, 0x01), (tiny * 1.5, 0x02),  # 1.5 steps ties to even (2)
        (fmax, max_code), (-fmax, max_code | 0x80),
        (float(np.nextafter(F32(fmax), F32(np.inf))), max_code),
        (fmax + top_half_spacing, max_code), (fmax * 4, max_code), (-fmax * 4, max_code | 0x80),
        (3e38, max_code), (np.inf, max_code), (-np.inf, max_code | 0x80),
        (np.nan, 0x7F), (-np.nan, 0x7F),
        (1e-45, 0x00), (-1e-45, 0x80),  # fp32 subnormals
        (1.0, (2 ** (7 - m) - 1) // 2 << m),  # exponent field = bias
    ]
    x = np.array([c[0] for c in cases], dtype=np.float32)
    want = np.array([c[1] for c in cases], dtype=np.uint8)
    assert np.array_equal(_core._fp8_from_float(x, fmt), want)


def random_floats(rng, n, lo_exp, hi_exp):
    """Random sign and mantissa, exponent uniform in [lo_exp, hi_exp)."""
    mant = rng.uniform(1.0, 2.0, n)
    exp = rng.integers(lo_exp, hi_exp, n)
    return (np.where(rng.random(n) < 0.5, -1.0, 1.0) * np.ldexp(mant, exp)).astype(np.float32)


@pytest.mark.parametrize("fmt", FMTS)
def test_random_floats_match_ml_dtypes(fmt):
    _, fmax, _, emin, m = FMTS[fmt]
    rng = np.random.default_rng(1 if fmt == "e4m3" else 2)
    top = int(np.log2(fmax))
    parts = [
        random_floats(rng, 600_000, emin - m - 3, emin),  # FP8 subnormals and below
        random_floats(rng, 1_000_000, emin, top + 1),  # normals
        random_floats(rng, 200_000, top, top + 4),  # around and beyond max
        random_floats(rng, 200_000, -140, 128),  # every fp32 magnitude
        rng.integers(0, 2**32, 500_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], dtype=np.float32),
    ]
    x = np.concatenate(parts)
    got = _core._fp8_from_float(x, fmt)
    want = ref_fp8(x, fmt)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (
        f"{bad.size} mismatches, e.g. x={x[bad[:5]]} got={got[bad[:5]]} want={want[bad[:5]]}")


def test_bf16_and_f16_decode_every_code():
    codes = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    for dec, dt in ((_core._bf16_to_float, ml_dtypes.bfloat16), (_core._f16_to_float, np.float16)):
        got = dec(codes)
        want = codes.view(dt).astype(np.float32)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def half_edge_cases():
    vals = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 65536.0, -65520.0, 1e5, 3.4e38,
            np.inf, -np.inf, 2.0**-14, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0000001, 3 * 2.0**-25,
            2.0**-26, 1e-45, -1e-45, 1.17549435e-38, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11,
            1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-8 + 2.0**-30]
    v = np.array(vals, dtype=np.float32)
    # Every exact halfway point between neighbouring bf16 / fp16 values near 1 and the
    # subnormal ranges, both signs.
    mids = []
    for dt, lo in ((ml_dtypes.bfloat16, 0x0000), (ml_dtypes.bfloat16, 0x3F00), (np.float16, 0x0000),
                   (np.float16, 0x3C00), (np.float16, 0x7B00)):
        c = np.arange(lo, lo + 0x100, dtype=np.uint16).view(dt).astype(np.float64)
        mids.append(((c[:-1] + c[1:]) / 2).astype(np.float32))
    m = np.concatenate(mids)
    return np.concatenate([v, -v, m, -m])


def test_bf16_and_f16_encode_match_casts():
    rng = np.random.default_rng(3)
    x = np.concatenate([
        rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        random_floats(rng, 1_000_000, -30, 20),
        half_edge_cases(),
    ])
    for enc, dec, dt in ((_core._bf16_from_float, _core._bf16_to_float, ml_dtypes.bfloat16),
                         (_core._f16_from_float, _core._f16_to_float, np.float16)):
        got = enc(x)
        with np.errstate(over="ignore", invalid="ignore"):
            want = x.astype(dt).view(np.uint16)
        nan = np.isnan(x)
        assert np.isnan(dec(got[nan])).all()
        bad = np.flatnonzero(got[~nan] != want[~nan])
        assert bad.size == 0, f"{dt}: {bad.size} mismatches, e.g. x={x[~nan][bad[:5]]}"


def test_hooks_reject_wrong_dtype_and_format():
    with pytest.raises(TypeError):
        _core._fp8_from_float(np.zeros(3, np.float64), "e4m3")
    with pytest.raises(ValueError):
        _core._fp8_from_float(np.zeros(3, np.float32), "e3m4")
    assert _core._fp8_to_float(np.zeros((2, 3), np.uint8), "e5m2").shape == (2, 3)
