"""ccompress.jax: compressed collectives inside ``jax.jit``, as XLA FFI calls into the C++ core.

Quick start (every process of a ``jax.distributed`` launch, or under ``mpiexec``)::

    import jax, jax.numpy as jnp
    import ccompress.jax as ccj

    jax.distributed.initialize()          # or run under mpiexec (mpi4py)

    @jax.jit
    def step(g):
        return ccj.allreduce(g, codec="fp8_e4m3:g128", algo="two_shot", op="avg")

Each collective is one XLA custom call (no Python per call) into the same C++ collectives
as :class:`ccompress.Communicator`, with the same bits for the same inputs. They are ordered
effects (XLA never reorders them between ranks), differentiable (custom transposes: see
:func:`allreduce`, :func:`reduce_scatter`, :func:`all_gather`), and take error feedback as
a pytree (:class:`FeedbackState`). Errors raised inside a compiled program reach Python as
JAX runtime errors whose message starts ``[ccompress.<ErrorType>]``; :func:`typed_errors`
turns them back into that ccompress error type. See docs/jax.md.
"""
from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator, NamedTuple, Optional, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from .. import _core
from .._internal import errors as _errors
from .._internal.errors import InvalidArgument, Unsupported
from ..codec import Codec
from ..communicator import Communicator
from . import _comms
from ._comms import default_communicator, from_jax_distributed, shutdown
from ._primitive import collective_p, register_targets

DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)

CommArg = Optional[Communicator]


class FeedbackState(NamedTuple):
    """Error-feedback residuals of one tensor on this rank, as a pytree (two float32
    arrays): carry it through a jitted train step and save it with the rest of the state.

    ``worker`` (the tensor's element count) is added to the input before its first
    quantization; ``server`` (this rank's chunk of an all-reduce's two_shot, else empty) to
    the chunk's sum before the second. Residuals differ between ranks by nature.
    """

    worker: Any
    server: Any

    @classmethod
    def zeros(cls, shape: Union[int, Tuple[int, ...]], *, server: bool = True,
              comm: CommArg = None) -> "FeedbackState":
        """Zero residuals for a tensor of ``shape`` on this rank.

        Parameters
        ----------
        shape : int or tuple of int
            The shape of the tensor the state belongs to.
        server : bool
            Keep the server residual (all-reduce with two_shot); False keeps an empty one
            (one_shot, reduce_scatter).
        comm : Communicator, optional
            The communicator of the calls (default: :func:`default_communicator`).

        Returns
        -------
        FeedbackState
        """
        comm = default_communicator() if comm is None else comm
        n = int(np.prod(shape))
        lo, hi = _core.chunk_range(n, comm.size, comm.rank)
        return cls(jnp.zeros((n,), jnp.float32), jnp.zeros((hi - lo if server else 0,),
                                                           jnp.float32))


def _comm(comm: CommArg) -> Tuple[Communicator, int]:
    """The communicator of a call and its registry id (the FFI targets registered)."""
    comm = default_communicator() if comm is None else comm
    ident = _comms.comm_id(comm)
    register_targets()
    return comm, ident


@contextlib.contextmanager
def _refusing(comm: Communicator) -> Iterator[None]:
    """Argument checks of one rank: where one fails, this rank takes part in the call check
    before raising, so that peers whose checks passed raise MismatchError instead of
    waiting for it (Communicator._refuse)."""
    try:
        yield
    except (InvalidArgument, Unsupported):
        comm._refuse()
        raise


def _checked(x: Any, codec: Any, transpose_codec: Any, what: str) -> Tuple[Any, str, str]:
    """(x as a JAX array, the canonical codec, the transpose's codec)."""
    x = jnp.asarray(x)
    if x.dtype not in DTYPES:
        raise InvalidArgument(f"ccompress.jax.{what}: x has dtype {x.dtype}; the codecs take "
                              "float32, bfloat16 and float16: cast first")
    for c in (codec, transpose_codec):
        if isinstance(c, str) and c in ("auto8", "auto4"):
            raise Unsupported(f"ccompress.jax.{what}: codec {c!r} chooses on host data per "
                              "call, which a compiled program cannot; name the codec")
    name = Codec.parse(codec).name
    tname = name if transpose_codec is None else Codec.parse(transpose_codec).name
    return x, name, tname


def _check_op(op: str) -> None:
    if op not in ("sum", "avg"):
        raise InvalidArgument(f"op must be 'sum' or 'avg', got {op!r}")


def _bind(x: Any, kind: str, comm: Communicator, ident: int, codec: str, tcodec: str,
          algo: str, op: str, feedback: Optional[FeedbackState]) -> Any:
    flat = jnp.reshape(x, (-1,))
    args = [flat]
    if feedback is not None:
        args += [jnp.asarray(feedback.worker, jnp.float32), jnp.asarray(feedback.server,
                                                                          jnp.float32)]
    return collective_p.bind(*args, kind=kind, comm=ident, size=comm.size, rank=comm.rank,
                             codec=codec, transpose_codec=tcodec, algo=algo, op=op,
                             feedback=feedback is not None)


def _check_feedback(fb: Any, n: int, comm: Communicator) -> FeedbackState:
    if not isinstance(fb, FeedbackState):
        raise InvalidArgument(f"error_feedback must be a ccompress.jax.FeedbackState, got "
                              f"{type(fb).__name__}")
    lo, hi = _core.chunk_range(n, comm.size, comm.rank)
    if tuple(np.shape(fb.worker)) != (n,) or np.shape(fb.server)[0] not in (0, hi - lo):
        raise InvalidArgument(
            f"error_feedback holds residuals of {np.shape(fb.worker)} and "
            f"{np.shape(fb.server)} elements; this call needs ({n},) and ({hi - lo},) or (0,): "
            "use FeedbackState.zeros(x.shape) for this tensor")
    return fb


def allreduce(x: Any, *, codec: Any = "none", algo: str = "auto", op: str = "sum",
              comm: CommArg = None, transpose_codec: Any = None,
              error_feedback: Optional[FeedbackState] = None) -> Any:
    """The reduction of ``x`` over all ranks, bit-identical on every rank and to
    :meth:`ccompress.Communicator.allreduce` of the same inputs.

    Usable inside ``jax.jit`` and under ``jax.grad``: the transpose is the identity (divided
    by the rank count for ``op="avg"``), as in Megatron's tensor parallelism, where the loss
    after it is the same on every rank.

    Parameters
    ----------
    x : array
        float32, bfloat16 or float16, any shape (the same on every rank).
    codec : str or Codec
        The wire format ("none", "bf16", "fp8_e4m3:g128", "hint8", "nvfp4", ...).
    algo : str
        "auto", "ring", "two_shot", "tree", "one_shot" or "hier".
    op : str
        "sum" or "avg".
    comm : Communicator, optional
        Default: every process of the launch (:func:`default_communicator`).
    transpose_codec : str or Codec, optional
        The codec of the transpose's collective (an all-reduce's transpose has none).
    error_feedback : FeedbackState, optional
        This tensor's residuals (algo two_shot, one_shot or auto); the call then returns
        ``(result, new_state)``.

    Returns
    -------
    array or (array, FeedbackState)
        The result, shaped like ``x``; with ``error_feedback``, also the updated state.

    Raises
    ------
    InvalidArgument
        A dtype the codecs do not take, an unknown codec, algo or op, no communicator.
    MismatchError
        Ranks disagree on the shape, dtype, codec, algo or op (every rank raises it, when
        the result is used; see :func:`typed_errors`).
    """
    comm, ident = _comm(comm)
    with _refusing(comm):
        x, name, tname = _checked(x, codec, transpose_codec, "allreduce")
        _check_op(op)
        fb = None if error_feedback is None else _check_feedback(error_feedback, x.size, comm)
    outs = _bind(x, "allreduce", comm, ident, name, tname, str(algo), op, fb)
    y = jnp.reshape(outs[0], x.shape)
    return y if fb is None else (y, FeedbackState(outs[1], outs[2]))


def reduce_scatter(x: Any, *, codec: Any = "none", op: str = "sum", comm: CommArg = None,
                   transpose_codec: Any = None,
                   error_feedback: Optional[FeedbackState] = None) -> Any:
    """This rank's block of rows of the reduction of ``x`` over all ranks.

    ``x.shape[0]`` must be a multiple of the rank count ``size``; the result has shape
    ``(x.shape[0] // size, *x.shape[1:])``: rows ``rank * m`` to ``(rank + 1) * m``
    of the sum (the chunk :meth:`ccompress.Communicator.reduce_scatter` returns for the
    flattened ``x``, same bits). Its transpose is an all-gather of the cotangent
    (:func:`all_gather` with ``tiled=True``), as in Megatron's sequence parallelism.

    Parameters
    ----------
    x : array
        float32, bfloat16 or float16, at least one dimension.
    codec, op, comm, transpose_codec
        As for :func:`allreduce`; ``transpose_codec`` is the all-gather's.
    error_feedback : FeedbackState, optional
        The worker residual (its ``server`` is empty); returns ``(result, new_state)``.

    Returns
    -------
    array or (array, FeedbackState)

    Raises
    ------
    InvalidArgument
        A 0-d ``x``, a first dimension that the rank count does not divide, a dtype the
        codecs do not take.
    MismatchError
        Ranks disagree on the call.
    """
    comm, ident = _comm(comm)
    with _refusing(comm):
        x, name, tname = _checked(x, codec, transpose_codec, "reduce_scatter")
        if x.ndim == 0 or x.shape[0] % comm.size:
            raise InvalidArgument(f"ccompress.jax.reduce_scatter: x's first dimension must be "
                                  f"a multiple of the {comm.size} ranks, got shape {x.shape}")
        _check_op(op)
        fb = None
        if error_feedback is not None:
            fb = _check_feedback(error_feedback, x.size, comm)
            if np.shape(fb.server)[0]:
                raise InvalidArgument("reduce_scatter keeps a worker residual only: make the "
                                      "state with FeedbackState.zeros(shape, server=False)")
    outs = _bind(x, "reduce_scatter", comm, ident, name, tname, "", op, fb)
    y = jnp.reshape(outs[0], (x.shape[0] // comm.size,) + x.shape[1:])
    return y if fb is None else (y, FeedbackState(outs[1], outs[2]))


def all_gather(x: Any, *, codec: Any = "none", tiled: bool = False, comm: CommArg = None,
               transpose_codec: Any = None) -> Any:
    """Every rank's ``x``, each part ``decode(encode(x of that rank))`` (the caller's own
    too), as :meth:`ccompress.Communicator.allgather` gives it.

    Its transpose is a reduce-scatter (sum) of the cotangent, as in Megatron's sequence
    parallelism.

    Parameters
    ----------
    x : array
        float32, bfloat16 or float16 (the same shape on every rank).
    codec, comm, transpose_codec
        As for :func:`allreduce`; ``transpose_codec`` is the reduce-scatter's.
    tiled : bool
        False: shape ``(size, *x.shape)`` (stacked, as ``jax.lax.all_gather``); True: the
        parts concatenated along the first dimension, ``(size * x.shape[0], ...)``.

    Returns
    -------
    array

    Raises
    ------
    InvalidArgument
        A dtype the codecs do not take; ``tiled=True`` with a 0-d ``x``.
    MismatchError
        Ranks disagree on the call.
    """
    comm, ident = _comm(comm)
    with _refusing(comm):
        x, name, tname = _checked(x, codec, transpose_codec, "all_gather")
        if tiled and x.ndim == 0:
            raise InvalidArgument("ccompress.jax.all_gather: tiled=True needs at least one "
                                  "dimension")
    out = _bind(x, "allgather", comm, ident, name, tname, "", "", None)[0]
    shape = (comm.size * x.shape[0],) + x.shape[1:] if tiled else (comm.size,) + x.shape
    return jnp.reshape(out, shape)


_TAGGED = re.compile(r"\[ccompress\.(\w+)\] (.*)", re.S)


def error_of(e: BaseException) -> Optional[_errors.CCompressError]:
    """The ccompress error that a JAX runtime error carries, or None.

    Parameters
    ----------
    e : BaseException
        An exception raised by running a compiled program (``JaxRuntimeError``).

    Returns
    -------
    CCompressError or None
        An instance of the type named in the message (``MismatchError``, ...).
    """
    m = _TAGGED.search(str(e))
    if m is None:
        return None
    cls = getattr(_errors, m.group(1), _errors.CCompressError)
    return cls(m.group(2).strip())


@contextlib.contextmanager
def typed_errors() -> Iterator[None]:
    """Re-raises a JAX runtime error that a ccompress collective caused as its ccompress
    type (``with ccompress.jax.typed_errors(): y.block_until_ready()``).

    Raises
    ------
    CCompressError
        The subclass named in the collective's message.
    """
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        typed = error_of(e)
        if typed is None:
            raise
        raise typed from e


def registered() -> int:
    """How many communicators this process has registered with the FFI module (one per
    communicator used, whatever the number of traces and compilations)."""
    return _comms.ffi_module().registered()


__all__ = ["DTYPES", "FeedbackState", "all_gather", "allreduce", "default_communicator",
           "error_of", "from_jax_distributed", "reduce_scatter", "registered", "shutdown",
           "typed_errors"]
