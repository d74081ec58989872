"""build_info(): versions and what this installation can do (the transports, CUDA, NCCL,
MPI), with the reason for anything missing; ``ccompress.build_info`` and the ccompress-info
command (:mod:`ccompress.tools.info`) print it."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from typing import Any, Dict, Optional

from .. import _core
from .nccl import find_nccl


def _mpi_info() -> Dict[str, Any]:
    try:
        from .. import _build_config
        status = _build_config.MPI_STATUS
    except ImportError:
        status = "unknown (no _build_config)"
    info: Dict[str, Any] = {"build": status, "available": False}
    try:
        import mpi4py
        info["mpi4py"] = mpi4py.__version__
        from mpi4py import MPI
        info["library"] = MPI.Get_library_version().splitlines()[0].strip()
    except Exception as e:  # noqa: BLE001 - reported, not raised
        info["reason"] = f"mpi4py unusable: {e}"
        return info
    try:
        from .. import _mpi  # noqa: F401
        info["available"] = True
    except ImportError as e:
        info["reason"] = f"MPI transport module not importable: {e}"
    return info


def _cuda_info() -> Dict[str, Any]:
    try:
        from .. import _build_config
        built, status = _build_config.CUDA_BUILT, _build_config.CUDA_STATUS
    except ImportError:
        built, status = False, "unknown (no _build_config)"
    info: Dict[str, Any] = {"built": built, "build": status, "available": False, "devices": 0}
    if not built:
        info["reason"] = "the CUDA module was not built"
        return info
    try:
        from .. import _cuda
        info["devices"] = int(_cuda.device_count())
        info["available"] = info["devices"] > 0
        if not info["available"]:
            info["reason"] = "no CUDA device or driver on this machine"
    except ImportError as e:
        info["reason"] = f"CUDA module not importable: {e}"
    return info


def _nccl_info(cuda: Dict[str, Any]) -> Dict[str, Any]:
    lib = find_nccl()
    info: Dict[str, Any] = {"library": lib, "available": False}
    if lib["path"] is None:
        info["reason"] = lib["reason"]
    elif not cuda["built"]:
        info["reason"] = "the CUDA module (which holds the NCCL transport) was not built"
    elif not cuda["available"]:
        info["reason"] = f"libnccl found, but no CUDA device: {cuda.get('reason', '')}"
    else:
        try:
            from .. import _cuda
            info["loaded_version"] = _cuda.nccl_load(lib["path"])
            info["available"] = True
        except Exception as e:  # noqa: BLE001 - reported, not raised
            info["reason"] = f"libnccl did not load: {e}"
    return info


def build_info() -> Dict[str, Any]:
    """Versions and what this installation can do, with the reason for anything missing.
    Never needs a GPU, CUDA driver, NCCL or MPI to run.

    Returns
    -------
    dict
        ``version``, ``python``, ``cpu_backend``, ``cpu_isa``, ``transports`` (each
        transport's availability), ``mpi``, ``cuda``, ``nccl`` (each with ``available`` and the
        ``reason`` when not), and the installed versions of numpy, torch, cupy and jax (None
        when absent). ``ccompress-info`` prints it as JSON.
    """
    info: Dict[str, Any] = {
        "version": _core.__version__,
        "python": sys.version.split()[0],
        "cpu_backend": True,
        "cpu_isa": _core.cpu_isa(),
        "transports": {"inproc": True},
        "mpi": _mpi_info(),
        "cuda": _cuda_info(),
    }
    info["nccl"] = _nccl_info(info["cuda"])
    info["transports"]["mpi"] = info["mpi"]["available"]
    info["transports"]["nccl"] = info["nccl"]["available"]
    info["transports"]["cuda_loopback"] = info["cuda"]["available"]
    for mod in ("numpy", "torch", "cupy", "jax"):
        info[mod] = _installed_version(mod)
    return info


def _installed_version(module: str) -> Optional[str]:
    """The version of an installed array library, None when it is not installed. Read from
    the module when it is already imported, else from the installed distribution's metadata
    (importing torch or jax only to print a version would take seconds)."""
    m = sys.modules.get(module)
    if m is not None and getattr(m, "__version__", None):
        return str(m.__version__)
    if importlib.util.find_spec(module) is None:
        return None
    names = {"cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x")}.get(module, (module,))
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed (version unknown)"

