"""Deprecated import path: the NumPy TSR-Adam is :mod:`ccompress.compressors.tsr_adam`.
Importing this module warns (DeprecationWarning); it hands every name on to that module,
and will be removed."""
from .compressors import tsr_adam as _new
from ._internal.deprecated import moved

__getattr__, __dir__ = moved(__name__, _new, aliases={"TSRAdam": "NumpyTSRAdam"})
