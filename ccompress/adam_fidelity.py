"""Optimizer-aware fidelity: the error of a compressed gradient as Adam sees it.

L2 error weighs every coordinate by its size, but Adam divides each coordinate by its own
running scale sqrt(v), so an error on a coordinate whose gradients are always small counts
for much more in the update than the same error on a large one. Two measures, in float64,
of a sequence of exact gradients g_1..g_T (what the optimizer sees: the mean over the ranks)
and their compressed counterparts ĝ_t; Adam's β1, β2, ε; the step t counted from the state's
step s_0 (t = s_0 + 1 at the first gradient):

- Second moment of the exact run: ``v_t = β2 v_{t-1} + (1 - β2) g_t²``, bias-corrected
  ``v̂_t = v_t / (1 - β2^t)``; ``v_0`` (and ``m_0``, ``s_0``) from a supplied optimizer state
  (torch's ``exp_avg_sq``, ``exp_avg``, ``step``), else zeros.
- **Adam-normalised error** (``adam``): ``‖(ĝ_t - g_t) / (√v̂_t + ε)‖ / ‖g_t / (√v̂_t + ε)‖``,
  the L2 error with each coordinate weighted by the factor Adam scales it by. With no state
  at the first step ``v̂_1 = g_1²``: then it is the RMS of the per-element relative errors
  ``(ĝ - g) / (|g| + ε)`` (Adam's first step is a sign step).
- **Update error** (``update``): Adam run twice from the same state, once on g and once on
  ĝ, each with its own moments carried over the sequence: ``m_t = β1 m_{t-1} + (1 - β1) g_t``,
  ``u_t = (m_t / (1 - β1^t)) / (√v̂_t + ε)`` (the step before the learning rate, no weight
  decay); the error is ``‖û_t - u_t‖ / ‖u_t‖`` and ``cos(û_t, u_t)``. This is open loop:
  both runs see the same gradients' positions (the parameters do not move apart).

A sequence's figures are the means over its steps of each step's value. :class:`AdamPair`
holds the two runs' state; :func:`adam_weights` and :func:`weighted_relerr` are what
``auto8:adam`` / ``auto4:adam`` (:mod:`ccompress.autocodec`) rank candidates with.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

import numpy as np

from ._internal.errors import InvalidArgument

BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults
EPS = 1e-8


def adam_weights(v_hat: np.ndarray, eps: float = EPS) -> np.ndarray:
    """Per-coordinate factor Adam scales a gradient by.

    Parameters
    ----------
    v_hat : array_like
        The bias-corrected second moment.
    eps : float, default 1e-8
        Adam's eps.

    Returns
    -------
    numpy.ndarray
        float64: ``1 / (sqrt(v_hat) + eps)``.
    """
    return 1.0 / (np.sqrt(np.asarray(v_hat, np.float64)) + eps)


def weighted_relerr(y: np.ndarray, ref: np.ndarray, w: np.ndarray) -> float:
    """The weighted relative error ``‖w (y - ref)‖ / ‖w ref‖`` in float64.

    Parameters
    ----------
    y, ref : array_like
        The result and the reference, of the same size.
    w : array_like
        The per-coordinate weights (:func:`adam_weights`).

    Returns
    -------
    float
        The ratio; 0 when both norms are 0, inf when only the reference's is.
    """
    return _ratio(*weighted_sums(y, ref, w))


def weighted_sums(y: np.ndarray, ref: np.ndarray, w: np.ndarray):
    """The two sums a pooled weighted error adds up, in float64.

    Parameters
    ----------
    y, ref : array_like
        The result and the reference, of the same size.
    w : array_like
        The per-coordinate weights.

    Returns
    -------
    tuple of (float, float)
        ``(‖w (y - ref)‖², ‖w ref‖²)``.
    """
    ref = np.asarray(ref, np.float64).ravel()
    w = np.asarray(w, np.float64).ravel()
    d = w * (np.asarray(y, np.float64).ravel() - ref)
    r = w * ref
    return float(d @ d), float(r @ r)


def check_betas(betas, eps: float) -> None:
    """Checks Adam's hyperparameters.

    Parameters
    ----------
    betas : tuple of (float, float)
        Adam's β1 and β2, each in [0, 1).
    eps : float
        Adam's eps, > 0.

    Raises
    ------
    InvalidArgument
        A beta outside [0, 1), or eps not positive.
    """
    b1, b2 = betas
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise InvalidArgument(f"Adam betas {betas}: each must be in [0, 1)")
    if not eps > 0:
        raise InvalidArgument(f"Adam eps {eps}: must be > 0")


class AdamPair:
    """Adam on the exact and on the compressed gradients of one tensor, side by side.

    Parameters
    ----------
    n : int
        The element count.
    betas : tuple of (float, float), default (0.9, 0.999)
        Adam's β1, β2.
    eps : float, default 1e-8
        Adam's eps.
    exp_avg, exp_avg_sq : array_like, optional
        The optimizer state before the first gradient (torch's names: the raw, not
        bias-corrected, moments); zeros when not given. Both runs start from it.
    step : int, default 0
        The steps already taken.

    Raises
    ------
    InvalidArgument
        Bad betas or eps, a state of another size than ``n``, or a negative second moment.
    """

    def __init__(self, n: int, betas=BETAS, eps: float = EPS,
                 exp_avg: Optional[np.ndarray] = None, exp_avg_sq: Optional[np.ndarray] = None,
                 step: int = 0) -> None:
        check_betas(betas, eps)
        self.b1, self.b2 = float(betas[0]), float(betas[1])
        self.eps = float(eps)
        m0 = np.zeros(n) if exp_avg is None else self._state(exp_avg, n, "exp_avg")
        v0 = np.zeros(n) if exp_avg_sq is None else self._state(exp_avg_sq, n, "exp_avg_sq")
        if np.any(v0 < 0):
            raise InvalidArgument("exp_avg_sq has negative entries: not a second moment")
        self.m, self.v = m0.copy(), v0.copy()
        self.m_hat, self.v_hat_run = m0.copy(), v0.copy()  # the compressed run's moments
        self.t = int(step)

    @staticmethod
    def _state(a, n: int, what: str) -> np.ndarray:
        a = np.asarray(a, np.float64).ravel()
        if a.size != n:
            raise InvalidArgument(f"optimizer state {what} has {a.size} elements; the "
                                  f"gradient has {n}")
        return a

    def step(self, g: np.ndarray, g_hat: np.ndarray) -> Dict[str, float]:
        """Feeds one step's exact and compressed gradients to the two runs.

        Parameters
        ----------
        g : array_like
            The exact gradient (what the optimizer sees: the mean over the ranks).
        g_hat : array_like
            Its compressed counterpart.

        Returns
        -------
        dict of str to float
            This step's ``adam``, ``update``, ``update_cos`` and the sums behind them
            (``adam_e2``, ``adam_r2``, ``update_e2``, ``update_r2``).
        """
        g = np.asarray(g, np.float64).ravel()
        gh = np.asarray(g_hat, np.float64).ravel()
        b1, b2, t = self.b1, self.b2, self.t + 1
        self.t = t
        self.m = b1 * self.m + (1 - b1) * g
        self.v = b2 * self.v + (1 - b2) * g * g
        self.m_hat = b1 * self.m_hat + (1 - b1) * gh
        self.v_hat_run = b2 * self.v_hat_run + (1 - b2) * gh * gh
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        w = adam_weights(self.v / c2, self.eps)
        ae2, ar2 = weighted_sums(gh, g, w)
        u = (self.m / c1) * w
        uh = (self.m_hat / c1) * adam_weights(self.v_hat_run / c2, self.eps)
        d = uh - u
        ue2, ur2, uu = float(d @ d), float(u @ u), float(uh @ uh)
        cos = float(uh @ u) / math.sqrt(uu * ur2) if uu > 0 and ur2 > 0 else \
            (1.0 if uu == ur2 == 0 else 0.0)
        return {"adam": _ratio(ae2, ar2), "update": _ratio(ue2, ur2), "update_cos": cos,
                "adam_e2": ae2, "adam_r2": ar2, "update_e2": ue2, "update_r2": ur2}


def _ratio(e2: float, r2: float) -> float:
    if r2 > 0:
        return math.sqrt(e2 / r2)
    return 0.0 if e2 == 0 else math.inf
