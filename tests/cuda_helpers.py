"""What the GPU tests share: whether they can run (and why not), and device buffers without
CuPy or PyTorch (ccompress._device.DeviceBuffer), filled from and read back into NumPy."""
import os

import numpy as np
import pytest

from ccompress._device import DeviceBuffer  # noqa: F401 - the tests take it from here


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
    """The array libraries with CUDA arrays installed here (a skipped case when none is)."""
    cases = []
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
    return cases or [pytest.param("none", marks=pytest.mark.skip(
        reason="neither CuPy nor PyTorch with CUDA is installed"))]


def to_device(lib, a):
    if lib == "cupy":
        import cupy
        return cupy.asarray(a)
    import torch
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def to_host(lib, a):
    if lib == "cupy":
        import cupy
        return cupy.asnumpy(a)
    return a.cpu().numpy()
