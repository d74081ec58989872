"""PowerSGD (Vogels et al. 2019): rank-r gradient compression with error feedback and warm
start, the peer baseline of the stateful compressors. NumPy, over any Communicator.

Per matrix gradient G_i (rank i; tensors of more dimensions are viewed as first dimension by
the rest) with residual e_i and the shared factor Q (n x r)::

    M_i = G_i + e_i
    P   = allreduce_avg(M_i Q)        # m x r, communicated
    P   = orth(P)                     # identical on every rank (same bits in)
    Q   = allreduce_avg(M_i^T P)      # n x r, communicated; kept for the next step
    out = P Q^T                       # the rank-r estimate of mean_i M_i
    e_i = M_i - out                   # error feedback (per rank)

Tensors for which rank r saves nothing (r (m + n) >= m n, vectors) are averaged exactly in
the first all-reduce. All factors of a phase travel in one collective (``_flat``).
State: Q (identical on every rank) and e_i (per-rank by nature), in ``state_dict``.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

import numpy as np

from .._internal.errors import InvalidArgument
from .._internal.flat import (allreduce_many, as_matrix, matrix_sides, name_tag,
                              orthonormal_columns, shared_gaussian)


class PowerSGD:
    """Rank-``rank`` PowerSGD over a Communicator.

    Parameters
    ----------
    rank
        columns of P and Q.
    error_feedback
        keep the per-rank residual e_i.
    warm_start
        start each step's power iteration from last step's Q (else a fresh
        shared Gaussian).
    codec
        wire codec of the factor all-reduces ("none": exact float32).
    seed
        seed of the shared initial Q.

    Raises
    ------
    InvalidArgument
        ``rank`` below 1.
    """

    def __init__(self, rank: int = 4, error_feedback: bool = True, warm_start: bool = True,
                 codec: str = "none", seed: int = 0):
        if rank < 1:
            raise InvalidArgument(f"PowerSGD rank {rank} must be >= 1")
        self.rank, self.error_feedback, self.warm_start = int(rank), error_feedback, warm_start
        self.codec, self.seed = codec, int(seed)
        self.q: Dict[str, np.ndarray] = {}
        self.error: Dict[str, np.ndarray] = {}
        self.step = 0

    def compressible(self, shape) -> bool:
        """Whether a tensor of this shape goes through the rank-r path.

        Parameters
        ----------
        shape : tuple of int
            The tensor's shape.

        Returns
        -------
        bool
            True when it is a matrix whose two factors are smaller than it.
        """
        m, n = matrix_sides(shape)
        return m > 1 and self.rank * (m + n) < m * n

    def allreduce(self, comm, grads: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        """The averaged gradients: exact for vectors and small tensors, rank-r for the rest.

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
        low = [k for k, g in grads.items() if self.compressible(np.shape(g))]
        dense = [k for k in grads if k not in low]
        m = {}
        for k in low:
            mk = as_matrix(np.asarray(grads[k], np.float32))
            if self.error_feedback and k in self.error:
                mk = mk + self.error[k]
            m[k] = mk
            if k not in self.q or not self.warm_start:
                self.q[k] = shared_gaussian(self.seed, (self.step, name_tag(k)),
                                            (mk.shape[1], min(self.rank, *mk.shape))
                                            ).astype(np.float32)
        first = allreduce_many(comm, [m[k] @ self.q[k] for k in low]
                               + [np.asarray(grads[k], np.float32) for k in dense], self.codec)
        p = {k: orthonormal_columns(first[i]).astype(np.float32) for i, k in enumerate(low)}
        second = allreduce_many(comm, [m[k].T @ p[k] for k in low], self.codec)
        out = {k: first[len(low) + i].reshape(np.shape(grads[k])) for i, k in enumerate(dense)}
        for i, k in enumerate(low):
            self.q[k] = second[i]
            est = p[k] @ second[i].T
            if self.error_feedback:
                self.error[k] = m[k] - est
            out[k] = est.reshape(np.shape(grads[k]))
        self.step += 1
        return {k: out[k] for k in grads}

    def state_dict(self) -> Dict[str, Any]:
        """The state, for checkpoints.

        Returns
        -------
        dict
            Q factors (identical on every rank), residuals (per rank), step.
        """
        return {"step": self.step, "q": {k: v.copy() for k, v in self.q.items()},
                "error": {k: v.copy() for k, v in self.error.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output.

        Parameters
        ----------
        state : mapping
            What :meth:`state_dict` returned (on this rank).

        Raises
        ------
        InvalidArgument
            ``state`` is not a PowerSGD state_dict (a key missing or of the wrong type).
        """
        try:
            self.step = int(state["step"])
            self.q = {k: np.array(v, np.float32) for k, v in state["q"].items()}
            self.error = {k: np.array(v, np.float32) for k, v in state["error"].items()}
        except (KeyError, TypeError, AttributeError) as e:
            raise InvalidArgument(f"not a PowerSGD state_dict ({e})") from e
