"""The ccompress exception family. C++ errors arrive as these classes."""


class CCompressError(Exception):
    """Base class of every error ccompress raises."""


class InvalidArgument(CCompressError, ValueError):
    """An argument cannot be used (dtype, size, layout, spec string, buffer)."""


class Unsupported(CCompressError, NotImplementedError):
    """Valid, but not available in this build or on this machine."""


class MismatchError(CCompressError):
    """Ranks disagree about a collective (count, dtype, codec, algo, op), or a message is malformed."""


class CollectiveTimeout(CCompressError, TimeoutError):
    """A peer made no progress within the communicator's timeout."""


class CudaError(CCompressError):
    """A CUDA runtime call failed."""


class NcclError(CCompressError):
    """An NCCL call failed."""


class MpiError(CCompressError):
    """An MPI call failed."""
