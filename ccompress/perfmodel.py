"""The documented path of the cost model (docs: ``ccompress.perfmodel.AlgoModel``,
``load_codec_costs``, ...): this name is the module :mod:`ccompress.tools.perfmodel` itself."""
import sys

from .tools import perfmodel as _perfmodel

sys.modules[__name__] = _perfmodel
