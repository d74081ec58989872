"""Turning user arrays into validated host buffers, and allocating results like them.

NumPy arrays (ml_dtypes.bfloat16 included) are read through ``__array_interface__``;
anything else through DLPack (PyTorch, JAX, CuPy, ...). Every check here runs before any
data moves, and every failure is an :class:`InvalidArgument` that says what to do.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import ml_dtypes
import numpy as np

from .errors import InvalidArgument

SUPPORTED = ("float32", "bfloat16", "float16")
_HINT = "ccompress reduces float32, bfloat16 and float16 — cast first"

# DLPack: the v1 ABI (DLManagedTensorVersioned, which carries a read-only flag) when the
# producer offers it for max_version=(1, 0), else the v0.x one; both start with a DLTensor.
_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST = 1, 2, 3
_KDL_FLOAT, _KDL_BFLOAT = 2, 4
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                 10: "rocm", 13: "cuda_managed", 14: "oneapi"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_DLPACK_FLAG_READ_ONLY = 1
_VERSIONED = b"dltensor_versioned"

_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass
class ArrayView:
    """A contiguous buffer of a supported dtype, kept alive by ``owner``: host memory, or
    the memory of CUDA device ``device``."""

    ptr: int
    n: int
    dtype: str
    shape: Tuple[int, ...]
    readonly: bool
    owner: Any
    device: Optional[int] = None


def dtype_name(dt: Any) -> str:
    """Our name for a NumPy dtype, or its own name when unsupported."""
    dt = np.dtype(dt)
    if dt == np.float32:
        return "float32"
    if dt == np.float16:
        return "float16"
    return dt.name


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype for one of SUPPORTED (bfloat16 through ml_dtypes)."""
    if name == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _check_dtype(name: str, what: str) -> None:
    if name not in SUPPORTED:
        raise InvalidArgument(f"{what} has dtype {name}; {_HINT}")


def _device_of(x: Any) -> str | None:
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return None
    kind, index = dev()
    kind = int(kind)
    if kind == _KDL_CPU:
        return None
    return f"{_DEVICE_NAMES.get(kind, f'device type {kind}')}:{index}"


def _fortran_order(what: str) -> InvalidArgument:
    return InvalidArgument(
        f"{what} is in Fortran (column-major) order; ccompress reads C (row-major) order: "
        f"pass np.ascontiguousarray({what}) (or .contiguous())")


def _is_jax(x: Any) -> bool:
    return type(x).__module__.split(".")[0] in ("jax", "jaxlib")


def _view_numpy(x: np.ndarray, what: str) -> ArrayView:
    name = dtype_name(x.dtype)
    _check_dtype(name, what)
    if not x.flags.c_contiguous:
        if x.flags.f_contiguous:
            raise _fortran_order(what)
        raise InvalidArgument(
            f"{what} is not contiguous; pass np.ascontiguousarray({what}) (or .contiguous())")
    return ArrayView(int(x.__array_interface__["data"][0]), int(x.size), name, tuple(x.shape),
                     not x.flags.writeable, x)


def _export(x: Any, what: str, on_device: bool) -> Any:
    # stream=-1 (device): no synchronisation by the producer; the communicator orders its
    # work with the caller's stream itself. max_version=(1, 0) asks for the versioned
    # capsule, whose flags say whether the memory is read-only (a read-only NumPy array is
    # exported only that way). Producers that refuse either get the plainer call.
    tries = [dict(stream=-1, max_version=(1, 0)), dict(stream=-1)] if on_device else []
    tries += [dict(max_version=(1, 0)), {}]
    for i, kw in enumerate(tries):
        try:
            return x.__dlpack__(**kw)
        except (RuntimeError, BufferError, TypeError, ValueError) as e:
            if i + 1 == len(tries):
                raise InvalidArgument(f"{what} cannot be exported through DLPack: {e}") from e


def _view_dlpack(x: Any, what: str, on_device: bool = False) -> ArrayView:
    capsule = _export(x, what, on_device)
    readonly = False
    if _capsule_valid(capsule, _VERSIONED):
        m = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, _VERSIONED))
        t, readonly = m.dl_tensor, bool(m.flags & _DLPACK_FLAG_READ_ONLY)
    else:
        t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    allowed = (_KDL_CUDA,) if on_device else (_KDL_CPU, _KDL_CUDA_HOST)
    if t.device.device_type not in allowed:
        where = "CUDA device" if on_device else "host"
        raise InvalidArgument(f"{what} is not in {where} memory (DLPack device type "
                              f"{t.device.device_type})")
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    if lanes == 1 and code == _KDL_FLOAT and bits in (32, 16):
        name = "float32" if bits == 32 else "float16"
    elif lanes == 1 and code == _KDL_BFLOAT and bits == 16:
        name = "bfloat16"
    else:
        name = {(2, 64): "float64", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8"}.get(
            (code, bits), f"DLPack code {code} with {bits} bits x{lanes}")
    _check_dtype(name, what)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = [t.strides[i] for i in range(t.ndim)]
        if not _dense(shape, strides, reversed(range(t.ndim))):
            if _dense(shape, strides, range(t.ndim)):
                raise _fortran_order(what)
            raise InvalidArgument(f"{what} is not contiguous; pass {what}.contiguous() "
                                  "(or np.ascontiguousarray)")
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    ptr = (t.data or 0) + t.byte_offset
    # The capsule's own destructor releases the producer's tensor once we drop it.
    device = int(t.device.device_id) if on_device else None
    return ArrayView(int(ptr), n, name, shape, readonly, (x, capsule), device)


def _dense(shape, strides, axes) -> bool:
    """Whether the strides (in elements) lay the axes out densely, the first of ``axes``
    varying fastest (axes of length 1 have any stride)."""
    expected = 1
    for i in axes:
        if shape[i] != 1 and strides[i] != expected:
            return False
        expected *= shape[i]
    return True


def _check_writable(x: Any, v: ArrayView, what: str) -> None:
    if _is_jax(x):
        # JAX arrays are immutable (and their DLPack export does not say so): writing into
        # one would change a value JAX assumes never changes.
        raise InvalidArgument(f"{what} is a JAX array, which is immutable; pass {what}=None "
                              "and use the returned array")
    if v.readonly:
        raise InvalidArgument(f"{what} is read-only; pass a writable array")


def cuda_device_of(x: Any) -> Optional[int]:
    """The CUDA device index of a DLPack array in device memory, else None (host arrays,
    and arrays of other devices, which :func:`view` rejects with a clear message)."""
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None or isinstance(x, np.ndarray):
        return None
    kind, index = dev()
    return int(index) if int(kind) == _KDL_CUDA else None


def device_view(x: Any, what: str = "x", writable: bool = False) -> ArrayView:
    """Validates ``x`` as a contiguous CUDA array of a supported dtype (CuPy, PyTorch, JAX,
    ... through DLPack); ``view`` is its host counterpart."""
    if cuda_device_of(x) is None:
        raise InvalidArgument(f"{what} is not a CUDA array; pass a CuPy array or a CUDA "
                              "tensor, or use a host communicator for host arrays")
    v = _view_dlpack(x, what, on_device=True)
    if writable:
        _check_writable(x, v, what)
    return v


def view(x: Any, what: str = "x", writable: bool = False) -> ArrayView:
    """Validates ``x`` as a contiguous host array of a supported dtype.

    Raises InvalidArgument for an unsupported dtype, a non-contiguous or Fortran-order
    layout, device memory (this communicator moves host memory), or, with ``writable``, an
    array that may not be written: read-only NumPy, DLPack's read-only flag, JAX.
    """
    device = _device_of(x)
    if device is not None:
        raise InvalidArgument(
            f"{what} is on {device}, but this communicator reduces host memory; pass a CPU "
            "array (x.cpu(), cupy.asnumpy(x)) — device arrays need the CUDA backend")
    if isinstance(x, np.ndarray):
        v = _view_numpy(x, what)
    elif hasattr(x, "__dlpack__"):
        v = _view_dlpack(x, what)
    elif isinstance(x, (list, tuple)) or np.isscalar(x):
        raise InvalidArgument(f"{what} is a {type(x).__name__}; pass an array "
                              "(np.asarray(x, dtype=np.float32))")
    else:
        raise InvalidArgument(f"{what} of type {type(x).__name__} is neither a NumPy array "
                              "nor a DLPack array")
    if writable:
        _check_writable(x, v, what)
    return v


def as_numpy(v: ArrayView) -> np.ndarray:
    """A NumPy array over the memory of ``v`` (no copy), shaped like the caller's array."""
    dt = numpy_dtype(v.dtype)
    if v.n == 0:
        return np.zeros(v.shape, dt)
    buf = (ctypes.c_char * (v.n * dt.itemsize)).from_address(v.ptr)
    return np.frombuffer(buf, dtype=dt, count=v.n).reshape(v.shape)


def empty_like(x: Any, shape: Tuple[int, ...], dtype: str) -> Any:
    """A new array of ``shape`` and ``dtype`` from the same library as ``x`` (NumPy when
    that library cannot hand out writable host memory)."""
    if isinstance(x, np.ndarray):
        return np.empty(shape, dtype=x.dtype)
    if hasattr(x, "new_empty"):  # PyTorch, host or device
        return x.new_empty(shape)
    device = cuda_device_of(x)
    if device is not None and type(x).__module__.split(".")[0] == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=x.dtype)
    if device is not None:
        raise InvalidArgument(f"cannot allocate a result like a {type(x).__name__} on the "
                              "device; pass out= (an array of the result's size and dtype)")
    return np.empty(shape, dtype=numpy_dtype(dtype))


def like_input(x: Any, result: Any) -> Any:
    """Returns ``result`` (allocated by :func:`empty_like`) as the caller's array type."""
    if isinstance(result, np.ndarray) and not isinstance(x, np.ndarray):
        ns = getattr(x, "__array_namespace__", None)
        if ns is not None:
            try:
                return ns().asarray(result)
            except Exception:  # a namespace without bf16 or host arrays: keep NumPy
                return result
    return result
