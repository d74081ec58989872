"""Communicator: compressed collectives over MPI processes, NCCL, or in-process ranks (threads
as ranks, on the host or on one GPU)."""
from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from ._internal import (arrays as _arrays, nonfinite as _nonfinite, topology as _topology,
                        transports as _transports)
from . import _core, autocodec
from ._internal.backends import Call, backend_for
from ._internal.errors import CCompressError, InvalidArgument, MismatchError, Unsupported
from ._internal.device import _cuda_module
from ._internal.ranks import on_threads, run_ranks
from ._internal.resolve import resolve
from ._internal.work import IssueQueue, Work
from .codec import Codec

# The names the C++ side accepts (it validates them, once per call: _core.CallSpec).
ALGOS = ("auto", "ring", "two_shot", "tree", "one_shot", "hier")
OPS = ("sum", "avg")
NONFINITE = _nonfinite.MODES


class Communicator:
    """A group of ranks that run compressed collectives together.

    Build one with :meth:`from_mpi` or :meth:`from_torch` (one process per rank),
    :meth:`inproc` (ranks as threads of this process) or :meth:`cuda_loopback` (virtual
    ranks on one GPU). Every rank must make the same calls in the same order; a rank that
    passes a different count, dtype, codec, algo or op makes every rank raise
    :class:`MismatchError` instead of hanging.

    Args:
      timeout: seconds a collective waits for a silent peer before raising
        :class:`CollectiveTimeout`.
      slice_elems: elements per pipelined slice (default: the transport's
        ``default_slice_elems``, i.e. 262144 over MPI and ``_core.DEFAULT_SLICE_ELEMS`` =
        65536 otherwise; rounded up to the codec's scale group). It changes how many
        messages carry a result, never its bits.
      seed: seed of stochastic rounding (codecs with ``:sr``); the noise of an element is a
        hash of (seed, step, rank, element index), where step counts this communicator's
        collectives unless a call passes its own ``step``.
      model: a :class:`ccompress.perfmodel.AlgoModel` (the same on every rank) that resolves
        ``algo="auto"`` of an all-reduce to the algorithm it predicts fastest for the call's
        size and codec; without one (or for a codec it has no cost for) auto picks by
        message size and rank count.
      nonfinite: what a NaN or Inf does (default for every call; a call's ``nonfinite=``
        overrides it). ``"propagate"``: it reaches exactly the outputs that the codec's
        policy states (README, "Guarantees"). ``"raise"``: the same, then
        :class:`NonFiniteError` on every rank when any output is non-finite. Either way
        ``last_stats`` counts the non-finite elements of this rank's input
        (``nonfinite_in``) and output (``nonfinite_out``).
      ranks_per_node: nodes of that many consecutive ranks, for ``algo="hier"`` (default:
        from MPI's shared-memory groups, or torchrun's ``LOCAL_WORLD_SIZE``; else unknown).
    """

    def __init__(self, transport: "_core.Transport", *, timeout: float = 300.0,
                 slice_elems: Optional[int] = None, seed: int = 0, model: Any = None,
                 nonfinite: str = "propagate", ranks_per_node: Optional[int] = None,
                 _keepalive: Any = None):
        if timeout <= 0 or (slice_elems is not None and slice_elems <= 0):
            raise InvalidArgument(f"timeout ({timeout} s) and slice_elems ({slice_elems}) "
                                  "must be positive")
        self._nonfinite = _nonfinite.check_mode(nonfinite)
        self._t = transport
        self._backend = backend_for(transport)
        self._device: Optional[int] = self._backend.device
        self._timeout = float(timeout)
        self._slice = int(slice_elems or 0)
        self._seed = int(seed)
        self._ranks_per_node = _topology.check(ranks_per_node, transport.size)
        if model is not None and not callable(getattr(model, "choose", None)):
            raise InvalidArgument(f"model must be a ccompress.perfmodel.AlgoModel, got {model!r}")
        self._model = model
        self._step = 0
        self._keepalive = _keepalive
        self._on_close: List[Callable[[], None]] = []  # the transport's own threads
        self._lock = threading.Lock()
        self._queue = IssueQueue(f"ccompress-r{transport.rank}")
        self.last_stats: Optional[dict] = None
        self._broken: Optional[str] = None
        # from_mpi: the NCCL communicator that CUDA arrays go to, made at their first call.
        self._mpi_comm: Any = None
        self._nccl: Optional["Communicator"] = None
        self._options = dict(timeout=timeout, slice_elems=slice_elems, seed=seed,
                             ranks_per_node=ranks_per_node)

    # ---- construction ----
    @classmethod
    def from_mpi(cls, comm: Any = None, **kwargs: Any) -> "Communicator":
        """Wraps an mpi4py communicator (default ``MPI.COMM_WORLD``). Collective: every rank
        of ``comm`` must call it. Host arrays travel over MPI."""
        comm, transport = _transports.mpi_transport(comm)
        kwargs.setdefault("ranks_per_node", _topology.from_mpi(comm))
        self = cls(transport, _keepalive=comm, **kwargs)
        self._mpi_comm = comm
        return self

    @classmethod
    def from_torch(cls, group: Any = None, **kwargs: Any) -> "Communicator":
        """A communicator over the ranks of a torch.distributed group (default: the world), no
        MPI needed (torchrun, env://); collective over the group's ranks. Host arrays move
        over gloo point-to-point (a private gloo group of the same processes), CUDA arrays
        over NCCL, its id shared through the group's store (:mod:`ccompress.torch._p2p`)."""
        from .torch import _p2p

        return _p2p.from_torch(cls, group, **kwargs)

    @classmethod
    def from_nccl(cls, comm: Any = None, *, unique_id: Optional[bytes] = None,
                  rank: Optional[int] = None, size: Optional[int] = None,
                  device: Optional[int] = None, **kwargs: Any) -> "Communicator":
        """A device communicator over NCCL (grouped ncclSend/ncclRecv on a comm stream, codec
        kernels on a codec stream). Collective: every rank calls it.

        Either pass an mpi4py communicator ``comm`` (rank 0 makes the NCCL unique id and
        broadcasts it over MPI; rank and size are the MPI ones), or ``unique_id`` (from
        :func:`nccl_unique_id` on one rank, shared by your own means) with ``rank`` and
        ``size``. ``device`` defaults to rank modulo the visible device count. libnccl is
        found at run time (``NCCL_ROOT``, the nvidia-nccl wheel, the system); without it,
        or without a GPU, this raises :class:`Unsupported` saying which is missing.
        """
        comm, t = _transports.nccl_rank(comm, unique_id, rank, size, device)
        return cls(t, _keepalive=comm, **kwargs)

    @classmethod
    def cuda_loopback(cls, size: int, device: int = 0, **kwargs: Any) -> List["Communicator"]:
        """``size`` communicators of virtual ranks on CUDA device ``device``, one per rank
        (give each to its own thread, see :func:`run_cuda_loopback`). They reduce CUDA
        arrays (CuPy, PyTorch, any DLPack producer) with the whole CUDA pipeline: codec
        kernels on each rank's codec stream, device-to-device copies on its comm stream."""
        if not isinstance(size, int) or size < 1:
            raise InvalidArgument(f"a loopback group needs size >= 1, got {size!r}")
        cuda = _cuda_module()
        ranks = cuda.loopback_group(size, int(device))
        return [cls(r, **kwargs) for r in ranks]

    @classmethod
    def inproc(cls, size: int, **kwargs: Any) -> List["Communicator"]:
        """``size`` communicators of one in-process group: one per rank, each for a thread."""
        if not isinstance(size, int) or size < 1:
            raise InvalidArgument(f"an in-process group needs size >= 1, got {size!r}")
        group = _core.InprocGroup(size)
        return [cls(group.transport(r), _keepalive=group, **kwargs) for r in range(size)]

    # ---- properties ----
    rank = property(lambda self: self._t.rank, doc="This rank's index in the group.")
    size = property(lambda self: self._t.size, doc="The number of ranks in the group.")
    transport = property(lambda self: self._t.name, doc='"inproc", "mpi", "tcp", "torch_gloo", ...')
    ranks_per_node = property(lambda self: self._ranks_per_node,
                              doc='Consecutive ranks sharing a node (algo="hier"); None: unknown.')

    device = property(lambda self: self._device,
                      doc="The CUDA device of a device communicator; None for host ones.")

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank has put on the wire through this communicator (headers included)."""
        return self._t.bytes_sent

    @property
    def slice_elems(self) -> int:
        """Elements per pipelined slice of this communicator's calls (before rounding up to
        a codec's scale group): the ``slice_elems`` it was made with, else its transport's
        default (262144 over MPI, ``_core.DEFAULT_SLICE_ELEMS`` otherwise)."""
        return self._slice or self._t.default_slice_elems

    @property
    def usable(self) -> bool:
        """False once a timeout, a transport error or a malformed message has made this
        communicator refuse further calls (each raises, naming the first error)."""
        return self._broken is None

    def barrier(self) -> None:
        self._t.barrier()

    def _nccl_for(self, x: Any) -> Optional["Communicator"]:
        """from_mpi / from_torch: the NCCL communicator of CUDA arrays (made at the first)."""
        if self._mpi_comm is None or _arrays.cuda_device_of(x) is None:
            return None
        if self._nccl is None:
            self._nccl = Communicator.from_nccl(self._mpi_comm, **self._options)
        return self._nccl

    # ---- collectives ----
    # Everything after the tensor is keyword-only, in the same order in all three
    # (all_to_all takes out by position too, as torch's all_to_all_single does).
    def allreduce(self, x: Any, *, codec: Any = "none", algo: str = "auto",
                  intra_codec: Any = None, inter_algo: Optional[str] = None, op: str = "sum",
                  out: Any = None, async_op: bool = False, stream: Any = None,
                  step: Optional[int] = None, nonfinite: Optional[str] = None,
                  error_feedback: Any = None) -> Any:
        """Reduces ``x`` over all ranks; every rank gets bit-identical results.

        ``codec`` is a spec string or :class:`Codec`, or ``"auto8"`` / ``"auto4"`` to let
        the ranks pick a codec and scale-group layout per call from the data (``":adam"``
        added, or an ``autocodec.AutoCodec``: by the Adam-normalised error, for gradients; see
        :mod:`ccompress.autocodec`; the choice is in ``last_stats``); ``algo`` one of ring,
        two_shot, tree, one_shot, hier, auto; ``op`` sum or avg. ``algo="hier"`` reduces
        inside each node of ``ranks_per_node`` ranks with ``intra_codec`` (default none:
        exact), between nodes with ``codec`` and the flat ``inter_algo`` (default auto).
        Writes into ``out`` when given (``out=x`` for in place) and returns it, else returns
        a new array like ``x``. With
        ``async_op`` returns a :class:`Work` whose ``wait()`` gives the result.
        ``error_feedback`` is this tensor's :class:`~ccompress.ErrorFeedback` (two_shot,
        one_shot or auto): what the codec drops is carried into the next call.

        CUDA arrays (device communicators, or from_mpi's NCCL side) run on the device,
        ordered with ``stream`` (default: the current stream of the array's library): the
        collective starts after the work issued there before the call, and that stream
        waits for the result.
        """
        return self._submit("allreduce", x, codec=codec, algo=algo, op=op, out=out,
                            async_op=async_op, stream=stream, step=step,
                            nonfinite=nonfinite, error_feedback=error_feedback,
                            hier=(intra_codec, inter_algo))

    def reduce_scatter(self, x: Any, *, codec: Any = "none", algo: Optional[str] = None,
                       intra_codec: Any = None, op: str = "sum", out: Any = None,
                       async_op: bool = False, stream: Any = None,
                       step: Optional[int] = None, nonfinite: Optional[str] = None,
                       error_feedback: Any = None) -> Any:
        """This rank's chunk of the reduction of ``x`` (flattened): elements
        ``chunk_range(x.size, size, rank)``, sizes differing by at most one between ranks.
        ``error_feedback`` keeps its worker residual (one quantization; no server one).
        ``algo="hier"`` sums inside each node of ``ranks_per_node`` ranks with
        ``intra_codec`` (default none: exact), then between nodes with ``codec``; the
        default (None) is the flat schedule."""
        return self._submit("reduce_scatter", x, codec=codec, op=op, out=out,
                            async_op=async_op, stream=stream, step=step,
                            nonfinite=nonfinite, error_feedback=error_feedback,
                            **_topology.schedule_args(algo, intra_codec))

    def allgather(self, x: Any, *, codec: Any = "none", algo: Optional[str] = None,
                  out: Any = None, async_op: bool = False, stream: Any = None,
                  step: Optional[int] = None, nonfinite: Optional[str] = None) -> Any:
        """Every rank's ``x`` stacked: shape ``(size, *x.shape)``. Each part is
        decode(encode(x of that rank)), the caller's own part too. ``algo="hier"`` sends
        each rank's encoding across the network once per node (the node forwards it); the
        result is the same bits as the flat one (one encoding of each part)."""
        return self._submit("allgather", x, codec=codec, out=out, async_op=async_op,
                            stream=stream, step=step, nonfinite=nonfinite,
                            **_topology.schedule_args(algo, None))

    def all_to_all(self, x: Any, out: Any = None, *, codec: Any = "none",
                   in_splits: Optional[Sequence[int]] = None,
                   out_splits: Optional[Sequence[int]] = None, async_op: bool = False,
                   stream: Any = None, step: Optional[int] = None,
                   nonfinite: Optional[str] = None, error_feedback: Any = None) -> Any:
        """Exchanges pieces of ``x`` between all ranks, as torch's ``all_to_all_single``.

        ``x`` is cut along dim 0 into ``size`` pieces, in rank order: piece ``j`` (the next
        ``in_splits[j]`` rows) goes to rank ``j``. The result holds the pieces received from
        every rank, in rank order, ``out_splits[i]`` rows from rank ``i``. Each piece is
        encoded once, on its own (no scale is shared with another rank's piece), and its
        receiver gets decode(encode(piece)): the bits the sender's own
        ``codec.decode(codec.encode(piece))`` gives. The piece a rank sends to itself goes
        through the codec too, so a rank receives the same bits from itself as from a peer.

        Parameters
        ----------
        x : array
            This rank's input: a host array (NumPy, or anything with DLPack) or, on a device
            communicator, a CUDA array; at least one dimension.
        out : array, optional
            Where the result goes, in ``x``'s dtype: ``sum(out_splits)`` rows shaped like
            ``x``'s rows (its element count is what is checked). Default: a new array (as
            many rows as ``x`` when there are no ``out_splits``).
        codec : str or Codec
            The wire format of every piece (default ``"none"``: exact).
        in_splits : sequence of int, optional
            Rows of dim 0 this rank sends to each rank (``size`` entries adding up to
            ``x.shape[0]``). Default: ``x.shape[0] / size`` rows to each.
        out_splits : sequence of int, optional
            Rows of dim 0 this rank receives from each rank; ``out_splits[i]`` must equal what
            rank ``i`` passes as ``in_splits[rank]``. Default: equal pieces of the output
            (``out``'s rows, or ``x``'s without ``out``).
        async_op : bool
            Return a :class:`Work` whose ``wait()`` gives the result.
        stream : stream, optional
            Device communicators: the stream the call is ordered with (default: the current
            stream of ``x``'s library).
        step : int, optional
            The step stochastic rounding hashes (default: this communicator's call count).
        nonfinite : {"propagate", "raise"}, optional
            What a NaN or Inf does (default: the communicator's setting).
        error_feedback : None
            Refused: dispatched tokens differ every call, so no residual carries over.

        Returns
        -------
        array
            The received pieces concatenated along dim 0 (``out`` when given), or a
            :class:`Work` with ``async_op``.

        Raises
        ------
        InvalidArgument
            Splits that are not one per rank, negative, or do not add up to ``x``'s rows (or
            to the output's); ``out`` of the wrong size or dtype. The other ranks raise
            :class:`MismatchError` at the same call.
        MismatchError
            On every rank, when the ranks pass different codecs or dtypes, or when what rank
            ``i`` sends to rank ``j`` differs from what ``j`` expects from ``i``.
        Unsupported
            ``error_feedback`` given (on every rank, the others by MismatchError).
        CollectiveTimeout, MessageError
            A peer that makes no progress, or a malformed message.
        """
        if error_feedback is not None:
            self._refuse()
            raise Unsupported("all_to_all has no error feedback: the dispatched tokens change "
                              "every call, so no residual carries over; pass "
                              "error_feedback=None")
        return self._submit("alltoall", x, codec=codec, out=out, async_op=async_op,
                            stream=stream, step=step, nonfinite=nonfinite,
                            in_splits=in_splits, out_splits=out_splits)

    # ---- one path for the four ----
    def _submit(self, kind: str, x: Any, *, async_op: bool, nonfinite: Optional[str],
                **how: Any) -> Any:
        """Resolves the call once (resolve: arrays, out, stream, feedback, step, options),
        wraps it (auto codec, nonfinite="raise") and runs it now or on the worker thread."""
        nccl = self._nccl_for(x)
        if nccl is not None:
            return nccl._submit(kind, x, async_op=async_op, nonfinite=nonfinite, **how)
        mode = _nonfinite.mode_of(self._nonfinite, nonfinite)
        try:
            call, result, auto = resolve(self, kind, x, async_op=async_op, **how)
        except InvalidArgument:
            self._refuse()
            raise
        body: Callable[[], dict] = lambda: self._run(call)  # noqa: E731
        if auto:
            body = lambda: autocodec.allreduce(self, call, auto)  # noqa: E731
        if mode == "raise":
            body = _nonfinite.raising(body, call, self)

        def run() -> Any:
            body()
            return _arrays.like_input(x, result)

        # Device, async: the caller's stream waits from Work.wait() on (ready is re-recorded).
        on_done = None if call.ready is None else lambda: call.ready.block(call.stream)
        return self._queue.launch(run, async_op, on_done)

    def _refuse(self) -> None:
        """This rank's arguments failed a check that its peers' may have passed (an output
        of the wrong size for this rank's chunk, say): before raising, it takes part in the
        call's mismatch check with a description no real call has (an empty all-gather of
        slice 1), so a peer that passed its checks raises MismatchError at the same point
        instead of waiting for this rank; where every rank refused, they all meet there and
        each raises its own error. One rank alone, or an unusable communicator, just raises."""
        if self.size == 1 or self._broken is not None:
            return
        spec = _core.CallSpec("allgather", algo=None, op=None, slice_elems=1,
                              timeout=self._timeout, seed=self._seed)
        src, dst = np.zeros(1, np.float32), np.zeros(1, np.float32)
        views = [_arrays.ArrayView(int(a.__array_interface__["data"][0]), 0, "float32", (0,),
                                   False, a) for a in (src, dst)]
        call = Call(spec, views[0], views[1], Codec.parse("none"), 0)
        try:
            self._queue.launch(lambda: self._run(call), False)
        except MismatchError:
            # A peer made its real call (and raises MismatchError): it took a step there,
            # so this rank takes one too and both number their next calls alike. Where every
            # rank refused, none took one.
            self._next_step(None)
        except CCompressError:
            pass  # the communicator is unusable now; the next call says why

    def _spec(self, kind: str, algo: Optional[str], op: Optional[str],
              hier: Tuple[Any, Optional[str]] = (None, None)) -> Any:
        levels = _topology.levels(algo, self._ranks_per_node, *hier)
        return _core.CallSpec(kind, algo=algo, op=op, slice_elems=self._slice,
                              timeout=self._timeout, seed=self._seed, **levels)

    def _next_step(self, step: Optional[int]) -> int:
        # Steps are taken in issue order, so every rank numbers its calls alike.
        self._step += 1
        return self._step - 1 if step is None else int(step)

    def _run(self, call: Call) -> dict:
        """Runs one collective now (the caller keeps the issue order) on the backend."""
        with self._lock:
            if self._broken:
                raise CCompressError(f"this communicator is unusable: {self._broken}; "
                                     "create a new one (all ranks)")
            try:
                stats = self._backend.run(call)
            except MismatchError as e:
                if "allgather(count=0," in str(e) and "slice_elems=" in str(e):
                    raise MismatchError(
                        f"{e}\n(an empty allgather is how a rank whose arguments failed a "
                        "check takes part: that rank raised InvalidArgument for this call)"
                    ) from None
                raise  # every rank stopped at the same point: the group is still in step
            except CCompressError as e:
                # A peer may still deliver messages of the failed call, which the next call
                # could take for its own: refuse to compute on.
                self._broken = f"{type(e).__name__} in an earlier collective ({e})"
                raise
        stats["codec"] = call.codec.name
        if call.feedback:
            call.feedback.nonfinite += stats["feedback_nonfinite"]
        self.last_stats = stats
        return stats

    def _exact_sum(self, v: np.ndarray, algo: str) -> np.ndarray:
        """The exact float32 all-reduce of a small host vector (step 0, legacy stream)."""
        xv, ov, result = self._backend.scratch(v)
        self._run(Call(self._spec("allreduce", algo, "sum"), xv, ov, Codec.parse("none"), 0))
        return result()

    def close(self) -> None:
        """Waits for pending async collectives and releases the worker thread and the
        transport's threads; later collectives raise CCompressError."""
        self._queue.close()
        with self._lock:
            self._broken = self._broken or "it was closed"
        if self._nccl is not None:
            self._nccl.close()
        for release in self._on_close:
            release()

    def __repr__(self) -> str:
        return f"Communicator(transport={self.transport}, rank={self.rank}, size={self.size})"


def run_inproc(size: int, fn: Callable[[Any], Any], **kwargs: Any) -> List[Any]:
    """Runs ``fn(comm)`` on ``size`` in-process ranks, one thread each, and returns the
    results in rank order. If any rank raises, the first error (lowest rank) is re-raised
    after all ranks have finished."""
    return run_ranks(Communicator.inproc(size, **kwargs), fn)


def run_cuda_loopback(size: int, fn: Callable[[Any], Any], device: int = 0,
                      **kwargs: Any) -> List[Any]:
    """:func:`run_inproc` for ``size`` virtual ranks on CUDA device ``device``
    (:meth:`Communicator.cuda_loopback`)."""
    return run_ranks(Communicator.cuda_loopback(size, device, **kwargs), fn)


__all__ = ["ALGOS", "NONFINITE", "OPS", "Communicator", "Work", "on_threads", "run_cuda_loopback",
           "run_inproc"]
