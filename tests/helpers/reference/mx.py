"""NumPy reference of the MX codecs (mxfp8, mxfp8_e5m2, mxfp4: OCP Microscaling v1.0), written
from the formulas in cuda/src/codecs/mxfp8/mxfp8.h and mxfp4/mxfp4.h, independent of the C++:
the shared exponent is floor(log2 amax) from np.frexp in float64, the FP8 elements are
ml_dtypes casts of the clamped quotient, E2M1 is fourbit.py's nearest-grid-point search.
Used by tests/codecs/test_mx.py."""
import ml_dtypes
import numpy as np

from .fourbit import NIBBLE_NAN, e2m1_rn, e2m1_value

BLOCK = 32
# spec -> (element type, element max, emax, half the smallest element subnormal)
FORMATS = {
    "mxfp8": (ml_dtypes.float8_e4m3fn, 448.0, 8, 2.0 ** -10),
    "mxfp8_e5m2": (ml_dtypes.float8_e5m2, 57344.0, 15, 2.0 ** -17),
    "mxfp4": ("e2m1", 6.0, 2, 2.0 ** -2),
}
# The error bound's constant per element: |x' - x| <= U * amax(block) + FLOOR.
U = {"mxfp8": 1 / 8, "mxfp8_e5m2": 1 / 8, "mxfp4": 1 / 4}


def floor_of(spec):
    return 2.0 ** -127 * FORMATS[spec][3] + 2.0 ** -149


def wire_size(spec, n):
    code_bytes = (n + 1) // 2 if spec == "mxfp4" else n
    return -(-(code_bytes + -(-n // BLOCK)) // 4) * 4


def block_amax(x64):
    """Largest finite |x| of each block of 32 (the last one shorter)."""
    n = x64.size
    a = np.where(np.isfinite(x64), np.abs(x64), 0.0)
    return np.concatenate([a, np.zeros(-n % BLOCK)]).reshape(-1, BLOCK).max(axis=1)


def scale_codes(spec, amax):
    """E8M0 code: floor(log2 amax) - emax + 127, clamped to 0..254 (0 for amax = 0)."""
    _, e = np.frexp(amax)  # amax = m 2^e, m in [0.5, 1): floor(log2 amax) = e - 1
    code = np.where(amax > 0, e - 1 - FORMATS[spec][2] + 127, 0)
    return np.clip(code, 0, 254).astype(np.uint8)


def scale_values(codes):
    """2^(code - 127) (255: NaN)."""
    v = np.ldexp(1.0, codes.astype(np.int32) - 127)
    return np.where(codes == 255, np.nan, v)


def encode(spec, x32):
    """The wire bytes of x32 (float32 values)."""
    dt, fmax = FORMATS[spec][:2]
    n = x32.size
    x64 = x32.astype(np.float64)
    codes = scale_codes(spec, block_amax(x64))
    s = np.repeat(scale_values(codes), BLOCK)[:n]
    finite = np.isfinite(x64)
    with np.errstate(invalid="ignore"):
        t = np.clip(np.where(finite, x64 / s, 0.0), -fmax, fmax)
    if spec == "mxfp4":
        q = np.where(finite, e2m1_rn(t), NIBBLE_NAN).astype(np.uint8)
        q = np.concatenate([q, np.zeros(n % 2, np.uint8)])
        payload = q[0::2] | (q[1::2] << 4)
    else:
        payload = t.astype(dt).view(np.uint8).copy()
        payload[np.isnan(x64)] = 0x7F
        if spec == "mxfp8":
            payload[np.isinf(x64)] = 0x7F
        else:
            payload[np.isinf(x64)] = np.where(x64[np.isinf(x64)] > 0, 0x7C, 0xFC)
    out = np.concatenate([payload, codes])
    return np.concatenate([out, np.zeros(wire_size(spec, n) - out.size, np.uint8)])


def decode(spec, wire, n):
    """float(q) * s in fp32."""
    code_bytes = (n + 1) // 2 if spec == "mxfp4" else n
    codes = wire[code_bytes:code_bytes + -(-n // BLOCK)]
    s = np.repeat(scale_values(codes), BLOCK)[:n].astype(np.float32)
    if spec == "mxfp4":
        b = wire[:code_bytes]
        q = np.stack([b & 15, b >> 4], axis=1).reshape(-1)[:n]
        v = e2m1_value(q)
    else:
        v = wire[:n].view(FORMATS[spec][0]).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        return (v * s).astype(np.float32)
