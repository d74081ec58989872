"""Deprecated import path: the cost model is :mod:`ccompress.perfmodel`.
Importing this module warns (DeprecationWarning); it hands every name on to that module,
and will be removed."""
from .. import perfmodel as _new
from .._internal.deprecated import moved

__getattr__, __dir__ = moved(__name__, _new)
