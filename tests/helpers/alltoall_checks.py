"""What the all-to-all tests share (tests/collectives, tests/mpi, tests/cuda): split tables,
every rank's input built from a seed, and the check of what one rank received against the
sender's own encode + decode of each piece (bit for bit) and against fp64 (the codec's stated
bound for one quantization of that piece alone)."""
import numpy as np

import ccompress as cc
from ccompress._internal.arrays import dtype_name, numpy_dtype
from ccompress.bounds import allreduce_error_bound
from helpers.common import same_bits

# Every codec family, the two-level (run-scaled) ones and rotations included.
CODECS = ["none", "bf16", "fp16", "fp8_e4m3:g128", "fp8_e5m2:g32", "taco:g32", "taco_e5m2:g128",
          "hint8", "hint8:g32:h256:s32", "nvfp4", "hnvfp4:h64", "hint4", "hint4:g32:h64:s16",
          "mxfp8", "mxfp8_e5m2", "mxfp4"]


def split_table(rng, size, most, zeros=True):
    """table[i][j]: rows rank i sends to rank j, uneven, some zero when ``zeros``."""
    t = rng.integers(0 if zeros else 1, most + 1, size=(size, size))
    if zeros and size > 1:
        t[0, size - 1] = 0  # at least one empty piece
    return t


def inputs(seed, table, row_shape=(), dtype="float32"):
    """Rank i's input: sum(table[i]) rows of ``row_shape``, each piece at its own scale (a
    piece of large values next to one of small ones: a shared scale would show)."""
    out = []
    for i, row in enumerate(table):
        rng = np.random.default_rng([seed, i])
        pieces = [rng.standard_normal((int(k),) + tuple(row_shape))
                  * np.exp(3 * rng.standard_normal()) for k in row]
        out.append(np.concatenate(pieces).astype(numpy_dtype(dtype)) if pieces else
                   np.zeros((0,) + tuple(row_shape), numpy_dtype(dtype)))
    return out


def piece(x, table, i, j):
    """The piece of rank i's input ``x`` for rank j."""
    lo = int(np.sum(table[i][:j]))
    return x[lo:lo + int(table[i][j])]


def check_received(y, xs, table, codec, rank, bits=True):
    """``y`` is what ``rank`` received: piece by piece (from rank 0 up), bit for bit the
    sender's codec.roundtrip of that piece (unless ``bits`` is False: stochastic rounding,
    whose noise depends on the sender), and within the codec's bound of one quantization of
    that piece against fp64."""
    c = cc.Codec.parse(codec)
    want, lo = [], 0
    for i, x in enumerate(xs):
        p = piece(x, table, i, rank)
        got = y[lo:lo + len(p)]
        lo += len(p)
        assert got.shape == p.shape and got.dtype == p.dtype, (i, got.shape, p.shape)
        if bits:
            want.append(c.roundtrip(np.ascontiguousarray(p)))
        if p.size:
            ref = p.astype(np.float64).reshape(-1)
            bound = allreduce_error_bound(ref[None], codec, "one_shot", "sum",
                                          dtype_name(p.dtype))
            err = np.abs(got.astype(np.float64).reshape(-1) - ref)
            assert np.all(err <= bound), (codec, "from rank", i, float((err / bound).max()))
    assert lo == len(y), (lo, len(y))
    if bits and want:
        got = np.ascontiguousarray(y)
        assert same_bits([np.concatenate(want), got]), (codec, "rank", rank)
