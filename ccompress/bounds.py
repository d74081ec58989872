"""Per-element error bounds of compressed collectives, for checking results against an
fp64 reference (tests, ccompress-perf's #wrong column).

A codec quantization of a value v in a scale group whose largest |value| is M errs by at
most ``u * M`` (scaled codecs: ``u`` = half the top spacing of the format over its max,
1/28 for E4M3 and 1/14 for E5M2, times 1 + 2^-16 for the rounding of the scale, plus
FLT_MIN times that half spacing for groups whose scale is clamped) or ``u * |v|`` (plain
casts: 2^-8 for bf16, 2^-11 for fp16, 2^-24 for float32). A collective quantizes each element
``q`` times (one_shot 1, two_shot 2, tree depth+1, ring n) and every partial sum it
quantizes is bounded by ``S = sum over ranks of each rank's M`` inflated by earlier errors,
so the result errs by at most::

    q * u * (1 + u)^q * S  +  (n + 4) * 2^-23 * S          (fp32 sums and divisions)
    + u_out * (|ref| + that)                                 (cast to a 16-bit output)
    + q * (half the subnormal spacing of a plain cast's format, or the clamped-scale floor)


divided by n for ``avg``. Groups are laid out as the schedule lays them out: from each
rank's chunk start for ring, two_shot and reduce_scatter, from element 0 otherwise.
"""
from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from . import _core
from .codec import Codec

# u = H / FP8_MAX with H half the top spacing of the format; a scale is never below FLT_MIN,
# so a quantization also errs by up to FLT_MIN * H in groups of tiny values (codec.h).
_FP8 = {"fp8_e4m3": (16 / 448, 16.0), "fp8_e5m2": (4096 / 57344, 4096.0)}
_FLT_MIN = 2.0 ** -126
_SCALE_ROUNDING = 1 + 2.0 ** -16
_CAST = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
# Half the subnormal spacing: the absolute error floor of a cast.
_CAST_FLOOR = {"float32": 2.0 ** -150, "bfloat16": 2.0 ** -134, "float16": 2.0 ** -25}
_CHUNKED = ("ring", "two_shot", "reduce_scatter")


def quantizations(algo: str, nranks: int) -> int:
    """Times each element is encoded by ``algo`` on its way to the result."""
    if nranks == 1 or algo in ("one_shot", "reduce_scatter", "allgather"):
        return 1
    if algo == "two_shot":
        return 2
    if algo == "ring":
        return nranks
    if algo == "tree":
        depth = 0
        while (2 << depth) - 1 < nranks:
            depth += 1
        return depth + 1
    raise ValueError(f"unknown algo {algo!r} (pass the resolved schedule, not 'auto')")


def _group_starts(n: int, nranks: int, algo: str, group: int) -> np.ndarray:
    bounds: Tuple[Tuple[int, int], ...]
    if algo in _CHUNKED and nranks > 1:
        bounds = tuple(_core.chunk_range(n, nranks, c) for c in range(nranks))
    else:
        bounds = ((0, n),)
    starts = [np.arange(lo, hi, group) for lo, hi in bounds if hi > lo]
    return np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)


def _group_amax(a: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per element, the largest finite |a| of its scale group (rows: ranks)."""
    finite = np.where(np.isfinite(a), np.abs(a), 0.0)
    if a.shape[1] == 0:
        return finite
    per_group = np.maximum.reduceat(finite, starts, axis=1)
    sizes = np.diff(np.append(starts, a.shape[1]))
    return np.repeat(per_group, sizes, axis=1)


def allreduce_error_bound(parts: Any, codec: Any, algo: str, op: str = "sum",
                          dtype: str = "float32") -> np.ndarray:
    """Largest |result - exact| allowed per element for an all-reduce of ``parts``
    (shape (nranks, n), any real dtype) with ``codec`` and the resolved ``algo``; the
    output has dtype ``dtype``. Also valid for reduce_scatter (algo "reduce_scatter",
    then index the result's chunk) and one-rank calls."""
    c = Codec.parse(codec)
    x = np.asarray(parts, dtype=np.float64)
    if x.ndim != 2:
        x = x.reshape(x.shape[0], -1)
    nranks, n = x.shape
    q = quantizations(algo, nranks)
    kind = c._c.kind
    floor = 0.0
    if kind in _FP8:
        u, top = _FP8[kind]
        m = _group_amax(x, _group_starts(n, nranks, algo, c.group))
        u, floor = u * _SCALE_ROUNDING, q * _FLT_MIN * top * _SCALE_ROUNDING
    else:
        wire = dtype if c._c.unbound else c._c.raw_dtype
        u, floor = _CAST[wire], q * _CAST_FLOOR[wire]
        m = np.abs(x)
    s = m.sum(axis=0)
    bound = q * u * (1 + u) ** q * s + (nranks + 4) * 2.0 ** -23 * s + floor
    ref = x.sum(axis=0)
    if op == "avg":
        bound, ref = bound / nranks, ref / nranks
    if dtype != "float32":
        bound = bound + _CAST[dtype] * (np.abs(ref) + bound) + _CAST_FLOOR[dtype]
    return bound + 1e-37
