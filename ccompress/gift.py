"""The documented import path of the NumPy GIFT (README, "Stateful compressors"): the code is
:mod:`ccompress.compressors.gift`, where the class is ``NumpyGIFT`` (``GIFT`` here, as
documented; the PyTorch front-end is :class:`ccompress.torch.GIFT`)."""
from .compressors.gift import Kronecker, NumpyGIFT, Whitening, nystrom, roundtrip_errors
from .compressors.gift import NumpyGIFT as GIFT

__all__ = ["GIFT", "Kronecker", "NumpyGIFT", "Whitening", "nystrom", "roundtrip_errors"]
