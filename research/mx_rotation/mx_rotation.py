"""Would a Walsh-Hadamard rotation in front of the MX codecs help, as it does for int8
(hint8) and int4 (hint4)? One quantization of each all-reduced tensor (the sum of the ranks'
parts) of perf/bench/make_tensors.py, by the library's own mxfp8 / mxfp4, after a
normalised WHT in blocks of H (0: none), mapped back; median relative L2 error over the
tensors.

    .venv/bin/python -m research.mx_rotation.mx_rotation [build/tensors/*.npz]
"""
from __future__ import annotations

import glob
import sys

import numpy as np

import ccompress as cc
from ccompress.bounds import _wht

BLOCKS = (0, 16, 32, 64, 128)


def round_trip(x: np.ndarray, spec: str, h: int) -> np.ndarray:
    """decode(encode(WHT(x))) mapped back (the normalised WHT is its own inverse)."""
    y = _wht(x.reshape(-1, h)).reshape(-1).astype(np.float32) if h else x
    c = cc.Codec(spec)
    d = c.decode(c.encode(y), y.size, "float32").astype(np.float64)
    return _wht(d.reshape(-1, h)).reshape(-1) if h else d


def main(paths) -> int:
    errs: dict = {}
    for path in paths:
        x = np.load(path)["parts"].astype(np.float32).sum(axis=0).reshape(-1)
        x = x[: x.size // 128 * 128]
        for spec in ("mxfp8", "mxfp4"):
            for h in BLOCKS:
                d = round_trip(x, spec, h)
                errs.setdefault((spec, h), []).append(np.linalg.norm(d - x) / np.linalg.norm(x))
    print(f"# one quantization, median relative L2 error over {len(paths)} tensors")
    for (spec, h), v in sorted(errs.items()):
        print(f"{spec:8s} H={h:<4d} {np.median(v):.4e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or sorted(glob.glob("build/tensors/*.npz"))))
