"""Communicators over a torch.distributed process group, no MPI needed (torchrun, env://).

Host buffers move over TCP connections between every pair of ranks (``_core.TcpTransport``:
a C++ progress thread moves each message, with no Python and no GIL on its path), found
through the group's store: each rank listens on the address it reaches the store host from
(or on ``CCOMPRESS_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME``'s), publishes it under a key of
the communicator, and connects once every rank's is there (:func:`tcp_transport`).

``CCOMPRESS_TRANSPORT=gloo`` (or a group without a store) moves them over the group's own
gloo point-to-point instead: the C++ executor posts every
transfer to a ``ccompress._core.PyTransport``, which calls :class:`GlooP2P` here with a
memoryview over the executor's own bytes; ``torch.frombuffer`` makes a tensor of the same
memory (no copy) and ``ProcessGroup.send/recv`` moves it. gloo matches a receive to the
send of the same (peer, tag) in posting order, which is the Transport contract, so the
plan's tags are used as they are, on a private gloo group (made from the caller's group)
where no application message can meet them. gloo does not report a received message's
size; both ends compute it from the same plan, which the call check before every
collective (count, dtype, codec, algo, op) makes sure of.

CUDA tensors go to an NCCL communicator whose unique id travels through the group's store
(:class:`StoreBroadcast`, made at the first CUDA call like ``from_mpi``'s).

This is a transport of the communicator layer (``Communicator.from_torch``), below the
framework adapters, so it imports torch inside the calls that use it: importing it (as
:mod:`ccompress.communicator` does) never imports torch.
"""
from __future__ import annotations

import concurrent.futures as cf
import fcntl
import itertools
import os
import pickle
import re
import socket
import struct
import threading
from datetime import timedelta
from typing import Any, Dict, List, Optional, Tuple

from .. import _core
from . import topology as _topology
from .errors import CCompressError, CollectiveTimeout, InvalidArgument, Unsupported

# gloo prefixes its errors with "[<source file>:<line>] " and ends some with a sign-off;
# users need the rest only.
_SOURCE_PREFIX = re.compile(r"\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*")
_SIGN_OFF = re.compile(r"\s*GLHF!.*$", re.S)


def readable(e: BaseException) -> str:
    """An engine's error message without source paths."""
    return _SIGN_OFF.sub("", _SOURCE_PREFIX.sub("", str(e))).strip()


class _Request:
    __slots__ = ("work", "tensor", "peer", "kind", "done", "error")

    def __init__(self, work: Any, tensor: Any, peer: int, kind: str):
        self.work, self.tensor, self.peer, self.kind = work, tensor, peer, kind
        self.done = work is None
        self.error: Optional[BaseException] = None


class GlooP2P:
    """The callables a ``_core.PyTransport`` forwards to, over ``pg`` (a gloo ProcessGroup
    or one with a CPU gloo backend). Handles are ints.

    A gloo point-to-point Work has no test: it completes only inside ``wait()``. So each
    request gets a waiter thread (from a pool that grows to the number in flight: a bounded
    pool could keep a request that completed behind one that waits for it) blocked in
    ``wait(timeout)`` with the GIL released, which marks it done and wakes the executor.
    ``timeout`` is the communicator's: every request was posted by the time of the
    executor's last progress, so its waiter has returned by the time the executor itself
    times out, and :meth:`cancel` can wait for the waiters of the requests it withdraws.
    Once a waiter has returned, its Work is dropped, and gloo (which holds the buffer
    through a weak pointer) writes a late message nowhere: no buffer of an abandoned
    collective is touched after cancel returns.
    """

    def __init__(self, pg: Any, rank: int, timeout: float):
        self.pg, self.rank, self.timeout = pg, rank, float(timeout)
        self._ids = itertools.count(1)
        self._reqs: Dict[int, _Request] = {}
        self._cv = threading.Condition()
        self._pool = cf.ThreadPoolExecutor(max_workers=1 << 16,
                                           thread_name_prefix=f"ccompress-gloo-r{rank}")

    def _post(self, send: bool, peer: int, view: memoryview, tag: int) -> int:
        import torch

        h = next(self._ids)
        kind = "send" if send else "recv"
        if len(view) == 0:  # both ends know the size: nothing needs to travel
            self._reqs[h] = _Request(None, None, peer, kind)
            return h
        t = torch.frombuffer(view, dtype=torch.uint8)  # the executor's bytes, not a copy
        try:
            work = self.pg.send([t], peer, tag) if send else self.pg.recv([t], peer, tag)
        except RuntimeError as e:
            where = "to" if send else "from"
            raise CCompressError(f"torch point-to-point {kind} {where} rank {peer} failed: "
                                 f"{readable(e)}") from None
        req = self._reqs[h] = _Request(work, t, peer, kind)
        self._pool.submit(self._wait_one, req)
        return h

    def _wait_one(self, req: _Request) -> None:
        error = None
        try:
            req.work.wait(timedelta(seconds=self.timeout))
        except BaseException as e:  # noqa: BLE001 - handed to the executor by test()
            error = e
        with self._cv:
            req.done, req.error, req.work, req.tensor = True, error, None, None
            self._cv.notify_all()

    def isend(self, peer: int, view: memoryview, tag: int) -> int:
        return self._post(True, peer, view, tag)

    def irecv(self, peer: int, view: memoryview, tag: int) -> int:
        return self._post(False, peer, view, tag)

    def _collect(self, handles: List[int]) -> List[int]:
        done = []
        for i, h in enumerate(handles):
            req = self._reqs[h]
            if not req.done:
                continue
            if req.error is not None:
                msg = readable(req.error)
                where = "to" if req.kind == "send" else "from"
                if _is_timeout(msg):
                    raise CollectiveTimeout(
                        f"no message arrived for {self.timeout} s (the {req.kind} {where} rank "
                        f"{req.peer}); a peer is missing, stuck or called a different collective")
                raise CCompressError(f"the {req.kind} {where} rank {req.peer} over the torch "
                                     f"process group failed: {msg}")
            del self._reqs[h]
            done.append(i)
        return done

    def test(self, handles: List[int]) -> List[int]:
        with self._cv:
            return self._collect(handles)

    def wait(self, handles: List[int], timeout_s: float) -> List[int]:
        """The indices of ``handles`` that completed, waiting up to ``timeout_s`` for one."""
        with self._cv:
            done = self._collect(handles)
            if not done:
                self._cv.wait_for(lambda: any(self._reqs[h].done for h in handles), timeout_s)
                done = self._collect(handles)
            return done

    def cancel(self, handles: List[int]) -> None:
        with self._cv:
            reqs = [self._reqs.pop(h) for h in handles if h in self._reqs]
            # Bounded: the waiters return by their own timeout (see the class docstring).
            self._cv.wait_for(lambda: all(r.done for r in reqs), self.timeout + 10.0)

    def barrier(self, timeout_s: float) -> None:
        work = self.pg.barrier()
        try:
            work.wait(timedelta(seconds=timeout_s))
        except RuntimeError as e:
            msg = readable(e)
            if _is_timeout(msg):
                raise CollectiveTimeout(f"barrier: not every rank arrived within {timeout_s} s")
            raise CCompressError(f"barrier over the torch process group failed: {msg}") from None

    def close(self) -> None:
        """Stops the waiter threads once their requests are done (called by
        ``Communicator.close``)."""
        self._pool.shutdown(wait=False)


class StoreBroadcast:
    """The three calls of an mpi4py communicator that ``Communicator.from_nccl`` uses
    (``Get_rank``, ``Get_size``, ``bcast``), over a torch.distributed store: rank 0's
    object (the NCCL unique id) is set under a key that every rank numbers alike (calls are
    collective, made in the same order); the others wait for it up to ``timeout`` seconds,
    then raise CollectiveTimeout."""

    def __init__(self, store: Any, rank: int, size: int, prefix: str, timeout: float = 300.0):
        self.store, self.rank, self.size, self.prefix = store, rank, size, prefix
        self.timeout = float(timeout)
        self._n = 0

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    def bcast(self, obj: Any, root: int = 0) -> Any:
        key = f"{self.prefix}/bcast/{self._n}"
        self._n += 1
        if self.rank == root:
            self.store.set(key, pickle.dumps(obj))
            got = obj
        else:
            try:
                self.store.wait([key], timedelta(seconds=self.timeout))
            except RuntimeError as e:  # torch raises its DistStoreError (a RuntimeError)
                raise CollectiveTimeout(
                    f"rank {self.rank}: rank {root} did not publish the NCCL id within "
                    f"{self.timeout} s ({readable(e)})") from None
            got = pickle.loads(self.store.get(key))
        # Every rank has read it once the count reaches size; the last one removes the key.
        if self.store.add(key + "/read", 1) == self.size:
            for k in (key, key + "/read"):
                try:
                    self.store.delete_key(k)
                except (RuntimeError, NotImplementedError):
                    pass  # a store without deletion keeps two small keys
        return got


TRANSPORTS = ("tcp", "gloo")


def transport_choice() -> str:
    """``CCOMPRESS_TRANSPORT``: how host bytes travel between torch ranks (default tcp)."""
    raw = os.environ.get("CCOMPRESS_TRANSPORT", "tcp").strip().lower() or "tcp"
    if raw not in TRANSPORTS:
        raise InvalidArgument(f"CCOMPRESS_TRANSPORT={raw!r}; use one of {', '.join(TRANSPORTS)}")
    return raw


def _interface_address(name: str, var: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:  # SIOCGIFADDR: the interface's IPv4 address
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
        except OSError as e:
            raise InvalidArgument(f"{var}={name!r}: no IPv4 address on that interface "
                                  f"({e.strerror}); name one this host has (ip -4 addr)") from None
    return socket.inet_ntoa(packed[20:24])


def local_address(reach: Optional[Tuple[str, int]] = None) -> str:
    """The IPv4 address this rank listens on: that of ``CCOMPRESS_SOCKET_IFNAME`` (else
    ``GLOO_SOCKET_IFNAME``, first entry), else the one this host reaches ``reach`` (host,
    port) from, by default ``MASTER_ADDR``/``MASTER_PORT`` (the store's host, which every
    rank reaches), else loopback."""
    for var in ("CCOMPRESS_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        name = os.environ.get(var, "").split(",")[0].strip()
        if name:
            return _interface_address(name, var)
    try:
        host, port = reach or (os.environ.get("MASTER_ADDR") or "127.0.0.1",
                               int(os.environ.get("MASTER_PORT") or 29500))
        target = socket.gethostbyname(host or "127.0.0.1")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, int(port)))  # sends nothing
            return s.getsockname()[0]
    except (OSError, ValueError):
        return "127.0.0.1"


def tcp_transport(store: Any, rank: int, size: int, prefix: str, timeout: float) -> Any:
    """A connected ``_core.TcpTransport`` of this rank: listens, publishes its address under
    ``prefix/<rank>`` in ``store``, reads every rank's and connects (collective). Raises
    CollectiveTimeout when some rank has not published within ``timeout`` seconds."""
    t = _core.TcpTransport(rank, size, local_address())
    store.set(f"{prefix}/{rank}", t.address)
    keys = [f"{prefix}/{r}" for r in range(size)]
    try:
        store.wait(keys, timedelta(seconds=timeout))
    except RuntimeError as e:  # torch's DistStoreError
        missing = [r for r, k in enumerate(keys) if not store.check([k])]
        raise CollectiveTimeout(
            f"rank {rank}: rank(s) {missing} did not publish a ccompress TCP address within "
            f"{timeout} s: are they running, and is CCOMPRESS_TRANSPORT the same on every "
            f"rank? ({readable(e)})") from None
    t.connect([store.get(k).decode() for k in keys], timeout)
    t.barrier_timeout_s = timeout
    return t


# Communicators made per group (from_torch is collective, so every member counts alike):
# each one's NCCL id gets its own store keys.
_MADE: Dict[Any, int] = {}
_STORES: Dict[int, Any] = {}  # the stores from_store numbered, by id


def _group_ranks(group: Any) -> Optional[List[int]]:
    """The global ranks of a group registered with torch.distributed, else None (a
    ProcessGroup made directly, e.g. by a backend from its store)."""
    import torch.distributed as dist

    try:
        return dist.get_process_group_ranks(group)
    except (ValueError, RuntimeError, KeyError):
        return None


def _private_gloo(group: Any, ranks: List[int]) -> Any:
    """A gloo group over the same processes, so ccompress's tags meet no application
    message, and CPU bytes move even when the caller's group is NCCL only. Collective over
    the group's members only."""
    import torch.distributed as dist

    if group is dist.group.WORLD or len(ranks) == dist.get_world_size():
        return dist.new_group(ranks, backend="gloo")
    return dist.new_group(ranks, backend="gloo", use_local_synchronization=True)


def _store_of(group: Any) -> Any:
    import torch.distributed as dist

    try:
        return dist.distributed_c10d._get_process_group_store(group)
    except (ValueError, RuntimeError, KeyError, AttributeError):
        return None


def from_torch(cls: Any, group: Any = None, *, store: Any = None, **kwargs: Any) -> Any:
    """``Communicator.from_torch(group=None, *, store=None, **kwargs)``.

    ``group``: None (the world group), a process group registered with torch.distributed
    (its members call this, collectively; the host bytes go over a private gloo group of
    the same processes, made with ``dist.new_group``), or a ProcessGroup made directly from
    a store, e.g. a backend's inner ``ProcessGroupGloo`` (used as it is: the caller keeps
    its point-to-point tags free for ccompress). ``store``: where the NCCL unique id of CUDA
    arrays travels (default: the registered group's store; without one, CUDA arrays are
    refused). ``kwargs`` go to the Communicator (``timeout``, ``slice_elems``, ``seed``,
    ...). A group of one rank gives a 1-rank communicator.
    """
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise ImportError("Communicator.from_torch needs PyTorch: pip install torch "
                          "(ccompress itself works without it)") from e

    if not dist.is_available() or not dist.is_initialized():
        if group is None or _group_ranks(group) is not None:
            raise InvalidArgument("Communicator.from_torch needs torch.distributed initialised: "
                                  "call torch.distributed.init_process_group first (torchrun "
                                  "sets its environment)")
    if group is None:
        group = dist.group.WORLD
    tcp = transport_choice() == "tcp"
    ranks = _group_ranks(group)
    if ranks is not None:
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise InvalidArgument("this process is not a member of the group passed to "
                                  "Communicator.from_torch; call it on the group's ranks only")
        store = store if store is not None else _store_of(group)
        tcp = tcp and store is not None
        if size > 1 and not tcp:
            _require_gloo()
        pg = _private_gloo(group, ranks) if size > 1 and not tcp else None
    else:  # an unregistered ProcessGroup: the caller owns its tags
        if not hasattr(group, "send") or not hasattr(group, "size"):
            raise InvalidArgument(f"group must be a torch.distributed ProcessGroup or None, got "
                                  f"{type(group).__name__}")
        rank, size, pg = group.rank(), group.size(), group
        tcp = tcp and store is not None
    if ranks is not None and size == dist.get_world_size() and "ranks_per_node" not in kwargs:
        kwargs["ranks_per_node"] = _topology.from_env(size)  # torchrun's LOCAL_WORLD_SIZE
    key = getattr(group, "group_name", None) or id(group)
    return _make(cls, rank, size, store, key, None if tcp else (pg, group), kwargs)


def from_store(cls: Any, store: Any, rank: int, size: int, **kwargs: Any) -> Any:
    """A communicator of ``size`` ranks that meet through ``store`` (a torch.distributed
    Store) and move host bytes over TCP (the ``ccompress`` backend's; see the module
    docstring). CUDA arrays go to NCCL, its id through the same store."""
    # Keys are numbered per store object: hold it, so that a later store cannot reuse its
    # id on some ranks and not others (their numbers, and so their keys, would differ).
    _STORES.setdefault(id(store), store)
    return _make(cls, rank, size, store, id(store), None, kwargs)


def _make(cls: Any, rank: int, size: int, store: Any, key: Any, gloo: Any,
          kwargs: dict) -> Any:
    """The communicator of from_torch / from_store: over TCP when ``gloo`` is None, else
    over ``gloo`` = (point-to-point group, the caller's group). Store keys are numbered per
    ``key`` (calls are collective, so every member numbers alike)."""
    n = None
    if store is not None:
        _MADE[key] = n = _MADE.get(key, -1) + 1
    timeout = float(kwargs.get("timeout", 300.0))
    if size == 1:
        self = cls(_core.InprocGroup(1).transport(0), _keepalive=None, **kwargs)
    elif gloo is None:
        self = cls(tcp_transport(store, rank, size, f"ccompress/tcp/{n}", timeout),
                   _keepalive=None, **kwargs)
    else:
        pg, group = gloo
        ops = GlooP2P(pg, rank, timeout)
        t = _core.PyTransport(ops, rank, size, "torch_gloo")
        self = cls(t, _keepalive=(ops, pg, group), **kwargs)
        self._on_close.append(ops.close)
        t.barrier_timeout_s = self._timeout
    if store is not None:
        # CUDA arrays go to NCCL, made at their first call through Communicator._nccl_for,
        # which asks this object (in place of an mpi4py communicator) to share the id.
        self._mpi_comm = StoreBroadcast(store, rank, size, f"ccompress/nccl/{n}",
                                        self._timeout)
    return self


def _is_timeout(msg: str) -> bool:
    """Whether gloo's error is its own timeout ("... timed out ...", or "Application timeout
    caused pair closure" when its deadline and ours expire together)."""
    m = msg.lower()
    return "timed out" in m or "timeout" in m


def _require_gloo() -> None:
    import torch.distributed as dist

    if not dist.is_gloo_available():
        raise Unsupported("Communicator.from_torch moves host tensors over gloo, which this "
                          "torch build lacks; use Communicator.from_mpi under mpiexec")


