"""The ``ccompress`` torch.distributed backend: unmodified DDP and FSDP2 scripts reduce their
gradients through ccompress's compressed collectives.

    import ccompress.torch                      # registers the backend
    dist.init_process_group("ccompress")        # torchrun; CCOMPRESS_CODEC=hint8 to compress
    dist.init_process_group("ccompress", pg_options=ccompress.torch.BackendOptions(
        all_reduce="fp8_e4m3:g128", error_feedback=True))

all_reduce (sum/avg), reduce_scatter_tensor, all_gather_into_tensor, all_to_all_single and
all_to_all of float tensors of at least ``min_numel`` elements go through a ccompress
communicator when their codec is not ``"none"``; every other call is an inner gloo (NCCL for CUDA) group's own, exact. After a
collective failed (a peer stopped, a timeout) the group refuses further calls.

This module is the process-group surface (the all-to-all's two forms in ``_alltoall``, the
ops always delegated in ``_delegating``); the options are in ``_options``, their agreement
across ranks and the choice between exact and compressed (and ``auto``) in ``_policy``,
running, delegating and reaping in ``_runner``. docs/torch.md has the whole story.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, List, Optional

import torch
import torch.distributed as dist

from .._internal.errors import CCompressError, InvalidArgument
from ..communicator import Communicator
from . import _alltoall, _engagement, _feedback, _gift_fsdp, _policy
from ._common import check_matches
from ._delegating import Delegating
from ._feedback import BackwardFeedback
from ._options import BackendOptions, auto_candidate
from ._policy import Policy, even_split, reduce_op
from ._runner import LIVE, Runner, inner_group, writable_flat

__all__ = ["NAME", "BackendOptions", "BackwardFeedback", "CompressedProcessGroup",
           "auto_candidate", "compressed_group", "register"]
NAME = "ccompress"


class CompressedProcessGroup(Delegating, dist.ProcessGroup):
    """The process group ``dist.init_process_group("ccompress")`` makes (see the module
    docstring).

    Parameters
    ----------
    store : torch.distributed.Store
        The group's store.
    rank, size : int
        This rank and the group's size.
    timeout : datetime.timedelta
        The group's timeout.
    options : BackendOptions, optional
        ``pg_options``; unset fields come from the ``CCOMPRESS_*`` environment.
    comm : Communicator, optional
        Where the compressed calls run (given on every rank or on none; default: a
        communicator made over ``store`` at the first compressed call). For ranks that are
        threads of one process, e.g. virtual ranks of one GPU: each thread makes its group
        over one shared store with its rank's communicator of
        :meth:`Communicator.cuda_loopback` (or :meth:`Communicator.inproc`), and its exact
        calls then go through gloo for CUDA tensors too (NCCL refuses two ranks on one GPU;
        gloo takes broadcast and all_reduce of CUDA tensors). It stays open when the group
        shuts down; the group's byte counts hold while nothing else uses it.

    Raises
    ------
    InvalidArgument, Unsupported
        This rank's options cannot be used (the other ranks raise MismatchError).
    MismatchError
        The ranks' options differ, ``comm`` is given on some ranks only or is not this
        rank of this size, or a rank did not make the group within ``timeout``.

    Attributes
    ----------
    options : BackendOptions
        The resolved options, the same on every rank.
    feedback : BackwardFeedback
        The error-feedback residuals (:meth:`state_dict` checkpoints them).
    """

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta,
                 options: Optional[BackendOptions] = None,
                 comm: Optional[Communicator] = None) -> None:
        super().__init__(rank, size)
        self._store, self._timeout = store, timeout
        # A store prefix can serve more than one group (one made again after
        # destroy_process_group, torch naming it alike): each creation counts itself, and
        # every key of this group (options, the inner groups' rendezvous) carries the count.
        gen = (store.add("ccompress/creations", 1) - 1) // size
        self._prefix = "" if gen == 0 else f"g{gen}/"
        config = _policy.agreed(store, rank, size, timeout, options, self._prefix)
        self._policy = Policy(config, rank)
        self.options = config.options
        self._exact_all_reduce = config.codecs["all_reduce"].spec == "none"
        _agree_comm(store, rank, size, timeout, comm, self._prefix)
        in_process = comm is not None and comm.transport in IN_PROCESS
        self._inner = inner_group(store, rank, size, timeout, self._prefix + "inner",
                                  cuda="gloo" if in_process else "nccl",
                                  serve=self)  # ops not overridden here go straight to it
        self._runner = Runner(store, rank, size, timeout, self._prefix, self._inner,
                              lambda: _engagement.plan_line(config, options), comm)
        LIVE.add(self)
        self.feedback = BackwardFeedback()
        self.gift: Any = None  # use_gift
        self._gift_calls = 0  # use_gift calls: each agrees the settings under its own keys

    # ---- identity ----
    def getBackendName(self) -> str:
        return NAME

    @property
    def bytes_sent(self) -> int:
        """Bytes ccompress put on the wire from this rank (delegated calls not counted)."""
        comm = self._runner.comm
        return 0 if comm is None else comm.bytes_sent

    def stats(self) -> dict:
        """What this group did, per op, counted on this rank (every rank sees the same calls).

        Returns
        -------
        dict
            Per op (``"all_reduce"``, ``"reduce_scatter"``, ``"all_gather"``,
            ``"all_to_all"``) and their sums under ``"total"``: ``calls``, ``compressed``,
            ``delegated`` (exactly, by reason: ``"codec none"``, ``"auto"``, ``"op"``,
            ``"dtype"``, ``"layout"``, ``"small"``, ``"shape"``, ``"device"``),
            ``bytes_sent`` (ccompress's), ``exact_bytes`` (an exact ring's for the compressed
            calls; an exact all-to-all's, every piece but this rank's own, for
            ``all_to_all``), ``delegated_exact_bytes``
            (``_engagement.OpStats`` says what each counts).
        """
        return self._runner.stats.snapshot(total=True)

    def state_dict(self) -> dict:
        """The codecs and the error-feedback residuals; with :meth:`use_gift`, GIFT's state
        too (the residuals are in its coordinates).

        Returns
        -------
        dict
            CPU tensors and plain values (``torch.save`` them).
        """
        return _feedback.group_state(self)

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` output.

        Parameters
        ----------
        state : dict
            Saved with the same codecs, and with GIFT where this group uses it.

        Raises
        ------
        InvalidArgument
            The codecs differ, or GIFT is used by one of the saving and loading groups only.
        """
        _feedback.load_group_state(self, state)

    def use_gift(self, gift: Any) -> None:
        """Whitens FSDP2's gradient reduce-scatters with a GIFT of a model sharded with
        ``fully_shard`` over this group (call it after fully_shard, on every rank).

        Each ``fully_shard`` module whose param group holds a hooked weight gets a
        reduce-scatter that whitens every row of the rank's gradient of that weight, runs
        this group's reduce-scatter (its codec; error feedback, when on, in whitened
        coordinates) and maps the rank's own shard back. The refresh's statistics and
        selection travel exactly through this group's communicator, so every rank holds the
        same factors; the selection measures ``options.reduce_scatter``. :meth:`state_dict`
        then holds GIFT's state.

        Parameters
        ----------
        gift : ccompress.torch.GIFT
            One per group, built alike on every rank.

        Raises
        ------
        InvalidArgument
            Not a GIFT, a second one, or a hooked layer outside every fully_shard module
            (DDP: pass ``gift=`` to ``ddp_comm_hook``) or sharded over another group.
        Unsupported
            ``output_side=True`` (it mixes rows across shards), or an ``auto`` codec.
        MismatchError
            On every rank, naming the setting and the ranks, where a GIFT setting differs
            between ranks; after the group's timeout where a rank did not call use_gift.
        """
        _gift_fsdp.use(self, gift)

    # ---- the compressed collectives ----
    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> dist._Work:
        # The reduction matters only where the op has a codec (reading it costs a microsecond).
        op = None if self._exact_all_reduce else reduce_op(opts)
        t = tensors[0] if len(tensors) == 1 else None
        codec, why = self._policy.decide("all_reduce", t, op, t, t is not None,
                                          self._runner)
        if why is not None:
            return self._runner.delegate(lambda: self._inner.allreduce(
                tensors, opts or dist.AllreduceOptions()), "all_reduce", why, tensors,
                self.options.all_reduce)
        kw = dict(codec=codec, algo=self.options.algo, op=op)
        ef = self.feedback.add_to(kw, "all_reduce", t, self.options.error_feedback)
        x = t.detach()  # in place; DLPack refuses tensors that require grad
        finish = None
        if not x.is_contiguous():  # a contiguous copy, reduced, then written back
            x, finish = x.contiguous(), (lambda: t.detach().copy_(x))
        kw["out"] = x
        return self._runner.run("allreduce", x, kw, tensors, "all_reduce",
                                lambda: self._policy.label("all_reduce", codec, ef), finish,
                                opts=opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: Any = None) -> dist._Work:
        return self._reduce_scatter(output, input, opts)

    def _reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, opts: Any,
                        before: Optional[Callable[[Any], None]] = None) -> dist._Work:
        """reduce_scatter_single; ``before(error_feedback or None)`` runs first, once the
        call's residual is known (GIFT whitens the input there, see use_gift)."""
        op = reduce_op(opts)
        even = even_split(input, output, self._runner.size, self._runner.rank)
        codec, why = self._policy.decide("reduce_scatter", input, op, output, even,
                                          self._runner)
        if why is not None:
            if before is not None:
                before(None)
            return self._runner.delegate(lambda: self._inner.reduce_scatter_single(
                output, input, opts or dist.ReduceScatterOptions()), "reduce_scatter", why,
                [input], self.options.reduce_scatter)
        kw = dict(codec=codec, op=op)
        ef = self.feedback.add_to(kw, "reduce_scatter", input,
                                  self.options.error_feedback)
        if before is not None:
            before(ef)
        x = input.detach().contiguous()  # a copy where it is not contiguous (read only)
        y, finish = writable_flat(output)
        kw["out"] = y
        return self._runner.run("reduce_scatter", x, kw, [output], "reduce_scatter",
                                lambda: self._policy.label("reduce_scatter", codec, ef),
                                finish, opts=opts)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: Any = None) -> dist._Work:
        fits = (output.numel() == self._runner.size * input.numel()
                and output.dtype == input.dtype)
        codec, why = self._policy.decide("all_gather", input, "sum", output, fits,
                                          self._runner)
        if why is not None:
            return self._runner.delegate(lambda: self._inner.all_gather_single(
                output, input, opts or dist.AllgatherOptions()), "all_gather", why, [input],
                self.options.all_gather)
        x = input.detach().contiguous()
        y, finish = writable_flat(output)
        return self._runner.run("allgather", x, dict(codec=codec, out=y), [output],
                                "all_gather", lambda: self._policy.label("all_gather", codec,
                                                                         None),
                                finish, opts=opts)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_splits: List[int], input_splits: List[int],
                          opts: Any = None) -> dist._Work:
        """``all_to_all_single`` (torch's ``alltoall_base``) with the group's ``all_to_all``
        codec (:func:`ccompress.torch._alltoall.single`)."""
        return _alltoall.single(self, output, input, output_splits, input_splits, opts)

    def alltoall(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                 opts: Any = None) -> dist._Work:
        """``all_to_all`` (the list form) with the group's ``all_to_all`` codec
        (:func:`ccompress.torch._alltoall.listed`)."""
        return _alltoall.listed(self, outputs, inputs, opts)

    def communicator(self) -> Communicator:
        """The ccompress communicator over the group's ranks (made at the first compressed
        call, which every rank makes alike)."""
        return self._runner.communicator()

    def shutdown(self) -> None:
        """What ``torch.distributed.destroy_process_group`` calls: ccompress's communicator
        finishes its pending collectives and stops its threads, its private gloo group and
        the delegated backends shut down, all while the interpreter is still running (a
        thread of theirs that outlives it aborts the process). The group refuses later
        calls; make a new one to go on. With ``CCOMPRESS_REPORT=1`` rank 0 first prints
        :meth:`stats` as a summary on stderr."""
        self._runner.report()
        self._release()
        super().shutdown()

    def _release(self) -> None:
        LIVE.discard(self)
        self._runner.release()


# Transports whose ranks are threads of this process (virtual ranks of one GPU among them).
IN_PROCESS = ("inproc", "inproc_ordered", "cuda_loopback")


def _agree_comm(store: Any, rank: int, size: int, timeout: timedelta,
                comm: Optional[Communicator], prefix: str) -> None:
    """Checks, on every rank alike, that ``comm`` is given on every rank or on none, and is
    this rank of this size where given.

    Raises
    ------
    MismatchError
        On every rank, naming the ranks that differ (or this rank's own mismatch).
    """
    mine: Any = {"comm": "made over the store" if comm is None else
                 f"given ({comm.transport})"}
    if comm is not None:
        try:
            check_matches(comm, rank, size, "this ccompress process group")
        except CCompressError as e:
            mine = e
    _policy.agree(store, f"{prefix}ccompress/communicator", rank, size, timeout, mine,
                  {"comm": "the communicator (comm=)"}, what="ccompress backend settings",
                  absent="did not make the ccompress process group",
                  needed="every rank must make the group",
                  fix="Give comm= on every rank or on none")


# torch.compile: dynamo must not trace into the group's Python methods (DDP's bucket rebuild
# calls broadcast from compiled code; tracing it fails on the group's private members).
# They run eagerly, as a C++ process group's would.
for _name in ("allreduce", "reduce_scatter_single", "all_gather_single",
              "all_gather_single_coalesced", "reduce_scatter_single_coalesced",
              "start_coalescing", "end_coalescing", "allreduce_coalesced", "allgather",
              "broadcast", "barrier", "reduce_scatter", "all_to_all_single", "alltoall",
              "send", "recv",
              "getBackendName", "shutdown", "stats", "state_dict", "load_state_dict",
              "use_gift"):
    setattr(CompressedProcessGroup, _name,
            torch.compiler.disable(getattr(CompressedProcessGroup, _name)))
del _name


def _create(opts: Any, pg_options: Any) -> CompressedProcessGroup:
    """torch's backend creator: the group, or a configuration error that ends an uncaught
    script as one line per rank (:func:`_engagement.brief_at_exit`)."""
    try:
        if pg_options is not None and not isinstance(pg_options, BackendOptions):
            raise InvalidArgument(f"pg_options of the ccompress backend must be a "
                                  f"ccompress.torch.BackendOptions, got "
                                  f"{type(pg_options).__name__}")
        return CompressedProcessGroup(opts.store, opts.group_rank, opts.group_size,
                                      opts.timeout, pg_options)
    except CCompressError as e:
        _engagement.brief_at_exit(e, opts.group_rank)
        raise


def register() -> None:
    """Registers backend ``"ccompress"`` with torch.distributed (once; done by
    ``import ccompress.torch``)."""
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "cuda"])


def compressed_group(group: Any = None) -> CompressedProcessGroup:
    """The :class:`CompressedProcessGroup` of a process group, e.g. to checkpoint its error
    feedback: ``compressed_group().state_dict()``.

    Parameters
    ----------
    group : torch.distributed.ProcessGroup, optional
        Default: the world group.

    Returns
    -------
    CompressedProcessGroup

    Raises
    ------
    InvalidArgument
        The group's backend is not ``"ccompress"``.
    """
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, CompressedProcessGroup):
        raise InvalidArgument(f"this process group uses backend {pg.name()!r}, not "
                              "'ccompress'; init_process_group('ccompress') first")
    return pg
