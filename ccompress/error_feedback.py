"""Error feedback owned by the library: the part of a gradient that a lossy all-reduce
dropped is carried into the next step instead of being lost.

One :class:`ErrorFeedback` holds the state of one tensor on one rank. Pass it to
``Communicator.allreduce(x, codec=..., error_feedback=ef)`` every step::

    ef = cc.ErrorFeedback()
    y = comm.allreduce(grad, codec="fp8_e4m3:g128", algo="two_shot", op="avg", error_feedback=ef)

What happens inside the collective (C++ executor, ``cuda/src/collectives/executor.cc``):

- **worker residual** ``e_w`` (n elements): ``v = x + e_w`` is encoded instead of ``x``, then
  ``e_w <- v - decode(encode(v))``, where ``decode(encode(v))`` is exactly the value every
  receiver adds (same bytes, same stochastic-rounding context).
- **server residual** ``e_s`` (this rank's chunk, ``chunk_range(n, size, rank)``): two_shot's
  owner encodes ``s = sum / divisor + e_s`` for the all-gather, then
  ``e_s <- s - decode(encode(s))``. It is in the units of the result (after ``avg``).

Schedules: ``two_shot`` uses both residuals; ``one_shot`` quantizes once and uses the
worker residual only; ``auto`` picks one of those two; ``ring`` and ``tree`` re-quantize
partial sums at every hop, which no per-rank residual corrects, and raise
:class:`Unsupported`. ``reduce_scatter`` uses the worker residual.

Residuals are float32 and **per-rank state by nature**: each rank keeps what its own
quantizations lost, so they differ between ranks (the results stay bit-identical). A NaN or
Inf never enters a residual: where ``v``, its decoded value or their difference is not
finite the residual element is set to 0 and counted in :attr:`nonfinite`.

On a device communicator (CUDA arrays) the residuals live in that GPU's memory and the CUDA
backend updates them; :attr:`worker_residual`, :attr:`server_residual` and
:meth:`state_dict` return host copies, and a loaded state moves to the device at its first
call there.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import _core
from ._internal.device import DeviceBuffer
from ._internal.errors import InvalidArgument


class ErrorFeedback:
    """Worker and server error-feedback residuals of one tensor on this rank.

    The residuals are allocated (zero) on first use, for the tensor size, rank count and rank
    of that call; a later call with another size raises :class:`~ccompress.InvalidArgument`
    (use one ErrorFeedback per tensor). Pass it as ``error_feedback=`` to
    :meth:`ccompress.Communicator.allreduce` or ``reduce_scatter``.

    Parameters
    ----------
    worker : bool, default True
        Keep the worker residual (before the first quantization).
    server : bool, default True
        Keep the server residual (at the chunk's owner, before the second).

    Raises
    ------
    InvalidArgument
        Neither residual is kept.
    """

    def __init__(self, worker: bool = True, server: bool = True):
        if not (worker or server):
            raise InvalidArgument("ErrorFeedback needs the worker residual, the server one or both")
        self.worker = bool(worker)
        self.server = bool(server)
        self.nonfinite = 0
        self._shape: Optional[Tuple[int, int, int]] = None  # (n, size, rank)
        # NumPy arrays, or DeviceBuffers of GPU self._device once a device call used them.
        self._worker: Any = None
        self._server: Any = None
        self._device: Optional[int] = None

    # ---- state ----
    @property
    def worker_residual(self) -> Optional[np.ndarray]:
        """This rank's worker residual.

        Returns
        -------
        numpy.ndarray or None
            float32, n elements (a host copy when it lives on a GPU); None before first use.
        """
        return self._host(self._worker, 0)

    @property
    def server_residual(self) -> Optional[np.ndarray]:
        """This rank's server residual.

        Returns
        -------
        numpy.ndarray or None
            float32, its chunk's elements (a host copy when it lives on a GPU); None before
            first use or when it is not kept.
        """
        return self._host(self._server, 1)

    def reset(self) -> None:
        """Forgets the residuals and the non-finite count (e.g. after a loss spike)."""
        self._shape = None
        self._worker = self._server = None
        self._device = None
        self.nonfinite = 0

    def state_dict(self) -> Dict[str, Any]:
        """A copy of the state, for checkpoints.

        Returns
        -------
        dict
            Host arrays and plain values: which residuals are kept, the residuals, the
            (n, size, rank) they belong to, and the non-finite count.
        """
        w, s = self._host(self._worker, 0), self._host(self._server, 1)
        return {
            "worker": bool(self.worker), "server": bool(self.server),
            "nonfinite": int(self.nonfinite),
            "shape": None if self._shape is None else list(self._shape),
            "worker_residual": None if w is None else w.copy(),
            "server_residual": None if s is None else s.copy(),
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output, checked.

        Parameters
        ----------
        state : dict
            What :meth:`state_dict` returned (on this rank).

        Raises
        ------
        InvalidArgument
            A key is missing, a residual has the wrong size, or a residual holds NaN or Inf.
        """
        try:
            worker, server = bool(state["worker"]), bool(state["server"])
            shape, wres, sres = state["shape"], state["worker_residual"], state["server_residual"]
            nonfinite = int(state["nonfinite"])
        except (KeyError, TypeError) as e:
            raise InvalidArgument(f"not an ErrorFeedback state_dict (missing {e})") from e
        if shape is None:
            self.reset()
            self.worker, self.server, self.nonfinite = worker, server, nonfinite
            return
        n, size, rank = (int(v) for v in shape)
        lo, hi = _core.chunk_range(n, size, rank)
        loaded = [self._checked(wres, n, "worker_residual") if worker else None,
                  self._checked(sres, hi - lo, "server_residual") if server else None]
        self.worker, self.server, self.nonfinite = worker, server, nonfinite
        self._shape = (n, size, rank)
        self._worker, self._server = loaded
        self._device = None  # on the host until a device call moves them

    @staticmethod
    def _checked(a: Any, n: int, name: str) -> np.ndarray:
        a = np.array(a, dtype=np.float32, copy=True).reshape(-1)
        if a.size != n:
            raise InvalidArgument(f"{name} holds {a.size} elements, its tensor needs {n}")
        if not np.isfinite(a).all():
            raise InvalidArgument(f"{name} holds NaN or Inf; residuals are always finite")
        return a

    def _lengths(self) -> Tuple[int, int]:
        n, size, rank = self._shape
        lo, hi = _core.chunk_range(n, size, rank)
        return n, hi - lo

    def _host(self, r: Any, which: int) -> Optional[np.ndarray]:
        """Residual ``r`` (worker: which=0, server: 1) as a host array."""
        if r is None or isinstance(r, np.ndarray):
            return r
        return r.download(np.empty(self._lengths()[which], np.float32))

    # ---- used by Communicator ----
    def buffers(self, n: int, size: int, rank: int, device: Optional[int] = None
                ) -> Tuple[int, int]:
        """Addresses of the residuals for a collective, allocating them on first use (the
        communicator calls this).

        Parameters
        ----------
        n : int
            The tensor's element count.
        size, rank : int
            The group's size and this rank.
        device : int, optional
            The GPU whose memory the residuals go to (moved there from the host, or back, when
            the previous call ran elsewhere); None: host memory.

        Returns
        -------
        tuple of (int, int)
            The worker and server residuals' addresses; 0 for one this state does not keep.

        Raises
        ------
        InvalidArgument
            The state belongs to another (n, size, rank): use one ErrorFeedback per tensor.
        """
        shape = (int(n), int(size), int(rank))
        if self._shape is None:
            lo, hi = _core.chunk_range(n, size, rank)
            self._worker = np.zeros(n, np.float32) if self.worker else None
            self._server = np.zeros(hi - lo, np.float32) if self.server else None
            self._shape = shape
        elif shape != self._shape:
            raise InvalidArgument(
                f"this ErrorFeedback holds the state of {self._shape[0]} elements on rank "
                f"{self._shape[2]} of {self._shape[1]}, called with {n} elements on rank {rank} "
                f"of {size}: use one ErrorFeedback per tensor (or reset() it)")
        if device != self._device:
            self._worker, self._server = (self._host(self._worker, 0),
                                          self._host(self._server, 1))
            if device is not None:
                self._worker, self._server = (None if r is None else DeviceBuffer.of(r, device)
                                              for r in (self._worker, self._server))
            self._device = device
        return tuple(0 if r is None else (r.ptr if device is not None else r.ctypes.data)
                     for r in (self._worker, self._server))

    def __repr__(self) -> str:
        what = "+".join(k for k, on in (("worker", self.worker), ("server", self.server)) if on)
        return f"ErrorFeedback({what}, shape={self._shape}, nonfinite={self.nonfinite})"
