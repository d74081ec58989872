"""Prints digests of the encoders' output bytes (and decodes) for the shapes their baseline copies
batch differently from one group at a time: every 4-bit group size and scale width, rotation
sizes, fp8 and taco group sizes (with lengths that are and are not multiples of 8), hint8
groups, at lengths with and without a tail group, several runs, on inputs with NaN, Inf,
zeros, subnormals and a wide range. tests/codecs/test_cpu_isa.py runs it in both copies and compares
with tests/data/isa_shape_digests.json, taken from the group-at-a-time loops.

    CCOMPRESS_CPU_ISA=baseline python tests/helpers/isa_shape_digest.py > tests/data/isa_shape_digests.json
"""
import hashlib
import json

import numpy as np

import ccompress as cc

SPECS = [
    "nvfp4", "hnvfp4:g16", "hnvfp4:g16:h2", "hnvfp4:g16:h32", "hnvfp4:g16:h128:rs",
    "hnvfp4:g16:h256", "hint4", "hint4:s16", "hint4:g16:h128", "hint4:g32", "hint4:g32:s16",
    "hint4:g64:h16:rs", "hint4:g128:s16", "hint4:g256:h256", "nvfp4:sr", "hint4:g32:sr",
    "fp8_e4m3:g16", "fp8_e4m3:g40", "fp8_e4m3:g128", "fp8_e5m2:g128", "fp8_e5m2:g1000",
    "fp8_e4m3:g1024", "fp8_e4m3:g128:sr",
    "taco:g32", "taco:g128", "taco_e5m2:g512", "hint8", "hint8:g32:h128:s16",
    "hint8:g8:h16:s32:rs", "hint8:g128:h1024:s8",
]
SIZES = [1, 7, 16, 17, 33, 1023, 1024 * 16 + 5, 65_536 + 1000, 2 * 65_536]


def digest(*arrays) -> str:
    h = hashlib.blake2b(digest_size=12)
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()


def shape_input(rng, n: int, kind: int) -> np.ndarray:
    if kind == 0:
        x = rng.standard_normal(n)
    elif kind == 1:  # wide range, down to fp32 subnormals and up to near FLT_MAX
        x = rng.standard_normal(n) * np.exp(rng.uniform(-100, 88, n))
    elif kind == 2:  # NaN and +-Inf sprinkled in, and whole zero stretches
        x = rng.standard_normal(n)
        x[rng.random(n) < 0.03] = np.nan
        x[rng.random(n) < 0.03] = np.inf
        x[rng.random(n) < 0.03] = -np.inf
        x[: n // 7] = 0.0
    else:  # tiny groups next to large ones: scales that underflow E4M3 / fp16
        x = rng.standard_normal(n) * np.where(rng.random(n) < 0.5, 1e-30, 1e3)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float32)


def main() -> None:
    rng = np.random.default_rng(20261202)
    out = {}
    for spec in SPECS:
        codec = cc.Codec(spec)
        for n in SIZES:
            for kind in range(4):
                x = shape_input(rng, n, kind)
                enc = codec.encode(x)
                # NaN bits are left out of the decode: a rotation block that overflows to
                # Inf - Inf decodes to NaNs whose sign the two WHT copies may set differently
                y = codec.decode(enc, n, "float32")
                out[f"{spec} {n} {kind}"] = digest(enc, np.where(np.isnan(y), np.nan, y))
    print(json.dumps(out, indent=0, sort_keys=True))


if __name__ == "__main__":
    main()
