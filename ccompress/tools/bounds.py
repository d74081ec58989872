"""Deprecated import path: the per-element error bounds are :mod:`ccompress.bounds`.
Importing this module warns (DeprecationWarning); it hands every name on to that module,
and will be removed."""
from .. import bounds as _new
from .._internal.deprecated import moved

__getattr__, __dir__ = moved(__name__, _new)
