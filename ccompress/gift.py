"""Deprecated import path: the NumPy GIFT is :mod:`ccompress.compressors.gift`.
Importing this module warns (DeprecationWarning); it hands every name on to that module,
and will be removed."""
from .compressors import gift as _new
from ._internal.deprecated import moved

__getattr__, __dir__ = moved(__name__, _new, aliases={"GIFT": "NumpyGIFT"})
