"""What the PyTorch adapters share: finding the ccompress communicator that matches a
torch.distributed process group, and calling a collective on a tensor (host memory over
MPI or in-process ranks; CUDA memory on the caller's current stream)."""
from __future__ import annotations

import os
import socket
from typing import Any, Dict, Optional

import torch

from .._errors import InvalidArgument, MismatchError, Unsupported
from ..communicator import Communicator

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_WORLD: Dict[str, Communicator] = {}


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise Unsupported(
            "no ccompress communicator was given and mpi4py is missing: launch under mpiexec "
            "with mpi4py installed (pip install mpi4py mpich), or pass comm=/group= "
            "a ccompress.Communicator") from e
    return MPI


def world_communicator() -> Communicator:
    """The ccompress communicator over ``MPI.COMM_WORLD``, created once per process (every
    rank must reach its first use, as for any collective)."""
    if "world" not in _WORLD:
        _WORLD["world"] = Communicator.from_mpi(_mpi().COMM_WORLD)
    return _WORLD["world"]


def check_matches(comm: Communicator, rank: int, size: int, what: str) -> Communicator:
    """Raises MismatchError unless ``comm`` has this rank and size."""
    if comm.rank != rank or comm.size != size:
        raise MismatchError(
            f"the ccompress communicator is rank {comm.rank} of {comm.size}, but {what} is "
            f"rank {rank} of {size}; pass a communicator over the same processes in the same "
            "order (Communicator.from_mpi(comm) with comm.Split(0, key=rank))")
    return comm


def communicator_for(process_group: Any = None, comm: Optional[Communicator] = None) -> Communicator:
    """The ccompress communicator whose ranks are those of a torch.distributed group.

    ``comm`` is checked (same rank and size) and returned (unchecked when
    torch.distributed is not initialised and no group is named). Otherwise the group must span
    the processes of ``MPI.COMM_WORLD`` (a launch under mpiexec): the communicator is made
    from COMM_WORLD, reordered by the group's ranks when they differ from MPI's.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        if comm is not None and process_group is None:
            return comm  # no process group to check it against (ranks in one process)
        raise InvalidArgument("torch.distributed is not initialised; call "
                              "torch.distributed.init_process_group (or "
                              "ccompress.torch.init_process_group_from_mpi) first")
    group = process_group if process_group is not None else dist.group.WORLD
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    what = "the torch process group"
    if comm is not None:
        return check_matches(comm, rank, size, what)
    MPI = _mpi()
    world = MPI.COMM_WORLD
    if world.size != size:
        raise MismatchError(
            f"the torch process group has {size} ranks but MPI.COMM_WORLD has {world.size}; "
            "pass comm= a ccompress.Communicator over the group's processes")
    order = world.allgather(rank)  # collective: every rank takes the same branch below
    if order == list(range(size)):
        return check_matches(world_communicator(), rank, size, what)
    key = "order " + ",".join(map(str, order))
    if key not in _WORLD:
        _WORLD[key] = Communicator.from_mpi(world.Split(0, rank))
    return check_matches(_WORLD[key], rank, size, what)


def init_process_group_from_mpi(backend: str = "gloo", **kwargs: Any) -> None:
    """``torch.distributed.init_process_group`` for a launch under mpiexec: rank and size
    from ``MPI.COMM_WORLD``, and a free TCP port on rank 0 agreed over MPI (address
    ``MASTER_ADDR`` when set, 127.0.0.1 when every rank runs on one host, else rank 0's
    host name). Collective over COMM_WORLD."""
    import torch.distributed as dist

    world = _mpi().COMM_WORLD
    addr = os.environ.get("MASTER_ADDR")
    port = None
    if world.rank == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    port = world.bcast(port, root=0)
    hosts = world.allgather(socket.gethostname())
    if addr is None:
        addr = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=world.rank,
                            world_size=world.size, **kwargs)


def check_tensor(x: Any, what: str) -> None:
    """Raises InvalidArgument unless ``x`` is a floating tensor ccompress can reduce."""
    if not isinstance(x, torch.Tensor):
        raise InvalidArgument(f"{what} is a {type(x).__name__}; pass a torch.Tensor")
    if x.dtype not in FLOAT_DTYPES:
        raise InvalidArgument(f"{what} has dtype {x.dtype}; ccompress reduces float32, "
                              "bfloat16 and float16 — cast first")


def allreduce(comm: Communicator, x: torch.Tensor, out: Optional[torch.Tensor] = None,
              **kwargs: Any) -> Any:
    """``comm.allreduce`` of a tensor (detached, made contiguous) into ``out`` (new when
    None); CUDA tensors run on the current stream of their device."""
    x = x.detach()
    if not x.is_contiguous():
        x = x.contiguous()
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if x.is_cuda:
        kwargs["stream"] = torch.cuda.current_stream(x.device).cuda_stream
    return comm.allreduce(x, out=out, **kwargs)
