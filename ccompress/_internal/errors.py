"""The ccompress exception family. C++ errors arrive as these classes."""


class CCompressError(Exception):
    """Base class of every error ccompress raises."""


class InvalidArgument(CCompressError, ValueError):
    """An argument cannot be used (dtype, size, layout, spec string, buffer)."""


class Unsupported(CCompressError, NotImplementedError):
    """Valid, but not available in this build or on this machine."""


class MismatchError(CCompressError):
    """Ranks disagree about a collective (count, dtype, codec, algo, op); every rank raises it
    at the same point, so the communicator stays usable."""


class MessageError(CCompressError):
    """A received message is malformed: its header (magic, version, dtype, codec, count,
    call) or its size differs from what the receiver expects. The message names the field,
    the peer and both values; the communicator is unusable afterwards."""


class NonFiniteError(CCompressError, FloatingPointError):
    """A collective called with ``nonfinite="raise"`` produced NaN or Inf outputs. Raised on
    every rank alike after the call completed (the output holds the result); the
    communicator stays usable."""


class CollectiveTimeout(CCompressError, TimeoutError):
    """A peer made no progress within the communicator's timeout."""


class CudaError(CCompressError):
    """A CUDA runtime call failed."""


class NcclError(CCompressError):
    """An NCCL call failed."""


class MpiError(CCompressError):
    """An MPI call failed."""
