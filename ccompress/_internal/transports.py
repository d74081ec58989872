"""Making the transports behind Communicator.from_mpi and from_nccl."""
from __future__ import annotations

from typing import Any, Optional, Tuple

from .device import _cuda_module, _nccl_path
from .errors import InvalidArgument, Unsupported


def mpi_transport(comm: Any) -> Tuple[Any, Any]:
    """(the mpi4py communicator, default COMM_WORLD; a _mpi.MpiTransport over it)."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise Unsupported("Communicator.from_mpi needs mpi4py: pip install mpi4py mpich") from e
    try:
        from .. import _mpi
    except ImportError as e:
        raise Unsupported(f"this ccompress build has no MPI transport ({e}); "
                          "reinstall with mpich (pip install mpich) present") from e
    comm = MPI.COMM_WORLD if comm is None else comm
    handle = MPI._handleof(comm)
    if handle >= 1 << 63:  # mpi4py gives a sign-extended MPICH handle (Dup'd comms) unsigned
        handle -= 1 << 64
    return comm, _mpi.MpiTransport(handle)


def nccl_rank(comm: Any, unique_id: Optional[bytes], rank: Optional[int], size: Optional[int],
              device: Optional[int]) -> Tuple[Any, Any]:
    """(the mpi4py communicator that shared the id, or None; a _cuda.DeviceRank over NCCL)."""
    cuda = _cuda_module()
    path = _nccl_path()
    if unique_id is None:
        if comm is None:
            try:
                from mpi4py import MPI
            except ImportError as e:
                raise Unsupported("from_nccl needs unique_id, rank and size, or mpi4py "
                                  "to share the id") from e
            comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        unique_id = comm.bcast(cuda.nccl_unique_id(path) if rank == 0 else None, root=0)
    elif rank is None or size is None:
        raise InvalidArgument("from_nccl with a unique_id needs rank= and size=")
    if int(cuda.device_count()) == 0:
        raise Unsupported("from_nccl needs a CUDA device; none is visible")
    if device is None:
        device = int(rank) % int(cuda.device_count())
    t = cuda.nccl_rank(bytes(unique_id), int(size), int(rank), int(device), path)
    return comm, t
