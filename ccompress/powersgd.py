"""The documented import path of PowerSGD (README, "Stateful compressors"); the code is
:mod:`ccompress.compressors.powersgd`."""
from .compressors.powersgd import PowerSGD

__all__ = ["PowerSGD"]
