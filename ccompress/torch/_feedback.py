"""The error-feedback residuals the ``ccompress`` backend keeps for the gradient collectives,
keyed by their place in a backward pass (``BackendOptions(error_feedback=True)``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Set, Tuple

import numpy as np
import torch

from .._internal.errors import InvalidArgument
from ..compressors.error_feedback import ErrorFeedback

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
        """The residual of this collective.

        Parameters
        ----------
        kind : str
            The op (``"all_reduce"``, ``"reduce_scatter"``).
        x : torch.Tensor
            Its input.

        Returns
        -------
        ErrorFeedback or None
            None outside a backward pass.
        """
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

    def add_to(self, kw: dict, kind: str, x: torch.Tensor, on: bool) -> Optional[ErrorFeedback]:
        """With ``on`` (the group's error_feedback option), :meth:`lookup` of this call, set
        as ``kw["error_feedback"]`` where there is one (inside a backward pass).

        Returns
        -------
        ErrorFeedback or None
        """
        ef = self.lookup(kind, x) if on else None
        if ef is not None:
            kw["error_feedback"] = ef
        return ef

    def state_dict(self) -> Dict[str, Any]:
        """Every residual.

        Returns
        -------
        dict
            ``"kind/place/numel/dtype"`` -> the residual's state (CPU tensors).
        """
        return {"/".join(map(str, k)): {n: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                                        for n, v in s.ef.state_dict().items()}
                for k, s in self.slots.items()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output; each residual is applied at its next use
        (same place, size and dtype).

        Parameters
        ----------
        state : dict
            What :meth:`state_dict` returned.
        """
        self.slots.clear()
        self.pending.clear()
        for name, ef in state.items():
            kind, place, numel, dtype = name.split("/")
            self.pending[(kind, int(place), int(numel), dtype)] = ef


# The codecs a checkpoint records, in this order (its format: an op added later is not in it).
CHECKPOINT_OPS = ("all_reduce", "reduce_scatter", "all_gather")


def _codecs(pg: Any) -> list:
    return [getattr(pg.options, op) for op in CHECKPOINT_OPS]


def group_state(pg: Any) -> Dict[str, Any]:
    """``CompressedProcessGroup.state_dict``: the group's codecs, its residuals and, where
    it uses one, its GIFT's state."""
    out = {"codecs": _codecs(pg), "error_feedback": pg.feedback.state_dict()}
    if pg.gift is not None:
        out["gift"] = pg.gift.state_dict()
    return out


def load_group_state(pg: Any, state: Dict[str, Any]) -> None:
    """``CompressedProcessGroup.load_state_dict``: raises InvalidArgument where ``state``
    was saved with other codecs, or with GIFT where ``pg`` has none (or the reverse)."""
    if list(state.get("codecs", [])) != _codecs(pg):
        raise InvalidArgument(f"this state was saved with codecs {state.get('codecs')}, "
                              f"the group uses {_codecs(pg)}")
    if (state.get("gift") is None) != (pg.gift is None):
        raise InvalidArgument("this state was saved by a group " + (
            "without GIFT; this group uses one" if pg.gift is not None else
            "with GIFT; call use_gift(GIFT(model, ...)) before loading it"))
    if pg.gift is not None:
        pg.gift.load_state_dict(state["gift"])
    pg.feedback.load_state_dict(state.get("error_feedback", {}))
