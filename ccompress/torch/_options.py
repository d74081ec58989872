"""The ``ccompress`` backend's configuration: :class:`BackendOptions`, the ``CCOMPRESS_*``
variables behind its unset fields, and each op's codec spec parsed once into an
:class:`OpCodec` (``auto`` and ``auto:CODEC`` are parsed here and nowhere else). Agreement
across ranks and the choice per call are ``_policy``'s.

An op with a codec of its own is one row of :data:`OP_CODECS` plus the
:class:`BackendOptions` field of the same name: resolution, agreement, the log line, the
counters and the checkpoint's codec list follow that table.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from .. import autocodec
from .._internal.errors import InvalidArgument, Unsupported
from ..codec import Codec
from ..communicator import ALGOS
from . import _p2p

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")
AUTO = "auto"
AUTO_CANDIDATE = "hint8"  # what a bare ``auto`` weighs against exact


@dataclass(frozen=True)
class OpVar:
    """Where an op's codec comes from when its :class:`BackendOptions` field is unset: the
    environment variable ``env`` (unset: ``"none"``, exact); whether ``auto`` applies, and
    whether error feedback does (the op reduces gradients)."""

    env: str
    auto: bool
    feedback: bool


# op (a BackendOptions field) -> its variable. A new op adds its row here and its field to
# BackendOptions. all_to_all carries activations (MoE dispatch and combine), which change
# every call: no auto, no error feedback.
OP_CODECS: Dict[str, OpVar] = {
    "all_reduce": OpVar("CCOMPRESS_CODEC", auto=True, feedback=True),
    "reduce_scatter": OpVar("CCOMPRESS_CODEC", auto=True, feedback=True),
    "all_gather": OpVar("CCOMPRESS_ALLGATHER_CODEC", auto=False, feedback=False),
    "all_to_all": OpVar("CCOMPRESS_ALLTOALL_CODEC", auto=False, feedback=False),
}
_SPECS = "a codec spec (none, bf16, fp16, fp8_e4m3:g128, hint8, nvfp4, ...; unset: none, exact)"


def env_flag(name: str, default: bool) -> bool:
    """A boolean ``CCOMPRESS_*`` variable.

    Parameters
    ----------
    name : str
        The environment variable.
    default : bool
        Its value when unset.

    Returns
    -------
    bool

    Raises
    ------
    InvalidArgument
        For a value other than 1/true/yes/on or 0/false/no/off/empty, naming the variable.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise InvalidArgument(f"{name}={raw!r}; accepted values: 1, true, yes, on (enable) or 0, "
                          "false, no, off, empty (disable)")


def _from_env(name: str, parse: Callable[[str], Any], accepted: str) -> Any:
    """``parse(raw)`` of variable ``name``, ``raw`` "" when unset; an error is one line
    naming the variable, its value and the accepted values (no chained traceback)."""
    raw = os.environ.get(name, "")
    try:
        return parse(raw)
    except (InvalidArgument, Unsupported, ValueError) as e:
        kind = Unsupported if isinstance(e, Unsupported) else InvalidArgument
        raise kind(f"{name}={raw!r}: {_one_line(e)}; {name} accepts {accepted}") from None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


@dataclass(frozen=True)
class OpCodec:
    """An op's codec spec, parsed and checked once per group.

    Attributes
    ----------
    spec : str
        The resolved spec as :class:`BackendOptions` shows it: ``"none"``, a codec's
        canonical name, ``"auto"`` or ``"auto:NAME"``.
    codec : Codec or None
        The fixed codec; None for ``"none"`` (exact) and for ``auto``.
    candidate : Codec or None
        What ``auto`` weighs against exact at the op's first call; None otherwise.
    """

    spec: str
    codec: Optional[Codec] = None
    candidate: Optional[Codec] = None

    @property
    def candidate_label(self) -> str:
        """The candidate as the user named it (``hint8`` for a bare ``auto``)."""
        return AUTO_CANDIDATE if self.spec == AUTO else self.spec[len(AUTO) + 1:]


def parse_codec(value: Optional[str], what: str, auto: bool) -> OpCodec:
    """The one parser of a backend codec spec.

    Parameters
    ----------
    value : str or None
        A codec spec, ``"auto"`` or ``"auto:CODEC"`` (where ``auto`` applies); None or ""
        for ``"none"``.
    what : str
        The op named in errors ("" where the caller names the variable).
    auto : bool
        Whether ``auto`` applies to this op.

    Returns
    -------
    OpCodec

    Raises
    ------
    InvalidArgument
        For a spec that does not parse, or ``auto:none``.
    Unsupported
        For auto8/auto4 (a codec chosen per call), ``auto`` where it does not apply, or an
        auto spec nested in ``auto:``.
    """
    if not value or value == "none":
        return OpCodec("none")
    subject = f"{what} codec {value!r}: " if what else ""
    if value == AUTO or value.startswith(AUTO + ":"):
        if not auto:
            raise Unsupported(f"{subject}auto applies to all_reduce and "
                              "reduce_scatter; name this op's codec")
        cand = AUTO_CANDIDATE if value == AUTO else value[len(AUTO) + 1:]
        if autocodec.is_auto(cand) or cand == AUTO or cand.startswith(AUTO + ":"):
            raise Unsupported(f"{subject}auto weighs one fixed codec spec "
                              "against exact (auto:nvfp4, auto:fp8_e4m3:g128)")
        codec = _codec(cand, subject)
        if codec.name == "none":
            raise InvalidArgument(f"{subject}auto weighs a lossy codec against "
                                  "exact; name one (auto:nvfp4) or use none")
        return OpCodec(AUTO if value == AUTO else f"{AUTO}:{codec.name}", candidate=codec)
    if autocodec.is_auto(value):
        raise Unsupported(f"{subject}{value} picks a codec per call; the backend needs "
                          "a fixed codec spec (error feedback and replica agreement depend on it)")
    codec = _codec(value, subject)
    return OpCodec(codec.name, codec=None if codec.name == "none" else codec)


def auto_candidate(spec: str) -> Optional[str]:
    """The codec an ``auto`` spec weighs against exact, as named.

    Parameters
    ----------
    spec : str
        A backend codec spec.

    Returns
    -------
    str or None
        ``"hint8"`` for ``"auto"``, CODEC's name for ``"auto:CODEC"``, None for a fixed spec.

    Raises
    ------
    InvalidArgument, Unsupported
        As :func:`parse_codec`.
    """
    codec = parse_codec(spec, "", auto=True)
    return codec.candidate_label if codec.candidate is not None else None


def _codec(spec: str, subject: str) -> Codec:
    try:
        return Codec.parse(spec)
    except InvalidArgument as e:
        raise InvalidArgument(f"{subject}{_one_line(e)}") from None


@dataclass
class BackendOptions:
    """Options of the ``ccompress`` backend, passed as
    ``dist.init_process_group("ccompress", pg_options=BackendOptions(...))`` (or to
    ``dist.new_group(backend="ccompress", pg_options=...)``).

    Fields left as None are read from the environment, so that unmodified scripts can be
    configured: ``CCOMPRESS_CODEC`` (all_reduce and reduce_scatter; unset: ``"none"``, exact,
    everything goes to gloo/NCCL; ``"auto"``: at the first call of each op, run it exact
    and with hint8 on this link, on every rank, and keep the one that costs less wall plus
    CPU time; ``"auto:CODEC"``: the same with CODEC, e.g. ``auto:nvfp4``),
    ``CCOMPRESS_ALLGATHER_CODEC`` (all_gather; unset ``"none"``: gathering parameters
    lossily changes the model itself, so it is asked for separately),
    ``CCOMPRESS_ALLTOALL_CODEC`` (all_to_all_single and all_to_all; unset ``"none"``: the
    activations an all-to-all carries are asked for separately, per group, so that an MoE
    layer's dispatch and combine can differ), ``CCOMPRESS_ALGO``
    (``auto``), ``CCOMPRESS_ERROR_FEEDBACK`` (``0``), ``CCOMPRESS_MIN_NUMEL`` (4096).

    Parameters
    ----------
    all_reduce, reduce_scatter, all_gather : str, optional
        Codec spec of each compressed collective.
    all_to_all : str, optional
        Codec spec of ``all_to_all_single`` and ``all_to_all`` (list form). Each
        destination's piece is encoded on its own; error feedback never applies to it (the
        activations it carries change every call), nor does ``auto``.
    algo : str, optional
        ccompress schedule of all_reduce (``auto``, ``two_shot``, ``one_shot``, ...).
    error_feedback : bool, optional
        Keep the compression error of the gradient collectives issued inside a backward pass
        (DDP's bucket all-reduces, FSDP2's reduce-scatters; never the all-to-alls) and add it at the same place in the
        next one. Off by default: the place identifies the tensor only when every backward
        issues the same collectives in the same order (DDP and FSDP2 on a static graph);
        ``ddp_comm_hook`` (keyed by DDP's own bucket index) keeps it on by default.
    min_numel : int, optional
        Tensors with fewer elements stay exact (loss scalars, gradient norms).
    """

    all_reduce: Optional[str] = None
    reduce_scatter: Optional[str] = None
    all_gather: Optional[str] = None
    algo: Optional[str] = None
    error_feedback: Optional[bool] = None
    min_numel: Optional[int] = None
    all_to_all: Optional[str] = None

    def resolved(self) -> "BackendOptions":
        """A copy with every field filled in (environment, then defaults) and checked.

        Returns
        -------
        BackendOptions

        Raises
        ------
        InvalidArgument, Unsupported
            For a value that cannot be used, naming the field or the variable.
        """
        return resolve(self).options


@dataclass(frozen=True)
class GroupConfig:
    """What a group runs with: the resolved ``options`` and each op's parsed codec."""

    options: BackendOptions
    codecs: Dict[str, OpCodec]


def _check_algo(v: str) -> str:
    if (v or "auto") not in ALGOS:
        raise InvalidArgument(f"unknown algo {v!r}; use one of {', '.join(ALGOS)}")
    return v or "auto"


def _check_min_numel(v: Any) -> int:
    n = int(v) if v not in (None, "") else 4096
    if n < 0:
        raise InvalidArgument(f"min_numel {n} must be >= 0")
    return n


def resolve(given: Optional[BackendOptions]) -> GroupConfig:
    """``given`` (None: all from the environment) resolved and checked, each op's codec
    parsed once.

    Parameters
    ----------
    given : BackendOptions or None
        The ``pg_options`` of the group.

    Returns
    -------
    GroupConfig

    Raises
    ------
    InvalidArgument, Unsupported
        One line naming the field or variable at fault, its value and what it accepts.
    """
    given = given or BackendOptions()
    codecs: Dict[str, OpCodec] = {}
    from_env: Dict[str, OpCodec] = {}  # a variable shared by several ops is parsed once
    for op, var in OP_CODECS.items():
        value = getattr(given, op)
        if value:
            codecs[op] = parse_codec(value, op, var.auto)
            continue
        if var.env not in from_env:
            accepted = _SPECS + (", auto or auto:CODEC" if var.auto else "") + \
                "; auto8/auto4 are not accepted by the backend"
            from_env[var.env] = _from_env(var.env, lambda v: parse_codec(v, "", var.auto),
                                          accepted)
        codecs[op] = from_env[var.env]
    algo = given.algo or _from_env("CCOMPRESS_ALGO", _check_algo, "one of " + ", ".join(ALGOS))
    _check_algo(algo)
    min_numel = (_check_min_numel(given.min_numel) if given.min_numel is not None else
                 _from_env("CCOMPRESS_MIN_NUMEL", _check_min_numel,
                           "an integer >= 0 (default 4096)"))
    ef = (env_flag("CCOMPRESS_ERROR_FEEDBACK", False) if given.error_feedback is None
          else bool(given.error_feedback))
    if ef and algo in ("ring", "tree", "hier"):
        raise Unsupported(f"error feedback needs the two_shot, one_shot or auto schedule, "
                          f"not {algo!r}; choose another algo (algo= or CCOMPRESS_ALGO) "
                          "or turn it off (error_feedback= or CCOMPRESS_ERROR_FEEDBACK=0)")
    for flag in ("CCOMPRESS_LOG", "CCOMPRESS_REPORT"):  # read later; checked now
        env_flag(flag, False)
    _p2p.transport_choice()
    options = BackendOptions(**{op: c.spec for op, c in codecs.items()}, algo=algo,
                             error_feedback=ef, min_numel=min_numel)
    return GroupConfig(options, codecs)
