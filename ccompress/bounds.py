"""The documented path of the error bounds (README, docs: ``ccompress.bounds.allreduce_error_bound``,
``hier_error_bound``): this name is the module :mod:`ccompress.tools.bounds` itself."""
import sys

from .tools import bounds as _bounds

sys.modules[__name__] = _bounds
