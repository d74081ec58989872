"""Resolving a collective call once, before anything runs: the arrays (validated by the
backend: host memory, or this communicator's device), the output (given, or allocated like
the input), the stream the call orders itself with, the error-feedback residuals, the step,
the C++ side's validated options (_core.CallSpec: algo, op, slice, timeout, seed) and, for
``algo="auto"`` with a model, the algorithm. The result is a
:class:`~ccompress._internal.backends.Call` that a backend runs as it is."""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from . import _core, autocodec
from ._internal import arrays as _arrays
from ._internal.backends import Call
from ._internal.errors import InvalidArgument, Unsupported
from .codec import Codec
from .error_feedback import ErrorFeedback


def resolve(comm: Any, kind: str, x: Any, *, codec: Any, out: Any, async_op: bool, stream: Any,
            step: Optional[int], error_feedback: Any = None, algo: Optional[str] = None,
            op: Optional[str] = None, hier: Tuple[Any, Optional[str]] = (None, None),
            in_splits: Any = None, out_splits: Any = None) -> Tuple[Call, Any, Optional[str]]:
    """(the Call, the array to return, the auto codec's name or None). ``algo`` and ``op``
    stay None where the collective has none (reduce_scatter: algo; allgather, alltoall:
    both); ``in_splits`` / ``out_splits`` (rows of dim 0 per rank) are alltoall's."""
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
    elif kind == "alltoall":
        given = None if out is None else backend.view(out, "out", writable=True)
        splits, n_out, shape = _alltoall_layout(comm.size, xv, in_splits, out_splits, given)
    else:
        lo, hi = _core.chunk_range(xv.n, comm.size, comm.rank)
        n_out, shape = hi - lo, (hi - lo,)
    result, ov = _output(backend, x, xv, out, shape, n_out, kind,
                         given if kind == "alltoall" else None)
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
    call = Call(spec, xv, ov, codec, step, fb, residuals, handle, ready)
    if kind == "alltoall":
        call.splits = splits + (n_out,)
    return call, result, auto


def _alltoall_layout(size: int, xv: _arrays.ArrayView, in_splits: Any, out_splits: Any,
                     out: Optional[_arrays.ArrayView]):
    """((in_splits, out_splits) in elements, the output's elements, its shape) of an
    all-to-all of ``xv`` whose splits count rows of dim 0 (rows shaped like x's). Without
    out_splits the output is ``out``'s rows, or x's without ``out``, in equal pieces, as in
    torch's all_to_all_single. Checks what this rank alone can (one split per rank, whole
    non-negative numbers adding up to the rows); whether the ranks agree with each other is
    the core's call check (check_alltoall_call)."""
    if not xv.shape:
        raise InvalidArgument("all_to_all splits x along dim 0, but x is 0-d; pass an array "
                              "with at least one dimension")
    rows, row = xv.shape[0], int(np.prod(xv.shape[1:], dtype=np.int64))

    def parse(v: Any, what: str) -> Tuple[int, ...]:
        if v is None:
            return ()
        try:
            parsed = tuple(int(s) for s in v)
            exact = all(int(s) == s for s in v)
        except (TypeError, ValueError):
            raise InvalidArgument(f"{what} must be a sequence of {size} whole numbers (rows of "
                                  f"dim 0 per rank), got {v!r}") from None
        if len(parsed) != size or not exact or any(s < 0 for s in parsed):
            raise InvalidArgument(f"{what} must be {size} non-negative whole numbers (rows of "
                                  f"dim 0, one per rank), got {list(v)!r}")
        return parsed

    ins, outs = parse(in_splits, "in_splits"), parse(out_splits, "out_splits")
    if ins and sum(ins) != rows:
        raise InvalidArgument(f"in_splits add up to {sum(ins)} rows, but x has {rows} rows "
                              "along dim 0; they must add up to x.shape[0]")
    if not ins and rows % size:
        raise InvalidArgument(f"x has {rows} rows along dim 0, which do not split into {size} "
                              "equal pieces; pass in_splits")
    out_rows = sum(outs) if outs else rows if out is None else out.n // max(row, 1)
    if not outs and out_rows % size:
        raise InvalidArgument(f"the output has {out_rows} rows, which do not split into "
                              f"{size} equal pieces; pass out_splits")
    splits = (tuple(s * row for s in ins), tuple(s * row for s in outs))
    return splits, out_rows * row, (out_rows,) + tuple(xv.shape[1:])


def _output(backend: Any, x: Any, xv: _arrays.ArrayView, out: Any, shape, n: int, what: str,
            ov: Optional[_arrays.ArrayView] = None):
    """(the array to return, its view): ``out`` checked against ``n`` elements of x's dtype
    (``ov``: its view where the caller took one already), or a new array of ``shape``."""
    if out is None:
        out = _arrays.empty_like(x, shape, xv.dtype)
        return out, backend.view(out, "out", writable=True)
    if ov is None:
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
