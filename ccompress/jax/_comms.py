"""The communicators of ccompress.jax: ids into the XLA FFI module's registry, and the
default communicator of a launch (``comm=None``).

A compiled program names its communicator by an integer id (an attribute of its custom
calls), never by an address: :func:`comm_id` registers a communicator's transport once and
releases the id when the communicator is closed or collected, after which a program that
still names it fails with :class:`InvalidArgument` instead of reaching freed memory. Host
and device communicators share one registry (in the core library): a host one is run by
the CPU handlers (ccompress._jax_ffi), a device one (``Communicator.from_nccl``) by the CUDA
handlers (ccompress._cuda) on XLA's stream.

``comm=None`` means every process of the launch (:func:`default_communicator`):

1. ``jax.distributed.initialize()`` has run: a communicator over TCP connections between
   every pair of processes (``_core.TcpTransport``), their addresses exchanged through JAX's
   coordination service key-value store. It wins where MPI is up too: its ranks are JAX's
   process indices (``jax.process_index()``), by which a JAX program shards its data.
2. else, under ``mpiexec`` (mpi4py importable, an MPI launcher's environment, more than one
   process): ``Communicator.from_mpi`` over a duplicate of ``MPI.COMM_WORLD``.
3. else :class:`InvalidArgument`: a collective outside any communicator.
"""
from __future__ import annotations

import itertools
import os
import weakref
from typing import Any, Optional

import jax
from jax._src import distributed as _jax_distributed

from .._internal import topology as _topology
from .._internal.errors import CollectiveTimeout, InvalidArgument, Unsupported
from .._internal.torch_p2p import local_address
from .. import _core
from ..communicator import Communicator

try:
    from .. import _jax_ffi
except ImportError:  # built without jax present
    _jax_ffi = None

_default: Optional[Communicator] = None
_generation = itertools.count()  # communicators made through the coordination service
# Environment variables that MPI launchers set (MPICH/Hydra, Open MPI, PMIx, Slurm's PMI).
_MPI_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def ffi_module() -> Any:
    """ccompress._jax_ffi, or Unsupported saying how to build it."""
    if _jax_ffi is None:
        raise Unsupported(
            "this ccompress build has no JAX FFI module (ccompress._jax_ffi): jax was not "
            "installed when it was built; pip install -e .[jax], then rebuild "
            "(bash scripts/setup.sh)")
    return _jax_ffi


def comm_id(comm: Communicator) -> int:
    """The registry id of ``comm`` (registered at its first use)."""
    if not isinstance(comm, Communicator):
        raise InvalidArgument(f"comm must be a ccompress.Communicator or None, "
                              f"got {type(comm).__name__}")
    ident = getattr(comm, "_jax_id", None)
    if ident is not None:
        return ident
    if not comm.usable:
        raise InvalidArgument(f"comm is unusable ({comm._broken}); make a new one (all ranks)")
    ffi = ffi_module()
    options = (comm._timeout, comm._slice, comm._seed, comm.ranks_per_node or 0)
    if comm.device is not None:  # a device communicator: the CUDA handlers run it
        from .. import _cuda

        ident = _cuda.jax_register(comm._t, *options)
    else:
        ident = ffi.register(comm._t, *options)
    comm._jax_id = ident
    comm._on_close.insert(0, lambda: ffi.unregister(ident))
    weakref.finalize(comm, ffi.unregister, ident)
    return ident


def _under_mpi() -> bool:
    return any(os.environ.get(v) for v in _MPI_ENV)


def _local_address(coordinator: Optional[str]) -> str:
    """The IPv4 address this process listens on (:func:`torch_p2p.local_address`: the
    interface ``CCOMPRESS_SOCKET_IFNAME`` names, else the one it reaches the coordinator
    from, which every process reaches)."""
    host, _, port = (coordinator or "127.0.0.1:1").rpartition(":")
    return local_address((host.strip("[]"), int(port or 1) if port.isdigit() else 1))


def from_jax_distributed(timeout: float = 300.0, **kwargs: Any) -> Communicator:
    """A communicator over every process of a ``jax.distributed`` launch (collective: every
    process calls it). Its transport is TCP between every pair of processes; the addresses
    travel through JAX's coordination service.

    Parameters
    ----------
    timeout : float
        Seconds to wait for every process's address, and the communicator's timeout.
    **kwargs
        Passed to :class:`ccompress.Communicator` (``slice_elems``, ``seed``, ...).

    Returns
    -------
    Communicator
        Rank ``jax.process_index()`` of ``jax.process_count()``.

    Raises
    ------
    InvalidArgument
        ``jax.distributed.initialize()`` has not run.
    CollectiveTimeout
        Some process did not publish its address within ``timeout``.
    """
    client = _jax_distributed.global_state.client
    if client is None:
        raise InvalidArgument("from_jax_distributed needs jax.distributed.initialize() first")
    rank, size = jax.process_index(), jax.process_count()
    prefix = f"ccompress/jax/{next(_generation)}"
    t = _core.TcpTransport(rank, size, _local_address(
        _jax_distributed.global_state.coordinator_address))
    client.key_value_set(f"{prefix}/{rank}", t.address)
    addresses = []
    for r in range(size):
        try:
            addresses.append(client.blocking_key_value_get(f"{prefix}/{r}", int(timeout * 1000)))
        except Exception as e:  # the coordination service's deadline error
            raise CollectiveTimeout(
                f"process {rank}: process {r} did not publish its ccompress address within "
                f"{timeout} s: does every process make the same ccompress.jax calls? ({e})"
            ) from None
    t.connect(addresses, timeout)
    t.barrier_timeout_s = timeout
    # JAX does not say which processes share a node; LOCAL_WORLD_SIZE may.
    kwargs.setdefault("ranks_per_node", _topology.from_env(size))
    return Communicator(t, timeout=timeout, **kwargs)


def default_communicator() -> Communicator:
    """The communicator of ``comm=None``: every process of the launch (module docstring).

    Returns
    -------
    Communicator
        Made at the first call, then reused until it is closed or becomes unusable.

    Raises
    ------
    InvalidArgument
        Neither ``jax.distributed`` nor MPI is up: a collective outside any communicator.
    """
    global _default
    if _default is not None and _default.usable:
        return _default
    if _jax_distributed.global_state.client is not None:
        _default = from_jax_distributed()
    elif _under_mpi():
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise Unsupported("this process runs under an MPI launcher, but comm=None needs "
                              "mpi4py to reach MPI: pip install mpi4py") from e
        _default = Communicator.from_mpi(MPI.COMM_WORLD.Dup())
    else:
        raise InvalidArgument(
            "ccompress.jax: no communicator: comm=None means every process of the launch, but "
            "jax.distributed.initialize() has not run and this process is not under mpiexec; "
            "initialize one of them, or pass comm= (a ccompress.Communicator)")
    return _default


def shutdown() -> None:
    """Closes the default communicator (the next ``comm=None`` call makes a new one; every
    process must call this alike)."""
    global _default
    if _default is not None:
        _default.close()
        _default = None
