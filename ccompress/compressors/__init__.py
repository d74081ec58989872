"""Stateful gradient compressors that drive a Communicator (NumPy): GIFT whitening
(:mod:`~ccompress.compressors.gift`), TSR two-sided low rank (:mod:`~ccompress.compressors.tsr`),
TSR-Adam (:mod:`~ccompress.compressors.tsr_adam`) and PowerSGD
(:mod:`~ccompress.compressors.powersgd`). The error feedback they keep is
:class:`ccompress.ErrorFeedback` (the codec layer); the PyTorch front-ends are in
``ccompress.torch``."""
