"""Many small arrays through one collective: the stateful compressors (PowerSGD, TSR, GIFT)
pack their per-tensor factors into one float32 buffer per phase, so a step costs a few
collectives whatever the number of tensors, and every byte is counted by the transport."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import zlib

import numpy as np


def allreduce_many(comm, arrays: Sequence[np.ndarray], codec: str = "none", op: str = "avg",
                   algo: str = "two_shot") -> List[np.ndarray]:
    """The all-reduce of every array (float32), through one ``comm.allreduce`` call
    (two_shot by default: the fewest bytes beyond two ranks). Results are bit-identical on
    all ranks (the collective's invariant)."""
    if not arrays:
        return []
    flat = np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in arrays])
    out = comm.allreduce(flat, codec=codec, algo=algo, op=op)
    parts, at = [], 0
    for a in arrays:
        parts.append(out[at:at + a.size].reshape(a.shape))
        at += a.size
    return parts


def orthonormal_columns(y: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the columns of y (reduced QR, signs fixed so that R has a
    non-negative diagonal): deterministic, so equal inputs give equal bases on every rank."""
    q, r = np.linalg.qr(np.asarray(y, np.float64))
    signs = np.where(np.diag(r) < 0, -1.0, 1.0)
    return q * signs


def shared_gaussian(seed: int, tag: Sequence[int], shape) -> np.ndarray:
    """A Gaussian matrix every rank draws alike from (seed, *tag): sketches need no traffic."""
    return np.random.default_rng([int(seed)] + [int(t) for t in tag]).standard_normal(shape)


def matrix_sides(shape) -> Tuple[int, int]:
    """(m, n) of a tensor viewed as a matrix (first dimension by the rest); (1, size) for
    vectors, which no low-rank method compresses."""
    shape = tuple(shape)
    if len(shape) < 2:
        return 1, int(np.prod(shape))
    return int(shape[0]), int(np.prod(shape[1:]))


def as_matrix(g: np.ndarray) -> np.ndarray:
    """A gradient as a matrix: first dimension by the product of the others."""
    g = np.asarray(g)
    return g.reshape(g.shape[0], -1) if g.ndim >= 2 else g.reshape(1, -1)


def name_tag(name: str) -> int:
    """A stable integer for a tensor name (seeds its shared sketches on every rank alike)."""
    return zlib.crc32(name.encode())
