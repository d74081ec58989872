"""The ``ccompress`` backend's policy: the agreement of every rank's options (and GIFT
settings) through the group's store before anything runs (:func:`agreed`, :func:`agree`); per
call, its own compressed collective or the inner gloo/NCCL group's exact one, with the reason
that ``stats()`` counts (:class:`Policy`); and ``auto``: both ways timed at an op's first
call, the cheaper kept on every rank.

The options and codecs come parsed from ``_options``; nothing here reads the environment or
parses a spec.
"""
from __future__ import annotations

import json
import time
from dataclasses import fields
from datetime import timedelta
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.distributed as dist

from .. import _core
from .._internal.errors import CCompressError, MismatchError
from ..codec import Codec
from . import _common, _engagement
from ._options import OP_CODECS, BackendOptions, GroupConfig, OpCodec, resolve

AUTO_REPS = 5  # timed runs of each way at an auto op's first call, after one warm-up
FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_COMPRESSIBLE_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg"}  # by RedOpType


def reduce_op(opts: Any) -> Optional[str]:
    """The reduction of a torch op's options as ccompress names it.

    Parameters
    ----------
    opts : torch.distributed.AllreduceOptions or ReduceScatterOptions or None
        None means sum.

    Returns
    -------
    str or None
        ``"sum"`` or ``"avg"``, the reductions ccompress computes; None for any other.
    """
    return "sum" if opts is None else _COMPRESSIBLE_OPS.get(opts.reduceOp.op)


def even_split(input: torch.Tensor, output: torch.Tensor, size: int, rank: int) -> bool:
    """Whether a reduce-scatter of ``input`` into ``output`` gives each rank an equal
    chunk of the same dtype, where ccompress's chunking puts it (else ``"shape"``)."""
    n = input.numel()
    return (n == size * output.numel() and output.dtype == input.dtype
            and _core.chunk_range(n, size, rank) == (rank * n // size, (rank + 1) * n // size))


def why_exact(t: torch.Tensor, codec: OpCodec, op: Optional[str], writes: torch.Tensor,
              min_numel: Optional[int]) -> Optional[str]:
    """Why a call on ``t`` (writing ``writes``) is delegated exactly, or None.

    Parameters
    ----------
    t, writes : torch.Tensor
        The call's input and the tensor it writes.
    codec : OpCodec
        The op's codec.
    op : str or None
        :func:`reduce_op` of the call (``"sum"`` for an all-gather).
    min_numel : int or None
        Smaller tensors stay exact; None: no size test (every size is compressed, an empty
        tensor too).

    Returns
    -------
    str or None
        ``"codec none"``, ``"op"``, ``"dtype"``, ``"device"``, ``"layout"`` (sparse, or a
        non-contiguous CUDA tensor: a non-contiguous host tensor goes through a contiguous
        copy) or ``"small"``; None when ccompress computes the call.
    """
    if codec.spec == "none":
        return "codec none"
    if op is None:
        return "op"
    if t.dtype not in FLOATS:
        return "dtype"
    if not (t.is_cpu or t.is_cuda):
        return "device"
    if t.layout != torch.strided or writes.layout != torch.strided or (
            t.is_cuda and not (t.is_contiguous() and writes.is_contiguous())):
        return "layout"
    if min_numel is not None and t.numel() < max(1, min_numel):
        return "small"
    return None


class Policy:
    """What each call of one group does.

    Parameters
    ----------
    config : GroupConfig
        The group's agreed options and parsed codecs.
    rank : int
        This rank in the group (rank 0 logs ``auto``'s choice).
    """

    def __init__(self, config: GroupConfig, rank: int) -> None:
        self.config = config
        self.options = config.options
        self._rank = rank
        self._auto: Dict[str, Optional[OpCodec]] = {}  # op -> auto's choice (None: exact)

    @property
    def auto_choices(self) -> Dict[str, str]:
        """What ``auto`` chose so far, per op: its candidate as named (``"hint8"``,
        ``"nvfp4"``), or ``"none"`` for exact."""
        return {k: "none" if c is None else c.candidate_label for k, c in self._auto.items()}

    def label(self, kind: str, codec: Codec, ef: Any) -> str:
        """A compressed call's name in the trace: the codec as configured (auto's
        candidate as named), ``+ error feedback`` where ``ef`` is a residual."""
        plan = self.config.codecs[kind]
        name = plan.candidate_label if plan.candidate is not None else codec.name
        return name + (" + error feedback" if ef is not None else "")

    def decide(self, kind: str, t: torch.Tensor, op: Optional[str], writes: torch.Tensor,
               shape_ok: bool, runner: Any,
               sized: bool = True) -> Tuple[Optional[Codec], Optional[str]]:
        """The codec of this call, or why it is delegated exactly.

        Parameters
        ----------
        kind : str
            The op (a key of ``OP_CODECS``).
        t, writes : torch.Tensor
            The call's input and the tensor it writes.
        op : str or None
            :func:`reduce_op` of the call.
        shape_ok : bool
            Whether the sizes are an even split of the group (else ``"shape"``).
        runner : Runner
            The group's runner: ``auto`` times both ways through it at the op's first call.
        sized : bool
            Whether the group's ``min_numel`` applies (False where the tensors' sizes differ
            between ranks, as in an uneven all-to-all: every rank must take the same path,
            an empty input included).

        Returns
        -------
        (Codec or None, str or None)
            The codec and None; or None and the reason (:func:`why_exact`, ``"shape"``, or
            ``"auto"`` where auto found exact cheaper on this link).

        Raises
        ------
        CCompressError
            ``auto``'s timing found the group unusable, or failed.
        """
        codec = self.config.codecs[kind]
        why = "shape" if not shape_ok else why_exact(
            t, codec, op, writes, self.options.min_numel if sized else None)
        if why is not None:
            return None, why
        if codec.candidate is None:
            return codec.codec, None
        if kind not in self._auto:
            runner.check_usable()
            self._auto[kind] = self._choose(kind, t.numel(), codec,
                                            self._ways(kind, t, op, writes, codec, runner),
                                            runner.inner)
        chosen = self._auto[kind]
        return (chosen.candidate, None) if chosen is not None else (None, "auto")

    def _ways(self, kind: str, t: torch.Tensor, op: str, output: torch.Tensor, codec: OpCodec,
              runner: Any) -> Dict[str, Callable[[], Any]]:
        """``auto``'s two ways of this call, exact and with the candidate, on copies."""
        x = t.detach().clone()
        y = output.detach().clone().view(-1)
        comm, inner, cand = runner.communicator(), runner.inner, codec.candidate
        if kind == "all_reduce":
            return {"none": lambda: inner.allreduce([x.clone()]).wait(),
                    "candidate": lambda: comm.allreduce(x.clone(), codec=cand,
                                                        algo=self.options.algo, op=op)}
        return {"none": lambda: inner.reduce_scatter_single(y, x.clone()).wait(),
                "candidate": lambda: comm.reduce_scatter(x.clone(), out=y, codec=cand, op=op)}

    def _choose(self, kind: str, numel: int, codec: OpCodec, ways: Dict[str, Callable[[], Any]],
                inner: dist.ProcessGroup) -> Optional[OpCodec]:
        """``auto``: times each way five times after a warm-up, alternating, and keeps the
        cheaper in wall plus CPU time, each the best of the five (runs slowed by something
        else on the host do not decide). The slowest rank's times decide, so every rank
        keeps the same. Collective: every rank reaches the op's first call alike."""
        # The cost of a way is its wall time plus the CPU time this process spent in it (all
        # its threads, the kernel's TCP work included): in a training step that CPU is taken
        # from the backward passes of this rank and of the others on its cores, so a way
        # that wins on wall time alone (a codec on a fast link) can still slow the step.
        wall = {name: float("inf") for name in ways}
        cpu = dict(wall)
        for rep in range(AUTO_REPS + 1):
            for name, fn in ways.items():
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                if rep:  # the first of each is a warm-up (connections, buffers)
                    wall[name] = min(wall[name], time.perf_counter() - t0)
                    cpu[name] = min(cpu[name], time.process_time() - c0)
        costs = torch.tensor([wall[n] + cpu[n] for n in ("none", "candidate")],
                             dtype=torch.float64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX  # the slowest rank's costs, the same on every rank
        inner.allreduce([costs], opts).wait()
        exact_s, comp_s = float(costs[0]), float(costs[1])
        keep = comp_s < exact_s
        cand = codec.candidate_label
        _engagement.log_info(self._rank, (
            f"{kind} codec auto: {numel} elements cost {1e3 * exact_s:.1f} ms exact and "
            f"{1e3 * comp_s:.1f} ms with {cand} (wall plus CPU time, the slowest rank's best "
            f"of {AUTO_REPS}); sending " + (cand if keep else
                                            "exact: compression does not pay on this link")))
        return codec if keep else None


def _source(name: str) -> str:
    var = OP_CODECS[name].env if name in OP_CODECS else f"CCOMPRESS_{name.upper()}"
    return f"{name}{' codec' if name in OP_CODECS else ''} (pg_options or {var})"


OPTION_LABELS = {f.name: _source(f.name) for f in fields(BackendOptions)}


def agreed(store: Any, rank: int, size: int, timeout: timedelta,
           given: Optional[BackendOptions], prefix: str = "") -> GroupConfig:
    """:func:`resolve` on this rank, compared with every other rank's through the group's
    store before the group is made (:func:`agree`).

    Parameters
    ----------
    store : torch.distributed.Store
        The group's store.
    rank, size : int
        This rank and the group's size.
    timeout : datetime.timedelta
        How long to wait for the other ranks.
    given : BackendOptions or None
        This rank's ``pg_options``.
    prefix : str
        The group's key prefix (one per creation on this store).

    Returns
    -------
    GroupConfig

    Raises
    ------
    InvalidArgument, Unsupported
        This rank's own options cannot be used (every rank raises: the others
        MismatchError naming this one).
    MismatchError
        An option differs between ranks, another rank could not resolve its own, or a rank
        never made the group within ``timeout``.
    """
    try:
        mine: Any = resolve(given)
    except CCompressError as e:
        mine = e
    agree(store, f"{prefix}ccompress/options", rank, size, timeout,
          mine if isinstance(mine, BaseException) else
          {k: getattr(mine.options, k) for k in OPTION_LABELS},
          OPTION_LABELS, what="ccompress backend options",
          absent="did not make the ccompress process group",
          needed="every rank must call init_process_group / new_group with backend "
                 "'ccompress'",
          fix="Set the same CCOMPRESS_* environment (or pg_options) on every rank")
    return mine


def agree(store: Any, key: str, rank: int, size: int, timeout: timedelta, mine: Any,
          labels: Dict[str, str], what: str, absent: str, needed: str, fix: str) -> None:
    """Compares this rank's settings with every other rank's through the group's store.

    Parameters
    ----------
    store : torch.distributed.Store
        The group's store.
    key : str
        New for every comparison; this rank publishes under ``key/<rank>``.
    rank, size : int
        This rank and the group's size.
    timeout : datetime.timedelta
        How long to wait for every rank's settings.
    mine : dict or BaseException
        JSON values over the keys of ``labels``, or the exception that kept this rank from
        resolving its settings.
    labels : dict
        Setting -> its name in messages.
    what, absent, needed, fix : str
        The words of the messages: "<what> differ between ranks: <label> is <value> on
        ranks [..]; ... . <fix>"; "ranks [..] <absent> within the group's timeout ...;
        <needed>".

    Raises
    ------
    CCompressError
        ``mine``, where it is an exception (after every rank has published).
    MismatchError
        On every other rank then, naming the ranks that could not resolve theirs; where a
        setting differs; where a rank never published within ``timeout``.
    """
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
    except Exception:  # noqa: BLE001 - the store's timeout error, named
        missing = [r for r in range(size) if not store.check([keys[r]])]
        raise MismatchError(f"ranks {missing} {absent} within the group's timeout "
                            f"({timeout}); {needed}") from None
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
