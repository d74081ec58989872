"""The ``ccompress`` torch.distributed backend: unmodified DDP and FSDP2 scripts reduce their
gradients through ccompress's compressed collectives.

    import ccompress.torch                      # registers the backend
    dist.init_process_group("ccompress")        # torchrun; CCOMPRESS_CODEC=hint8 to compress
    dist.init_process_group("ccompress", pg_options=ccompress.torch.BackendOptions(
        all_reduce="fp8_e4m3:g128", error_feedback=True))

The group holds an inner gloo group (and NCCL for CUDA tensors where available) over the
same store and ranks. all_reduce (sum/avg), reduce_scatter_tensor and
all_gather_into_tensor of float32/bfloat16/float16 tensors of at least ``min_numel``
elements go through a ccompress communicator made from a second inner group when their
codec is not ``"none"``; every other call, and those with codec ``"none"``, is the inner
group's own (exact, bit for bit what a gloo/NCCL group computes). After a compressed or
delegated collective failed (a peer stopped, a timeout) the group refuses further calls.
``compressed_group().use_gift(ccompress.torch.GIFT(model))`` whitens FSDP2's gradient
reduce-scatters (:meth:`CompressedProcessGroup.use_gift`).
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
import weakref
from datetime import timedelta
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.distributed as dist

from .. import _core
from .._internal import topology as _topology
from .._internal.errors import CCompressError, InvalidArgument, MismatchError
from ..communicator import Communicator
from . import _common, _engagement, _p2p, _trace
from ._backend_state import BackendOptions, BackwardFeedback, auto_candidate

NAME = "ccompress"
_AUTO_REPS = 5  # timed runs of each way at an auto op's first call, after one warm-up
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_COMPRESSIBLE_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg"}


class _Outcome:
    """A collective's result for torch: :attr:`future` completes with the value given to
    :meth:`set_result`, or fails with the error given to :meth:`set_exception`, as C++
    readers see it too; :meth:`wait` re-raises the error itself (its own type).

    ``torch.futures.Future.set_exception`` stores the exception as the future's *value* and
    raises it only where Python reads it. DDP's reducer reads the future of a process
    group's Work in C++ and took that exception object for the reduced gradient (a
    segmentation fault in ``parseCppCommHookResult``). A future made by ``then`` from a
    callback that raises is failed for C++ and Python alike, so the error reaches
    ``loss.backward()`` as a RuntimeError carrying its message. (A DDP comm hook's future
    goes through DDP's Python hook wrapper, which re-raises a stored exception: the DDP
    hook keeps ``set_exception`` and its typed errors.)"""

    def __init__(self) -> None:
        self._source = torch.futures.Future()
        self.future = self._source.then(_Outcome._unwrap)

    def set_result(self, value: Any) -> None:
        self._source.set_result((value, None))

    def set_exception(self, error: BaseException) -> None:
        self._source.set_result((None, error))

    def wait(self) -> Any:
        value, error = self._source.wait()
        if error is not None:
            raise error
        return value

    @staticmethod
    def _unwrap(fut: torch.futures.Future) -> Any:
        value, error = fut.value()
        if error is not None:
            raise error
        return value


class _Work(dist._Work):
    """A compressed collective in flight: ``wait()`` re-raises its error, ``get_future()``
    is completed with the output tensors, or failed with the error (_Outcome)."""

    def __init__(self, outcome: _Outcome) -> None:
        super().__init__()
        self._outcome = outcome

    def wait(self, timeout: Any = None) -> bool:
        self._outcome.wait()
        return True

    def get_future(self) -> torch.futures.Future:
        return self._outcome.future


def _inner_group(store: Any, rank: int, size: int, timeout: timedelta, prefix: str,
                 cuda: bool = True) -> dist.ProcessGroup:
    """A plain ProcessGroup with gloo for CPU tensors and, with ``cuda`` where CUDA and NCCL
    are there, NCCL for CUDA tensors, over ``store`` under ``prefix``."""
    pg = dist.ProcessGroup(rank, size)
    gloo = dist.ProcessGroupGloo(dist.PrefixStore(prefix + "/gloo/", store), rank, size,
                                 timeout=timeout)
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)
    pg._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    if cuda and torch.cuda.is_available() and dist.is_nccl_available():
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        nccl = dist.ProcessGroupNCCL(dist.PrefixStore(prefix + "/nccl/", store), rank, size,
                                     opts)
        pg._register_backend(torch.device("cuda"), dist.ProcessGroup.BackendType.NCCL, nccl)
    return pg


class CompressedProcessGroup(dist.ProcessGroup):
    """The process group ``dist.init_process_group("ccompress")`` makes (see the module
    docstring). ``options`` is the resolved :class:`BackendOptions`; :meth:`state_dict`
    checkpoints the error-feedback residuals; :attr:`bytes_sent` counts ccompress's bytes."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta,
                 options: Optional[BackendOptions] = None) -> None:
        super().__init__(rank, size)
        self._store, self._timeout = store, timeout
        # A store prefix can serve more than one group (one made again after
        # destroy_process_group, torch naming it alike): each creation counts itself, and
        # every key of this group (options, the inner groups' rendezvous) carries the count.
        gen = (store.add("ccompress/creations", 1) - 1) // size
        self._prefix = "" if gen == 0 else f"g{gen}/"
        self.options = _agreed_options(store, rank, size, timeout, options, self._prefix)
        self._given = options
        self._stats = _engagement.OpStats()
        self._announced = False
        self._sent_mark = 0
        self._inner = _inner_group(store, rank, size, timeout, self._prefix + "inner")
        for dev, kind in ((torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO),
                          (torch.device("cuda"), dist.ProcessGroup.BackendType.NCCL)):
            try:  # ops this class does not override go straight to these backends
                self._register_backend(dev, kind, self._inner._get_backend(dev))
            except RuntimeError:
                pass  # no NCCL backend (no CUDA)
        self._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
        self._comm: Optional[Communicator] = None
        self._comm_pg: Optional[dist.ProcessGroup] = None
        _LIVE.add(self)
        self._lock = threading.Lock()
        self._broken: Optional[str] = None
        self._delegated: List[Tuple[Any, Any]] = []  # (Work, future) not yet seen complete
        self._retired: List[Any] = []  # Works seen complete by the last call: freed at the next
        self.feedback = BackwardFeedback()
        self.gift: Any = None  # use_gift
        self._gift_calls = 0  # use_gift calls: each agrees the settings under its own keys
        self._auto: dict = {}  # op -> the codec auto chose
        self._trace = _trace.GroupTrace(rank, size, _trace.global_rank(rank))  # CCOMPRESS_TRACE

    # ---- identity ----
    def getBackendName(self) -> str:
        return NAME

    @property
    def bytes_sent(self) -> int:
        """Bytes ccompress put on the wire from this rank (delegated calls not counted)."""
        return 0 if self._comm is None else self._comm.bytes_sent

    def stats(self) -> dict:
        """What this group did, per op (``"all_reduce"``, ``"reduce_scatter"``,
        ``"all_gather"``): ``calls``; ``compressed`` (ran through ccompress with the op's
        codec); ``delegated``, the calls the inner gloo/NCCL group ran exactly, by reason
        (``"codec none"``: the op's codec is none; ``"op"``: a reduction other than sum/avg;
        ``"dtype"``: not float32/bfloat16/float16; ``"layout"``: sparse, or a non-contiguous
        CUDA tensor; ``"small"``: fewer than min_numel elements; ``"shape"``: sizes that are
        not an even split of the group, or a list of tensors; ``"device"``: neither CPU nor
        CUDA); ``bytes_sent``, the bytes ccompress sent for the compressed calls (headers
        included), against ``exact_bytes``, what an exact ring sends for them (all-reduce
        2(P-1)/P of the tensor, reduce-scatter (P-1)/P of the input, all-gather P-1 inputs),
        and ``delegated_exact_bytes``, the exact ring's bytes of the delegated calls. Plus
        ``"total"``: the sums over the ops. Counted on this rank; every rank sees the same
        calls."""
        ops = self._stats.snapshot()
        total = {k: sum(s[k] for s in ops.values())
                 for k in ("calls", "compressed", "bytes_sent", "exact_bytes",
                           "delegated_exact_bytes")}
        return dict(ops, total=total)

    def state_dict(self) -> dict:
        """Codecs and the error-feedback residuals (CPU tensors; ``torch.save`` them); with
        :meth:`use_gift`, GIFT's state too (the residuals are in its coordinates)."""
        o = self.options
        out = {"codecs": [o.all_reduce, o.reduce_scatter, o.all_gather],
               "error_feedback": self.feedback.state_dict()}
        if self.gift is not None:
            out["gift"] = self.gift.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` output (saved with the same codecs, and with GIFT
        where this group uses it)."""
        o = self.options
        if list(state.get("codecs", [])) != [o.all_reduce, o.reduce_scatter, o.all_gather]:
            raise InvalidArgument(f"this state was saved with codecs {state.get('codecs')}, "
                                 f"the group uses {[o.all_reduce, o.reduce_scatter, o.all_gather]}")
        if (state.get("gift") is None) != (self.gift is None):
            raise InvalidArgument("this state was saved by a group " + (
                "without GIFT; this group uses one" if self.gift is not None else
                "with GIFT; call use_gift(GIFT(model, ...)) before loading it"))
        if self.gift is not None:
            self.gift.load_state_dict(state["gift"])
        self.feedback.load_state_dict(state.get("error_feedback", {}))

    def use_gift(self, gift: Any) -> None:
        """Whitens FSDP2's gradient reduce-scatters with ``gift``, a
        :class:`ccompress.torch.GIFT` of a model sharded with ``fully_shard`` over this
        group (call it after fully_shard, on every rank)::

            gift = ccompress.torch.GIFT(model, rank=32, refresh_every=50, sketch=32)
            ccompress.torch.compressed_group().use_gift(gift)

        Each ``fully_shard`` module whose param group holds a hooked weight gets a
        reduce-scatter that whitens every row of the rank's gradient of that weight, runs
        this group's reduce-scatter (its codec; error feedback, when on, in whitened
        coordinates) and maps the rank's own shard back (``ccompress/torch/_gift_fsdp.py``).
        The refresh's statistics and selection travel exactly through this group's
        communicator, so every rank holds the same factors; the selection measures
        ``options.reduce_scatter``. :meth:`state_dict` then holds GIFT's state. Raises
        :class:`InvalidArgument` for a model with a hooked layer outside every fully_shard
        module (DDP: pass ``gift=`` to ``ddp_comm_hook``; the backend's all-reduce sees
        buckets without their parameters) or sharded over another group, and
        :class:`Unsupported` for ``output_side=True`` (it mixes rows across shards).

        Before installing anything, every rank's GIFT settings are compared through the
        group's store, as the options are at creation: rank, refresh_every, the hooked
        layers' names, sketch, output_side, ema, damping, damping_out, select, min_gain,
        seed and the codec the selection measures. Where any differs, every rank raises
        :class:`MismatchError` naming the setting and the ranks ("GIFT rank is 32 on ranks
        [0], 16 on ranks [1]"); a rank that does not call use_gift makes the others raise
        after the group's timeout, naming it."""
        from ._gift_fsdp import SETTINGS, install, settings

        if self.gift is not None:
            raise InvalidArgument("this group uses a GIFT already (one per group)")
        self._gift_calls += 1  # every call compares under keys of its own
        try:
            mine: Any = settings(self, gift)
        except CCompressError as e:
            mine = e
        _agree(self._store, f"{self._prefix}ccompress/gift/{self._gift_calls}", self.rank(),
               self.size(), self._timeout, mine, SETTINGS, what="GIFT settings",
               absent="did not call use_gift",
               needed="every rank of the group must call use_gift, with the same GIFT",
               fix="Build the same GIFT(...) on every rank")
        install(self, gift)
        self.gift = gift

    # ---- the compressed collectives ----
    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> dist._Work:
        op = self._op(opts)
        t = tensors[0] if len(tensors) == 1 else None
        why = ("shape" if t is None else
               self._why_exact(t, self.options.all_reduce, op, writes=t))
        codec = self._codec("all_reduce", t, op) if why is None else "none"
        if why is None and codec == "none":
            why = "auto"  # auto found exact faster on this link
        if why is not None:
            self._count_delegated("all_reduce", why, tensors)
            return self._delegate(lambda: self._inner.allreduce(tensors, opts or
                                                                dist.AllreduceOptions()))
        kw = dict(codec=codec, algo=self.options.algo, op=op)
        ef = self._feedback("all_reduce", t)
        if ef is not None:
            kw["error_feedback"] = ef
        x = t.detach()  # in place; DLPack refuses tensors that require grad
        finish = None
        if not x.is_contiguous():  # a contiguous copy, reduced, then written back
            x, finish = x.contiguous(), (lambda: t.detach().copy_(x))
        return self._run(lambda c: c.allreduce(x, out=x, **self._stream(x, kw)), tensors,
                         "all_reduce", x, kw, finish)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: Any = None) -> dist._Work:
        return self._reduce_scatter(output, input, opts)

    def _reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, opts: Any,
                        before: Optional[Callable[[Any], None]] = None) -> dist._Work:
        """reduce_scatter_single; ``before(error_feedback or None)`` runs first, once the
        call's residual is known (GIFT whitens the input there, see use_gift)."""
        op = self._op(opts)
        size, n = self.size(), input.numel()
        even = (n == size * output.numel() and output.dtype == input.dtype
                and _core.chunk_range(n, size, self.rank()) == (self.rank() * n // size,
                                                                (self.rank() + 1) * n // size))
        why = "shape" if not even else self._why_exact(input, self.options.reduce_scatter, op,
                                                       writes=output)
        codec = self._codec("reduce_scatter", input, op, output) if why is None else "none"
        if why is None and codec == "none":
            why = "auto"
        if why is not None:
            self._count_delegated("reduce_scatter", why, [input])
            if before is not None:
                before(None)
            return self._delegate(lambda: self._inner.reduce_scatter_single(
                output, input, opts or dist.ReduceScatterOptions()))
        kw = dict(codec=codec, op=op)
        ef = self._feedback("reduce_scatter", input)
        if ef is not None:
            kw["error_feedback"] = ef
        if before is not None:
            before(ef)
        x = input.detach().contiguous()  # a copy where it is not contiguous (read only)
        y, finish = _writable_flat(output)
        return self._run(lambda c: c.reduce_scatter(x, out=y, **self._stream(x, kw)), [output],
                         "reduce_scatter", x, kw, finish)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: Any = None) -> dist._Work:
        fits = output.numel() == self.size() * input.numel() and output.dtype == input.dtype
        why = "shape" if not fits else self._why_exact(input, self.options.all_gather, "sum",
                                                       writes=output)
        if why is not None:
            self._count_delegated("all_gather", why, [input])
            return self._delegate(lambda: self._inner.all_gather_single(
                output, input, opts or dist.AllgatherOptions()))
        kw = dict(codec=self.options.all_gather)
        x = input.detach().contiguous()
        y, finish = _writable_flat(output)
        return self._run(lambda c: c.allgather(x, out=y, **self._stream(x, kw)), [output],
                         "all_gather", x, kw, finish)

    # ---- delegated exactly (the inner group's own result and Work) ----
    # Every op that torch's ProcessGroup trampoline routes to Python is overridden here,
    # even where it only delegates: the trampoline calls the base class with the GIL held
    # when Python has no override, and gloo, which may need the GIL while it holds its
    # queue lock (freeing a finished Work's tensors), then deadlocks. Calling the inner
    # group from Python releases the GIL first.
    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._delegate(lambda: self._inner.all_gather_single_coalesced(
            outputs, inputs, opts or dist.AllgatherOptions()))

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._delegate(lambda: self._inner.reduce_scatter_single_coalesced(
            outputs, inputs, opts or dist.ReduceScatterOptions()))

    def start_coalescing(self, device):
        self._check_usable()
        self._inner._start_coalescing(device)

    def end_coalescing(self, device):
        return self._delegate(lambda: self._inner._end_coalescing(device))

    def allreduce_coalesced(self, tensors, opts=None):
        return self._delegate(lambda: self._inner.allreduce_coalesced(tensors, opts))

    def allgather(self, outputs, inputs, opts=None):
        return self._delegate(lambda: self._inner.allgather(outputs, inputs, opts))

    def broadcast(self, tensors, opts=None):
        return self._delegate(lambda: self._inner.broadcast(tensors, opts))

    def barrier(self, opts=None):
        return self._delegate(lambda: self._inner.barrier(opts))

    def reduce_scatter(self, outputs, inputs, opts=None):
        return self._delegate(lambda: self._inner.reduce_scatter(outputs, inputs, opts))

    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        return self._delegate(lambda: self._inner.all_to_all_single(
            output, input, output_splits, input_splits, opts))

    def send(self, tensors, dst, tag=0):
        return self._delegate(lambda: self._inner.send(tensors, dst, tag))

    def recv(self, tensors, src, tag=0):
        return self._delegate(lambda: self._inner.recv(tensors, src, tag))

    # ---- internals ----
    @staticmethod
    def _op(opts: Any) -> Optional[str]:
        """"sum" or "avg" for the reductions ccompress computes, else None."""
        red = dist.ReduceOp.SUM if opts is None else opts.reduceOp
        for k, v in _COMPRESSIBLE_OPS.items():
            if red == k:
                return v
        return None

    def _why_exact(self, t: torch.Tensor, codec: str, op: Optional[str],
                   writes: torch.Tensor) -> Optional[str]:
        """None when ccompress computes this call, else the reason it is delegated
        (:meth:`stats`). A non-contiguous host tensor is compressed through a contiguous
        copy (written back); a non-contiguous CUDA one is delegated."""
        if codec == "none":
            return "codec none"
        if op is None:
            return "op"
        if t.dtype not in _FLOATS:
            return "dtype"
        if t.device.type not in ("cpu", "cuda"):
            return "device"
        if t.layout != torch.strided or writes.layout != torch.strided or (
                t.is_cuda and not (t.is_contiguous() and writes.is_contiguous())):
            return "layout"
        if t.numel() < max(1, self.options.min_numel):
            return "small"
        return None

    def _announce(self) -> None:
        """The log line at the group's first collective (rank 0): what each op does."""
        if not self._announced:
            self._announced = True
            _engagement.log_info(self.rank(), _engagement.plan_line(self.options, self._given))

    def _exact_bytes(self, kind: str, tensors: List[torch.Tensor]) -> int:
        return sum(_engagement.exact_ring_bytes(kind, t.numel(), t.element_size(), self.size())
                   for t in tensors if isinstance(t, torch.Tensor))

    def _count_delegated(self, kind: str, why: str, tensors: List[torch.Tensor]) -> None:
        self._announce()
        self._stats.delegated(kind, why, self._exact_bytes(kind, tensors))
        self._stats.check_engaged(kind, getattr(self.options, kind), self.rank())
        if self._trace.on:
            self._trace.instant(f"{kind} exact ({why})", numel=sum(
                t.numel() for t in tensors if isinstance(t, torch.Tensor)))

    def _codec(self, kind: str, t: torch.Tensor, op: str,
               output: Optional[torch.Tensor] = None) -> str:
        """The codec of this call: the option's, or for ``auto`` the choice made at the op's
        first call (:meth:`_choose`)."""
        codec = getattr(self.options, kind)
        cand = auto_candidate(codec)
        if cand is None:
            return codec
        if kind not in self._auto:
            self._check_usable()
            self._auto[kind] = self._choose(kind, t, op, output, cand)
        return self._auto[kind]

    def _choose(self, kind: str, t: torch.Tensor, op: str,
                output: Optional[torch.Tensor], cand: str) -> str:
        """``auto``: times this call exact (the inner group) and compressed with ``cand``
        (hint8, or auto:CODEC's codec) on copies of its tensors, five times each after a
        warm-up, alternating, and returns the cheaper ("none" for exact) in wall plus CPU
        time, each the best of the five (so that runs slowed by something else on the host
        do not decide). Every rank times; the slowest rank's times decide (a MAX all-reduce
        over the inner group), so every rank picks the same. Collective: every rank reaches
        the op's first call alike, as for any collective."""
        x = t.detach().clone()
        y = (output if output is not None else t).detach().clone().view(-1)
        comm = self.communicator()
        if kind == "all_reduce":
            ops = {"none": lambda: self._inner.allreduce([x.clone()]).wait(),
                   cand: lambda: comm.allreduce(x.clone(), codec=cand, algo=self.options.algo,
                                                op=op)}
        else:
            ops = {"none": lambda: self._inner.reduce_scatter_single(y, x.clone()).wait(),
                   cand: lambda: comm.reduce_scatter(x.clone(), out=y, codec=cand, op=op)}
        # The cost of a way is its wall time plus the CPU time this process spent in it (all
        # its threads, the kernel's TCP work included): in a training step that CPU is taken
        # from the backward passes of this rank and of the others on its cores, so a way
        # that wins on wall time alone (a codec on a fast link) can still slow the step.
        wall = {name: float("inf") for name in ops}
        cpu = dict(wall)
        for rep in range(_AUTO_REPS + 1):
            for name, fn in ops.items():
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                if rep:  # the first of each is a warm-up (connections, buffers)
                    wall[name] = min(wall[name], time.perf_counter() - t0)
                    cpu[name] = min(cpu[name], time.process_time() - c0)
        slowest = torch.tensor([wall[n] + cpu[n] for n in ("none", cand)], dtype=torch.float64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        self._inner.allreduce([slowest], opts).wait()
        exact_s, comp_s = float(slowest[0]), float(slowest[1])
        choice = cand if comp_s < exact_s else "none"
        _engagement.log_info(self.rank(), (
            f"{kind} codec auto: {t.numel()} elements cost {1e3 * exact_s:.1f} ms exact and "
            f"{1e3 * comp_s:.1f} ms with {cand} (wall plus CPU time, the slowest rank's best "
            f"of {_AUTO_REPS}); sending " + (cand if choice == cand else
                                            "exact: compression does not pay on this link")))
        return choice

    def _feedback(self, kind: str, t: torch.Tensor) -> Any:
        return self.feedback.lookup(kind, t) if self.options.error_feedback else None

    @staticmethod
    def _stream(t: torch.Tensor, kw: dict) -> dict:
        if t.is_cuda:
            kw["stream"] = torch.cuda.current_stream(t.device).cuda_stream
        return kw

    def _check_usable(self) -> None:
        self._reap()
        if self._broken is not None:
            raise CCompressError(f"this ccompress process group is unusable: {self._broken}; "
                                 "destroy it and create a new one (all ranks)")

    def _fail(self, e: BaseException) -> None:
        with self._lock:
            if self._broken is None:
                self._broken = f"{type(e).__name__} in an earlier collective ({e})"

    def communicator(self) -> Communicator:
        """The ccompress communicator over the group's ranks (made at the first compressed
        call, which every rank makes alike)."""
        if self._comm is None:
            # Host bytes over TCP connections of its own (or, with CCOMPRESS_TRANSPORT=gloo,
            # a gloo group of its own: ccompress's tags meet no delegated message); CUDA
            # tensors get an NCCL communicator whose id travels through the store.
            store = dist.PrefixStore(self._prefix + "ccompress/", self._store)
            timeout = self._timeout.total_seconds()
            if _p2p.transport_choice() == "tcp":
                kw = {}
                if self.size() == int(os.environ.get("WORLD_SIZE") or 0):  # torchrun's nodes
                    kw["ranks_per_node"] = _topology.from_env(self.size())
                self._comm = _p2p.from_store(Communicator, store, self.rank(), self.size(),
                                             timeout=timeout, **kw)
            else:
                pg = self._comm_pg = _inner_group(self._store, self.rank(), self.size(),
                                                  self._timeout, self._prefix + "ccompress",
                                                  cuda=False)
                self._comm = Communicator.from_torch(pg, store=store, timeout=timeout)
        return self._comm

    def _run(self, call: Callable[[Communicator], Any], outputs: List[torch.Tensor],
             kind: str, x: torch.Tensor, kw: dict,
             finish: Optional[Callable[[], Any]] = None) -> _Work:
        """Counts a compressed call of ``kind`` on input ``x`` with options ``kw`` and starts
        ``call(comm)`` asynchronously on ccompress's worker thread (issue order is kept); the
        Work completes with ``outputs``, after ``finish()`` (the write-back of a
        non-contiguous output). With CCOMPRESS_TRACE, the call is a trace event."""
        self._check_usable()
        self._announce()
        exact = self._exact_bytes(kind, [x])
        self._stats.compressed(kind, exact)
        start = _trace.now_us() if self._trace.on else 0.0
        out = _Outcome()
        try:
            work = call(_Async(self.communicator()))
        except Exception as e:  # bad arguments, or a communicator that cannot run: raise
            if self._comm is None or not self._comm.usable:
                self._fail(e)
            raise

        def done(w: Any) -> None:
            # Runs right after the call, before the worker thread starts the next one: the
            # communicator's byte count grew by this call's bytes alone.
            sent = self._comm.bytes_sent
            self._stats.sent(kind, sent - self._sent_mark)
            if self._trace.on:  # the write-back of finish() is left out
                ef = " + error feedback" if kw.get("error_feedback") is not None else ""
                self._trace.call(f"{kind} {kw['codec']}{ef}", start, numel=x.numel(),
                                 bytes_sent=sent - self._sent_mark, exact_bytes=exact)
            self._sent_mark = sent
            try:
                w.wait()
                if finish is not None:
                    finish()
            except Exception as e:  # noqa: BLE001 - handed to torch through the future
                if not self._comm.usable:  # a lost peer or a timeout, not a MismatchError
                    self._fail(e)
                out.set_exception(e)
            else:
                out.set_result(outputs)

        work.add_done_callback(done)
        return _Work(out)

    def _delegate(self, call: Callable[[], dist._Work]) -> dist._Work:
        """The inner group's Work; a failure it reports later makes this group refuse
        further calls (an error raised at the call itself, a bad argument, does not)."""
        self._check_usable()
        work = call()
        try:
            fut = work.get_future()
        except Exception:  # noqa: BLE001 - a Work without a future: wait() reports errors
            fut = None
        with self._lock:
            self._delegated.append((work, fut))
        return work

    def _reap(self) -> None:
        """Records the failure of every delegated collective found complete, and lets its
        Work go one call later.

        gloo's worker thread frees a finished Work whose last reference it holds, and the
        Work's tensors then release their Python objects, which needs the interpreter: after
        the script ended, that aborts the process ("terminate called without an active
        exception"). So this group keeps every delegated Work until a call after the one
        that saw it complete (by then gloo has let go of it) and frees it here, on the
        calling thread; those still held at shutdown go with the group object. Failures are
        polled here too, never by a callback on the future, which gloo would run (and
        free) on its own thread."""
        done: List[Tuple[Any, Any]] = []
        with self._lock:
            delegated, self._delegated = self._delegated, []
            for item in delegated:
                work, fut = item
                finished = fut.done() if fut is not None else work.is_completed()
                (done if finished else self._delegated).append(item)
            old, self._retired = self._retired, [work for work, _ in done]
        for _, fut in done:
            if fut is not None:
                try:
                    fut.wait()
                except Exception as e:  # noqa: BLE001 - the caller sees it from wait()
                    self._fail(e)
        del old  # freed here, by this thread

    def shutdown(self) -> None:
        """What ``torch.distributed.destroy_process_group`` calls: ccompress's communicator
        finishes its pending collectives and stops its threads, its private gloo group and
        the delegated backends shut down, all while the interpreter is still running (a
        thread of theirs that outlives it aborts the process). The group refuses later
        calls; make a new one to go on. With ``CCOMPRESS_REPORT=1`` rank 0 first prints
        :meth:`stats` as a summary on stderr."""
        if _engagement.env_flag("CCOMPRESS_REPORT", False) and self.rank() == 0 \
                and self._broken is None:
            print(_engagement.summary(self._stats.snapshot(), self.bytes_sent),
                  file=sys.stderr, flush=True)
        self._release()
        super().shutdown()

    def _release(self) -> None:
        with self._lock:
            if self._broken is None:
                self._broken = "it was shut down (destroy_process_group)"
        _LIVE.discard(self)
        comm, pg, self._comm_pg = self._comm, self._comm_pg, None
        if comm is not None:  # kept: bytes_sent still reads it
            comm.close()
        if pg is not None:
            pg.shutdown()


def _writable_flat(output: torch.Tensor) -> Tuple[torch.Tensor, Optional[Callable[[], Any]]]:
    """A flat contiguous tensor a collective may write, and, where that is a copy of a
    non-contiguous ``output``, the write-back."""
    y = output.detach()
    if y.is_contiguous():
        return y.view(-1), None
    flat = torch.empty(y.numel(), dtype=y.dtype, device=y.device)
    return flat, lambda: y.copy_(flat.view(y.shape))


_OPTION_SOURCES = {"all_reduce": "all_reduce codec (pg_options or CCOMPRESS_CODEC)",
                   "reduce_scatter": "reduce_scatter codec (pg_options or CCOMPRESS_CODEC)",
                   "all_gather": "all_gather codec (pg_options or CCOMPRESS_ALLGATHER_CODEC)",
                   "algo": "algo (pg_options or CCOMPRESS_ALGO)",
                   "error_feedback": "error_feedback (pg_options or CCOMPRESS_ERROR_FEEDBACK)",
                   "min_numel": "min_numel (pg_options or CCOMPRESS_MIN_NUMEL)"}


def _agreed_options(store: Any, rank: int, size: int, timeout: timedelta,
                    options: Optional[BackendOptions], prefix: str = "") -> BackendOptions:
    """``options`` resolved on this rank and compared with every other rank's through the
    group's store before the group is made (:func:`_agree`): where any option differs (or a
    rank could not resolve its own), every rank raises, naming the option and the ranks. A
    rank that never publishes its options (it died, or never made the group) makes the
    others raise after the group's timeout."""
    try:
        mine: Any = (options or BackendOptions()).resolved()
    except CCompressError as e:
        mine = e
    _agree(store, f"{prefix}ccompress/options", rank, size, timeout,
           mine if isinstance(mine, BaseException) else
           {k: getattr(mine, k) for k in _OPTION_SOURCES},
           _OPTION_SOURCES, what="ccompress backend options",
           absent="did not make the ccompress process group",
           needed="every rank must call init_process_group / new_group with backend "
                  "'ccompress'",
           fix="Set the same CCOMPRESS_* environment (or pg_options) on every rank")
    return mine


def _agree(store: Any, key: str, rank: int, size: int, timeout: timedelta, mine: Any,
           labels: dict, what: str, absent: str, needed: str, fix: str) -> None:
    """Compares this rank's settings with every other rank's through the group's store.

    ``mine`` is a dict of JSON values over the keys of ``labels`` (setting -> its name in
    messages), or the exception that kept this rank from resolving its settings; it is
    published under ``key/<rank>`` (``key`` must be new for every comparison) and every
    rank's is read back. Then every rank raises alike: this rank its own exception; the
    others :class:`MismatchError` naming the ranks that could not resolve theirs; where a
    setting differs, :class:`MismatchError` naming each differing setting with its values
    and ranks ("<what> differ between ranks: <label> is <value> on ranks [..], ...; ... .
    <fix>"). A rank that never publishes makes the others raise :class:`MismatchError` after
    ``timeout``, naming it ("ranks [..] <absent> within the group's timeout ...; <needed>")."""
    if size <= 1:
        if isinstance(mine, BaseException):
            raise mine
        return
    blob = ({"error": f"{type(mine).__name__}: {mine}"} if isinstance(mine, BaseException)
            else mine)
    keys = [f"{key}/{r}" for r in range(size)]
    store.set(keys[rank], json.dumps(blob))
    try:
        store.wait(keys, timeout)
    except Exception as e:  # noqa: BLE001 - the store's timeout error, named
        missing = [r for r in range(size) if not store.check([keys[r]])]
        raise MismatchError(f"ranks {missing} {absent} within the group's timeout "
                            f"({timeout}); {needed}") from e
    theirs = [json.loads(store.get(k)) for k in keys]
    if isinstance(mine, BaseException):
        raise mine
    failed = {r: t["error"] for r, t in enumerate(theirs) if "error" in t}
    if failed:
        raise MismatchError(f"{what} could not be resolved on ranks {sorted(failed)} (this "
                            "rank's resolved): " +
                            "; ".join(f"rank {r}: {m}" for r, m in failed.items()))
    diffs = _common.differing(theirs, labels)
    if diffs:
        raise MismatchError(f"{what} differ between ranks: " + "; ".join(diffs) + f". {fix}")


class _Async:
    """A communicator whose collectives are asynchronous (``async_op=True``)."""

    def __init__(self, comm: Communicator) -> None:
        self._c = comm

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self._c, name)
        return lambda *a, **kw: fn(*a, async_op=True, **kw)


_LIVE: "weakref.WeakSet[CompressedProcessGroup]" = weakref.WeakSet()

# torch.compile: dynamo must not trace into the group's Python methods (DDP's bucket rebuild
# calls broadcast from compiled code; tracing it fails on the group's private members).
# They run eagerly, as a C++ process group's would.
for _name in ("allreduce", "reduce_scatter_single", "all_gather_single",
              "all_gather_single_coalesced", "reduce_scatter_single_coalesced",
              "start_coalescing", "end_coalescing", "allreduce_coalesced", "allgather",
              "broadcast", "barrier", "reduce_scatter", "all_to_all_single", "send", "recv",
              "getBackendName", "shutdown", "stats", "state_dict", "load_state_dict",
              "use_gift"):
    setattr(CompressedProcessGroup, _name,
            torch.compiler.disable(getattr(CompressedProcessGroup, _name)))
del _name


@atexit.register
def _close_all() -> None:
    """Releases, before the interpreter exits, the groups a script never passed to
    destroy_process_group (see :meth:`CompressedProcessGroup.shutdown`)."""
    for pg in list(_LIVE):
        try:
            pg._release()
        except Exception:  # noqa: BLE001 - best effort at exit, nothing left to report to
            pass


def _create(opts: Any, pg_options: Any) -> CompressedProcessGroup:
    if pg_options is not None and not isinstance(pg_options, BackendOptions):
        raise InvalidArgument(f"pg_options of the ccompress backend must be a "
                             f"ccompress.torch.BackendOptions, got {type(pg_options).__name__}")
    return CompressedProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                                  pg_options)


def register() -> None:
    """Registers backend ``"ccompress"`` with torch.distributed (once; done by
    ``import ccompress.torch``)."""
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "cuda"])


def compressed_group(group: Any = None) -> CompressedProcessGroup:
    """The :class:`CompressedProcessGroup` of ``group`` (default: the world group), e.g. to
    checkpoint its error feedback: ``compressed_group().state_dict()``."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, CompressedProcessGroup):
        raise InvalidArgument(f"this process group uses backend {pg.name()!r}, not "
                             "'ccompress'; init_process_group('ccompress') first")
    return pg
