"""GIFT: geometry-informed low-precision gradient all-reduce (docs/algorithms.md, "GIFT"),
with the source's weaknesses fixed. NumPy, over any Communicator and any wire codec.

For a linear layer y = x W^T (W: out x in), the input-side K-FAC factor A = E[x x^T] is
approximated as rank r + diagonal, A ~ A_hat = U diag(lam) U^T + D, and factored without a
dense solve: with B = D^-1/2 U diag(sqrt(lam)) = Q diag(sig) Z^T (thin SVD, Q: in x r),

    L = D^1/2 M,   M = I + Q diag(sqrt(1 + sig^2) - 1) Q^T,   so  L L^T = A_hat.

The gradient goes on the wire as G~ = G L^-T = (G D^-1/2) M^-1 and comes back as G~ L^T =
(G~ M) D^1/2, where M^-1 = I + Q diag(1/sqrt(1 + sig^2) - 1) Q^T: O(in * r) per row.
Optionally the output side too (the other K-FAC factor S = E[delta delta^T], same form):
G~ = L_S^-1 G L_A^-T. On the tiny GPT's real gradients the input side alone lowers fp8's
one-step error 2-2.5x after the first 100 steps even with dense, fresh statistics; both
sides 3-4x (research/gift/gift_study.py).

- A is an EMA of each rank's x^T x / tokens, all-reduced in float32 (exact codec) so every
  rank holds the same bits; the factor is refreshed when :meth:`observe` is called (every
  K steps, the caller's choice), deterministically from those bits. With ``sketch=k`` only
  A Omega (in x k, Omega Gaussian drawn alike on every rank from a shared seed) and diag(A)
  travel, O(in * k) instead of in x in, and A is rebuilt as the Nystrom approximation
  Y (Omega^T Y)^+ Y^T plus the diagonal it misses: exact when rank(A) <= k, and cheap
  enough to refresh the statistics every few steps.
- Encode and decode use the same scales (the codec's own, sent on the wire); the sum is
  float32 (the collective's); error feedback (library-owned, :class:`ErrorFeedback`) is
  kept in the transformed coordinates. On refresh the worker residual is mapped into the
  new coordinates; the server residual (a chunk of the owner) is dropped.
- Layers are chosen from measured error (:meth:`select`): each rank measures the one-step
  round-trip error of its own gradient with and without the transform, the figures are
  averaged over ranks (so every rank decides alike), and layers whose error falls by at
  least ``min_gain`` are treated. The table is kept in ``selection``.
All tensors of a step travel in one all-reduce (one ErrorFeedback for the packed buffer).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

import numpy as np

from .._internal.errors import InvalidArgument
from .._internal.flat import allreduce_many, as_matrix, shared_gaussian
from ..codec import Codec
from ..error_feedback import ErrorFeedback


class Whitening:
    """The factor L of one layer (see the module docstring); float64.

    Parameters
    ----------
    a : numpy.ndarray
        The layer's input second moment A (d x d, symmetric PSD).
    rank : int
        The rank of the low-rank part.
    damping : float
        The floor of the residual diagonal, relative to mean(diag(A)).
    """

    def __init__(self, a: np.ndarray, rank: int, damping: float):
        a = np.asarray(a, np.float64)
        d = a.shape[0]
        lam, u = np.linalg.eigh(a)
        r = min(rank, d)
        lam, u = np.clip(lam[::-1][:r], 0, None), u[:, ::-1][:, :r]
        floor = damping * max(float(np.trace(a)) / d, 1e-30)
        diag = np.maximum(np.diag(a) - (u * u) @ lam, floor)
        self.dsqrt = np.sqrt(diag)
        b = (u * np.sqrt(lam)) / self.dsqrt[:, None]
        q, sig, _ = np.linalg.svd(b, full_matrices=False)
        self.q = q
        root = np.sqrt(1.0 + sig * sig)
        self.fwd = 1.0 / root - 1.0  # M^-1 = I + Q diag(fwd) Q^T
        self.back = root - 1.0       # M    = I + Q diag(back) Q^T

    def to_wire(self, g: np.ndarray) -> np.ndarray:
        """G L^-T: a gradient into the whitened coordinates it travels in.

        Parameters
        ----------
        g : numpy.ndarray
            The gradient, (rows, d).

        Returns
        -------
        numpy.ndarray
            The whitened gradient, same shape.
        """
        h = g / self.dsqrt
        return h + ((h @ self.q) * self.fwd) @ self.q.T

    def from_wire(self, h: np.ndarray) -> np.ndarray:
        """H L^T: a whitened gradient back into the layer's coordinates.

        Parameters
        ----------
        h : numpy.ndarray
            The whitened gradient, (rows, d).

        Returns
        -------
        numpy.ndarray
            The gradient, same shape.
        """
        return (h + ((h @ self.q) * self.back) @ self.q.T) * self.dsqrt

    def dense(self) -> np.ndarray:
        """L itself, for tests.

        Returns
        -------
        numpy.ndarray
            d x d, float64.
        """
        m = np.eye(self.q.shape[0]) + (self.q * self.back) @ self.q.T
        return self.dsqrt[:, None] * m


class Kronecker:
    """Both K-FAC factors of a layer, A ~ L_A L_A^T (input side) and S ~ L_S L_S^T (output
    side, S = E[delta delta^T] of the loss gradient of the layer's output): the gradient
    goes on the wire as L_S^-1 G L_A^-T and comes back as L_S G~ L_A^T (each factor a
    :class:`Whitening`).

    Parameters
    ----------
    a, s : numpy.ndarray
        The input (in x in) and output (out x out) second moments.
    rank : int
        The rank of each factor's low-rank part.
    damping, damping_out : float
        The diagonal floors of the input and output factors.
    """

    def __init__(self, a: np.ndarray, s: np.ndarray, rank: int, damping: float,
                 damping_out: float):
        self.right = Whitening(a, rank, damping)
        self.left = Whitening(s, rank, damping_out)

    def to_wire(self, g: np.ndarray) -> np.ndarray:
        """L_S^-1 G L_A^-T.

        Parameters
        ----------
        g : numpy.ndarray
            The gradient, (out, in).

        Returns
        -------
        numpy.ndarray
            What travels, same shape.
        """
        return np.ascontiguousarray(self.left.to_wire(self.right.to_wire(g).T).T)

    def from_wire(self, h: np.ndarray) -> np.ndarray:
        """L_S H L_A^T.

        Parameters
        ----------
        h : numpy.ndarray
            What travelled, (out, in).

        Returns
        -------
        numpy.ndarray
            The gradient, same shape.
        """
        return self.right.from_wire(np.ascontiguousarray(self.left.from_wire(h.T).T))


def nystrom(y: np.ndarray, omega: np.ndarray, diag: np.ndarray) -> np.ndarray:
    """The Nystrom approximation of a symmetric PSD A from its sketch, with the diagonal
    it misses added back.

    Parameters
    ----------
    y : numpy.ndarray
        The sketch A Omega, (d, k).
    omega : numpy.ndarray
        The sketch matrix Omega, (d, k).
    diag : numpy.ndarray
        diag(A), d elements.

    Returns
    -------
    numpy.ndarray
        Y (Omega^T Y)^+ Y^T plus the part of diag(A) it misses (A minus a Nystrom
        approximation is PSD, so that part is >= 0 up to rounding); d x d.
    """
    core = omega.T @ y
    s, v = np.linalg.eigh((core + core.T) / 2)
    keep = s > max(float(s.max()), 0.0) * 1e-10
    b = (y @ v[:, keep]) / np.sqrt(s[keep])
    a = b @ b.T
    a[np.diag_indices_from(a)] += np.maximum(diag - np.einsum("ij,ij->i", b, b), 0.0)
    return a


def roundtrip_errors(codec: Codec, factor, g: Any) -> "tuple[float, float]":
    """One codec round trip's relative L2 error of a gradient, plain and through a factor.

    Parameters
    ----------
    codec : Codec
        The codec (fed float32).
    factor : Whitening or Kronecker
        The layer's factor.
    g : array_like
        The gradient (as a matrix; float64 inside).

    Returns
    -------
    tuple of (float, float)
        ``(||rt(G) - G||, ||rt(G L^-T) L^T - G||) / ||G||``.
    """
    g = as_matrix(np.asarray(g, np.float64))
    plain = codec.roundtrip(g.astype(np.float32)).reshape(g.shape)
    back = factor.from_wire(codec.roundtrip(factor.to_wire(g).astype(np.float32))
                            .reshape(g.shape).astype(np.float64))
    norm = max(float(np.linalg.norm(g)), 1e-30)
    return float(np.linalg.norm(plain - g)) / norm, float(np.linalg.norm(back - g)) / norm


class NumpyGIFT:
    """Geometry-informed compressed all-reduce of weight gradients.

    Parameters
    ----------
    codec
        wire codec (any spec: fp8_e4m3:g128, hint8:g32, nvfp4, ...).
    rank
        rank of the low-rank part of A.
    ema
        EMA weight of the old A per :meth:`observe` call. The source's 0.95 with a
        collection every 50 steps keeps 77% of the weight on the first statistics after
        250 steps; on this repository's language model 0.5 halved the gap to fresh
        statistics (a study in the git history of perf/RESULTS.md), so 0.5 is the default.
    damping
        floor of the residual diagonal, relative to mean(diag(A)). The source's
        1e-3 whitens the weak directions fully; on this repository's language-model
        gradients 0.3 lowered fp8's one-step error 2.5-3.2x where 1e-3 gave 1.3-2.8x
        (a study in the git history of perf/RESULTS.md), so 0.3 is the default.
    error_feedback
        keep worker and server residuals (transformed coordinates).
    algo
        schedule of the gradient all-reduce.
    sketch
        0 to all-reduce the dense moments; k > 0 to all-reduce a k-column Nystrom
        sketch and the diagonal instead (layers with in <= k + 1 still go dense).
    seed
        seed of the shared sketch matrices (the same on every rank).
    damping_out
        damping of the output-side factor (relative to its mean diagonal),
        used for the layers whose output moments :meth:`observe` was given.

    Raises
    ------
    InvalidArgument
        ``ema`` outside [0, 1), a negative ``sketch``, or an unknown codec.
    """

    def __init__(self, codec: str = "fp8_e4m3:g128", rank: int = 32, ema: float = 0.5,
                 damping: float = 0.3, error_feedback: bool = True, algo: str = "two_shot",
                 sketch: int = 0, seed: int = 0, damping_out: float = 1.0):
        if not 0 <= ema < 1:
            raise InvalidArgument(f"GIFT ema {ema} must be in [0, 1)")
        if sketch < 0:
            raise InvalidArgument(f"GIFT sketch {sketch} must be >= 0 (0: dense moments)")
        self.sketch, self.seed, self.draws = int(sketch), int(seed), 0
        self.codec, self.rank, self.ema, self.damping = Codec.parse(codec), rank, ema, damping
        self.algo, self.damping_out = algo, damping_out
        self.ef = ErrorFeedback() if error_feedback else None
        self.second_moment: Dict[str, np.ndarray] = {}
        self.output_moment: Dict[str, np.ndarray] = {}
        self.factors: Dict[str, Any] = {}  # Whitening, or Kronecker with output moments
        self.layers: List[str] = []
        self.selection: List[Dict[str, Any]] = []
        self._layout: List[Any] = []  # (name, matrix shape) of the packed buffer

    # ---- geometry ----
    def observe(self, comm, moments: Mapping[str, Any],
                output_moments: Optional[Mapping[str, Any]] = None) -> None:
        """Folds this rank's second moments into the EMA after an exact float32 all-reduce,
        and refreshes those layers' factors.

        Parameters
        ----------
        comm : ccompress.Communicator
            The communicator (every rank calls this alike).
        moments : mapping of str to array
            name -> x^T x / tokens (in x in), the layer's input second moment on this rank.
        output_moments : mapping of str to array, optional
            name -> delta^T delta / tokens (out x out, delta the loss gradient of the layer's
            output): those layers get both K-FAC factors (:class:`Kronecker`); they travel in
            the same all-reduce.

        Raises
        ------
        InvalidArgument
            Output moments of a layer without input moments.
        """
        names = sorted(moments)
        outs = sorted(output_moments or {})
        if not set(outs) <= set(names):
            raise InvalidArgument(f"output moments of {sorted(set(outs) - set(names))} come "
                                  "without input moments; give both for every such layer")
        mats = [np.asarray(moments[k], np.float64) for k in names]
        mats += [np.asarray(output_moments[k], np.float64) for k in outs]
        avg = self._reduce_moments(comm, mats)
        for store, keys, got in ((self.second_moment, names, avg[:len(names)]),
                                 (self.output_moment, outs, avg[len(names):])):
            for k, a in zip(keys, got):
                old = store.get(k)
                store[k] = a.astype(np.float64) if old is None else \
                    self.ema * old + (1 - self.ema) * a
        for k in names:
            previous = self.factors.get(k)
            self.factors[k] = self._factor(k)
            self._remap_residual(k, previous)

    def _factor(self, k: str):
        """Layer k's factor from the EMA moments: two-sided when it has output moments."""
        if k in self.output_moment:
            return Kronecker(self.second_moment[k], self.output_moment[k], self.rank,
                             self.damping, self.damping_out)
        return Whitening(self.second_moment[k], self.rank, self.damping)

    def _reduce_moments(self, comm, mats: List[np.ndarray]) -> List[np.ndarray]:
        """The rank-average of each moment: dense, or sketched (module docstring)."""
        if not self.sketch:
            return allreduce_many(comm, mats)
        self.draws += 1
        omegas = [None if m.shape[0] <= self.sketch + 1 else
                  shared_gaussian(self.seed, (self.draws, i), (m.shape[0], self.sketch))
                  for i, m in enumerate(mats)]
        payload = []
        for m, om in zip(mats, omegas):
            payload += [m] if om is None else [m @ om, np.diag(m)]
        red, out = allreduce_many(comm, payload), []
        for om in omegas:
            if om is None:
                out.append(red.pop(0).astype(np.float64))
            else:
                y, diag = red.pop(0).astype(np.float64), red.pop(0).astype(np.float64)
                out.append(nystrom(y, om, diag))
        return out

    def select(self, comm, grads: Mapping[str, Any], candidates: Iterable[str],
               min_gain: float = 1.5) -> List[str]:
        """Chooses the layers to treat from the measured one-step round-trip error (the table
        goes to ``selection``).

        Parameters
        ----------
        comm : ccompress.Communicator
            The communicator (the errors are averaged over the ranks, so all choose alike).
        grads : mapping of str to array
            name -> this rank's gradient.
        candidates : iterable of str
            The layers to consider (those with a factor).
        min_gain : float, default 1.5
            The least plain / whitened error ratio for a layer to be treated.

        Returns
        -------
        list of str
            The treated layers (also ``layers``).
        """
        cands = [k for k in sorted(candidates) if k in self.factors]
        errs = np.array([roundtrip_errors(self.codec, self.factors[k], grads[k])
                         for k in cands], np.float32).reshape(-1, 2)
        errs = allreduce_many(comm, [errs])[0] if cands else errs
        self.selection = [{"layer": k, "err_plain": float(e[0]), "err_gift": float(e[1]),
                           "gain": float(e[0] / max(e[1], 1e-30)),
                           "selected": bool(e[0] >= min_gain * e[1])}
                          for k, e in zip(cands, errs)]
        self.layers = [s["layer"] for s in self.selection if s["selected"]]
        return self.layers

    # ---- the all-reduce ----
    def allreduce(self, comm, grads: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        """The averaged gradients: treated layers through the transform, the rest as they are,
        all in one compressed all-reduce.

        Parameters
        ----------
        comm : ccompress.Communicator
            The communicator (every rank passes the same names and shapes).
        grads : mapping of str to array
            name -> this rank's gradient.

        Returns
        -------
        dict of str to numpy.ndarray
            name -> the averaged gradient (float32, shape kept).
        """
        names = list(grads)
        layout = [(k, as_matrix(np.asarray(grads[k])).shape) for k in names]
        if self._layout and self._layout != layout and self.ef is not None:
            self.ef.reset()  # another packing: the residual no longer lines up
        self._layout = layout
        wire = []
        for k in names:
            g = np.asarray(grads[k], np.float32)
            wire.append(self.factors[k].to_wire(as_matrix(g)).astype(np.float32)
                        if k in self.layers else g)
        flat = np.concatenate([w.reshape(-1) for w in wire])
        flat = comm.allreduce(flat, codec=self.codec, algo=self.algo, op="avg",
                              error_feedback=self.ef)
        out, at = {}, 0
        for k, w in zip(names, wire):
            h = flat[at:at + w.size].reshape(w.shape)
            at += w.size
            if k in self.layers:
                h = self.factors[k].from_wire(h.astype(np.float64)).astype(np.float32)
            out[k] = h.reshape(np.shape(grads[k]))
        return out

    def _remap_residual(self, k: str, previous) -> None:
        """Moves layer k's slice of the worker residual into the new coordinates."""
        ef = self.ef
        if ef is None or ef.worker_residual is None or k not in self.layers:
            return
        at = 0
        for name, shape in self._layout:
            size = int(np.prod(shape))
            if name == k:
                e = ef.worker_residual[at:at + size].reshape(shape).astype(np.float64)
                g = previous.from_wire(e) if previous is not None else e
                ef.worker_residual[at:at + size] = self.factors[k].to_wire(g).reshape(-1)
            at += size
        if ef.server_residual is not None:
            ef.server_residual[:] = 0

    def state_dict(self) -> Dict[str, Any]:
        """The state, for checkpoints.

        Returns
        -------
        dict
            EMA moments (identical on every rank: factors are rebuilt from them), the treated
            layers and selection table, and the error-feedback state (per rank).
        """
        return {"second_moment": {k: v.copy() for k, v in self.second_moment.items()},
                "output_moment": {k: v.copy() for k, v in self.output_moment.items()},
                "layers": list(self.layers), "selection": list(self.selection),
                "sketch_draws": self.draws,
                "layout": [(k, list(s)) for k, s in self._layout],
                "error_feedback": None if self.ef is None else self.ef.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output.

        Parameters
        ----------
        state : mapping
            What :meth:`state_dict` returned (on this rank).

        Raises
        ------
        InvalidArgument
            ``state`` is not a GIFT state_dict (a key missing or of the wrong type).
        """
        try:
            self.second_moment = {k: np.array(v, np.float64)
                                  for k, v in state["second_moment"].items()}
            self.output_moment = {k: np.array(v, np.float64)
                                  for k, v in state.get("output_moment", {}).items()}
            self.layers, self.selection = list(state["layers"]), list(state["selection"])
            self.draws = int(state.get("sketch_draws", 0))
            self._layout = [(k, tuple(s)) for k, s in state["layout"]]
            if self.ef is not None and state["error_feedback"] is not None:
                self.ef.load_state_dict(state["error_feedback"])
        except (KeyError, TypeError, AttributeError) as e:
            raise InvalidArgument(f"not a GIFT state_dict ({e})") from e
        self.factors = {k: self._factor(k) for k in self.second_moment}
