"""Offline simulation: N virtual ranks in this process, each a thread over the in-process
transport, running exactly the code a real run uses."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from ._internal.errors import InvalidArgument
from .communicator import run_inproc


def allreduce(parts: Sequence[Any], codec: Any = "none", algo: str = "auto", op: str = "sum",
              slice_elems: Optional[int] = None, timeout: float = 120.0) -> List[Any]:
    """All-reduces ``parts[r]`` as rank r's input over ``len(parts)`` virtual ranks.

    Parameters
    ----------
    parts : sequence of arrays
        One input per virtual rank, all of the same size and dtype.
    codec, algo, op
        As for :meth:`ccompress.Communicator.allreduce`.
    slice_elems : int, optional
        Elements per pipelined slice (the communicators' option).
    timeout : float, default 120.0
        Seconds a rank waits for a silent peer.

    Returns
    -------
    list of arrays
        Every rank's result, in rank order (bit-identical by construction; tests check it).

    Raises
    ------
    InvalidArgument
        ``parts`` is empty, or a rank's call is invalid (as for the communicator's).
    """
    parts = list(parts)
    if not parts:
        raise InvalidArgument("parts is empty; pass one array per virtual rank")
    return run_inproc(len(parts),
                      lambda c: c.allreduce(parts[c.rank], codec=codec, algo=algo, op=op),
                      timeout=timeout, slice_elems=slice_elems)


def reduce_scatter(parts: Sequence[Any], codec: Any = "none", op: str = "sum",
                   slice_elems: Optional[int] = None, timeout: float = 120.0) -> List[Any]:
    """Every virtual rank's chunk of the reduction of ``parts``.

    Parameters
    ----------
    parts : sequence of arrays
        One input per virtual rank, all of the same size and dtype.
    codec, op
        As for :meth:`ccompress.Communicator.reduce_scatter`.
    slice_elems : int, optional
        Elements per pipelined slice.
    timeout : float, default 120.0
        Seconds a rank waits for a silent peer.

    Returns
    -------
    list of arrays
        Each rank's chunk, in rank order.

    Raises
    ------
    InvalidArgument
        ``parts`` is empty, or a rank's call is invalid.
    """
    parts = list(parts)
    if not parts:
        raise InvalidArgument("parts is empty; pass one array per virtual rank")
    return run_inproc(len(parts), lambda c: c.reduce_scatter(parts[c.rank], codec=codec, op=op),
                      timeout=timeout, slice_elems=slice_elems)


def allgather(parts: Sequence[Any], codec: Any = "none", slice_elems: Optional[int] = None,
              timeout: float = 120.0) -> List[Any]:
    """Every virtual rank's all-gather result.

    Parameters
    ----------
    parts : sequence of arrays
        One part per virtual rank, all of the same size and dtype.
    codec : str or Codec, default "none"
        As for :meth:`ccompress.Communicator.allgather`.
    slice_elems : int, optional
        Elements per pipelined slice.
    timeout : float, default 120.0
        Seconds a rank waits for a silent peer.

    Returns
    -------
    list of arrays
        Each rank's result (the parts stacked), in rank order.

    Raises
    ------
    InvalidArgument
        ``parts`` is empty, or a rank's call is invalid.
    """
    parts = list(parts)
    if not parts:
        raise InvalidArgument("parts is empty; pass one array per virtual rank")
    return run_inproc(len(parts), lambda c: c.allgather(parts[c.rank], codec=codec),
                      timeout=timeout, slice_elems=slice_elems)
