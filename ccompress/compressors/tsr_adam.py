"""TSR-Adam in NumPy: Adam whose moments live in TSR's r x r core space.

For a matrix parameter W (m x n) with averaged core C (from
:class:`~ccompress.compressors.tsr.TSR`)::

    m = b1 m + (1 - b1) C;   v = b2 v + (1 - b2) C*C
    W <- W - lr (scale * U (m_hat / (sqrt(v_hat) + eps)) V^T + weight_decay W)

so an optimizer step costs r x r floats of traffic per matrix. Vectors and small tensors
get plain AdamW on their exactly averaged gradients. When TSR refreshes a matrix's bases,
its moments are either rotated into the new bases (``on_refresh="rotate"``:
m <- R_u m R_v^T, and v <- (R_u*R_u) v (R_v*R_v)^T, which keeps v non-negative and is exact
for a sign flip or permutation of basis vectors) or reset to zero with a fresh bias
correction (``"reset"``).

Parameters are NumPy arrays updated in place (the PyTorch optimizer in
``ccompress/torch/tsr_adam.py`` passes views of CPU tensors).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Union

import numpy as np

from .._internal.errors import InvalidArgument
from .tsr import TSR

REFRESH_MODES = ("rotate", "reset")


class NumpyTSRAdam:
    """AdamW with TSR-compressed, core-space moments for matrices.

    Parameters
    ----------
    params
        name -> float32 NumPy array (updated in place).
    tsr
        the :class:`TSR` that communicates the gradients.
    lr, betas, eps
        as AdamW.
    weight_decay
        decoupled weight decay, one rate for every parameter or a mapping
        name -> rate (absent names: 0), as AdamW's parameter groups.
    scale
        multiplier of the core-space update (low rank moves fewer directions).
    on_refresh
        "rotate" or "reset" the core moments when the bases change.

    Raises
    ------
    InvalidArgument
        An unknown ``on_refresh``, a parameter that is not a float32 NumPy array, or a
        weight_decay mapping that names unknown parameters.
    """

    def __init__(self, params: Mapping[str, np.ndarray], tsr: TSR, lr: float = 1e-3,
                 betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: Union[float, Mapping[str, float]] = 0.0,
                 scale: float = 1.0, on_refresh: str = "rotate"):
        if on_refresh not in REFRESH_MODES:
            raise InvalidArgument(f"on_refresh {on_refresh!r}: use one of {REFRESH_MODES}")
        for k, p in params.items():
            if not (isinstance(p, np.ndarray) and p.dtype == np.float32):
                raise InvalidArgument(f"parameter {k}: TSRAdam updates float32 NumPy arrays")
        self.params, self.tsr = dict(params), tsr
        if isinstance(weight_decay, Mapping):
            unknown = sorted(set(weight_decay) - set(params))
            if unknown:
                raise InvalidArgument(f"weight_decay names unknown parameters {unknown[:3]}")
            self.wd = {k: float(weight_decay.get(k, 0.0)) for k in params}
        else:
            self.wd = {k: float(weight_decay) for k in params}
        self.lr, self.betas, self.eps = lr, tuple(betas), eps
        self.scale, self.on_refresh = scale, on_refresh
        self.state: Dict[str, Dict[str, Any]] = {}

    def step(self, comm, grads: Mapping[str, Any], lr: float = None) -> None:
        """One optimizer step from this rank's gradients (every rank calls it alike): updates
        ``params`` in place.

        Parameters
        ----------
        comm : ccompress.Communicator
            The communicator.
        grads : mapping of str to array
            name -> this rank's gradient, for every parameter.
        lr : float, optional
            This step's learning rate (default the one given at construction).
        """
        lr = self.lr if lr is None else lr
        out = self.tsr.allreduce(comm, {k: grads[k] for k in self.params})
        for k, (ru, rv) in out.rotations.items():
            if k in self.state:
                self._carry(self.state[k], ru, rv)
        for k, c in out.cores.items():
            upd = self._adam(k, c)
            self._apply(k, self.scale * self.tsr.expand(k, upd), lr)
        for k, g in out.dense.items():
            self._apply(k, self._adam(k, g), lr)

    def _adam(self, k: str, g: np.ndarray) -> np.ndarray:
        st = self.state.get(k)
        if st is None:
            st = self.state[k] = {"t": 0, "m": np.zeros_like(g, np.float32),
                                  "v": np.zeros_like(g, np.float32)}
        b1, b2 = self.betas
        st["t"] += 1
        m, v = st["m"], st["v"]  # b * m + (1 - b) * g, in place (the same float32 operations)
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        m_hat = m / (1 - b1 ** st["t"])
        v_hat = v / (1 - b2 ** st["t"])
        return (m_hat / (np.sqrt(v_hat) + self.eps)).astype(np.float32)

    def _apply(self, k: str, update: np.ndarray, lr: float) -> None:
        p = self.params[k]
        if self.wd[k]:
            p *= np.float32(1 - lr * self.wd[k])
        p -= np.float32(lr) * update.reshape(p.shape)

    def _carry(self, st: Dict[str, Any], ru: np.ndarray, rv: np.ndarray) -> None:
        if self.on_refresh == "reset":
            st["t"] = 0
            st["m"][...] = 0
            st["v"][...] = 0
            return
        st["m"] = (ru @ st["m"] @ rv.T).astype(np.float32)
        st["v"] = ((ru * ru) @ st["v"] @ (rv * rv).T).astype(np.float32)

    def state_dict(self) -> Dict[str, Any]:
        """The state, for checkpoints.

        Returns
        -------
        dict
            The moments (identical on every rank: they see the same averaged cores) and TSR's
            state.
        """
        return {"tsr": self.tsr.state_dict(),
                "moments": {k: {"t": s["t"], "m": s["m"].copy(), "v": s["v"].copy()}
                            for k, s in self.state.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output.

        Parameters
        ----------
        state : mapping
            What :meth:`state_dict` returned (on this rank).

        Raises
        ------
        InvalidArgument
            ``state`` is not a TSRAdam state_dict (a key missing or of the wrong type).
        """
        try:
            self.tsr.load_state_dict(state["tsr"])
            self.state = {k: {"t": int(s["t"]), "m": np.array(s["m"], np.float32),
                              "v": np.array(s["v"], np.float32)}
                          for k, s in state["moments"].items()}
        except (KeyError, TypeError, AttributeError) as e:
            raise InvalidArgument(f"not a TSRAdam state_dict ({e})") from e
