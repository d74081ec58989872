"""NumPy reference of the 4-bit codecs (nvfp4 / hnvfp4 / hint4), written from the formulas in
cuda/src/codecs/nvfp4/nvfp4.cc and hint4/hint4.cc: every step is the same IEEE fp32 operation,
so the wire bytes must match the library's bit for bit. Used by test_nvfp4.py, test_int4.py and
test_stochastic_rounding.py.

Independent of the C++ where it can be: E2M1 rounding is a nearest-grid-point search with
ties to the even code, E4M3 / fp16 scales are ml_dtypes / NumPy casts after clamping, int4 is
np.rint, and the stochastic noise is SplitMix64 re-implemented on uint64 arrays."""
import ml_dtypes
import numpy as np

F32 = np.float32
FLT_MIN = np.finfo(np.float32).tiny
E2M1_GRID = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float64)
NIBBLE_NAN = 0x8


def wire_size(n, group, scale_bytes):
    """[ceil(n/2) codes | ceil(n/G) scales | pad to 4 | fp32]; nothing for n = 0."""
    if n == 0:
        return 0
    return -(-(-(-n // 2) + -(-n // group) * scale_bytes) // 4) * 4 + 4


# ---- rotation: blocks of h from the run start, the tail cut into its powers of two ----

def rot_blocks(n, h):
    out = [(o, h) for o in range(0, n - n % h, h)]
    off, tail, p = n - n % h, n % h, h >> 1
    while p:
        if tail & p:
            out.append((off, p))
            off += p
        p >>= 1
    return out


def wht_norm(p):
    lg = p.bit_length() - 1
    v = F32(0.5 ** (lg // 2))  # exact
    return F32(v * F32(0.70710678118654752)) if lg & 1 else v


def random_signs(p):
    i = np.arange(p, dtype=np.uint32)
    with np.errstate(over="ignore"):
        x = i * np.uint32(0x9E3779B1) + np.uint32(0x7F4A7C15)
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x85EBCA6B)
        x ^= x >> np.uint32(13)
        x *= np.uint32(0xC2B2AE35)
        x ^= x >> np.uint32(16)
    return np.where(x & 1, F32(-1), F32(1)).astype(np.float32)


def fwht_rows(v):
    """Unnormalised butterflies over the rows of v (m, p), in hadamard.h's order, fp32."""
    m, p = v.shape
    length = 1
    while length < p:
        w = v.reshape(m, p // (2 * length), 2, length)
        a, b = w[:, :, 0, :], w[:, :, 1, :]
        v = np.stack([a + b, a - b], axis=2).reshape(m, p)
        length *= 2
    return v


def rotate(x, h, rs=False, inverse=False):
    """Per rotation block of p: WHT(sign * x) / sqrt(p), or its inverse sign * WHT(x) / sqrt(p)."""
    y = np.array(x, dtype=np.float32, copy=True)
    for p in sorted({p for _, p in rot_blocks(y.size, h)}):
        offs = [o for o, q in rot_blocks(y.size, h) if q == p]
        idx = np.add.outer(np.array(offs), np.arange(p))
        with np.errstate(invalid="ignore", over="ignore"):
            v = y[idx]
            if rs and not inverse:
                v = v * random_signs(p)
            v = fwht_rows(v) * wht_norm(p)
            if rs and inverse:
                v = v * random_signs(p)
        y[idx] = v
    return y


# ---- grids ----

def e2m1_rn(v):
    """E2M1 nibble of finite fp32 v: nearest grid point, ties to the even code, saturating."""
    a = np.abs(v.astype(np.float64))
    dist = np.abs(a[:, None] - E2M1_GRID[None, :])
    cand = dist == dist.min(axis=1, keepdims=True)
    even = cand & (np.arange(8) % 2 == 0)
    m = np.where(even.any(axis=1), even.argmax(axis=1), cand.argmax(axis=1))
    return (m | np.where((v < 0) & (m != 0), 8, 0)).astype(np.uint8)


def e2m1_value(q):
    mag = E2M1_GRID[q & 7].astype(np.float32)
    return np.where(q == NIBBLE_NAN, np.nan, np.where(q & 8, -mag, mag)).astype(np.float32)


def int4_rn(v):
    m = np.rint(np.clip(v, -7, 7)).astype(np.int32)
    return (m & 15).astype(np.uint8)


def int4_value(q):
    s = np.where(q >= 8, q.astype(np.int32) - 16, q.astype(np.int32)).astype(np.float32)
    return np.where(q == NIBBLE_NAN, np.nan, s).astype(np.float32)


def mix64(z):
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sr_uniform(seed, step, rank, index):
    """stochastic.h's noise for an array of element indices: 24 random bits in [0, 1)."""
    h = mix64(np.array([seed ^ 0x243F6A8885A308D3], np.uint64))
    h = mix64(h ^ np.uint64(step))
    h = mix64(h ^ np.uint64(rank & 0xFFFFFFFF))
    h = mix64(h ^ np.asarray(index, np.int64).astype(np.uint64))
    return (h >> np.uint64(40)).astype(np.float32) * F32(2.0 ** -24)


def e2m1_sr(v, u):
    a = np.abs(v).astype(np.float32)
    step = np.where(a < 2, F32(0.5), np.where(a < 4, F32(1), F32(2))).astype(np.float32)
    r = (np.floor(a / step + u) * step).astype(np.float32)  # a / step: exact powers of two
    return e2m1_rn(np.where(v < 0, -1, 1) * np.minimum(r, F32(6)))


def int4_sr(v, u):
    r = np.minimum(np.floor(np.minimum(np.abs(v), F32(7)) + u), F32(7))
    return int4_rn(np.where(v < 0, -r, r).astype(np.float32))


FORMATS = {  # name -> (qmax, rn, sr, value)
    "e2m1": (6.0, e2m1_rn, e2m1_sr, e2m1_value),
    "int4": (7.0, int4_rn, int4_sr, int4_value),
}


# ---- group scales ----

def encode_scale(t, bits, round_up):
    """Code (uint8 E4M3 or uint16 fp16 bits) and value of t >= 0, RNE or rounded up."""
    if bits == 8:
        code = np.minimum(t, F32(448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8).copy()
        val = lambda c: c.view(ml_dtypes.float8_e4m3fn).astype(np.float32)  # noqa: E731
        top = 0x7E
    else:
        code = t.astype(np.float16).view(np.uint16).copy()
        val = lambda c: c.view(np.float16).astype(np.float32)  # noqa: E731
        top = 0x7BFF
    if round_up:
        code = np.where((val(code) < t) & (code < top), code + 1, code).astype(code.dtype)
    return code, val(code)


def encode(x, fmt, group, rotation=0, rs=False, scale_bits=8, sr=False, ctx=(0, 0, 0, 0)):
    """Wire bytes of one run of fp32 values x."""
    qmax, rn, srq, _ = FORMATS[fmt]
    x = np.asarray(x, np.float32)
    n = x.size
    if n == 0:
        return np.zeros(0, np.uint8)
    y = rotate(x, rotation, rs) if rotation else x
    fin = np.isfinite(y)
    ay = np.where(fin, np.abs(y), F32(0)).astype(np.float32)
    cmax = F32(448 if scale_bits == 8 else 32768)
    s = np.maximum(ay.max() / F32(qmax * cmax), FLT_MIN).astype(np.float32)
    ng = -(-n // group)
    pad = ng * group - n
    amax = np.concatenate([ay, np.zeros(pad, np.float32)]).reshape(ng, group).max(axis=1)
    t = (amax / F32(qmax) / s).astype(np.float32)
    code, val = encode_scale(t, scale_bits, sr)
    d = np.repeat((val * s).astype(np.float32), group)[:n]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        v = np.where(d > 0, y / np.where(d > 0, d, F32(1)), F32(0)).astype(np.float32)
    v = np.where(fin, v, F32(0))
    if sr:
        u = sr_uniform(ctx[0], ctx[1], ctx[2], ctx[3] + np.arange(n))
        q = srq(v, u)
    else:
        q = rn(v)
    q = np.where(fin, q, NIBBLE_NAN).astype(np.uint8)
    if n % 2:
        q = np.append(q, np.uint8(0))
    payload = (q[0::2] | (q[1::2] << 4)).astype(np.uint8)
    scales = code.view(np.uint8)  # little-endian for fp16
    body = np.concatenate([payload, scales])
    body = np.concatenate([body, np.zeros(-body.size % 4, np.uint8)])
    return np.concatenate([body, s.reshape(1).view(np.uint8)])


def steps(wire, n, group, scale_bits=8):
    """Per element step d = scale * s read back from a wire buffer (the bound's d)."""
    sb = scale_bits // 8
    ng = -(-n // group)
    off = -(-n // 2)
    raw = wire[off:off + ng * sb]
    val = (raw.view(ml_dtypes.float8_e4m3fn) if sb == 1 else raw.view(np.float16)).astype(np.float32)
    s = wire[-4:].view(np.float32)[0]
    return np.repeat((val * s).astype(np.float32), group)[:n], s


def decode(wire, n, fmt, group, rotation=0, rs=False, scale_bits=8):
    if n == 0:
        return np.zeros(0, np.float32)
    value = FORMATS[fmt][3]
    codes = np.stack([wire[: -(-n // 2)] & 15, wire[: -(-n // 2)] >> 4], axis=1).reshape(-1)[:n]
    d, _ = steps(wire, n, group, scale_bits)
    with np.errstate(invalid="ignore"):
        y = (value(codes) * d).astype(np.float32)
    return rotate(y, rotation, rs, inverse=True) if rotation else y


def runs_of(n, nranks, algo, slice_elems):
    """The encoded runs of a schedule: slices from each chunk start (ring, two_shot) or from 0."""
    from ccompress import chunk_range

    if nranks > 1 and algo in ("ring", "two_shot"):
        chunks = [chunk_range(n, nranks, c) for c in range(nranks)]
    else:
        chunks = [(0, n)]
    return [(b, min(hi, b + slice_elems)) for lo, hi in chunks for b in range(lo, hi, slice_elems)]
