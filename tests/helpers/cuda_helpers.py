"""What the GPU tests share: whether they can run (and why not), device buffers without
CuPy or PyTorch (ccompress._internal.device.DeviceBuffer), filled from and read back into NumPy, and
DeviceArray, a CUDA array that offers nothing but DLPack, for the Communicator tests."""
import ctypes
import os

import numpy as np

import ccompress as cc
from ccompress._internal.arrays import _DLTensor, dtype_name
from ccompress._internal.device import DeviceBuffer  # noqa: F401 - the tests take it from here


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_DL_DTYPES = {"float32": (2, 32), "float16": (2, 16), "bfloat16": (4, 16)}


class DeviceArray:
    """A contiguous CUDA array in ccompress's own device memory (a DeviceBuffer) that a
    Communicator reads through DLPack like any CuPy array or CUDA tensor. Allocates results
    like itself with ``new_empty`` (as PyTorch tensors do). It needs no array library, so the
    Communicator's device path is tested where CuPy and PyTorch are absent (the CPU
    emulator of cuda/emu)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.buf = DeviceBuffer(self.size * self.dtype.itemsize)
        self._exported = []  # the DLPack structures handed out, alive as long as the array

    @classmethod
    def of(cls, a):
        a = np.ascontiguousarray(a)
        out = cls(a.shape, a.dtype)
        out.buf.upload(a)
        return out

    def numpy(self):
        return self.buf.download(np.empty(self.shape, self.dtype))

    def new_empty(self, shape):
        return DeviceArray(shape, self.dtype)

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0

    def __dlpack__(self, stream=None):
        shape = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        m = _DLManagedTensor()
        t = m.dl_tensor
        t.data, t.ndim, t.byte_offset = self.buf.ptr, len(self.shape), 0
        t.device.device_type, t.device.device_id = 2, 0
        t.dtype.code, t.dtype.bits = _DL_DTYPES[dtype_name(self.dtype)]
        t.dtype.lanes = 1
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        self._exported.append((m, shape))
        return _capsule_new(ctypes.addressof(m), b"dltensor", None)


def host_ptr(a):
    """The address of a NumPy array's data."""
    return a.__array_interface__["data"][0]


def cuda_or_reason():
    """(the _cuda module, None) when a GPU is usable, else (None, why the GPU tests skip).
    With CCOMPRESS_REQUIRE_GPU=1 (perf/gpu_check.sh) a missing GPU is an error instead."""
    try:
        from ccompress import _cuda
        why = None if _cuda.device_count() > 0 else \
            "no CUDA device is visible on this machine (the GPU tests need one)"
    except ImportError as e:
        _cuda, why = None, f"ccompress was built without its CUDA module ({e})"
    if why and os.environ.get("CCOMPRESS_REQUIRE_GPU") == "1":
        raise RuntimeError(f"CCOMPRESS_REQUIRE_GPU=1 but {why}")
    return (None, why) if why else (_cuda, None)


def framework_cases():
    """The kinds of CUDA array to test: ccompress's own DeviceArray (plain DLPack), and CuPy
    and PyTorch when they are installed with CUDA."""
    cases = ["dlpack"]
    try:
        import cupy  # noqa: F401
        cases.append("cupy")
    except Exception:  # noqa: BLE001 - absent or without a driver
        pass
    try:
        import torch
        if torch.cuda.is_available():
            cases.append("torch")
    except Exception:  # noqa: BLE001
        pass
    return cases


def to_device(lib, a):
    if lib == "dlpack":
        return DeviceArray.of(a)
    if lib == "cupy":
        import cupy
        return cupy.asarray(a)
    import torch
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def to_host(lib, a):
    if lib == "dlpack":
        return a.numpy()
    if lib == "cupy":
        import cupy
        return cupy.asnumpy(a)
    return a.cpu().numpy()


def device_run(dr, kind, in_ptr, out_ptr, n, dtype, codec, *, algo=None, op=None, slice_elems=0,
               timeout=60.0, seed=0, **buffers):
    """One collective straight on a _cuda.DeviceRank (no Communicator): the options go to
    _core.CallSpec, the buffers (step, stream, residuals, ready_event) to DeviceRank.run."""
    spec = cc._core.CallSpec(kind, algo=algo, op=op, slice_elems=slice_elems, timeout=timeout,
                             seed=seed)
    return dr.run(spec, in_ptr, out_ptr, n, dtype, codec, **buffers)
