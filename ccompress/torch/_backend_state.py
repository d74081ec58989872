"""What the ``ccompress`` torch.distributed backend keeps besides its groups: its options
(from the environment or ``pg_options``) and the error-feedback residuals of the gradient
collectives, keyed by their place in a backward pass."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Set, Tuple

import numpy as np
import torch

from .. import autocodec
from .._internal.errors import InvalidArgument, Unsupported
from ..codec import Codec
from ..communicator import ALGOS
from ..compressors.error_feedback import ErrorFeedback

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def _env_flag(name: str, default: bool) -> bool:
    from ._engagement import env_flag

    return env_flag(name, default)


def _from_env(name: str, parse: Any, accepted: str) -> Any:
    """``parse(raw)`` of environment variable ``name``; an error names the variable, its
    value and the accepted values."""
    raw = os.environ.get(name)
    try:
        return parse(raw)
    except (InvalidArgument, Unsupported, ValueError) as e:
        kind = Unsupported if isinstance(e, Unsupported) else InvalidArgument
        raise kind(f"{name}={raw!r}: {e}\n{name} accepts {accepted}") from e


_SPECS = ("a codec spec (none, bf16, fp16, fp8_e4m3:g128, hint8, nvfp4, ...; unset: none, "
          "exact)")
_CODEC_VALUES = _SPECS + ", auto or auto:CODEC; auto8/auto4 are not accepted by the backend"
_GATHER_VALUES = _SPECS + "; auto8/auto4 are not accepted by the backend"


# ``auto`` weighs AUTO_CANDIDATE against exact at an op's first call, ``auto:CODEC`` that
# codec (see CompressedProcessGroup's module docstring).
AUTO = "auto"
AUTO_CANDIDATE = "hint8"


def auto_candidate(spec: str) -> Optional[str]:
    """The codec a resolved ``auto`` spec weighs against exact (``auto``: hint8,
    ``auto:CODEC``: CODEC), or None for a fixed codec spec."""
    if spec == AUTO:
        return AUTO_CANDIDATE
    if spec.startswith(AUTO + ":"):
        return spec[len(AUTO) + 1:]
    return None


def _spec(codec: Optional[str], what: str) -> str:
    if codec is None:
        return "none"
    cand = auto_candidate(codec)
    if cand is not None:
        if what == "all_gather":
            raise Unsupported(f"{what} codec {codec!r}: auto applies to all_reduce and "
                              "reduce_scatter; name the all-gather's codec")
        if codec == AUTO:
            return AUTO
        if autocodec.is_auto(cand) or auto_candidate(cand) is not None:
            raise Unsupported(f"{what} codec {codec!r}: auto weighs one fixed codec spec "
                              "against exact (auto:nvfp4, auto:fp8_e4m3:g128)")
        name = Codec.parse(cand).name
        if name == "none":
            raise InvalidArgument(f"{what} codec {codec!r}: auto weighs a lossy codec against "
                                  "exact; name one (auto:nvfp4) or use none")
        return f"{AUTO}:{name}"
    if autocodec.is_auto(codec):
        raise Unsupported(f"{what} codec {codec!r} picks a codec per call; the backend needs "
                          "a fixed codec spec (error feedback and replica agreement depend on it)")
    return Codec.parse(codec).name


def _check_algo(algo: str) -> str:
    if algo not in ALGOS:
        raise InvalidArgument(f"unknown algo {algo!r}; use one of {', '.join(ALGOS)}")
    return algo


def _check_min_numel(n: int) -> int:
    if n < 0:
        raise InvalidArgument(f"min_numel {n} must be >= 0")
    return n


@dataclass
class BackendOptions:
    """Options of the ``ccompress`` backend, passed as
    ``dist.init_process_group("ccompress", pg_options=BackendOptions(...))`` (or to
    ``dist.new_group(backend="ccompress", pg_options=...)``).

    Fields left as None are read from the environment, so that unmodified scripts can be
    configured: ``CCOMPRESS_CODEC`` (default codec of all_reduce and reduce_scatter; unset
    means ``"none"``: exact, everything goes to gloo/NCCL; ``"auto"``: at the first call of
    each op, run it exact and with hint8 on this link, on every rank, and keep the one that
    costs less wall plus CPU time; ``"auto:CODEC"``: the same with CODEC instead of hint8,
    e.g. ``auto:nvfp4`` for a 4-bit codec validated on the model),
    ``CCOMPRESS_ALLGATHER_CODEC``
    (all_gather; unset ``"none"``: gathering parameters lossily changes the model itself,
    not a gradient estimate, so it must be asked for separately), ``CCOMPRESS_ALGO``
    (``auto``), ``CCOMPRESS_ERROR_FEEDBACK`` (``0``), ``CCOMPRESS_MIN_NUMEL`` (4096).

    Args:
      all_reduce, reduce_scatter, all_gather: codec spec of each compressed collective.
      algo: ccompress schedule of all_reduce (``auto``, ``two_shot``, ``one_shot``, ...).
      error_feedback: keep the compression error of the gradient collectives, those issued
        inside a backward pass (DDP's bucket all-reduces, FSDP2's reduce-scatters), and add
        it at the same place in the next backward pass. Off by default: the place of a
        collective in a backward pass identifies its tensor only when every backward issues
        the same collectives in the same order (true of DDP and FSDP2 on a static graph),
        so it is something to turn on knowingly; ``ddp_comm_hook`` (keyed by DDP's own
        bucket index) keeps it on by default.
      min_numel: tensors with fewer elements stay exact (loss scalars, gradient norms).
    """

    all_reduce: Optional[str] = None
    reduce_scatter: Optional[str] = None
    all_gather: Optional[str] = None
    algo: Optional[str] = None
    error_feedback: Optional[bool] = None
    min_numel: Optional[int] = None

    def resolved(self) -> "BackendOptions":
        """A copy with every field filled in (environment, then defaults) and checked."""
        env_codec = _from_env("CCOMPRESS_CODEC", lambda v: (v and _spec(v, "CCOMPRESS_CODEC")) or None,
                              _CODEC_VALUES) if not (self.all_reduce and self.reduce_scatter) \
            else None
        env_gather = _from_env("CCOMPRESS_ALLGATHER_CODEC",
                               lambda v: (v and _spec(v, "all_gather")) or None,
                               _GATHER_VALUES) if not self.all_gather else None
        algo = self.algo
        if not algo:
            algo = _from_env("CCOMPRESS_ALGO", lambda v: _check_algo(v or "auto"),
                             "one of " + ", ".join(ALGOS))
        min_numel = self.min_numel
        if min_numel is None:
            min_numel = _from_env("CCOMPRESS_MIN_NUMEL",
                                  lambda v: _check_min_numel(int(v) if v else 4096),
                                  "an integer >= 0 (default 4096)")
        out = BackendOptions(
            all_reduce=_spec(self.all_reduce or env_codec, "all_reduce"),
            reduce_scatter=_spec(self.reduce_scatter or env_codec, "reduce_scatter"),
            all_gather=_spec(self.all_gather or env_gather, "all_gather"),
            algo=algo,
            error_feedback=(_env_flag("CCOMPRESS_ERROR_FEEDBACK", False)
                            if self.error_feedback is None else bool(self.error_feedback)),
            min_numel=int(min_numel))
        if out.algo not in ALGOS:
            raise InvalidArgument(f"unknown algo {out.algo!r}; use one of {', '.join(ALGOS)}")
        if out.error_feedback and out.algo in ("ring", "tree", "hier"):
            raise Unsupported(f"error feedback needs the two_shot, one_shot or auto schedule, "
                              f"not {out.algo!r}; choose another algo (algo= or CCOMPRESS_ALGO) "
                              "or turn it off (error_feedback= or CCOMPRESS_ERROR_FEEDBACK=0)")
        if out.min_numel < 0:
            raise InvalidArgument(f"min_numel {out.min_numel} must be >= 0")
        return out


Key = Tuple[str, int, int, str]  # (collective, place in the backward pass, numel, dtype)


@dataclass
class _Slot:
    ef: ErrorFeedback
    data_ptr: Optional[int]  # all-reduce: DDP's bucket buffer, the same every step
    numel: int


@dataclass
class BackwardFeedback:
    """Error-feedback residuals of the collectives issued inside backward passes.

    A collective is known by its kind, its place among the keyed collectives of its
    backward pass (``torch._C._current_graph_task_id`` tells one pass from the next), its
    size and dtype; an all-reduce also by its buffer's address, which DDP keeps for its
    buckets from step to step (and changes when it rebuilds them after the first step:
    the residual starts again). FSDP2 reduce-scatters from a fresh buffer each time, so
    only the place keys it. Residuals not used in the last backward pass that made keyed
    calls are dropped at the start of the next one."""

    slots: Dict[Key, _Slot] = field(default_factory=dict)
    pending: Dict[Key, dict] = field(default_factory=dict)
    _task: int = -1
    _place: int = 0
    _used: Set[Key] = field(default_factory=set)

    def lookup(self, kind: str, x: torch.Tensor) -> Optional[ErrorFeedback]:
        """The residual of this collective, or None outside a backward pass."""
        task = torch._C._current_graph_task_id()
        if task < 0:
            return None
        if task != self._task:
            if self._used:  # a pass that made keyed calls ended: forget what it did not use
                self.slots = {k: v for k, v in self.slots.items() if k in self._used}
                self._used = set()
            self._task, self._place = task, 0
        key = (kind, self._place, x.numel(), str(x.dtype))
        self._place += 1
        ptr = x.data_ptr() if kind == "all_reduce" else None
        slot = self.slots.get(key)
        if slot is None or slot.data_ptr != ptr:
            slot = self.slots[key] = _Slot(ErrorFeedback(), ptr, x.numel())
            saved = self.pending.pop(key, None)
            if saved is not None:
                slot.ef.load_state_dict({k: v.numpy() if isinstance(v, torch.Tensor) else v
                                         for k, v in saved.items()})
        self._used.add(key)
        return slot.ef

    def state_dict(self) -> Dict[str, Any]:
        """Every residual (CPU tensors) under ``"kind/place/numel/dtype"``."""
        return {"/".join(map(str, k)): {n: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                                        for n, v in s.ef.state_dict().items()}
                for k, s in self.slots.items()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict`; each residual is applied at its next use (same
        place, size and dtype)."""
        self.slots.clear()
        self.pending.clear()
        for name, ef in state.items():
            kind, place, numel, dtype = name.split("/")
            self.pending[(kind, int(place), int(numel), dtype)] = ef
