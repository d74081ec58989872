"""Deprecated import path: TSR is :mod:`ccompress.compressors.tsr`.
Importing this module warns (DeprecationWarning); it hands every name on to that module,
and will be removed."""
from .compressors import tsr as _new
from ._internal.deprecated import moved

__getattr__, __dir__ = moved(__name__, _new)
