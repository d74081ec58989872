"""Where a resolved call runs: the host backend (CPU loops over a _core transport) or the
device backend (CUDA kernels on a _cuda.DeviceRank). Both take the same :class:`Call` and
hand it to the same binding, ``rank.run(spec, in, out, n, dtype, codec, *, step, stream,
worker_residual, server_residual, ready_event, in_splits, out_splits, out_n)``; what differs
is which arrays they accept, how a call is ordered with the caller, how a small exact sum gets
its buffers, and how the NaN/Inf of an output are counted."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import numpy as np

from . import arrays as _arrays
from .. import _core
from .arrays import ArrayView
from .errors import InvalidArgument, Unsupported


@dataclass
class Call:
    """One collective, resolved once: everything a backend needs to run it.

    ``spec`` is the C++ side's validated kind and options (algo, op, slice, timeout, seed);
    ``residuals`` the (worker, server) error-feedback addresses (0 for none); ``stream`` the
    caller's cudaStream_t and ``ready`` an event recorded on it at the call (device, async).
    """

    spec: Any
    x: ArrayView
    out: ArrayView
    codec: Any
    step: int
    feedback: Any = None
    residuals: Tuple[int, int] = (0, 0)
    stream: int = 0
    ready: Any = None
    #: all-to-all only: (in_splits, out_splits) in elements per rank (empty: equal pieces)
    #: and the output's element count
    splits: Optional[Tuple[Tuple[int, ...], Tuple[int, ...], int]] = None

    @property
    def kind(self) -> str:
        return self.spec.kind


def _run(rank: Any, call: Call) -> dict:
    in_splits, out_splits, out_n = call.splits or ((), (), -1)
    return rank.run(call.spec, call.x.ptr, call.out.ptr, call.x.n, call.x.dtype, call.codec._c,
                    step=call.step, stream=call.stream, worker_residual=call.residuals[0],
                    server_residual=call.residuals[1],
                    ready_event=0 if call.ready is None else call.ready.handle,
                    in_splits=list(in_splits), out_splits=list(out_splits), out_n=out_n)


class HostBackend:
    """Host arrays over a _core transport (in-process or MPI)."""

    device: Optional[int] = None

    def __init__(self, transport: Any):
        self.rank = transport

    def view(self, x: Any, what: str, writable: bool = False) -> ArrayView:
        return _arrays.view(x, what, writable)

    def order(self, stream: Any, x: Any, async_op: bool) -> Tuple[int, Any]:
        if stream is not None:
            raise Unsupported("stream= applies to device arrays, which need a device "
                              "communicator (Communicator.cuda_loopback or from_nccl)")
        return 0, None

    def run(self, call: Call) -> dict:
        return _run(self.rank, call)

    def copy_input(self, x: Any, xv: ArrayView, stream: Any) -> ArrayView:
        """A private copy of ``xv``, taken now (an input its output overlaps)."""
        return _arrays.view(np.array(_arrays.as_numpy(xv), copy=True))

    def count_out(self, call: Call, stats: dict) -> Tuple[int, Optional[int]]:
        """(NaN/Inf elements of this rank's output, index of the first or None)."""
        return tuple(_core.count_nonfinite(call.out.ptr, call.out.dtype, call.out.n))

    def scratch(self, v: np.ndarray) -> Tuple[ArrayView, ArrayView, Callable[[], np.ndarray]]:
        """Views of ``v`` and of a result like it, and a function that reads the result."""
        out = np.empty_like(v)
        return _arrays.view(v), _arrays.view(out), lambda: out


class DeviceBackend(HostBackend):
    """CUDA arrays of one device over a _cuda.DeviceRank (loopback or NCCL)."""

    def __init__(self, rank: Any):
        super().__init__(rank)
        self.device = int(rank.device)

    def view(self, x: Any, what: str, writable: bool = False) -> ArrayView:
        if _arrays.cuda_device_of(x) is None:
            raise InvalidArgument(
                f"{what} is not a CUDA array, but this communicator ({self.rank.name}) reduces "
                f"device memory of cuda:{self.device}; pass a CuPy array or a CUDA tensor")
        v = _arrays.device_view(x, what, writable)
        if v.device != self.device:
            raise InvalidArgument(f"{what} is on cuda:{v.device}, but this communicator uses "
                                  f"cuda:{self.device}; move it there first")
        return v

    def order(self, stream: Any, x: Any, async_op: bool) -> Tuple[int, Any]:
        """The caller's stream as a cudaStream_t handle, and for an asynchronous call an
        event recorded on that stream now: the worker thread starts the collective later,
        and the event makes it wait for the work issued before the call, not for what the
        caller issues after it (which is meant to overlap)."""
        from .device import _cuda_module, cuda_stream_handle

        handle = cuda_stream_handle(stream, x)
        if not async_op:
            return handle, None
        ready = _cuda_module().TimingEvent(self.device)
        ready.record(handle)
        return handle, ready

    def copy_input(self, x: Any, xv: ArrayView, stream: Any) -> ArrayView:
        """A private device copy of ``xv``, enqueued on the caller's stream (the collective
        starts after it, as after everything issued there before the call)."""
        from .device import DeviceBuffer, _cuda_module, cuda_stream_handle

        nbytes = xv.n * _arrays.numpy_dtype(xv.dtype).itemsize
        buf = DeviceBuffer(nbytes, self.device)
        _cuda_module().copy_async(buf.ptr, xv.ptr, nbytes, cuda_stream_handle(stream, x))
        return ArrayView(buf.ptr, xv.n, xv.dtype, xv.shape, False, buf, self.device)

    def count_out(self, call: Call, stats: dict) -> Tuple[int, Optional[int]]:
        # Counted on the device by the collective; finding the first is not.
        return stats["nonfinite_out"], None

    def scratch(self, v: np.ndarray) -> Tuple[ArrayView, ArrayView, Callable[[], np.ndarray]]:
        from .device import DeviceBuffer

        src, dst = DeviceBuffer.of(v, self.device), DeviceBuffer(v.nbytes, self.device)
        name = _arrays.dtype_name(v.dtype)
        views = [_arrays.ArrayView(b.ptr, v.size, name, v.shape, False, b, self.device)
                 for b in (src, dst)]
        return views[0], views[1], lambda: dst.download(v)


def backend_for(transport: Any) -> HostBackend:
    """A device rank (ccompress._cuda.DeviceRank, which has a ``device``) reduces CUDA arrays;
    every other transport host arrays."""
    return HostBackend(transport) if getattr(transport, "device", None) is None \
        else DeviceBackend(transport)
