"""Finding libnccl at run time: ``NCCL_ROOT``, then the nvidia-nccl wheel, then the system.

Nothing here is needed to import ccompress: a missing or unloadable libnccl only disables
the NCCL transport, and :func:`find_nccl` says why.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
from pathlib import Path
from typing import Dict, List, Optional


def _candidates() -> List[Path]:
    paths: List[Path] = []
    root = os.environ.get("NCCL_ROOT")
    if root:
        paths += [Path(root) / "lib" / "libnccl.so.2", Path(root) / "lib64" / "libnccl.so.2"]
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        paths.append(Path(base) / "nccl" / "lib" / "libnccl.so.2")
    system = ctypes.util.find_library("nccl")
    if system:
        paths.append(Path(system))
    return paths


def find_nccl() -> Dict[str, Optional[str]]:
    """``{"path": ..., "version": "2.x.y"}`` of the first loadable libnccl, or
    ``{"path": None, "reason": ...}`` listing where it looked."""
    tried = []
    for path in _candidates():
        if path.is_absolute() and not path.exists():
            tried.append(f"{path} (absent)")
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        version = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(version)) != 0:
            tried.append(f"{path} (ncclGetVersion failed)")
            continue
        v = version.value
        major, minor, patch = (v // 10000, (v % 10000) // 100, v % 100) if v >= 10000 else \
            (v // 1000, (v % 1000) // 100, v % 100)
        return {"path": str(path), "version": f"{major}.{minor}.{patch}"}
    where = "; ".join(tried) if tried else "NCCL_ROOT unset, no nvidia-nccl wheel, none on the system"
    return {"path": None, "reason": f"libnccl not found ({where}); pip install nvidia-nccl-cu13"}
