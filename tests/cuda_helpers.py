"""Device buffers for the GPU tests without CuPy or PyTorch: ccompress._cuda's malloc/copy,
filled from and read back into NumPy arrays."""
import os

import numpy as np


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


class DeviceBuffer:
    """``nbytes`` of device memory, freed with the object."""

    def __init__(self, cuda, nbytes, device=0):
        self.cuda, self.device, self.nbytes = cuda, device, int(nbytes)
        self.ptr = cuda.malloc(max(self.nbytes, 1), device)

    @classmethod
    def of(cls, cuda, a, device=0):
        a = np.ascontiguousarray(a)
        buf = cls(cuda, a.nbytes, device)
        buf.upload(a)
        return buf

    def upload(self, a):
        a = np.ascontiguousarray(a)
        assert a.nbytes <= self.nbytes
        self.cuda.copy(self.ptr, a.__array_interface__["data"][0], a.nbytes)

    def download(self, like):
        out = np.empty_like(like)
        self.cuda.copy(out.__array_interface__["data"][0], self.ptr, out.nbytes)
        return out

    def bytes(self, n=None):
        return self.download(np.empty(self.nbytes if n is None else n, np.uint8))

    def __del__(self):
        try:
            self.cuda.free(self.ptr, self.device)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
