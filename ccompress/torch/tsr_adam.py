"""TSR-Adam for PyTorch: :class:`torch.optim.Optimizer` over the NumPy TSR-Adam
(``ccompress/compressors/tsr_adam.py``), so the core-space math is written once.

    from ccompress.torch.tsr_adam import TSRAdam
    opt = TSRAdam(model.named_parameters(), None, cc.tsr.TSR(rank=32), lr=1e-3)  # or a group
    loss.backward(); opt.step()          # communicates the r x r cores, updates in place

Parameters must be float32 CPU tensors (their NumPy views are updated in place); every rank
of ``comm`` steps alike. ``comm`` is a ccompress Communicator, a torch.distributed process
group, or None for every process of the launch (torchrun, mpiexec, one process). The
learning rate of param_groups[0] is used (schedulers work).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Tuple

import numpy as np
import torch

from .._internal.errors import InvalidArgument, Unsupported
from ..compressors.tsr import TSR
from ..compressors.tsr_adam import NumpyTSRAdam
from . import _common, _engagement, _trace


class TSRAdam(torch.optim.Optimizer):
    """AdamW with TSR-compressed gradients and core-space moments (see
    :class:`ccompress.compressors.tsr_adam.NumpyTSRAdam`, which it runs on the parameters'
    memory).

    Parameters
    ----------
    named_params : iterable of (str, torch.nn.Parameter)
        ``model.named_parameters()``; those that require grad are optimized.
    comm : ccompress.Communicator or torch.distributed.ProcessGroup or None
        The data-parallel group (as :func:`ccompress.torch.tp_all_reduce`'s ``group``).
    tsr : ccompress.compressors.tsr.TSR, optional
        The compressor (default ``TSR()``).
    lr, betas, eps, weight_decay, scale, on_refresh
        As for NumpyTSRAdam.

    Raises
    ------
    Unsupported
        A parameter that is not a contiguous float32 CPU tensor.
    InvalidArgument
        No parameter requires grad, or an invalid setting.
    """

    def __init__(self, named_params: Iterable[Tuple[str, torch.nn.Parameter]], comm,
                 tsr: TSR = None, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, scale: float = 1.0, on_refresh: str = "rotate"):
        named = [(n, p) for n, p in named_params if p.requires_grad]
        for n, p in named:
            if p.device.type != "cpu" or p.dtype != torch.float32 or not p.is_contiguous():
                raise Unsupported(f"parameter {n}: TSRAdam updates contiguous float32 CPU "
                                  f"tensors, got {p.dtype} on {p.device}")
        if not named:
            raise InvalidArgument("TSRAdam got no parameters that require grad")
        super().__init__([p for _, p in named], {"lr": lr})
        self._named = named
        self.comm = _common.resolve(comm)
        self.impl = NumpyTSRAdam({n: p.detach().numpy() for n, p in named}, tsr or TSR(),
                                 lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                 scale=scale, on_refresh=on_refresh)
        self._trace: Any = None  # CCOMPRESS_TRACE, at the first step

    @torch.no_grad()
    def step(self, closure=None):
        """One optimizer step from this rank's gradients (every rank calls it alike).

        Parameters
        ----------
        closure : callable, optional
            Re-evaluates the model and returns the loss.

        Returns
        -------
        torch.Tensor or None
            The closure's loss.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads: Dict[str, Any] = {}
        for n, p in self._named:
            grads[n] = (p.grad.detach().numpy() if p.grad is not None
                        else np.zeros(tuple(p.shape), np.float32))
        if self._trace is None:
            self._trace = _trace.GroupTrace(self.comm.rank, self.comm.size,
                                            _trace.global_rank(self.comm.rank),
                                            label="ccompress TSR-Adam")
        start, sent = _trace.now_us(), self.comm.bytes_sent
        self.impl.step(self.comm, grads, lr=self.param_groups[0]["lr"])
        if self._trace.on:  # the whole step: projections, collectives, core-space Adam
            numel = sum(p.numel() for _, p in self._named)
            tsr = self.impl.tsr
            self._trace.call(f"tsr_adam step r{tsr.rank} {tsr.codec}", start, numel=numel,
                             bytes_sent=self.comm.bytes_sent - sent,
                             exact_bytes=_engagement.exact_ring_bytes(
                                 "all_reduce", numel, 4, self.comm.size))
        return loss

    def state_dict(self) -> Dict[str, Any]:
        """The state, for checkpoints.

        Returns
        -------
        dict
            Moments, bases, residuals and step as CPU tensors (copies), so that ``torch.save`` /
            ``torch.load(weights_only=True)`` round-trip it bit for bit; and the learning rate.
        """
        return {"tsr_adam": _tensors(self.impl.state_dict()), "lr": self.param_groups[0]["lr"]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output.

        Parameters
        ----------
        state : dict
            What :meth:`state_dict` returned (on this rank).

        Raises
        ------
        InvalidArgument
            Not a TSRAdam state_dict.
        """
        try:
            self.impl.load_state_dict(_arrays(state["tsr_adam"]))
            self.param_groups[0]["lr"] = float(state["lr"])
        except (KeyError, TypeError) as e:
            raise InvalidArgument(f"not a TSRAdam state_dict ({e})") from e


def _tensors(x: Any) -> Any:
    """NumPy arrays in nested dicts as CPU tensors (own copies)."""
    if isinstance(x, dict):
        return {k: _tensors(v) for k, v in x.items()}
    return torch.from_numpy(np.array(x)) if isinstance(x, np.ndarray) else x


def _arrays(x: Any) -> Any:
    """The inverse of :func:`_tensors` (tensors as NumPy arrays)."""
    if isinstance(x, dict):
        return {k: _arrays(v) for k, v in x.items()}
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x
