"""The CUDA side's entry points that need no communicator: the CUDA module, libnccl, NCCL
unique ids and stream handles."""
from __future__ import annotations

from typing import Any

from ._errors import InvalidArgument, Unsupported


def _cuda_module():
    try:
        from . import _cuda
    except ImportError as e:
        raise Unsupported(f"this ccompress build has no CUDA module ({e}); reinstall with nvcc "
                          "on PATH (CCOMPRESS_CUDA=ON)") from e
    return _cuda


def _nccl_path() -> str:
    from ._nccl import find_nccl

    found = find_nccl()
    if found["path"] is None:
        raise Unsupported(found["reason"])
    return str(found["path"])


def nccl_unique_id() -> bytes:
    """A fresh NCCL unique id for :meth:`Communicator.from_nccl` (make it on one rank and
    share it with the others)."""
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
