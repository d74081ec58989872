"""kernels/exact_div.cuh, the call-free fp32 division of the hint8 kernels, on the device
(real or emulated) against NumPy's float32 division (IEEE round to nearest even, subnormals
kept) bit for bit, through both of its paths: prepare_divisor + exact_div as the kernels
call it, and div_general, which the fast path hides for normal operands. NaN matches any NaN.

The cases are the ones a wrong division gets wrong: every class of operand (normal,
subnormal, zero, Inf, NaN, both signs), every exponent pair, quotients within a few ulps of
a rounding midpoint (the final correction of fast_core; fp32 quotients of normal results
are never exactly a midpoint), exact ties and near-ties of subnormal results, and results at
the overflow threshold. Sized to take a few seconds on the CPU emulator (cuda/emu), larger
on a GPU."""

import numpy as np
import pytest

import ccompress as cc
from helpers.cuda_helpers import cuda_or_reason

CUDA, WHY = cuda_or_reason()
pytestmark = pytest.mark.skipif(CUDA is None, reason=str(WHY))

# Scale of every generated family: the emulator runs blocks one at a time on the CPU.
SCALE = 1 if CUDA is None or getattr(CUDA, "emulated", False) else 16

SPECIAL = np.array([0x00000000, 0x00000001, 0x00000002, 0x003FFFFF, 0x00400000, 0x007FFFFF,
                    0x00800000, 0x00800001, 0x00FFFFFF, 0x3F800000, 0x3F800001, 0x3FFFFFFF,
                    0x40000000, 0x3F7FFFFF, 0x7EFFFFFF, 0x7F000000, 0x7F7FFFFF, 0x7F800000,
                    0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x0D800000, 0x0D7FFFFF, 0x7E800000,
                    0x7E7FFFFF, 0x33800000, 0x34000000], np.uint32)


def _f32(bits):
    return np.asarray(bits, np.uint32).view(np.float32)


def _signed(rng, bits):
    return bits | (rng.integers(0, 2, bits.size, dtype=np.uint32) << np.uint32(31))


def _any_class(rng, n):
    """Bit patterns with the exponent uniform over 0..255 (zeros, subnormals, Inf and NaN
    1/256 each way), an eighth with a zero significand, both signs."""
    exp = rng.integers(0, 256, n, dtype=np.uint32)
    sig = rng.integers(0, 1 << 23, n, dtype=np.uint32)
    sig[rng.random(n) < 0.125] = 0
    return _f32(_signed(rng, (exp << np.uint32(23)) | sig))


def random_pairs(rng, n):
    """Random bits, random classes, and the special values against each other and both."""
    raw = rng.integers(0, 1 << 32, (2, n), dtype=np.uint64).astype(np.uint32)
    s = np.concatenate([SPECIAL, SPECIAL | np.uint32(0x80000000)])
    sa, sb = np.meshgrid(s, s)
    k = n // 4
    rs = _f32(rng.choice(s, k))
    return (np.concatenate([_f32(raw[0]), _any_class(rng, n), _f32(sa.ravel()), rs, _any_class(rng, k)]),
            np.concatenate([_f32(raw[1]), _any_class(rng, n), _f32(sb.ravel()), _any_class(rng, k), rs]))


def exponent_pairs(rng, sigs=4):
    """Every pair of biased exponents (0..255 each) at a few significand pairs: the extremes
    and random ones, random signs."""
    ea, eb = (e.ravel().astype(np.uint32) for e in np.meshgrid(np.arange(256), np.arange(256)))
    fixed = [(0, 0), (0x7FFFFF, 1), (1, 0x7FFFFF), (0x400000, 0x7FFFFF)]
    a, b = [], []
    for i in range(sigs + len(fixed)):
        if i < len(fixed):
            sa, sb = (np.full(ea.size, s, np.uint32) for s in fixed[i])
        else:
            sa, sb = rng.integers(0, 1 << 23, (2, ea.size), dtype=np.uint32)
        a.append(_f32(_signed(rng, (ea << np.uint32(23)) | sa)))
        b.append(_f32(_signed(rng, (eb << np.uint32(23)) | sb)))
    return np.concatenate(a), np.concatenate(b)


def _neighbours(a, b, steps=2):
    """a and its float32 neighbours up to `steps` ulps each way, each with its b."""
    out = [a]
    lo = hi = a
    for _ in range(steps):
        lo = np.nextafter(lo, np.float32(-np.inf))
        hi = np.nextafter(hi, np.float32(np.inf))
        out += [lo, hi]
    return np.concatenate(out), np.tile(b, 2 * steps + 1)


def near_midpoints(rng, n):
    """a with a / b within a few ulps of a rounding midpoint of a normal quotient q: a = RN(m b)
    for a midpoint m of q (exact in float64: 25 x 24 bits) and its neighbours. Below a power of
    two the spacing halves, so a share of q are powers of two with the midpoint below them.
    The quotient's exponent spans the whole normal range, up to the overflow threshold."""
    eq = rng.integers(-126, 128, n)
    eb = np.clip(rng.integers(-126, 128, n), -126 - np.minimum(eq, 0), 127 - np.maximum(eq, 0))
    sq = rng.integers(0, 1 << 23, n)
    sq[rng.random(n) < 0.15] = 0
    q = np.ldexp(1.0 + sq / 2.0**23, eq)
    b = np.ldexp(1.0 + rng.integers(0, 1 << 23, n) / 2.0**23, eb)
    below = rng.random(n) < 0.5
    m = np.where(below, q - np.ldexp(np.where(sq == 0, 0.5, 1.0), eq - 24), q + np.ldexp(1.0, eq - 24))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    bsign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    with np.errstate(over="ignore"):
        a = (sign * m * b).astype(np.float32)
    return _neighbours(a, (bsign * b).astype(np.float32))


def _inverse_mod(m, w):
    """m^-1 modulo 2^w for odd m (uint64 arrays, w <= 25): Newton's iteration on 2-adic
    digits, each step doubling the correct bits."""
    mask = np.uint64((1 << w) - 1)
    x = m.copy()  # right to 3 bits for odd m
    for _ in range(4):
        x = (x * ((np.uint64(2) - m * x) & mask)) & mask
    return x


def near_ties(rng, n, w, shift):
    """a / b = (M - r / B) 2^(shift - w) for an odd w-bit M (a midpoint between two quotients
    with w - 1 significant bits: w = 25 for a normal quotient, fewer where it is subnormal), a
    small integer r (0: the exact tie, possible only for subnormal quotients) and B < 2^24:
    B = r M^-1 modulo 2^w makes A = (M B - r) / 2^w an integer, so a = A 2^ka and b = B 2^kb
    are float32 and the quotient is within r / B ulp/2 of the midpoint (down to 2^-24 of an
    ulp, beyond any faithful first guess). `shift` (an array) places the quotient's exponent."""
    m = (rng.integers(1 << (w - 2), 1 << (w - 1), n, dtype=np.uint64) * 2 + 1) if w > 1 \
        else np.ones(n, np.uint64)
    r = np.where(rng.random(n) < 0.75, rng.integers(-16, 17, n), rng.integers(-4096, 4097, n))
    base = ((r % (1 << w)).astype(np.uint64) * _inverse_mod(m, w)) & np.uint64((1 << w) - 1)
    room = np.maximum(((1 << 24) - base.astype(np.int64)) >> w, 1)
    bb = base.astype(np.int64) + (rng.integers(0, 1 << 40, n) % room) * (1 << w)
    big = m.astype(np.int64) * bb - r  # exact: below 2^49
    assert np.all(big % (1 << w) == 0)
    aa = big >> w
    kb = rng.integers(-126, 100, n) - 23
    a, b = np.ldexp(aa.astype(np.float64), kb + shift), np.ldexp(bb.astype(np.float64), kb)
    ok = (aa > 0) & (bb > 0) & (bb < 1 << 24)
    with np.errstate(over="ignore"):
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        ok &= (a32.astype(np.float64) == a) & (b32.astype(np.float64) == b) & np.isfinite(a32)
    sa = np.where(rng.random(n) < 0.5, np.float32(-1), np.float32(1))
    sb = np.where(rng.random(n) < 0.5, np.float32(-1), np.float32(1))
    return (a32 * sa)[ok], (b32 * sb)[ok]


def tie_cases(rng, n):
    """near_ties for normal quotients over the whole exponent range (up to the overflow
    threshold) and for subnormal quotients at every precision they have."""
    a, b = [], []
    x, y = near_ties(rng, n, 25, rng.integers(-124, 130, n))
    a.append(x), b.append(y)
    for w in range(1, 25):
        x, y = near_ties(rng, n // 24, w, np.full(n // 24, w - 150))
        a.append(x), b.append(y)
    return np.concatenate(a), np.concatenate(b)


def subnormal_results(rng, n):
    """Random subnormal quotients q with a = RN(q b) and its neighbours."""
    qs = rng.integers(1, 1 << 24, n) * np.ldexp(1.0, -150)  # subnormal quotients and midpoints
    b2 = np.ldexp(1.0 + rng.integers(0, 1 << 23, n) / 2.0**23, rng.integers(1, 127, n))
    sa, sb = _neighbours((qs * b2).astype(np.float32), b2.astype(np.float32))
    sign = np.where(rng.random(sa.size) < 0.5, np.float32(-1), np.float32(1))
    return sa * sign, sb


def families(rng):
    """(name, a, b) for every family of cases."""
    yield ("random classes",) + random_pairs(rng, 150_000 * SCALE)
    yield ("exponent pairs",) + exponent_pairs(rng, sigs=4 * SCALE)
    yield ("near midpoints",) + near_midpoints(rng, 150_000 * SCALE)
    yield ("near ties",) + tie_cases(rng, 400_000 * SCALE)
    yield ("subnormal results",) + subnormal_results(rng, 60_000 * SCALE)


def mismatches(a, b, got):
    """Indices where got is not a / b (NumPy's float32 division) bit for bit, a NaN where the
    quotient is any NaN."""
    with np.errstate(all="ignore"):
        want = a / b
    assert want.dtype == np.float32
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    return np.flatnonzero(~same), want


@pytest.fixture(scope="module")
def cases():
    """Every family's (name, a, b), float32, made once for both paths."""
    rng = np.random.default_rng(20260)
    return [(name, np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32))
            for name, a, b in families(rng)]


@pytest.mark.parametrize("general", [False, True], ids=["exact_div", "div_general"])
def test_exact_div_bit_identical_to_host_division(cases, general):
    failures = []
    for name, a, b in cases:
        got = CUDA.exact_div_check(a, b, general=general)
        bad, want = mismatches(a, b, got)
        if bad.size:
            shown = ", ".join(f"{a[i].view(np.uint32):08x} / {b[i].view(np.uint32):08x}: device "
                              f"{got[i].view(np.uint32):08x}, host {want[i].view(np.uint32):08x}"
                              for i in bad[:5])
            failures.append(f"{name}: {bad.size} of {a.size} differ ({shown})")
    assert not failures, "; ".join(failures)


def test_exact_div_check_rejects_mismatched_arrays():
    with pytest.raises(cc.InvalidArgument, match="a and b"):
        CUDA.exact_div_check(np.ones(3, np.float32), np.ones(4, np.float32))
