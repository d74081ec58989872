"""Per-element error bounds of compressed collectives, for checking results against an
fp64 reference (tests, ccompress-perf's #wrong column).

One quantization errs, per coefficient (the element itself, or its Walsh-Hadamard coefficient
for rotated codecs), by at most ``u * M + v * R`` where M is the largest |coefficient| of its
scale group and R that of its run piece (two-level scales), or ``u * |x|`` for plain casts
(2^-8 bf16, 2^-11 fp16, 2^-24 float32). The constants are the ones each codec states in its
format header (cuda/src/codecs/<family>/<family>.h), read from its family's registry entry
(``Codec.error_model()``: u, v, the floor, and how scale groups lie over rotation blocks);
stochastic rounding doubles them. A collective quantizes each element ``q`` times (one_shot 1, two_shot 2, tree
depth+1, ring n); every partial sum it quantizes has group maxima at most ``S`` = the sum
over ranks of each rank's maxima (rotations are linear), inflated by the earlier errors, so a
coefficient errs by at most::

    q * (u * S + v * S_run) * (1 + u)^q  +  floors  +  2^-16 * S   (fp32 rotations)

A rotated block of p coefficients maps back with p^-1/2 times their sum. Then come the fp32
sums, ``(n + 4) * 2^-23 * sum |x|``, the division for ``avg``, and the cast to a 16-bit output.
Groups, blocks and run pieces are laid out as the schedule lays them out: from each rank's
chunk start for ring, two_shot and reduce_scatter, from element 0 otherwise.
"""
from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np

from . import _core
from .codec import Codec

_CAST = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
# Half the subnormal spacing: the absolute error floor of a cast.
_CAST_FLOOR = {"float32": 2.0 ** -150, "bfloat16": 2.0 ** -134, "float16": 2.0 ** -25}
_CHUNKED = ("ring", "two_shot", "reduce_scatter")


def quantizations(algo: str, nranks: int) -> int:
    """Times each element is encoded by ``algo`` on its way to the result.

    Parameters
    ----------
    algo : str
        The resolved schedule: ring, two_shot, tree, one_shot, or the collectives
        reduce_scatter and allgather.
    nranks : int
        The number of ranks.

    Returns
    -------
    int
        1 at one rank, for one_shot, reduce_scatter and allgather; 2 for two_shot; ``nranks``
        for ring; the tree's depth plus one for tree.

    Raises
    ------
    ValueError
        An unknown algo (``"auto"`` included: pass the schedule it resolved to).
    """
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


def _constants(c: "_core.Codec") -> Tuple[float, float, float]:
    """(u, v, floor) of one quantization of a scaled codec (see the module comment)."""
    e = c.error_model()
    return e["u"], e["v"], e["floor"]


def _chunks(n: int, nranks: int, algo: str) -> List[Tuple[int, int]]:
    if algo in _CHUNKED and nranks > 1:
        return [tuple(_core.chunk_range(n, nranks, r)) for r in range(nranks)]
    return [(0, n)]


def _wht(a: np.ndarray) -> np.ndarray:
    """Normalised Walsh-Hadamard transform along the last axis (a power of two long)."""
    n = a.shape[-1]
    h = 1
    while h < n:
        a = a.reshape(a.shape[:-1] + (n // (2 * h), 2, h))
        a = np.stack([a[..., 0, :] + a[..., 1, :], a[..., 0, :] - a[..., 1, :]], axis=-2)
        a = a.reshape(a.shape[:-3] + (n,))
        h *= 2
    return a / np.sqrt(n)


def _scaled_bound(x: np.ndarray, c: "_core.Codec", q: int) -> np.ndarray:
    """Per element, the quantization part of the bound for one chunk (rows: ranks)."""
    u, v, floor = _constants(c)
    grow = (1 + u) ** q
    nranks, m = x.shape
    h, g = c.rotation, c.group
    piece = c.run_block or m  # run pieces: Codec::run_block
    out = np.zeros(m)
    for p0 in range(0, m, max(piece, 1)):
        xs = x[:, p0:p0 + piece]
        mlen = xs.shape[1]
        blocks = c.rotation_blocks(mlen)
        if h:  # full blocks in one batched transform, then the few tail blocks
            full = mlen - mlen % h
            coef = [_wht(xs[:, :full].reshape(nranks, -1, h)).reshape(nranks, full)]
            coef += [_wht(xs[:, o:o + p]) for o, p in blocks if o >= full]
            coef = np.abs(np.concatenate(coef, axis=1))
        else:
            coef = np.abs(xs)
        run_amax = float(coef.max(axis=1).sum()) if coef.size else 0.0
        # Scale groups: nvfp4 and hint4 lay groups of g from the piece start over the
        # coefficients; taco and hint8 tile each rotation block (a short block is one group).
        if not c.error_model()["groups_tile_blocks"] or not h:
            spans = [(0, mlen)]
        else:
            spans = [(0, mlen - mlen % h)] + [(o, p) for o, p in blocks if p < h]
        coef_err = np.zeros(mlen)
        for o, p in spans:
            if p == 0:
                continue
            gg = min(g, p)
            a = np.pad(coef[:, o:o + p], ((0, 0), (0, -p % gg))).reshape(nranks, -1, gg)
            s = np.repeat(a.max(axis=2).sum(axis=0), gg)[:p]
            coef_err[o:o + p] = q * (u * s + v * run_amax) * grow + q * floor + 2.0 ** -16 * s
        if h:  # a block of p coefficients maps back with p^-1/2 times their sum
            full = mlen - mlen % h
            per_block = coef_err[:full].reshape(-1, h).sum(axis=1) / np.sqrt(h)
            out[p0:p0 + full] = np.repeat(per_block, h)
            for o, p in blocks:
                if o >= full:
                    out[p0 + o:p0 + o + p] = coef_err[o:o + p].sum() / np.sqrt(p)
        else:
            out[p0:p0 + mlen] = coef_err
    return out


def allreduce_error_bound(parts: Any, codec: Any, algo: str, op: str = "sum",
                          dtype: str = "float32") -> np.ndarray:
    """Largest |result - exact| allowed per element for an all-reduce of ``parts``.

    Also valid for reduce_scatter (algo ``"reduce_scatter"``, then index the result's chunk)
    and one-rank calls. The tests check every lossy result against it, computed in fp64.

    Parameters
    ----------
    parts : array_like
        Shape (nranks, n) (or (nranks, ...), flattened per rank), any real dtype: each rank's
        input.
    codec : str or Codec
        The codec spec.
    algo : str
        The resolved schedule (see :func:`quantizations`).
    op : {"sum", "avg"}, default "sum"
        The reduction.
    dtype : {"float32", "bfloat16", "float16"}, default "float32"
        The dtype the collective ran in (the output's rounding is added).

    Returns
    -------
    numpy.ndarray
        float64, n elements: the bound of each element.

    Raises
    ------
    InvalidArgument
        An unknown codec spec.
    ValueError
        An unknown algo.
    """
    x = np.asarray(parts, dtype=np.float64)
    if x.ndim != 2:
        x = x.reshape(x.shape[0], -1)
    nranks, n = x.shape
    return _level_bound(x, Codec.parse(codec)._c, quantizations(algo, nranks),
                        _chunks(n, nranks, algo), op, dtype)


def _level_bound(x: np.ndarray, c: Any, q: int, chunks: List[Tuple[int, int]], op: str,
                 dtype: str) -> np.ndarray:
    """allreduce_error_bound's body: ``q`` quantizations of runs laid out from each of
    ``chunks``' starts, over the rows (ranks) of ``x``."""
    nranks, n = x.shape
    absx = np.where(np.isfinite(x), np.abs(x), 0.0)
    e = (c.bind(dtype) if c.unbound else c).error_model()  # `none` casts to the input dtype
    if e["cast"]:
        u = e["u"]  # a stochastic cast errs by up to a whole spacing: in u and the floor
        s = absx.sum(axis=0)
        bound = q * u * (1 + u) ** q * s + q * e["floor"]
    else:
        bound = np.zeros(n)
        for lo, hi in chunks:
            bound[lo:hi] = _scaled_bound(np.where(np.isfinite(x[:, lo:hi]), x[:, lo:hi], 0.0),
                                         c, q)
    bound = bound + (nranks + 4) * 2.0 ** -23 * absx.sum(axis=0)
    ref = x.sum(axis=0)
    if op == "avg":
        bound, ref = bound / nranks, ref / nranks
    if dtype != "float32":
        bound = bound + _CAST[dtype] * (np.abs(ref) + bound) + _CAST_FLOOR[dtype]
    return bound + 1e-37


def hier_error_bound(parts: Any, codec: Any, inter_algo: str, ranks_per_node: int,
                     intra_codec: Any = "none", op: str = "sum",
                     dtype: str = "float32", kind: str = "allreduce") -> np.ndarray:
    """Largest |result - exact| allowed per element for ``algo="hier"`` over consecutive
    nodes of ``ranks_per_node`` ranks, with the flat ``inter_algo`` between nodes (two_shot
    or auto: the one-plan schedule, the only one of ``kind`` reduce_scatter; index the
    result's chunk then). For allgather, hier's result is the flat one's.

    One plan (cuda/src/collectives/hier.cc): runs are the P chunks at every level. Each
    node's sum of a chunk is quantized once with ``intra_codec`` (G > 1), then the node sums
    ``q`` times with ``codec`` (one contribution each when there are several nodes, and the
    result for allreduce), the second level widened by how far the node sums may be from
    the exact ones (see below).

    Leveled (ring, tree, one_shot between nodes), it adds the three levels' bounds: each node's reduce-scatter with ``intra_codec`` (one
    quantization, laid out by the node's shards); the inter-node all-reduce of every shard
    with ``codec``, bounded on the exact node sums and widened by how far the node sums it
    really received may be from them (each quantization's error grows with its group's
    largest coefficient, which that distance can raise by up to the group's rotation size
    to the half times the distance); and, when ``intra_codec`` is lossy, the all-gather's
    quantization of the result, widened the same way.

    Parameters
    ----------
    parts : array_like
        Shape (nranks, n): each rank's input.
    codec : str or Codec
        The codec between nodes.
    inter_algo : str
        The flat schedule between nodes.
    ranks_per_node : int
        Consecutive ranks per node.
    intra_codec : str or Codec, default "none"
        The codec inside a node.
    op : {"sum", "avg"}, default "sum"
        The reduction.
    dtype : {"float32", "bfloat16", "float16"}, default "float32"
        The dtype the collective ran in.
    kind : {"allreduce", "reduce_scatter"}, default "allreduce"
        The collective.

    Returns
    -------
    numpy.ndarray
        float64, n elements: the bound of each element.

    Raises
    ------
    ValueError
        The ranks do not form nodes of ``ranks_per_node``, or an unknown algo.
    InvalidArgument
        An unknown codec spec.
    """
    x = np.asarray(parts, dtype=np.float64)
    if x.ndim != 2:
        x = x.reshape(x.shape[0], -1)
    nranks, n = x.shape
    g = int(ranks_per_node)
    if g < 1 or nranks % g:
        raise ValueError(f"{nranks} ranks do not form nodes of {ranks_per_node}")
    nodes = nranks // g
    finite = np.where(np.isfinite(x), x, 0.0)
    node_sums = finite.reshape(nodes, g, n).sum(axis=1)
    intra = Codec.parse(intra_codec)
    level_dtype = dtype  # every level writes the user dtype
    if kind != "allreduce" or inter_algo in ("two_shot", "auto"):
        return _one_plan_bound(finite, Codec.parse(codec), intra, g, kind, op, dtype)
    b1 = np.zeros((nodes, n))
    if g > 1:
        for j in range(nodes):
            b1[j] = allreduce_error_bound(finite[j * g:(j + 1) * g], intra, "reduce_scatter",
                                          op, level_dtype)
    if op == "avg":
        node_sums = node_sums / g
    total = b1.sum(axis=0)
    if nodes > 1:
        inter = Codec.parse(codec)
        b2 = np.zeros(n)
        for lo, hi in (_core.chunk_range(n, g, local) for local in range(g)):
            if hi > lo:
                b2[lo:hi] = allreduce_error_bound(node_sums[:, lo:hi], inter, inter_algo, op,
                                                  level_dtype)
        total = total + b2 + _widening(inter, inter_algo, nodes, b1, level_dtype)
    mid = total
    if g > 1 and intra.lossy(dtype):
        result = node_sums.sum(axis=0) / (nodes if op == "avg" else 1)
        b3 = allreduce_error_bound(result[None, :], intra, "one_shot", "sum", level_dtype)
        total = total + b3 + _widening(intra, "one_shot", 1, mid[None, :], level_dtype)
    return total + 1e-37


def _one_plan_bound(x: np.ndarray, inter: Codec, intra: Codec, g: int, kind: str, op: str,
                    dtype: str) -> np.ndarray:
    """hier_error_bound of the one-plan schedule (finite ``x``: rows are ranks)."""
    nranks, n = x.shape
    nodes = nranks // g
    chunks = [tuple(_core.chunk_range(n, nranks, c)) for c in range(nranks)]
    node_sums = x.reshape(nodes, g, n).sum(axis=1)
    b1 = np.zeros((nodes, n))
    if g > 1:
        for j in range(nodes):  # the intra-node sums stay in fp32: no division, no cast
            b1[j] = _level_bound(x[j * g:(j + 1) * g], intra._c, 1, chunks, "sum", "float32")
    q = (1 if nodes > 1 else 0) + (1 if kind == "allreduce" else 0)
    total = b1.sum(axis=0)
    if q:
        codec = inter if nodes > 1 else intra  # one node: the result is encoded for inside it
        level = "two_shot" if q == 2 else "one_shot"  # (_widening's count of quantizations)
        total = (total + _level_bound(node_sums, codec._c, q, chunks, "sum", "float32")
                 + _widening(codec, level, max(nodes, q), b1, "float32"))
    scale = nranks if op == "avg" else 1
    total = total / scale
    if dtype != "float32":
        ref = np.abs(node_sums.sum(axis=0)) / scale
        total = total + _CAST[dtype] * (ref + total) + _CAST_FLOOR[dtype]
    return total + 1e-37


def _widening(codec: Codec, algo: str, nranks: int, dist: np.ndarray,
              dtype: str) -> np.ndarray:
    """How much more a collective's quantizations may err when each rank's input is up to
    ``dist`` (rows: ranks) away from the one its bound was computed on."""
    c = codec._c
    q = quantizations(algo, nranks)
    sums = (nranks + 4) * 2.0 ** -23 * dist.sum(axis=0)  # the fp32 sums of the moved inputs
    e = (c.bind(dtype) if c.unbound else c).error_model()
    if e["cast"]:
        u = e["u"]
        return q * u * (1 + u) ** q * dist.sum(axis=0) + sums
    u, v, _ = _constants(c)
    # A coefficient of a rotation block of h moves by at most h^1/2 times the largest input
    # move, and an element gathers h^-1/2 times the sum of its block's h coefficient errors.
    reach = max(c.rotation, 1)
    per_rank_max = dist.max(axis=1).sum() if dist.size else 0.0
    return q * (u + v) * (1 + u) ** q * reach * per_rank_max + sums
