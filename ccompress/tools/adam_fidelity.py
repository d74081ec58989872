"""Deprecated import path: the optimizer-aware error measures are :mod:`ccompress.adam_fidelity`.
Importing this module warns (DeprecationWarning); it hands every name on to that module,
and will be removed."""
from .. import adam_fidelity as _new
from .._internal.deprecated import moved

__getattr__, __dir__ = moved(__name__, _new)
