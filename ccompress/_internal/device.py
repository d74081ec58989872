"""The CUDA side's entry points that need no communicator: the CUDA module, libnccl, NCCL
unique ids and stream handles."""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import InvalidArgument, Unsupported
from .nccl import find_nccl


def _cuda_module():
    try:
        from .. import _cuda
    except ImportError as e:
        raise Unsupported(f"this ccompress build has no CUDA module ({e}); reinstall with nvcc "
                          "on PATH (CCOMPRESS_CUDA=ON)") from e
    return _cuda


def _nccl_path() -> str:
    found = find_nccl()
    if found["path"] is None:
        raise Unsupported(found["reason"])
    return str(found["path"])


def nccl_unique_id() -> bytes:
    """A fresh NCCL unique id for :meth:`ccompress.Communicator.from_nccl` (make it on one
    rank and share it with the others).

    Returns
    -------
    bytes
        The id.

    Raises
    ------
    Unsupported
        This build has no CUDA module, or libnccl is not found.
    """
    return _cuda_module().nccl_unique_id(_nccl_path())


def cuda_stream_handle(stream: Any, x: Any = None) -> int:
    """A cudaStream_t handle from ``stream``: an int, a CuPy stream (``.ptr``), a PyTorch
    stream (``.cuda_stream``); None means the current stream of ``x``'s library (PyTorch's
    ``torch.cuda.current_stream()``, CuPy's ``cupy.cuda.get_current_stream()``), else the
    legacy default stream (0)."""
    if stream is None:
        lib = type(x).__module__.split(".")[0] if x is not None else ""
        if lib == "torch":
            import torch

            return int(torch.cuda.current_stream(x.device).cuda_stream)
        if lib == "cupy":
            import cupy

            return int(cupy.cuda.get_current_stream().ptr)
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    raise InvalidArgument(f"stream of type {type(stream).__name__} is not a CUDA stream; pass "
                          "an int handle, a CuPy stream or a torch.cuda.Stream")


class DeviceBuffer:
    """``nbytes`` of device memory of CUDA device ``device`` (ccompress's own allocation,
    outside any array library's pool), freed with the object. Copies in and out wait for
    the copy (and, for ``download``, first for all work on the device)."""

    def __init__(self, nbytes: int, device: int = 0):
        self._cuda = _cuda_module()
        self.device, self.nbytes = int(device), int(nbytes)
        self.ptr = self._cuda.malloc(max(self.nbytes, 1), self.device)

    @classmethod
    def of(cls, a: Any, device: int = 0) -> "DeviceBuffer":
        """A device copy of the NumPy array ``a``."""
        a = np.ascontiguousarray(a)
        buf = cls(a.nbytes, device)
        buf.upload(a)
        return buf

    def upload(self, a: Any) -> None:
        """Copies the NumPy array ``a`` (at most ``nbytes``) to the start of the buffer."""
        a = np.ascontiguousarray(a)
        if a.nbytes > self.nbytes:
            raise InvalidArgument(f"{a.nbytes} bytes do not fit a {self.nbytes}-byte buffer")
        self._cuda.copy(self.ptr, a.__array_interface__["data"][0], a.nbytes)

    def download(self, like: Any) -> Any:
        """A NumPy array shaped like ``like`` from the start of the buffer, read after all
        work enqueued on the device so far (any stream) has finished."""
        out = np.empty_like(like)
        if out.nbytes > self.nbytes:
            raise InvalidArgument(f"{out.nbytes} bytes asked of a {self.nbytes}-byte buffer")
        self._cuda.synchronize(self.device)
        self._cuda.copy(out.__array_interface__["data"][0], self.ptr, out.nbytes)
        return out

    def bytes(self, n: Any = None) -> Any:
        """The first ``n`` bytes (default all) as a uint8 NumPy array."""
        return self.download(np.empty(self.nbytes if n is None else n, np.uint8))

    def __del__(self):
        try:
            self._cuda.free(self.ptr, self.device)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
