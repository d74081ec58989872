"""Data-driven codec choice: ``codec="auto8"`` and ``codec="auto4"``.

For each call, every rank measures the error of one round trip of each candidate codec on a
sample of its own tensor, in two layouts when the tensor is 2-D (scale groups running along
rows, as stored, or along columns: the "data-driven reshaping"). The ranks then sum their
squared errors and squared norms with an exact float32 all-reduce, so all of them see the same
totals and pick the same (codec, layout): the one with the least relative error within the
bit budget (8.5 bits per element for auto8, 4.6 for auto4). The choice is reported in
``comm.last_stats``. auto8 weighs only 8-bit codecs; auto4 weighs ``nvfp4``, ``hnvfp4:g16``
and ``hint4:g16``, not ``mxfp4``, which lost at a high learning rate (:data:`CANDIDATES`).

For gradients that an Adam-type optimizer consumes, ``auto8:adam`` / ``auto4:adam`` rank the
candidates by the Adam-normalised error instead (:mod:`ccompress.adam_fidelity`): each
element's error and value weighted by ``1 / (sqrt(v̂) + eps)``, Adam's per-coordinate scale.
``v̂`` comes from an :class:`AutoCodec` passed as the codec, which either holds the
optimizer's second moment (:meth:`AutoCodec.set_second_moment`) or keeps its own running
average of the square of this tensor's all-reduced results (identical on every rank); one
object per tensor, like :class:`~ccompress.ErrorFeedback`. The plain string form, and an
AutoCodec's first call, have no history and weigh by the rank's own ``|x|`` (``v̂ = x²``:
Adam's first step), so the spec ranks by the mean squared relative error per element.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import adam_fidelity
from ._internal import arrays as _arrays
from ._internal.errors import CCompressError, InvalidArgument
from .codec import Codec

# Candidates in order of preference on ties; those this build does not register are skipped.
# auto8 weighs 8-bit codecs only, so it never sends 4 bits. auto4 leaves mxfp4 out: at a small
# GPT's tuned AdamW rate it ended 3-4% above exact where hint4:g16 held (perf/results/
# training.md, "4-bit at a high learning rate"); by the plain error it never won there anyway.
CANDIDATES = {
    "auto8": ("fp8_e4m3:g128", "fp8_e4m3:g32", "taco:g128", "hint8", "hint8:g32",
              "hint8:g16:s8", "hint8:g32:s8", "mxfp8"),
    "auto4": ("nvfp4", "hnvfp4:g16", "hint4"),
}
BUDGET_BITS = {"auto8": 8.5, "auto4": 4.6}
SAMPLE_ELEMS = 1 << 15


METRICS = ("l2", "adam")

# The public names (the rest serve the communicator's call).
__all__ = ["AutoCodec", "CANDIDATES", "Choice", "METRICS", "candidates", "choose", "is_auto",
           "parse"]


def parse(spec: Any) -> Optional[Tuple[str, str]]:
    """The base and metric of an auto codec.

    Parameters
    ----------
    spec : str or AutoCodec or any
        A codec argument.

    Returns
    -------
    tuple of (str, str) or None
        ("auto8" | "auto4", "l2" | "adam") of an auto spec or :class:`AutoCodec`, else None.
    """
    if isinstance(spec, AutoCodec):
        return spec.base, spec.metric
    if not isinstance(spec, str):
        return None
    base, _, metric = spec.partition(":")
    if base in CANDIDATES and (metric or "l2") in METRICS:
        return base, metric or "l2"
    return None


def is_auto(spec: Any) -> bool:
    """Whether a codec argument chooses per call.

    Parameters
    ----------
    spec : str or AutoCodec or any
        A codec argument.

    Returns
    -------
    bool
        True for auto8 / auto4 (with an optional ``:adam`` / ``:l2``) and an
        :class:`AutoCodec`.
    """
    return parse(spec) is not None


class AutoCodec:
    """``auto8`` / ``auto4`` with state, for one tensor: pass it as ``codec=`` every step.

    Without :meth:`set_second_moment` it keeps ``v = beta2 v + (1 - beta2) y²`` of every
    call's all-reduced result y (the same bits on every rank, so every rank weighs alike),
    bias-corrected by the call count. The first call weighs by the rank's own input.

    Parameters
    ----------
    name
        "auto8" or "auto4", optionally with ":adam" or ":l2" (the default metric is
        ``metric``).
    metric
        "adam" (rank by the Adam-normalised error) or "l2".
    beta2, eps
        of the running second moment and the weights ``1 / (sqrt(v̂) + eps)``;
        match the optimizer's.
    exp_avg_sq, step
        a second moment (raw, as torch keeps it) and its step count to
        continue the running average from (e.g. the optimizer's, when resuming).

    Raises
    ------
    InvalidArgument
        An unknown base or metric, bad beta2 or eps, or a starting exp_avg_sq without a step
        of at least 1.
    """

    def __init__(self, name: str = "auto8", metric: str = "adam", beta2: float = 0.999,
                 eps: float = adam_fidelity.EPS, exp_avg_sq: Any = None, step: int = 0) -> None:
        base, _, given = str(name).partition(":")
        if base not in CANDIDATES or (given or metric) not in METRICS:
            raise InvalidArgument(f"AutoCodec({name!r}, metric={metric!r}): use auto8 or auto4 "
                                  f"and a metric of {', '.join(METRICS)}")
        adam_fidelity.check_betas((0.0, beta2), eps)
        self.base, self.metric = base, given or metric
        self.beta2, self.eps = float(beta2), float(eps)
        self.v: Optional[np.ndarray] = None
        self.calls = 0
        self.supplied = False
        if exp_avg_sq is not None:
            self.set_second_moment(exp_avg_sq)
            self.supplied, self.calls = False, int(step)
            if self.calls < 1:
                raise InvalidArgument("AutoCodec: a starting exp_avg_sq needs its step >= 1")

    def __repr__(self) -> str:
        return f"AutoCodec({self.name!r})"

    @property
    def name(self) -> str:
        """The spec this state stands for.

        Returns
        -------
        str
            ``"<base>:<metric>"``, e.g. ``"auto8:adam"``.
        """
        return f"{self.base}:{self.metric}"

    def set_second_moment(self, exp_avg_sq: Any, step: Optional[int] = None) -> None:
        """Weigh by the optimizer's own second moment from now on.

        Parameters
        ----------
        exp_avg_sq : array_like
            E.g. torch's ``exp_avg_sq``, this tensor's size.
        step : int, optional
            The optimizer's step: bias-corrects with it when given, else takes the moment as it
            is.

        Raises
        ------
        InvalidArgument
            A moment with NaN, Inf or negative entries.
        """
        v = np.asarray(exp_avg_sq, np.float64)
        if np.any(~np.isfinite(v)) or np.any(v < 0):
            raise InvalidArgument("set_second_moment: exp_avg_sq must be finite and >= 0")
        self.v = v / (1 - self.beta2 ** step) if step else v
        self.supplied = True

    def weights(self, x: np.ndarray) -> np.ndarray:
        """The per-element weights of this call's ranking.

        Parameters
        ----------
        x : numpy.ndarray
            This rank's input.

        Returns
        -------
        numpy.ndarray
            float64, the shape of ``x``: ``1 / (sqrt(v̂) + eps)``.

        Raises
        ------
        InvalidArgument
            The second moment has another size than ``x`` (one AutoCodec per tensor).
        """
        if self.v is None:
            return adam_fidelity.adam_weights(np.square(x.astype(np.float64)), self.eps)
        if self.v.size != x.size:
            raise InvalidArgument(f"{self.name}: the second moment has {self.v.size} elements, "
                                  f"the tensor {x.size}: one AutoCodec per tensor")
        v = self.v if self.supplied else self.v / (1 - self.beta2 ** self.calls)
        return adam_fidelity.adam_weights(v.reshape(x.shape), self.eps)

    def observe(self, y: np.ndarray) -> None:
        """Adds one call's all-reduced result to the running second moment.

        Parameters
        ----------
        y : numpy.ndarray
            The call's result (the same bits on every rank).
        """
        self.calls += 1
        if self.supplied or self.metric != "adam":
            return
        y2 = np.square(np.nan_to_num(y.astype(np.float64), posinf=0.0, neginf=0.0)).ravel()
        self.v = (1 - self.beta2) * y2 if self.v is None else \
            self.beta2 * self.v + (1 - self.beta2) * y2


def candidates(name: str) -> List[Codec]:
    """The registered candidates of ``auto8`` / ``auto4`` that fit its bit budget.

    Parameters
    ----------
    name : {"auto8", "auto4"}
        The auto codec.

    Returns
    -------
    list of Codec
        In order of preference on ties; those this build does not register are skipped.
    """
    out = []
    for spec in CANDIDATES[name]:
        try:
            c = Codec.parse(spec)
        except CCompressError:
            continue
        if c.wire_bytes(SAMPLE_ELEMS) * 8 / SAMPLE_ELEMS <= BUDGET_BITS[name] and c not in out:
            out.append(c)
    return out


def matrix_shape(shape: Sequence[int]) -> Tuple[int, int]:
    """(rows, cols) of a tensor seen as a matrix: the last axis against all the others."""
    if len(shape) < 2:
        return 1, int(np.prod(shape, dtype=np.int64)) if shape else 1
    cols = int(shape[-1])
    return int(np.prod(shape[:-1], dtype=np.int64)), cols


def layouts(shape: Sequence[int]) -> Tuple[str, ...]:
    rows, cols = matrix_shape(shape)
    return ("rows", "cols") if rows > 1 and cols > 1 else ("rows",)


def arrange(a: np.ndarray, layout: str) -> np.ndarray:
    """The flat array a collective sees: as stored, or column by column."""
    if layout == "rows":
        return a.reshape(-1)
    rows, cols = matrix_shape(a.shape)
    return np.ascontiguousarray(a.reshape(rows, cols).T).reshape(-1)


def restore(flat: np.ndarray, shape: Sequence[int], layout: str) -> np.ndarray:
    """Inverse of :func:`arrange`."""
    if layout == "rows":
        return flat.reshape(shape)
    rows, cols = matrix_shape(shape)
    return flat.reshape(cols, rows).T.reshape(shape)


def _sample(a: np.ndarray, layout: str) -> np.ndarray:
    """About SAMPLE_ELEMS elements that meet the same scale groups as in the full tensor:
    whole rows (or whole columns), evenly spread."""
    rows, cols = matrix_shape(a.shape)
    m = a.reshape(rows, cols).astype(np.float32)
    if layout == "cols":
        m = m.T
    if m.size <= SAMPLE_ELEMS:
        return m.reshape(-1)
    keep = max(1, SAMPLE_ELEMS // m.shape[1])
    idx = np.linspace(0, m.shape[0] - 1, keep).astype(np.int64)
    sample = m[idx].reshape(-1)
    return sample[:max(SAMPLE_ELEMS, m.shape[1])]


@dataclass
class Choice:
    """What an auto codec chose for one call.

    Attributes
    ----------
    codec : Codec
        The chosen codec.
    layout : {"rows", "cols"}
        Reduce as stored, or column by column (through a rearranged copy).
    table : list of tuple of (str, str, float)
        (codec, layout, relative error) of every candidate.
    """
    codec: Codec
    layout: str
    table: List[Tuple[str, str, float]]  # (codec, layout, relerr) for every candidate


def choose(name: str, a: np.ndarray, exact_sum, weights: Optional[np.ndarray] = None) -> Choice:
    """Picks a (codec, layout) for a host array from the ranks' pooled sample errors.

    Parameters
    ----------
    name : {"auto8", "auto4"}
        The auto codec.
    a : numpy.ndarray
        This rank's input.
    exact_sum : callable
        ``exact_sum(v)`` returns the exact float32 all-reduce of a small vector (the same on
        every rank).
    weights : numpy.ndarray, optional
        Shape of ``a``: weigh each element's error and value (the Adam-normalised ranking).

    Returns
    -------
    Choice
        The codec and layout with the least pooled error (the first on ties), and the table.

    Raises
    ------
    CCompressError
        No candidate codec of ``name`` is registered in this build.
    """
    cands = candidates(name)
    if not cands:
        raise CCompressError(f"{name}: no candidate codec is registered in this build")
    options = [(c, lay) for lay in layouts(a.shape) for c in cands]
    stats = np.zeros(2 * len(options), np.float32)
    samples = {lay: _sample(a, lay) for lay in layouts(a.shape)}
    wsamples = {lay: None if weights is None else
                _sample(weights.reshape(a.shape), lay).astype(np.float64) for lay in samples}
    for i, (c, lay) in enumerate(options):
        s = samples[lay]
        r = c.roundtrip(s).astype(np.float64)
        # NaN/Inf inputs, and the outputs a codec's policy lets them reach, say nothing about
        # its error on the rest: leave them out (else one NaN would decide the choice).
        finite = np.isfinite(s) & np.isfinite(r)
        w = 1.0 if wsamples[lay] is None else wsamples[lay][finite]
        d = (r - s)[finite] * w
        sw = s[finite].astype(np.float64) * w
        stats[2 * i] = float(np.dot(d, d))
        stats[2 * i + 1] = float(np.dot(sw, sw))
    totals = np.asarray(exact_sum(stats), dtype=np.float64)
    rel = np.sqrt(totals[0::2] / np.maximum(totals[1::2], 1e-300))
    best = int(np.argmin(rel))  # first on ties: the order above breaks them
    table = [(c.name, lay, float(r)) for (c, lay), r in zip(options, rel)]
    return Choice(options[best][0], options[best][1], table)


def allreduce(comm: Any, call: Any, spec: Any) -> dict:
    """Runs the all-reduce ``call`` (resolved with codec "none") with the (codec, layout)
    that ``spec`` (auto8 / auto4 [:adam], or an :class:`AutoCodec`) picks for its data: the
    ranks agree on the choice through one exact all-reduce of their sample errors, then
    reduce as stored ("rows") or column by column ("cols", through a rearranged copy). Host
    arrays only; the choice goes to ``last_stats``."""
    name, metric = parse(spec)
    a = _arrays.as_numpy(call.x)
    weights = None
    if metric == "adam":
        weights = spec.weights(a) if isinstance(spec, AutoCodec) else \
            adam_fidelity.adam_weights(np.square(a.astype(np.float64)))
    choice = choose(name, a, lambda v: comm._exact_sum(v, "two_shot"), weights)
    if choice.layout == "rows":
        stats = comm._run(replace(call, codec=choice.codec))
    else:
        flat = arrange(a, "cols")
        res = np.empty_like(flat)
        stats = comm._run(replace(call, codec=choice.codec, x=_arrays.view(flat),
                                  out=_arrays.view(res)))
        _arrays.as_numpy(call.out)[...] = restore(res, call.x.shape, "cols")
    if isinstance(spec, AutoCodec):
        spec.observe(_arrays.as_numpy(call.out))
    stats.update(auto=spec if isinstance(spec, str) else spec.name, layout=choice.layout,
                 candidates=choice.table)
    return stats
