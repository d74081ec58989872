"""Shared by the PyTorch tests (in-process and under mpiexec): tensors to NumPy, the fp64
reference check of a collective's result against its stated bound, and the check that
ccompress's own calls into torch raise no deprecation."""
import contextlib
import os
import sys
import warnings

import numpy as np
import torch

import ccompress
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


_CCOMPRESS_DIR = os.path.dirname(os.path.abspath(ccompress.__file__)) + os.sep
# Frames between a deprecated torch call and its caller: torch's own (its wrappers, and its
# internals the call runs), the decorator torch marks its deprecations with, and the
# warnings machinery.
_PASS_THROUGH = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,)
_PASS_THROUGH_FILES = {"typing_extensions.py", "warnings.py", "functools.py"}


def _caller_file(frame):
    """The file of the innermost frame from ``frame`` outward that is not torch's, its
    deprecation decorator's or the warnings module's: the code that made the call."""
    while frame is not None:
        f = os.path.abspath(frame.f_code.co_filename)
        if not f.startswith(_PASS_THROUGH) and os.path.basename(f) not in _PASS_THROUGH_FILES:
            return f
        frame = frame.f_back
    return ""


@contextlib.contextmanager
def no_deprecated_calls_by_ccompress():
    """Fails the block where ccompress's own code triggers a FutureWarning or a
    DeprecationWarning (a torch name or argument the installed torch deprecates, or one
    that torch's internals raise on a call ccompress makes), in any thread; the caller's
    own deprecated calls pass. Shows every other warning as usual."""
    found = []
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (FutureWarning, DeprecationWarning)):
            caller = _caller_file(sys._getframe(1))
            if caller.startswith(_CCOMPRESS_DIR):
                found.append(f"{caller}: {category.__name__}: {message}")
                return
        shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", FutureWarning)
        warnings.simplefilter("always", DeprecationWarning)
        warnings.showwarning = show
        yield
    assert not found, "ccompress's own code triggers deprecations:\n  " + "\n  ".join(
        sorted(set(found)))
