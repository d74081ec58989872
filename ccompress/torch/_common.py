"""What the PyTorch adapters share: finding the ccompress communicator that matches a
torch.distributed process group in every launch mode (torchrun, mpiexec, one process), and
calling a collective on a tensor (host memory over gloo point-to-point, MPI or in-process
ranks; CUDA memory on the caller's current stream)."""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import socket
import sys
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from .._internal import topology
from .._internal.errors import InvalidArgument, MismatchError, Unsupported
from ..communicator import Communicator

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_COMMS: Dict[Any, Communicator] = {}
_GROUPS: Dict[Any, Tuple[Any, Communicator]] = {}


@atexit.register
def _release_groups() -> None:
    """Closes the communicators made for torch groups and lets go of the groups before the
    interpreter exits. Held here until the interpreter's own teardown, a group (gloo's, even
    after destroy_process_group) would stop its threads while Python is half gone, and one of
    them that still needed the interpreter aborted the process ("terminate called without an
    active exception") after the script had finished."""
    held = list(_GROUPS.values())
    _GROUPS.clear()
    for _, comm in held:
        try:
            comm.close()
        except Exception:  # noqa: BLE001 - best effort at exit, nothing left to report to
            pass


# Set by the MPI launchers in every process they start (MPICH/Hydra and Slurm's PMI, Open
# MPI): an MPI launch is recognised without importing mpi4py, which under torchrun would
# start a 1-rank MPI world in each process.
_MPI_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise Unsupported(
            "no ccompress communicator was given and mpi4py is missing: launch under mpiexec "
            "with mpi4py installed (pip install mpi4py mpich), or pass comm=/group= "
            "a ccompress.Communicator") from e
    return MPI


def mpi_launch_size() -> Optional[int]:
    """Processes in the MPI world this process belongs to: MPI's own count when mpi4py has
    initialised MPI, else the launcher's environment; None when no MPI launcher started
    this process (torchrun, a plain ``python``)."""
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None and mod.Is_initialized() and not mod.Is_finalized():
        return mod.COMM_WORLD.Get_size()
    for var in _MPI_SIZE_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return None


def _one_rank() -> Communicator:
    """A 1-rank communicator (its sum of one tensor is that tensor: the true result)."""
    return Communicator.inproc(1)[0]


def world_communicator() -> Communicator:
    """The ccompress communicator over every process of this launch, created once per
    process (every rank must reach its first use, as for any collective).

    Returns
    -------
    ccompress.Communicator
        The world group's once torch.distributed is initialised; else, under mpiexec,
        ``MPI.COMM_WORLD``'s; else, for a single process, a 1-rank one.

    Raises
    ------
    InvalidArgument
        A multi-process launch by torchrun without torch.distributed initialised.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return communicator_for(None)
    if "world" in _COMMS:
        return _COMMS["world"]
    mpi_size = mpi_launch_size()
    torch_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if mpi_size is not None and mpi_size > 1:
        comm = Communicator.from_mpi(_mpi().COMM_WORLD)
    elif torch_size > 1:
        raise InvalidArgument(
            f"this process is one of WORLD_SIZE={torch_size} (torchrun), but "
            "torch.distributed is not initialised; call torch.distributed.init_process_group "
            "first, or pass group= a ccompress.Communicator")
    else:
        comm = _one_rank()
    _COMMS["world"] = comm
    return comm


def ranges(ranks: List[int]) -> str:
    """A list of ranks for a message: all of them up to 8, else the first and last."""
    return "[" + ", ".join(map(str, ranks)) + "]" if len(ranks) <= 8 else \
        f"[{ranks[0]}..{ranks[-1]} ({len(ranks)} ranks)]"


def differing(theirs: List[dict], labels: Dict[str, str]) -> List[str]:
    """Each setting of ``labels`` (setting -> its name in messages) whose value differs
    between the ranks' settings ``theirs`` (one dict per rank, in rank order), as
    "<label> is <value> on ranks [..], <value> on ranks [..]"."""
    out = []
    for k, label in labels.items():
        by_value: dict = {}
        for r, t in enumerate(theirs):
            by_value.setdefault(json.dumps(t[k]), []).append(r)
        if len(by_value) > 1:
            out.append(f"{label} is " + ", ".join(
                f"{json.loads(v)!r} on ranks {ranges(rs)}" for v, rs in by_value.items()))
    return out


def agree(comm: Communicator, mine: dict, labels: Dict[str, str], what: str, fix: str) -> None:
    """Compares this rank's settings ``mine`` (JSON values over the keys of ``labels``) with
    every other rank's through ``comm``: an exact all-gather of their digests and, only
    where those differ, of the settings themselves. Every rank then raises alike:
    :class:`MismatchError` "<what> differ between ranks: <each differing setting>. <fix>"."""
    if comm.size <= 1:
        return
    blob = json.dumps(mine, sort_keys=True).encode()
    digest = np.frombuffer(hashlib.sha256(blob).digest(), np.uint8).astype(np.float32)
    if (comm.allgather(digest) == digest).all():
        return
    sizes = comm.allgather(np.array([len(blob)], np.float32))[:, 0].astype(int)
    padded = np.zeros(int(sizes.max()), np.float32)
    padded[:len(blob)] = np.frombuffer(blob, np.uint8)
    every = comm.allgather(padded)
    theirs = [json.loads(bytes(row[:n].astype(np.uint8))) for row, n in zip(every, sizes)]
    raise MismatchError(f"{what} differ between ranks: " + "; ".join(differing(theirs, labels))
                        + f". {fix}")


def resolve(group: Any) -> Communicator:
    """A ccompress communicator from what an adapter's ``group=`` holds: a Communicator
    (itself), None (:func:`world_communicator`), or a torch.distributed process group
    (:func:`communicator_for`)."""
    if isinstance(group, Communicator):
        return group
    if group is None:
        return world_communicator()
    return communicator_for(group)


def check_matches(comm: Communicator, rank: int, size: int, what: str) -> Communicator:
    """Raises MismatchError unless ``comm`` has this rank and size."""
    if comm.rank != rank or comm.size != size:
        raise MismatchError(
            f"the ccompress communicator is rank {comm.rank} of {comm.size}, but {what} is "
            f"rank {rank} of {size}; pass a communicator over the same processes in the same "
            "order (Communicator.from_torch(group), or from_mpi(comm.Split(0, key=rank)))")
    return comm


def communicator_for(process_group: Any = None, comm: Optional[Communicator] = None) -> Communicator:
    """The ccompress communicator whose ranks are those of a torch.distributed group.

    ``comm`` is checked (same rank and size) and returned (unchecked when
    torch.distributed is not initialised and no group is named). Otherwise one is made
    once per group, collectively over its ranks:

    - launched by mpiexec (``init_process_group_from_mpi``) with a group spanning every
      process: over ``MPI.COMM_WORLD``, reordered by the group's ranks when they differ
      from MPI's; an MPI world whose size is not torch's world size raises MismatchError
      on every rank;
    - otherwise (torchrun, env://; subgroups under mpiexec): :meth:`Communicator.from_torch`
      over the group's own gloo point-to-point;
    - a group of one rank: a 1-rank communicator.
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
    if rank < 0:
        raise InvalidArgument("this process is not a member of the process group; only its "
                              "members may use it")
    # Keyed by name, kept with the group object: a group made again after
    # destroy_process_group reuses the name but gets a communicator of its own.
    key = ("group", getattr(group, "group_name", None) or id(group))
    if key not in _GROUPS or _GROUPS[key][0] is not group:
        _GROUPS[key] = (group, _make_for(group, rank, size, dist.get_world_size()))
    return check_matches(_GROUPS[key][1], rank, size, what)


def _make_for(group: Any, rank: int, size: int, torch_world: int) -> Communicator:
    mpi_size = mpi_launch_size()
    if mpi_size is not None and mpi_size > 1 and mpi_size != torch_world:
        raise MismatchError(
            f"this process was launched by MPI into a world of {mpi_size}, but "
            f"torch.distributed's world has {torch_world} ranks; start torch.distributed "
            "with ccompress.torch.init_process_group_from_mpi, or pass comm= a "
            "ccompress.Communicator over the group's processes")
    if size == 1:
        return _one_rank()
    if mpi_size == torch_world and size == torch_world and _mpi_transport_available():
        world = _mpi().COMM_WORLD
        if world.size != size:  # pragma: no cover - guarded by mpi_launch_size
            raise MismatchError(f"MPI.COMM_WORLD has {world.size} ranks, the group {size}")
        order = world.allgather(rank)  # collective: every rank takes the same branch below
        if order == list(range(size)):
            return Communicator.from_mpi(world)
        return Communicator.from_mpi(world.Split(0, rank))
    return Communicator.from_torch(group)


def _mpi_transport_available() -> bool:
    try:
        import mpi4py  # noqa: F401
        from .. import _mpi  # noqa: F401
    except ImportError:
        return False
    return True


def init_process_group_from_mpi(backend: str = "gloo", **kwargs: Any) -> None:
    """``torch.distributed.init_process_group`` for a launch under mpiexec: rank and size
    from ``MPI.COMM_WORLD``, and a free TCP port on rank 0 agreed over MPI (address
    ``MASTER_ADDR`` when set, 127.0.0.1 when every rank runs on one host, else rank 0's
    host name). Collective over COMM_WORLD.

    Like torchrun, it sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` from MPI, and
    ``LOCAL_WORLD_SIZE`` where every node holds the same number of consecutive ranks (it is
    removed otherwise): code that reads them, and the ``ccompress`` backend's
    ``algo="hier"`` and ``CCOMPRESS_TRACE`` file names, see the same launch as under
    torchrun.

    Parameters
    ----------
    backend : str, default "gloo"
        The torch.distributed backend (``"ccompress"``, ``"nccl"``, ...).
    **kwargs
        Passed on to ``torch.distributed.init_process_group`` (not ``rank``, ``world_size``
        or ``init_method``, which this sets).
    """
    import torch.distributed as dist

    world = _mpi().COMM_WORLD
    local_rank, per_node = topology.mpi_node(world)
    os.environ.update(RANK=str(world.rank), WORLD_SIZE=str(world.size),
                      LOCAL_RANK=str(local_rank))
    if per_node is None:
        os.environ.pop("LOCAL_WORLD_SIZE", None)
    else:
        os.environ["LOCAL_WORLD_SIZE"] = str(per_node)
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


def bucket_offsets(bucket: Any, what: str) -> List[Tuple[torch.Tensor, int]]:
    """(parameter, offset of its gradient in the flat buffer) of each parameter of a DDP
    bucket: DDP lays them out back to back in ``bucket.parameters()`` order. A layout that
    does not add up raises Unsupported (``what`` names the feature that needs it)."""
    out, at = [], 0
    for p in bucket.parameters():
        out.append((p, at))
        at += p.numel()
    n = bucket.buffer().numel()
    if at != n:
        raise Unsupported(f"a gradient bucket of {n} elements holds parameters of {at}: "
                          f"{what} needs DDP's dense back-to-back bucket layout")
    return out


def run_now(buf: torch.Tensor, body: Any) -> "torch.futures.Future[torch.Tensor]":
    """``body()`` now, in the calling thread, for a DDP hook: a Future completed with
    ``buf`` (on ``buf``'s device for CUDA), or with ``body``'s error, which DDP re-raises."""
    fut = torch.futures.Future(devices=[buf.device]) if buf.is_cuda else torch.futures.Future()
    try:
        body()
    except Exception as e:  # DDP re-raises it from the future
        fut.set_exception(e)
    else:
        fut.set_result(buf)
    return fut


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
