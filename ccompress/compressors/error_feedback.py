"""Deprecated import path: ErrorFeedback is :mod:`ccompress.error_feedback`.
Importing this module warns (DeprecationWarning); it hands every name on to that module,
and will be removed."""
from .. import error_feedback as _new
from .._internal.deprecated import moved

__getattr__, __dir__ = moved(__name__, _new)
