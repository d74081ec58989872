"""The documented import path of the NumPy TSR-Adam (README, "Stateful compressors"): the code
is :mod:`ccompress.compressors.tsr_adam`, where the class is ``NumpyTSRAdam`` (``TSRAdam``
here, as documented; the PyTorch optimizer is :class:`ccompress.torch.TSRAdam`)."""
from .compressors.tsr_adam import REFRESH_MODES, NumpyTSRAdam
from .compressors.tsr_adam import NumpyTSRAdam as TSRAdam

__all__ = ["NumpyTSRAdam", "REFRESH_MODES", "TSRAdam"]
