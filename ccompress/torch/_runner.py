"""How the ``ccompress`` backend runs what its policy decided: a compressed call on
ccompress's worker thread (its outcome handed to torch as a Work and a future), a delegated
call on the inner gloo/NCCL group (reaped later, on the calling thread), the failure that
makes a group refuse further calls, and the shutdown that stops every thread while the
interpreter still runs.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import weakref
from datetime import timedelta
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.distributed as dist

from .._internal import topology as _topology
from .._internal.errors import CCompressError
from ..communicator import Communicator
from . import _engagement, _p2p, _trace
from ._work import Outcome, Work


def inner_group(store: Any, rank: int, size: int, timeout: timedelta, prefix: str,
                cuda: Optional[str] = "nccl", serve: Optional[dist.ProcessGroup] = None
                ) -> dist.ProcessGroup:
    """A plain ProcessGroup with gloo for CPU tensors over ``store`` under ``prefix``, and
    for CUDA tensors what ``cuda`` names; its backends are registered on ``serve`` too, where
    given (the ops ``serve`` does not override).

    Parameters
    ----------
    store : torch.distributed.Store
        The rendezvous.
    rank, size : int
        This rank and the group's size.
    timeout : datetime.timedelta
        The group's timeout.
    prefix : str
        The keys of this group in ``store``.
    cuda : {"nccl", "gloo", None}, default "nccl"
        ``"nccl"``: NCCL for CUDA tensors, where CUDA and NCCL are there; ``"gloo"``: gloo
        for CUDA tensors too (ranks that share a GPU, which NCCL refuses); None: no backend
        for CUDA tensors.
    serve : torch.distributed.ProcessGroup, optional
        A group that gets the same backends.

    Returns
    -------
    torch.distributed.ProcessGroup
    """
    pg = dist.ProcessGroup(rank, size)
    gloo = dist.ProcessGroupGloo(dist.PrefixStore(prefix + "/gloo/", store), rank, size,
                                 timeout=timeout)
    backends = [(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)]
    if cuda == "gloo":
        backends.append((torch.device("cuda"), dist.ProcessGroup.BackendType.GLOO, gloo))
    elif cuda == "nccl" and torch.cuda.is_available() and dist.is_nccl_available():
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        nccl = dist.ProcessGroupNCCL(dist.PrefixStore(prefix + "/nccl/", store), rank, size,
                                     opts)
        backends.append((torch.device("cuda"), dist.ProcessGroup.BackendType.NCCL, nccl))
    for group in (pg,) if serve is None else (pg, serve):
        for device, kind, backend in backends:
            group._register_backend(device, kind, backend)
        group._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    return pg


class Runner:
    """Runs, delegates and reaps the calls of one group, and shuts it down.

    Parameters
    ----------
    store : torch.distributed.Store
        The group's store.
    rank, size : int
        This rank and the group's size.
    timeout : datetime.timedelta
        The group's timeout.
    prefix : str
        The group's key prefix.
    inner : torch.distributed.ProcessGroup
        The inner gloo/NCCL group that runs delegated calls.
    plan_line : callable
        What each op does, in one line: rank 0 logs it at the group's first call.
    comm : Communicator, optional
        The communicator of the compressed calls, the caller's (it stays open at
        :meth:`release`); default: one made at the first compressed call.

    Attributes
    ----------
    rank, size : int
        This rank and the group's size (read per call: cheaper than the group's
        ``rank()`` and ``size()``, which go through torch's C++ binding).
    """

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta, prefix: str,
                 inner: dist.ProcessGroup, plan_line: Callable[[], str],
                 comm: Optional[Communicator] = None) -> None:
        self._store, self.rank, self.size, self._timeout = store, rank, size, timeout
        self._prefix, self.inner, self._plan_line = prefix, inner, plan_line
        self._announced = False
        self.stats = _engagement.OpStats()
        self.trace = _trace.GroupTrace(rank, size, _trace.global_rank(rank))  # CCOMPRESS_TRACE
        self.comm: Optional[Communicator] = comm
        self._own_comm = comm is None  # closed at release; a given one is the caller's
        self._comm_pg: Optional[dist.ProcessGroup] = None
        self._sent_mark = 0 if comm is None else comm.bytes_sent
        self._lock = threading.Lock()
        self.broken: Optional[str] = None
        self._delegated: List[Tuple[Any, Any]] = []  # (Work, future) not yet seen complete
        self._retired: List[Any] = []  # Works seen complete by the last call: freed at the next
        self._last: Optional[Outcome] = None  # the last call started on the worker thread

    def communicator(self) -> Communicator:
        """The ccompress communicator over the group's ranks: the one given to the group, or
        one made at the first compressed call (which every rank makes alike).

        Returns
        -------
        Communicator
        """
        if self.comm is None:
            # Host bytes over TCP connections of its own (or, with CCOMPRESS_TRANSPORT=gloo,
            # a gloo group of its own: ccompress's tags meet no delegated message); CUDA
            # tensors get an NCCL communicator whose id travels through the store.
            store = dist.PrefixStore(self._prefix + "ccompress/", self._store)
            timeout = self._timeout.total_seconds()
            if _p2p.transport_choice() == "tcp":
                kw = {}
                if self.size == int(os.environ.get("WORLD_SIZE") or 0):  # torchrun's nodes
                    kw["ranks_per_node"] = _topology.from_env(self.size)
                self.comm = _p2p.from_store(Communicator, store, self.rank, self.size,
                                            timeout=timeout, **kw)
            else:
                pg = self._comm_pg = inner_group(self._store, self.rank, self.size,
                                                 self._timeout, self._prefix + "ccompress",
                                                 cuda=None)
                self.comm = Communicator.from_torch(pg, store=store, timeout=timeout)
        return self.comm

    def announce(self) -> None:
        """Logs the plan line at the group's first call (rank 0)."""
        if not self._announced:
            self._announced = True
            _engagement.log_info(self.rank, self._plan_line())

    def exact_bytes(self, kind: str, tensors: List[torch.Tensor]) -> int:
        """What an exact ring of ``kind`` sends from this rank for ``tensors``."""
        n = 0
        for t in tensors:
            if isinstance(t, torch.Tensor):
                n += _engagement.exact_ring_bytes(kind, t.numel(), t.element_size(), self.size)
        return n

    def run(self, method: str, x: torch.Tensor, kw: dict, outputs: List[torch.Tensor],
            kind: str, label: Callable[[], str], finish: Optional[Callable[[], Any]] = None,
            exact: Optional[int] = None, opts: Any = None) -> Work:
        """Runs a compressed call: on ccompress's worker thread (issue order is kept), or on
        this thread where torch waits for it at once (``opts.asyncOp`` False).

        Parameters
        ----------
        method : str
            The communicator's collective (``"allreduce"``, ``"all_to_all"``, ...), called as
            ``method(x, **kw)`` (with the caller's CUDA stream for a CUDA ``x``).
        x : torch.Tensor
            The input, flat and contiguous; for the counters and the trace too.
        kw : dict
            The collective's other arguments.
        outputs : list of torch.Tensor
            What the Work completes with.
        kind : str
            The op, for the counters.
        label : callable
            ``label()`` is the trace event's name after the op (the codec, and error
            feedback); called only where the trace is on.
        finish : callable, optional
            Runs after the call (the write-back of a non-contiguous output).
        exact : int, optional
            The bytes an exact collective sends from this rank for this call (default: an
            exact ring's for ``x``; an all-to-all's depend on its splits).
        opts : torch.distributed options, optional
            The op's options: with ``asyncOp`` False (``async_op=False`` in Python: torch
            waits for the Work at once) the call runs on this thread, after the calls issued
            before it, and its Work is complete when returned.

        Returns
        -------
        Work

        Raises
        ------
        CCompressError
            The group is unusable, or the call's arguments are refused (then raised as is);
            a call run on this thread raises its own error here too.
        """
        self.check_usable()
        self.announce()
        exact = self.exact_bytes(kind, [x]) if exact is None else exact
        self.stats.compressed(kind, exact)
        start = _trace.now_us() if self.trace.on else 0.0
        caller = torch.cuda.current_stream(x.device) if x.is_cuda else None
        if caller is not None:
            kw["stream"] = caller.cuda_stream
        try:
            comm = self.communicator()
        except Exception as e:  # a communicator that cannot be made: the group cannot run
            self.fail(e)
            raise
        out = Outcome()
        if opts is not None and not getattr(opts, "asyncOp", True):
            return self._run_here(getattr(comm, method), x, kw, outputs, kind, label, finish,
                                  exact, start, out)
        # CUDA: finish() runs on the worker thread, on the caller's stream (taken now), which
        # w.wait() makes wait for the collective and the caller's later work follows.
        stream = caller if finish is not None else None
        try:
            work = getattr(comm, method)(x, async_op=True, **kw)
        except Exception as e:  # bad arguments, or a communicator that cannot run: raise
            if not comm.usable:
                self.fail(e)
            raise

        def done(w: Any) -> None:
            # Runs right after the call, before the worker thread starts the next one: the
            # communicator's byte count grew by this call's bytes alone.
            self._count_sent(kind, label, start, x, exact)
            try:
                w.wait()
                if finish is not None:
                    with (contextlib.nullcontext() if stream is None
                          else torch.cuda.stream(stream)):
                        finish()
            except Exception as e:  # noqa: BLE001 - handed to torch through the future
                if not self.comm.usable:  # a lost peer or a timeout, not a MismatchError
                    self.fail(e)
                out.set_exception(e)
            else:
                out.set_result(outputs)

        self._last = out
        work.add_done_callback(done)
        return Work(out)

    def _run_here(self, collective: Callable[..., Any], x: torch.Tensor, kw: dict,
                  outputs: List[torch.Tensor], kind: str, label: Callable[[], str],
                  finish: Optional[Callable[[], Any]], exact: int, start: float,
                  out: Outcome) -> Work:
        """:meth:`run` on this thread, once every call issued before it has finished and
        been counted. Its stream order is a synchronous collective's: a CUDA call runs on
        the caller's stream, and so does ``finish``."""
        last, self._last = self._last, None
        if last is not None:
            last.settle()  # its done() has counted its bytes: this call's are its own
        try:
            collective(x, **kw)
        except Exception as e:
            self._count_sent(kind, label, start, x, exact)
            if not self.comm.usable:  # a lost peer or a timeout, not a MismatchError
                self.fail(e)
            raise
        self._count_sent(kind, label, start, x, exact)
        if finish is not None:
            finish()
        out.set_result(outputs)
        return Work(out)

    def _count_sent(self, kind: str, label: Callable[[], str], start: float,
                    x: torch.Tensor, exact: int) -> None:
        """Counts the bytes the communicator sent since the last call as this call's, and
        traces it (the write-back of finish() is left out)."""
        sent = self.comm.bytes_sent
        self.stats.sent(kind, sent - self._sent_mark)
        if self.trace.on:
            self.trace.call(f"{kind} {label()}", start, numel=x.numel(),
                            bytes_sent=sent - self._sent_mark, exact_bytes=exact)
        self._sent_mark = sent

    def delegate(self, call: Callable[[], dist._Work], kind: Optional[str] = None,
                 why: Optional[str] = None, tensors: Optional[List[torch.Tensor]] = None,
                 codec: str = "none", exact: Optional[int] = None) -> dist._Work:
        """The inner group's Work for ``call()``; with ``kind``, counted as delegated for
        ``why`` (``codec``: the op's configured codec, for the engagement warning; ``exact``:
        the bytes the call sends, default an exact ring's for ``tensors``). A
        failure the Work reports later makes the group refuse further calls; an error
        raised at the call itself (a bad argument) does not.

        Raises
        ------
        CCompressError
            The group is unusable.
        """
        if kind is not None:
            if not self._announced:
                self.announce()
            self.stats.delegated(kind, why, self.exact_bytes(kind, tensors) if exact is None
                                 else exact)
            if codec != "none":
                self.stats.check_engaged(kind, codec, self.rank)
            if self.trace.on:
                self.trace.instant(f"{kind} exact ({why})", numel=sum(
                    t.numel() for t in tensors if isinstance(t, torch.Tensor)))
        self.check_usable()
        work = call()
        try:
            fut = work.get_future()
        except Exception:  # noqa: BLE001 - a Work without a future: wait() reports errors
            fut = None
        with self._lock:
            self._delegated.append((work, fut))
        return work

    def reap(self) -> None:
        """Records the failure of every delegated collective found complete, and lets its
        Work go one call later.

        gloo's worker thread frees a finished Work whose last reference it holds, and the
        Work's tensors then release their Python objects, which needs the interpreter: after
        the script ended, that aborts the process ("terminate called without an active
        exception"). So the group keeps every delegated Work until a call after the one
        that saw it complete (by then gloo has let go of it) and frees it here, on the
        calling thread; those still held at shutdown go with the group object. Failures are
        polled here too, from the future (a second ``wait()`` of a gloo send or recv Work
        waits for a second message), never by a callback on the future, which gloo would
        run (and free) on its own thread."""
        with self._lock:
            if not self._delegated and not self._retired:
                return
            done: List[Tuple[Any, Any]] = []
            pending: List[Tuple[Any, Any]] = []
            for item in self._delegated:
                work, fut = item
                finished = fut.done() if fut is not None else work.is_completed()
                (done if finished else pending).append(item)
            self._delegated = pending
            old, self._retired = self._retired, [work for work, _ in done]
        for _, fut in done:
            if fut is not None:
                try:
                    fut.wait()
                except Exception as e:  # noqa: BLE001 - the caller sees it from wait()
                    self.fail(e)
        del old  # freed here, by this thread

    def check_usable(self) -> None:
        """Reaps, then raises where an earlier collective failed or the group was shut down.

        Raises
        ------
        CCompressError
            Naming the earlier failure.
        """
        self.reap()
        if self.broken is not None:
            raise CCompressError(f"this ccompress process group is unusable: {self.broken}; "
                                 "destroy it and create a new one (all ranks)")

    def fail(self, e: BaseException) -> None:
        """Latches the first failure: the group refuses every later call."""
        with self._lock:
            if self.broken is None:
                self.broken = f"{type(e).__name__} in an earlier collective ({e})"

    def report(self) -> None:
        """With ``CCOMPRESS_REPORT=1``, rank 0 of a group still usable prints the counters
        as a summary on stderr."""
        if _engagement.env_flag("CCOMPRESS_REPORT", False) and self.rank == 0 \
                and self.broken is None:
            print(_engagement.summary(self.stats.snapshot(),
                                      0 if self.comm is None else self.comm.bytes_sent),
                  file=sys.stderr, flush=True)

    def release(self) -> None:
        """Refuses later calls; closes the communicator it made (its pending collectives
        finish, its threads stop) and shuts its private gloo group down. A communicator
        given to the group stays open: its owner closes it."""
        with self._lock:
            if self.broken is None:
                self.broken = "it was shut down (destroy_process_group)"
        comm, pg, self._comm_pg = self.comm, self._comm_pg, None
        if comm is not None and self._own_comm:  # kept: bytes_sent still reads it
            comm.close()
        if pg is not None:
            pg.shutdown()


def writable_flat(output: torch.Tensor) -> Tuple[torch.Tensor, Optional[Callable[[], Any]]]:
    """A flat contiguous tensor a collective may write, and, where that is a copy of a
    non-contiguous ``output``, the write-back."""
    y = output.detach()
    if y.is_contiguous():
        return y.view(-1), None
    flat = torch.empty(y.numel(), dtype=y.dtype, device=y.device)
    return flat, lambda: y.copy_(flat.view(y.shape))


LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()  # the groups not yet shut down


@atexit.register
def _close_all() -> None:
    """Releases, before the interpreter exits, the groups a script never passed to
    destroy_process_group (a thread of theirs that outlives the interpreter aborts the
    process)."""
    for pg in list(LIVE):
        try:
            pg._release()
        except Exception:  # noqa: BLE001 - best effort at exit, nothing left to report to
            pass
