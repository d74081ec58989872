"""Data-driven codec choice: ``codec="auto8"`` and ``codec="auto4"``.

For each call, every rank measures the error of one round trip of each candidate codec on a
sample of its own tensor, in two layouts when the tensor is 2-D (scale groups running along
rows, as stored, or along columns: the "data-driven reshaping"). The ranks then sum their
squared errors and squared norms with an exact float32 all-reduce, so all of them see the same
totals and pick the same (codec, layout): the one with the least relative error within the
bit budget (8.5 bits per element for auto8, 4.6 for auto4). The choice is reported in
``comm.last_stats``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

import numpy as np

from ._errors import CCompressError
from .codec import Codec

# Candidates in order of preference on ties; those this build does not register are skipped.
CANDIDATES = {
    "auto8": ("fp8_e4m3:g128", "fp8_e4m3:g32", "taco:g128", "hint8", "hint8:g32",
              "hint8:g16:s8", "hint8:g32:s8"),
    "auto4": ("nvfp4", "hnvfp4:g16", "hint4"),
}
BUDGET_BITS = {"auto8": 8.5, "auto4": 4.6}
SAMPLE_ELEMS = 1 << 15


def is_auto(spec: Any) -> bool:
    return isinstance(spec, str) and spec in CANDIDATES


def candidates(name: str) -> List[Codec]:
    """The registered candidates of ``auto8``/``auto4`` that fit its bit budget."""
    out = []
    for spec in CANDIDATES[name]:
        try:
            c = Codec.parse(spec)
        except CCompressError:
            continue
        if c.wire_bytes(SAMPLE_ELEMS) * 8 / SAMPLE_ELEMS <= BUDGET_BITS[name] and c not in out:
            out.append(c)
    return out


def matrix_shape(shape: Sequence[int]) -> Tuple[int, int]:
    """(rows, cols) of a tensor seen as a matrix: the last axis against all the others."""
    if len(shape) < 2:
        return 1, int(np.prod(shape, dtype=np.int64)) if shape else 1
    cols = int(shape[-1])
    return int(np.prod(shape[:-1], dtype=np.int64)), cols


def layouts(shape: Sequence[int]) -> Tuple[str, ...]:
    rows, cols = matrix_shape(shape)
    return ("rows", "cols") if rows > 1 and cols > 1 else ("rows",)


def arrange(a: np.ndarray, layout: str) -> np.ndarray:
    """The flat array a collective sees: as stored, or column by column."""
    if layout == "rows":
        return a.reshape(-1)
    rows, cols = matrix_shape(a.shape)
    return np.ascontiguousarray(a.reshape(rows, cols).T).reshape(-1)


def restore(flat: np.ndarray, shape: Sequence[int], layout: str) -> np.ndarray:
    """Inverse of :func:`arrange`."""
    if layout == "rows":
        return flat.reshape(shape)
    rows, cols = matrix_shape(shape)
    return flat.reshape(cols, rows).T.reshape(shape)


def _sample(a: np.ndarray, layout: str) -> np.ndarray:
    """About SAMPLE_ELEMS elements that meet the same scale groups as in the full tensor:
    whole rows (or whole columns), evenly spread."""
    rows, cols = matrix_shape(a.shape)
    m = a.reshape(rows, cols).astype(np.float32)
    if layout == "cols":
        m = m.T
    if m.size <= SAMPLE_ELEMS:
        return m.reshape(-1)
    keep = max(1, SAMPLE_ELEMS // m.shape[1])
    idx = np.linspace(0, m.shape[0] - 1, keep).astype(np.int64)
    sample = m[idx].reshape(-1)
    return sample[:max(SAMPLE_ELEMS, m.shape[1])]


@dataclass
class Choice:
    codec: Codec
    layout: str
    table: List[Tuple[str, str, float]]  # (codec, layout, relerr) for every candidate


def choose(name: str, a: np.ndarray, exact_sum) -> Choice:
    """Picks a (codec, layout) for host array ``a``; ``exact_sum(v)`` must return the exact
    float32 all-reduce of a small vector (the same on every rank)."""
    cands = candidates(name)
    if not cands:
        raise CCompressError(f"{name}: no candidate codec is registered in this build")
    options = [(c, lay) for lay in layouts(a.shape) for c in cands]
    stats = np.zeros(2 * len(options), np.float32)
    samples = {lay: _sample(a, lay) for lay in layouts(a.shape)}
    for i, (c, lay) in enumerate(options):
        s = samples[lay]
        r = c.roundtrip(s).astype(np.float64)
        # NaN/Inf inputs, and the outputs a codec's policy lets them reach, say nothing about
        # its error on the rest: leave them out (else one NaN would decide the choice).
        finite = np.isfinite(s) & np.isfinite(r)
        d = (r - s)[finite]
        stats[2 * i] = float(np.dot(d, d))
        stats[2 * i + 1] = float(np.dot(s[finite].astype(np.float64), s[finite]))
    totals = np.asarray(exact_sum(stats), dtype=np.float64)
    rel = np.sqrt(totals[0::2] / np.maximum(totals[1::2], 1e-300))
    best = int(np.argmin(rel))  # first on ties: the order above breaks them
    table = [(c.name, lay, float(r)) for (c, lay), r in zip(options, rel)]
    return Choice(options[best][0], options[best][1], table)


def allreduce(comm: Any, call: Any, name: str) -> dict:
    """Runs the all-reduce ``call`` (resolved with codec "none") with the (codec, layout)
    that ``auto8``/``auto4`` picks for its data: the ranks agree on the choice through one
    exact all-reduce of their sample errors, then reduce as stored ("rows") or column by
    column ("cols", through a rearranged copy). Host arrays only; the choice goes to
    ``last_stats``."""
    from dataclasses import replace

    from . import _arrays

    a = _arrays.as_numpy(call.x)
    choice = choose(name, a, lambda v: comm._exact_sum(v, "two_shot"))
    if choice.layout == "rows":
        stats = comm._run(replace(call, codec=choice.codec))
    else:
        flat = arrange(a, "cols")
        res = np.empty_like(flat)
        stats = comm._run(replace(call, codec=choice.codec, x=_arrays.view(flat),
                                  out=_arrays.view(res)))
        _arrays.as_numpy(call.out)[...] = restore(res, call.x.shape, "cols")
    stats.update(auto=name, layout=choice.layout, candidates=choice.table)
    return stats
