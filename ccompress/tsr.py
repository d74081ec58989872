"""The documented import path of TSR (README, "Stateful compressors"); the code is
:mod:`ccompress.compressors.tsr`."""
from .compressors.tsr import TSR, TSRStep

__all__ = ["TSR", "TSRStep"]
