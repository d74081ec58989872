"""ccompress: compressed collective communication.

Quick start::

    import ccompress as cc
    codec = cc.Codec.parse("fp8_e4m3:g128")
    comm = cc.Communicator.from_mpi()                 # under mpiexec, host arrays over MPI
    y = comm.allreduce(x, codec="fp8_e4m3:g128", algo="two_shot", op="avg")
    parts = cc.simulate.allreduce([x0, x1, x2, x3], codec="fp8_e4m3:g128", algo="ring")
"""
from ._internal.errors import (CCompressError, CollectiveTimeout, CudaError, InvalidArgument,
                               MessageError, MismatchError, MpiError, NcclError, NonFiniteError,
                               Unsupported)
from . import _core
from . import simulate
from .codec import Codec
from .error_feedback import ErrorFeedback
from ._internal.build_info import build_info
from ._internal.device import nccl_unique_id
from .communicator import ALGOS, OPS, Communicator, Work, run_cuda_loopback, run_inproc

__version__ = _core.__version__
chunk_range = _core.chunk_range

__all__ = [
    "ALGOS", "OPS", "CCompressError", "Codec", "CollectiveTimeout", "Communicator", "CudaError",
    "ErrorFeedback", "InvalidArgument", "MessageError", "MismatchError", "MpiError", "NcclError",
    "NonFiniteError", "Unsupported", "Work", "build_info", "chunk_range", "nccl_unique_id",
    "run_cuda_loopback", "run_inproc", "simulate",
]
