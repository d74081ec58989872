"""NumPy reference of TACO (taco:gG, taco_e5m2:gG; format in cuda/src/codecs/taco/taco.h), written
from docs/algorithms.md ("TACO"): the same fp32 operations in the same order as the library,
so wire bytes and decoded values match bit for bit. Its rotation (blocked Walsh-Hadamard)
and stochastic-noise pieces are shared by the hint8 reference tests."""
import ml_dtypes
import numpy as np

F32 = np.float32
# base name -> (ml_dtypes type, FP8_MAX, mantissa bits, exponent bias)
FMT = {"taco": (ml_dtypes.float8_e4m3fn, 448.0, 3, 7),
       "taco_e5m2": (ml_dtypes.float8_e5m2, 57344.0, 2, 15)}
SIZES = [0, 1, 2, 3, 5, 7, 31, 32, 33, 97, 127, 128, 129, 255, 257, 1000, 4099]


# ---- pieces shared with the hint8 tests ----

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
