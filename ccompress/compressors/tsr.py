"""TSR: two-sided low-rank all-reduce of matrix gradients (docs/algorithms.md, "TSR"), with the
source's open points closed. NumPy, over any Communicator.

Per m x n gradient G_i (rank i) and bases U (m x r), V (n x r), identical on every rank:

    C = allreduce_avg(U^T M_i V)          # r x r core, really communicated (codec optional)
    M_i = G_i (+ e_i with error feedback, e_i <- M_i - U (U^T M_i V) V^T)

Refresh every ``refresh_every`` steps (and at the first), a randomized range finder whose
sketches are all-reduced (the mean gradient is what gets a basis):

    Omega  = shared Gaussian (n x k), k = r + oversample, drawn alike from (seed, step, name)
    Y      = allreduce_avg(M_i Omega)                           # m x k, communicated
    (power iterations: Y = allreduce_avg(M_i orth(allreduce_avg(M_i^T orth(Y)))))
    Q      = orth(Y)                                            # re-orthonormalised
    B      = allreduce_avg(Q^T M_i)                             # k x n, communicated
    B      = W S Z^T (small SVD);  U = Q W[:, :r],  V = Z[:, :r]

With ``basis_ema`` = beta > 0 the range finder sketches, in place of M_i, this rank's running
average A_i <- beta A_i + (1 - beta) M_i (A_i = M_i at the first step), kept every step at no
traffic: the bases follow the directions the gradient keeps over ~1/(1 - beta) steps rather
than one step's minibatch noise, at the same bytes (sketches are linear, so the all-reduced
sketch is that of the mean of the ranks' averages).

Every phase packs all tensors into one collective, so the transport counts every byte (a
step is one collective when the cores are exact, or when ``dense_codec`` is the cores'
codec; else two: lossy cores, exact small tensors). The
rotations R_u = U_new^T U_old, R_v = V_new^T V_old of a refresh are returned, so an
optimizer can carry its core-space moments into the new bases (see tsr_adam.py). Tensors
where r x r saves nothing, and vectors, are averaged exactly alongside the cores.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Tuple

import numpy as np

from .._internal.errors import InvalidArgument
from .._internal.flat import (allreduce_many, as_matrix, matrix_sides, name_tag,
                              orthonormal_columns, shared_gaussian)


@dataclass
class TSRStep:
    """What one TSR all-reduce produced.

    Attributes
    ----------
    cores : dict of str to numpy.ndarray
        name -> the averaged r x r core (float32).
    dense : dict of str to numpy.ndarray
        name -> the exactly averaged gradient (shape kept).
    rotations : dict of str to tuple of numpy.ndarray
        name -> (R_U, R_V), the rotations of the bases at a refresh (empty otherwise).
    """
    cores: Dict[str, np.ndarray]   # name -> averaged r x r core (float32)
    dense: Dict[str, np.ndarray]   # name -> exactly averaged gradient (shape kept)
    rotations: Dict[str, Tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


class TSR:
    """Two-sided rank-``rank`` projection with shared-seed randomized refresh.

    Parameters
    ----------
    rank
        r (cores are r x r; capped by the matrix sides).
    refresh_every
        steps between basis refreshes (K).
    oversample
        extra sketch columns p.
    power_iters
        power iterations of the range finder (each: two more all-reduces).
    codec
        wire codec of the core all-reduce.
    dense_codec
        wire codec of the tensors that travel whole (vectors, small matrices);
        "none" (default): exact. Set to ``codec`` to send them in the cores' collective: one
        collective per step instead of two, which is what a step costs where collectives
        are latency-bound (small models, CPU transports).
    sketch_codec
        wire codec of the refresh sketches ("none": exact). The sketches only
        choose a subspace, so a coarse codec (bf16) costs little accuracy and halves the
        refresh traffic, which buys more frequent refreshes or more rank at the same bytes.
    error_feedback
        keep e_i, the part of M_i outside the bases.
    basis_ema
        beta of the running average of M_i whose range gives the bases (0: the
        refresh step's M_i alone).
    seed
        seed of the shared sketches.

    Raises
    ------
    InvalidArgument
        rank or refresh_every below 1, a negative oversample or power_iters, or basis_ema
        outside [0, 1).
    """

    def __init__(self, rank: int = 32, refresh_every: int = 100, oversample: int = 5,
                 power_iters: int = 0, codec: str = "none", error_feedback: bool = False,
                 seed: int = 0, basis_ema: float = 0.0, sketch_codec: str = "none",
                 dense_codec: str = "none"):
        if rank < 1 or refresh_every < 1 or oversample < 0 or power_iters < 0:
            raise InvalidArgument("TSR needs rank >= 1, refresh_every >= 1, oversample >= 0, "
                                  "power_iters >= 0")
        if not 0.0 <= basis_ema < 1.0:
            raise InvalidArgument(f"TSR basis_ema {basis_ema}: use 0 <= beta < 1 (0: no average)")
        self.basis_ema = float(basis_ema)
        self.average: Dict[str, np.ndarray] = {}
        self.rank, self.refresh_every, self.oversample = rank, refresh_every, oversample
        self.power_iters, self.codec, self.error_feedback = power_iters, codec, error_feedback
        self.sketch_codec, self.dense_codec = sketch_codec, dense_codec
        self.seed = int(seed)
        self.u: Dict[str, np.ndarray] = {}
        self.v: Dict[str, np.ndarray] = {}
        self.error: Dict[str, np.ndarray] = {}
        self.step = 0

    def compressible(self, shape) -> bool:
        """Whether a tensor of this shape travels as an r x r core.

        Parameters
        ----------
        shape : tuple of int
            The tensor's shape.

        Returns
        -------
        bool
            True when it is a matrix (as :func:`as_matrix` sees it) whose core is smaller.
        """
        m, n = matrix_sides(shape)
        r = min(self.rank, m, n)
        return m > 1 and r * r < m * n

    def expand(self, name: str, core: np.ndarray) -> np.ndarray:
        """U core V^T: a core back into the gradient's space.

        Parameters
        ----------
        name : str
            The tensor's name.
        core : numpy.ndarray
            Its r x r core.

        Returns
        -------
        numpy.ndarray
            m x n, float32.
        """
        return (self.u[name] @ core @ self.v[name].T).astype(np.float32)

    def allreduce(self, comm, grads: Mapping[str, Any]) -> TSRStep:
        """Cores of the compressible gradients and exact means of the rest (refreshing the
        bases every ``refresh_every`` steps).

        Parameters
        ----------
        comm : ccompress.Communicator
            The communicator (every rank passes the same names and shapes).
        grads : mapping of str to array
            name -> this rank's gradient.

        Returns
        -------
        TSRStep
            The averaged cores, the dense means and, at a refresh, the rotations.
        """
        low = [k for k, g in grads.items() if self.compressible(np.shape(g))]
        dense = [k for k in grads if k not in low]
        m = {}
        for k in low:
            mk = as_matrix(np.asarray(grads[k], np.float32))
            m[k] = mk + self.error[k] if self.error_feedback and k in self.error else mk
        basis_of = self._running_average(m) if self.basis_ema else m
        rotations = {}
        if self.step % self.refresh_every == 0 or any(k not in self.u for k in low):
            rotations = self._refresh(comm, basis_of)
        local = [self.u[k].T @ m[k] @ self.v[k] for k in low]
        plain = [np.asarray(grads[k], np.float32) for k in dense]
        if self.codec == self.dense_codec:  # one collective for cores and dense tensors
            both = allreduce_many(comm, local + plain, self.codec)
            cores, exact = both[:len(low)], both[len(low):]
        else:
            cores = allreduce_many(comm, local, self.codec)
            exact = allreduce_many(comm, plain, self.dense_codec)
        if self.error_feedback:
            for k, c in zip(low, local):
                self.error[k] = m[k] - self.u[k] @ c @ self.v[k].T
        self.step += 1
        return TSRStep(dict(zip(low, cores)),
                       {k: e.reshape(np.shape(grads[k])) for k, e in zip(dense, exact)},
                       rotations)

    def _running_average(self, m: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """A_i <- beta A_i + (1 - beta) M_i per matrix (A_i = M_i when new); returns A."""
        b = np.float32(self.basis_ema)
        for k, mk in m.items():
            a = self.average.get(k)
            if a is None:
                self.average[k] = mk.copy()
            else:  # b * a + (1 - b) * mk, in place
                a *= b
                a += (1 - b) * mk
        return {k: self.average[k] for k in m}

    def _refresh(self, comm, m: Dict[str, np.ndarray]):
        names = sorted(m)
        ks = {k: min(self.rank + self.oversample, *m[k].shape) for k in names}
        omega = {k: shared_gaussian(self.seed, (self.step, name_tag(k)),
                                    (m[k].shape[1], ks[k])).astype(np.float32) for k in names}
        codec = self.sketch_codec
        y = dict(zip(names, allreduce_many(comm, [m[k] @ omega[k] for k in names], codec)))
        for _ in range(self.power_iters):
            q = {k: orthonormal_columns(y[k]).astype(np.float32) for k in names}
            z = allreduce_many(comm, [m[k].T @ q[k] for k in names], codec)
            z = {k: orthonormal_columns(zk).astype(np.float32) for k, zk in zip(names, z)}
            y = dict(zip(names, allreduce_many(comm, [m[k] @ z[k] for k in names], codec)))
        q = {k: orthonormal_columns(y[k]).astype(np.float32) for k in names}
        b = allreduce_many(comm, [q[k].T @ m[k] for k in names], codec)
        rotations = {}
        for k, bk in zip(names, b):
            w, _, zt = np.linalg.svd(bk.astype(np.float64), full_matrices=False)
            r = min(self.rank, *m[k].shape)
            u = (q[k].astype(np.float64) @ w[:, :r]).astype(np.float32)
            v = np.ascontiguousarray(zt[:r].T).astype(np.float32)
            if k in self.u:
                rotations[k] = (u.T @ self.u[k], v.T @ self.v[k])
            self.u[k], self.v[k] = u, v
        return rotations

    def state_dict(self) -> Dict[str, Any]:
        """The state, for checkpoints.

        Returns
        -------
        dict
            Bases (identical on every rank), residuals and running averages (per rank), step.
        """
        return {"step": self.step, "u": {k: a.copy() for k, a in self.u.items()},
                "v": {k: a.copy() for k, a in self.v.items()},
                "error": {k: a.copy() for k, a in self.error.items()},
                "average": {k: a.copy() for k, a in self.average.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output.

        Parameters
        ----------
        state : mapping
            What :meth:`state_dict` returned (on this rank).

        Raises
        ------
        InvalidArgument
            ``state`` is not a TSR state_dict (a key missing or of the wrong type).
        """
        try:
            self.step = int(state["step"])
            self.u = {k: np.array(a, np.float32) for k, a in state["u"].items()}
            self.v = {k: np.array(a, np.float32) for k, a in state["v"].items()}
            self.error = {k: np.array(a, np.float32) for k, a in state["error"].items()}
            self.average = {k: np.array(a, np.float32)
                            for k, a in state.get("average", {}).items()}
        except (KeyError, TypeError, AttributeError) as e:
            raise InvalidArgument(f"not a TSR state_dict ({e})") from e
