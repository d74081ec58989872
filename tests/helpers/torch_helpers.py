"""Shared by the PyTorch tests (in-process and under mpiexec): tensors to NumPy, and the
fp64 reference check of a collective's result against its stated bound."""
import numpy as np
import torch

from ccompress.bounds import allreduce_error_bound
from helpers.common import same_bits as _same_bits

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def to_numpy(t):
    """A host NumPy copy of ``t`` in its own dtype (bfloat16 through ml_dtypes)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def check_reduced(y, parts, codec, algo, op="sum", what=""):
    """Asserts |y - fp64 reduction of parts| <= the bound of (codec, algo, op) per element
    and returns the largest error / bound ratio. ``parts``: one tensor per rank."""
    stack = np.stack([to_numpy(p).reshape(-1) for p in parts])
    ref = stack.astype(np.float64).sum(axis=0)
    if op == "avg":
        ref /= len(parts)
    dtype = DTYPE_NAMES[y.dtype]
    bound = allreduce_error_bound(stack, codec, algo, op=op, dtype=dtype)
    err = np.abs(to_numpy(y).reshape(-1).astype(np.float64) - ref)
    ratio = float((err / bound).max()) if err.size else 0.0
    assert np.all(err <= bound), f"{what}: error up to {ratio:.3g} x the bound"
    return ratio


def same_bits(tensors):
    """Whether all tensors hold exactly the same bytes."""
    return _same_bits([to_numpy(t) for t in tensors])


def rank_tensor(rank, shape, dtype=torch.float32, seed=0):
    """Rank ``rank``'s Gaussian test input, with a scale of its own (stresses the scales)."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    scale = float(np.exp(np.random.default_rng([seed, rank]).standard_normal()))
    return (torch.randn(shape, generator=g) * scale).to(dtype)


class Bucket:
    """What DDP hands a hook: a flat gradient buffer, the bucket's index and (optional) the
    parameters laid out back to back in the buffer."""

    def __init__(self, buffer, index, params=()):
        self._buffer, self._index, self._params = buffer, index, list(params)

    def parameters(self):
        return self._params

    def buffer(self):
        return self._buffer

    def index(self):
        return self._index
