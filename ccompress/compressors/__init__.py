"""Stateful gradient compressors over a Communicator (NumPy): error feedback, GIFT whitening, TSR two-sided low rank, TSR-Adam, PowerSGD. The PyTorch front-ends are in ``ccompress.torch``."""
