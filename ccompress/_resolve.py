"""Resolving a collective call once, before anything runs: the arrays (validated by the
backend: host memory, or this communicator's device), the output (given, or allocated like
the input), the stream the call orders itself with, the error-feedback residuals, the step,
the C++ side's validated options (_core.CallSpec: algo, op, slice, timeout, seed) and, for
``algo="auto"`` with a model, the algorithm. The result is a
:class:`~ccompress._internal.backends.Call` that a backend runs as it is."""
from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _core, autocodec
from ._internal import arrays as _arrays
from ._internal.backends import Call
from ._internal.errors import InvalidArgument, Unsupported
from .codec import Codec
from .error_feedback import ErrorFeedback


def resolve(comm: Any, kind: str, x: Any, *, codec: Any, out: Any, async_op: bool, stream: Any,
            step: Optional[int], error_feedback: Any = None, algo: Optional[str] = None,
            op: Optional[str] = None, hier: Tuple[Any, Optional[str]] = (None, None)
            ) -> Tuple[Call, Any, Optional[str]]:
    """(the Call, the array to return, the auto codec's name or None). ``algo`` and ``op``
    stay None where the collective has none (reduce_scatter: algo; allgather: both)."""
    auto = codec if kind == "allreduce" and autocodec.is_auto(codec) else None
    if auto and comm._device is not None:
        raise Unsupported(f"codec {auto!r} chooses on host data; on a device communicator "
                          "pass a codec spec (see ccompress-fidelity for the choice)")
    codec = Codec.parse("none" if auto else codec)
    spec = comm._spec(kind, algo, op, hier)  # validates kind, algo, op (C++), before any data
    backend = comm._backend
    xv = backend.view(x, "x")
    if kind == "allreduce":
        n_out, shape = xv.n, xv.shape
    elif kind == "allgather":
        n_out, shape = xv.n * comm.size, (comm.size,) + xv.shape
    else:
        lo, hi = _core.chunk_range(xv.n, comm.size, comm.rank)
        n_out, shape = hi - lo, (hi - lo,)
    result, ov = _output(backend, x, xv, out, shape, n_out, kind)
    if _needs_copy(kind, xv, ov):
        # The output overlaps the input other than as an in-place all-reduce (out=x): an
        # all-gather into a buffer whose own chunk is x (FSDP2), a reduce-scatter into this
        # rank's slice of x (ZeRO), or any other overlap. The collective reads a private copy
        # of x taken now, so it computes what separate buffers would. Every rank takes the
        # same branch whatever the addresses, so no rank refuses a call its peers run.
        xv = backend.copy_input(x, xv, stream)
    handle, ready = backend.order(stream, x, async_op)
    fb, residuals = _feedback(comm, error_feedback, auto, xv.n)
    if kind == "reduce_scatter":
        residuals = (residuals[0], 0)  # one quantization: no server residual
    step = comm._next_step(step)
    if algo == "auto" and comm._model is not None and not auto and not fb:
        itemsize = _arrays.numpy_dtype(xv.dtype).itemsize
        chosen = comm._model.choose_call(xv.n, itemsize, codec.name, comm.size,
                                         comm.ranks_per_node)
        if chosen:
            spec = comm._spec(kind, chosen[0], op, (None, chosen[1]))
    return Call(spec, xv, ov, codec, step, fb, residuals, handle, ready), result, auto


def _output(backend: Any, x: Any, xv: _arrays.ArrayView, out: Any, shape, n: int, what: str):
    if out is None:
        out = _arrays.empty_like(x, shape, xv.dtype)
        return out, backend.view(out, "out", writable=True)
    ov = backend.view(out, "out", writable=True)
    if ov.n != n or ov.dtype != xv.dtype:
        raise InvalidArgument(
            f"out holds {ov.n} elements of {ov.dtype}, but {what} of this x writes {n} "
            f"elements of {xv.dtype}; pass out=None or an array of that size and dtype")
    return out, ov


def _needs_copy(kind: str, xv: _arrays.ArrayView, ov: _arrays.ArrayView) -> bool:
    """Whether ``out`` shares memory with ``x`` in a way the schedules do not read and write
    in place themselves (all-reduce with out=x is the one they do)."""
    if not xv.n or not ov.n:
        return False
    in_bytes = xv.n * _arrays.numpy_dtype(xv.dtype).itemsize
    out_bytes = ov.n * _arrays.numpy_dtype(ov.dtype).itemsize
    overlaps = ov.ptr < xv.ptr + in_bytes and xv.ptr < ov.ptr + out_bytes
    return overlaps and not (kind == "allreduce" and ov.ptr == xv.ptr)


def _feedback(comm: Any, ef: Any, auto: Optional[str], n: int):
    if ef is None:
        return None, (0, 0)
    if not isinstance(ef, ErrorFeedback):
        raise InvalidArgument(f"error_feedback must be a ccompress.ErrorFeedback, "
                              f"got {type(ef).__name__}")
    if auto:
        raise Unsupported(f"error_feedback needs a fixed codec; {auto} may change the codec "
                          "and layout every call, so name the codec")
    return ef, ef.buffers(n, comm.size, comm.rank, comm._device)
