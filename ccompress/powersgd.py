"""Deprecated import path: PowerSGD is :mod:`ccompress.compressors.powersgd`.
Importing this module warns (DeprecationWarning); it hands every name on to that module,
and will be removed."""
from .compressors import powersgd as _new
from ._internal.deprecated import moved

__getattr__, __dir__ = moved(__name__, _new)
