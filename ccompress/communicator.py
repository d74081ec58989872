"""Communicator: compressed collectives over MPI processes, NCCL, or in-process ranks (threads
as ranks, on the host or on one GPU)."""
from __future__ import annotations

import concurrent.futures as cf
import threading
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from . import _arrays, _core, autocodec
from ._errors import CCompressError, InvalidArgument, MismatchError, NonFiniteError, Unsupported
from ._device import _cuda_module, _nccl_path, cuda_stream_handle
from .codec import Codec
from .error_feedback import ErrorFeedback

ALGOS = ("auto", "ring", "two_shot", "tree", "one_shot")
OPS = ("sum", "avg")
NONFINITE = ("propagate", "raise")


class Work:
    """Handle of an asynchronous collective (``async_op=True``)."""

    def __init__(self, future: cf.Future):
        self._future = future

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Blocks until done and returns the result (re-raising the collective's error)."""
        return self._future.result(timeout)

    def is_completed(self) -> bool:
        return self._future.done()

    def add_done_callback(self, fn: Callable[["Work"], Any]) -> None:
        """Calls ``fn(self)`` once the collective has finished (at once if it has), on the
        thread that finished it; ``fn`` reads the outcome with ``wait()``."""
        self._future.add_done_callback(lambda _: fn(self))

    result = wait


class Communicator:
    """A group of ranks that run compressed collectives together.

    Build one with :meth:`from_mpi` (one process per rank), :meth:`inproc` (ranks as
    threads of this process) or :meth:`cuda_loopback` (virtual ranks on one GPU, for device
    arrays). Every rank must make the same calls in the same order; a
    rank that passes a different count, dtype, codec, algo or op makes every rank raise
    :class:`MismatchError` instead of hanging.

    Args:
      timeout: seconds a collective waits for a silent peer before raising
        :class:`CollectiveTimeout`.
      slice_elems: elements per pipelined slice (default ``_core.DEFAULT_SLICE_ELEMS``,
        rounded up to the codec's scale group).
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
    """

    def __init__(self, transport: "_core.Transport", *, timeout: float = 300.0,
                 slice_elems: Optional[int] = None, seed: int = 0, model: Any = None,
                 nonfinite: str = "propagate", _keepalive: Any = None):
        if timeout <= 0:
            raise InvalidArgument(f"timeout {timeout} s must be positive")
        if slice_elems is not None and slice_elems <= 0:
            raise InvalidArgument(f"slice_elems {slice_elems} must be positive")
        self._nonfinite = self._check_nonfinite(nonfinite)
        self._t = transport
        # A device rank (ccompress._cuda.DeviceRank) reduces CUDA arrays; the others host arrays.
        self._device: Optional[int] = getattr(transport, "device", None)
        self._timeout = float(timeout)
        self._slice = int(slice_elems or 0)
        self._seed = int(seed)
        if model is not None and not callable(getattr(model, "choose", None)):
            raise InvalidArgument(f"model must be a ccompress.perfmodel.AlgoModel, got {model!r}")
        self._model = model
        self._step = 0
        self._keepalive = _keepalive
        self._lock = threading.Lock()
        self._pool: Optional[cf.ThreadPoolExecutor] = None
        self._last: Optional[cf.Future] = None
        self.last_stats: Optional[dict] = None
        self._broken: Optional[str] = None
        # from_mpi: the NCCL communicator that CUDA arrays go to, made at their first call.
        self._mpi_comm: Any = None
        self._nccl: Optional["Communicator"] = None
        self._options = dict(timeout=timeout, slice_elems=slice_elems, seed=seed)

    # ---- construction ----
    @classmethod
    def from_mpi(cls, comm: Any = None, **kwargs: Any) -> "Communicator":
        """Wraps an mpi4py communicator (default ``MPI.COMM_WORLD``). Collective: every rank
        of ``comm`` must call it. Host arrays travel over MPI."""
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise Unsupported("Communicator.from_mpi needs mpi4py: pip install mpi4py mpich") from e
        try:
            from . import _mpi
        except ImportError as e:
            raise Unsupported(f"this ccompress build has no MPI transport ({e}); "
                              "reinstall with mpich (pip install mpich) present") from e
        comm = MPI.COMM_WORLD if comm is None else comm
        handle = MPI._handleof(comm)
        if handle >= 1 << 63:  # mpi4py gives a sign-extended MPICH handle (Dup'd comms) unsigned
            handle -= 1 << 64
        self = cls(_mpi.MpiTransport(handle), _keepalive=comm, **kwargs)
        self._mpi_comm = comm
        return self

    @classmethod
    def from_torch(cls, group: Any = None, **kwargs: Any) -> "Communicator":
        """A communicator over the ranks of a torch.distributed process group (default: the
        world), no MPI needed (torchrun, env://). Collective over the group's ranks. Host
        arrays move over the group's gloo point-to-point (a private gloo group over the same
        processes); CUDA arrays over NCCL, its id shared through the group's store, made at
        the first CUDA call. See :mod:`ccompress.torch._p2p`."""
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
        cuda = _cuda_module()
        path = _nccl_path()
        if unique_id is None:
            if comm is None:
                try:
                    from mpi4py import MPI
                except ImportError as e:
                    raise Unsupported("from_nccl needs unique_id, rank and size, or mpi4py "
                                      "to share the id") from e
                comm = MPI.COMM_WORLD
            rank, size = comm.Get_rank(), comm.Get_size()
            unique_id = comm.bcast(cuda.nccl_unique_id(path) if rank == 0 else None, root=0)
        elif rank is None or size is None:
            raise InvalidArgument("from_nccl with a unique_id needs rank= and size=")
        if int(cuda.device_count()) == 0:
            raise Unsupported("from_nccl needs a CUDA device; none is visible")
        if device is None:
            device = int(rank) % int(cuda.device_count())
        t = cuda.nccl_rank(bytes(unique_id), int(size), int(rank), int(device), path)
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
        """``size`` communicators of one in-process group, one per rank; give each to its
        own thread (see :func:`run_inproc`)."""
        if not isinstance(size, int) or size < 1:
            raise InvalidArgument(f"an in-process group needs size >= 1, got {size!r}")
        group = _core.InprocGroup(size)
        return [cls(group.transport(r), _keepalive=group, **kwargs) for r in range(size)]

    # ---- properties ----
    @property
    def rank(self) -> int:
        return self._t.rank

    @property
    def size(self) -> int:
        return self._t.size

    @property
    def transport(self) -> str:
        return self._t.name

    @property
    def device(self) -> Optional[int]:
        """The CUDA device of a device communicator; None for host communicators."""
        return self._device

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank has put on the wire through this communicator (headers included)."""
        return self._t.bytes_sent

    @property
    def usable(self) -> bool:
        """False once a timeout, a transport error or a malformed message has made this
        communicator refuse further calls (each raises, naming the first error)."""
        return self._broken is None

    def barrier(self) -> None:
        self._t.barrier()

    def _nccl_for(self, x: Any) -> Optional["Communicator"]:
        """For a communicator from from_mpi, the NCCL communicator that CUDA arrays go to
        (made collectively at the first CUDA call, which every rank makes alike)."""
        if self._mpi_comm is None or _arrays.cuda_device_of(x) is None:
            return None
        if self._nccl is None:
            self._nccl = Communicator.from_nccl(self._mpi_comm, **self._options)
        return self._nccl

    # ---- collectives ----
    def allreduce(self, x: Any, codec: Any = "none", algo: str = "auto", op: str = "sum",
                  out: Any = None, async_op: bool = False, stream: Any = None,
                  step: Optional[int] = None, nonfinite: Optional[str] = None,
                  error_feedback: Any = None) -> Any:
        """Reduces ``x`` over all ranks; every rank gets bit-identical results.

        ``codec`` is a spec string or :class:`Codec`, or ``"auto8"`` / ``"auto4"`` to let
        the ranks pick a codec and scale-group layout per call from the data (see
        :mod:`ccompress.autocodec`; the choice is in ``last_stats``); ``algo`` one of ring,
        two_shot, tree, one_shot, auto; ``op`` sum or avg. Writes into ``out`` when given
        (``out=x`` for in place) and returns it, else returns a new array like ``x``. With
        ``async_op`` returns a :class:`Work` whose ``wait()`` gives the result.
        ``error_feedback`` is this tensor's :class:`~ccompress.ErrorFeedback` (two_shot,
        one_shot or auto): what the codec drops is carried into the next call.

        CUDA arrays (device communicators, or from_mpi's NCCL side) run on the device,
        ordered with ``stream`` (default: the current stream of the array's library): the
        collective starts after the work issued there before the call, and that stream
        waits for the result.
        """
        nccl = self._nccl_for(x)
        if nccl is not None:
            return nccl.allreduce(x, codec, algo, op, out, async_op, stream, step, nonfinite,
                                  error_feedback)
        auto = codec if autocodec.is_auto(codec) else None
        if auto and self._device is not None:
            raise Unsupported(f"codec {auto!r} chooses on host data; on a device communicator "
                              "pass a codec spec (see ccompress-fidelity for the choice)")
        codec, algo, op = self._check_args("none" if auto else codec, algo, op, stream)
        xv = self._view(x, "x")
        out, ov = self._output(x, xv, out, xv.shape, xv.n, "allreduce")
        s = self._stream(stream, x, async_op)
        fb = self._feedback(error_feedback, auto, xv.n)
        step = self._next_step(step)
        if algo == "auto" and self._model is not None and not auto and not fb:
            itemsize = _arrays.numpy_dtype(xv.dtype).itemsize
            algo = self._model.choose(xv.n, itemsize, codec.name, self.size) or "auto"
        if auto:  # (error feedback was refused for auto codecs above)
            body = lambda: self._auto_allreduce(auto, xv, ov, algo, op, step)  # noqa: E731
        else:
            body = lambda: self._collective(_core.allreduce, xv, ov, codec, algo, op,  # noqa: E731
                                            step, fb, s)
        return self._launch(self._counted(body, "allreduce", xv, ov, nonfinite), x, out,
                            async_op)

    def reduce_scatter(self, x: Any, codec: Any = "none", op: str = "sum", out: Any = None,
                       async_op: bool = False, stream: Any = None,
                       step: Optional[int] = None, nonfinite: Optional[str] = None,
                       error_feedback: Any = None) -> Any:
        """This rank's chunk of the reduction of ``x`` (flattened): elements
        ``chunk_range(x.size, size, rank)``, sizes differing by at most one between ranks.
        ``error_feedback`` keeps its worker residual (one quantization; no server one)."""
        nccl = self._nccl_for(x)
        if nccl is not None:
            return nccl.reduce_scatter(x, codec, op, out, async_op, stream, step, nonfinite,
                                       error_feedback)
        codec, _, op = self._check_args(codec, "two_shot", op, stream)
        xv = self._view(x, "x")
        lo, hi = _core.chunk_range(xv.n, self.size, self.rank)
        out, ov = self._output(x, xv, out, (hi - lo,), hi - lo, "reduce_scatter")
        fb = self._feedback(error_feedback, None, xv.n)
        if fb:
            fb = (fb[0], (fb[1][0], 0))
        s = self._stream(stream, x, async_op)
        step = self._next_step(step)
        body = lambda: self._collective(_core.reduce_scatter, xv, ov, codec, "two_shot", op,  # noqa: E731
                                        step, fb, s)
        return self._launch(self._counted(body, "reduce_scatter", xv, ov, nonfinite), x, out,
                            async_op)

    def allgather(self, x: Any, codec: Any = "none", out: Any = None, async_op: bool = False,
                  stream: Any = None, step: Optional[int] = None,
                  nonfinite: Optional[str] = None) -> Any:
        """Every rank's ``x`` stacked: shape ``(size, *x.shape)``. Each part is
        decode(encode(x of that rank)), the caller's own part too."""
        nccl = self._nccl_for(x)
        if nccl is not None:
            return nccl.allgather(x, codec, out, async_op, stream, step, nonfinite)
        codec, _, _ = self._check_args(codec, "one_shot", "sum", stream)
        xv = self._view(x, "x")
        out, ov = self._output(x, xv, out, (self.size,) + xv.shape, xv.n * self.size,
                               "allgather")
        if xv.n and ov.ptr == xv.ptr:
            raise InvalidArgument("allgather cannot write its output over its input")
        s = self._stream(stream, x, async_op)
        step = self._next_step(step)
        body = lambda: self._collective(_core.allgather, xv, ov, codec, "one_shot", "sum", step,  # noqa: E731
                                        None, s)
        return self._launch(self._counted(body, "allgather", xv, ov, nonfinite), x, out,
                            async_op)

    # ---- internals ----
    @staticmethod
    def _check_nonfinite(mode: str) -> str:
        if mode not in NONFINITE:
            raise InvalidArgument(f"nonfinite={mode!r}; use 'propagate' or 'raise'")
        return mode

    def _counted(self, body: Callable[[], dict], what: str, xv, ov,
                 nonfinite: Optional[str]) -> Callable[[], dict]:
        """Wraps a collective's body: in "raise" mode, raises NonFiniteError on every rank
        alike when the output holds NaN/Inf. The counts come with the stats (the executor
        counts each slice while it is in cache). all-reduce and all-gather outputs are equal
        on all ranks, so their counts are too; reduce-scatter chunks differ, so there the
        ranks add their counts with one exact one-element all-reduce first."""
        mode = self._nonfinite if nonfinite is None else self._check_nonfinite(nonfinite)

        def run() -> dict:
            stats = body()
            if mode != "raise":
                return stats
            if self._device is None:
                n_out, first_out = _core.count_nonfinite(ov.ptr, ov.dtype, ov.n)
            else:  # counted on the device by the collective; finding the first is not
                n_out, first_out = stats["nonfinite_out"], None
            anywhere = n_out if what != "reduce_scatter" else self._any_rank(n_out, stats)
            if anywhere:
                n_in = stats.get("nonfinite_in")
                at = "" if first_out is None else f", first at index {first_out}"
                where = f"{n_out} here{at}" if n_out else "none in this rank's chunk"
                raise NonFiniteError(
                    f"{what} produced non-finite (NaN/Inf) outputs ({where}); this rank's input "
                    f"held {n_in}. nonfinite='raise' is set (the output was written); pass "
                    "nonfinite='propagate' to keep NaN/Inf in the result instead")
            return stats

        return run

    def _any_rank(self, count: int, stats: dict) -> float:
        """The sum over ranks of ``count`` (> 0 exactly when any rank's is), keeping
        ``last_stats`` those of the caller's collective."""
        v = np.array([min(count, 1)], np.float32)
        total = np.empty_like(v)
        if self._device is None:
            self._collective(_core.allreduce, _arrays.view(v), _arrays.view(total),
                             Codec.parse("none"), "one_shot", "sum", 0)
        else:
            from ._device import DeviceBuffer

            dv, dt = DeviceBuffer.of(v, self._device), DeviceBuffer(v.nbytes, self._device)
            as_view = lambda b: _arrays.ArrayView(b.ptr, 1, "float32", (1,), False, b,  # noqa: E731
                                                  self._device)
            self._collective(_core.allreduce, as_view(dv), as_view(dt), Codec.parse("none"),
                             "one_shot", "sum", 0)
            total = dt.download(total)
        self.last_stats = stats
        return float(total[0])

    def _check_args(self, codec: Any, algo: str, op: str, stream: Any):
        if stream is not None and self._device is None:
            raise Unsupported("stream= applies to device arrays, which need a device "
                              "communicator (Communicator.cuda_loopback or from_nccl)")
        if algo not in ALGOS:
            raise InvalidArgument(f"unknown algo {algo!r}; use one of {', '.join(ALGOS)}")
        if op not in OPS:
            raise InvalidArgument(f"unknown op {op!r}; use 'sum' or 'avg'")
        return Codec.parse(codec), algo, op

    def _view(self, x: Any, what: str, writable: bool = False) -> _arrays.ArrayView:
        """Host arrays on host communicators, CUDA arrays of this device on device ones."""
        if self._device is None:
            return _arrays.view(x, what, writable)
        if _arrays.cuda_device_of(x) is None:
            raise InvalidArgument(
                f"{what} is not a CUDA array, but this communicator ({self.transport}) reduces "
                f"device memory of cuda:{self._device}; pass a CuPy array or a CUDA tensor")
        v = _arrays.device_view(x, what, writable)
        if v.device != self._device:
            raise InvalidArgument(f"{what} is on cuda:{v.device}, but this communicator uses "
                                  f"cuda:{self._device}; move it there first")
        return v

    def _stream(self, stream: Any, x: Any, async_op: bool = False) -> Tuple[int, Any]:
        """Where a collective orders itself: the caller's stream as a cudaStream_t handle (0
        for host communicators), and for an asynchronous call on the device an event
        recorded on that stream now. The worker thread starts the collective later; the event
        makes it wait for the work issued before the call, not for what the caller issues
        after it (which is meant to overlap)."""
        if self._device is None:
            return 0, None
        handle = cuda_stream_handle(stream, x)
        if not async_op:
            return handle, None
        ready = _cuda_module().TimingEvent(self._device)
        ready.record(handle)
        return handle, ready

    def _output(self, x: Any, xv: _arrays.ArrayView, out: Any, shape, n: int, what: str):
        if out is None:
            out = _arrays.empty_like(x, shape, xv.dtype)
            return out, self._view(out, "out", writable=True)
        ov = self._view(out, "out", writable=True)
        if ov.n != n or ov.dtype != xv.dtype:
            raise InvalidArgument(
                f"out holds {ov.n} elements of {ov.dtype}, but {what} of this x writes {n} "
                f"elements of {xv.dtype}; pass out=None or an array of that size and dtype")
        in_bytes = xv.n * _arrays.numpy_dtype(xv.dtype).itemsize
        out_bytes = ov.n * _arrays.numpy_dtype(ov.dtype).itemsize
        overlaps = ov.ptr < xv.ptr + in_bytes and xv.ptr < ov.ptr + out_bytes
        if overlaps and ov.ptr != xv.ptr:
            raise InvalidArgument("out partly overlaps x; pass out=x (in place) or a separate array")
        return out, ov

    def _feedback(self, ef: Any, auto: Optional[str], n: int):
        if ef is None:
            return None
        if not isinstance(ef, ErrorFeedback):
            raise InvalidArgument(f"error_feedback must be a ccompress.ErrorFeedback, "
                                  f"got {type(ef).__name__}")
        if auto:
            raise Unsupported(f"error_feedback needs a fixed codec; {auto} may change the codec "
                              "and layout every call, so name the codec")
        return ef, ef.buffers(n, self.size, self.rank, self._device)

    def _next_step(self, step: Optional[int]) -> int:
        # Steps are taken in issue order, so every rank numbers its calls alike.
        self._step += 1
        return self._step - 1 if step is None else int(step)

    def _collective(self, fn: Callable, xv, ov, codec: Codec, algo: str, op: str,
                    step: int, feedback=None, stream: Tuple[int, Any] = (0, None)) -> dict:
        """Runs one collective now (the caller keeps the issue order); ``feedback`` is
        (ErrorFeedback, (worker address, server address)). ``fn`` is the _core host
        collective; a device rank runs its own method of the same name instead, ordered with
        ``stream`` (from :meth:`_stream`)."""
        residuals = feedback[1] if feedback else (0, 0)
        handle, ready = stream
        with self._lock:
            if self._broken:
                raise CCompressError(f"this communicator is unusable: {self._broken}; "
                                     "create a new one (all ranks)")
            try:
                if self._device is not None:
                    stats = getattr(self._t, fn.__name__)(
                        xv.ptr, ov.ptr, xv.n, xv.dtype, codec._c, algo, op, self._slice,
                        self._timeout, self._seed, step, handle, *residuals,
                        0 if ready is None else ready.handle)
                else:
                    stats = fn(self._t, xv.ptr, ov.ptr, xv.n, xv.dtype, codec._c, algo, op,
                               self._slice, self._timeout, self._seed, step, *residuals)
            except MismatchError:
                raise  # every rank stopped at the same point: the group is still in step
            except CCompressError as e:
                # A peer may still deliver messages of the failed call, which the next call
                # could take for its own: refuse to compute on.
                self._broken = f"{type(e).__name__} in an earlier collective ({e})"
                raise
        stats["codec"] = codec.name
        if feedback:
            feedback[0].nonfinite += stats["feedback_nonfinite"]
        self.last_stats = stats
        return stats

    def _auto_allreduce(self, name: str, xv, ov, algo: str, op: str, step: int) -> dict:
        a = _arrays.as_numpy(xv)

        def exact_sum(v: np.ndarray) -> np.ndarray:
            sv = _arrays.view(v)
            out = np.empty_like(v)
            self._collective(_core.allreduce, sv, _arrays.view(out), Codec.parse("none"),
                             "two_shot", "sum", 0)
            return out

        choice = autocodec.choose(name, a, exact_sum)
        if choice.layout == "rows":
            stats = self._collective(_core.allreduce, xv, ov, choice.codec, algo, op, step)
        else:
            flat = autocodec.arrange(a, "cols")
            res = np.empty_like(flat)
            stats = self._collective(_core.allreduce, _arrays.view(flat), _arrays.view(res),
                                     choice.codec, algo, op, step)
            _arrays.as_numpy(ov)[...] = autocodec.restore(res, xv.shape, "cols")
        stats.update(auto=name, layout=choice.layout, candidates=choice.table)
        return stats

    def _launch(self, body: Callable[[], Any], x: Any, out: Any, async_op: bool) -> Any:
        def run() -> Any:
            body()
            return _arrays.like_input(x, out)

        if async_op:
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix=f"ccompress-r{self.rank}")
            self._last = self._pool.submit(run)
            return Work(self._last)
        if self._last is not None:  # keep issue order with earlier async calls
            cf.wait([self._last])
            self._last = None
        return run()

    def close(self) -> None:
        """Waits for pending async collectives and releases the worker thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._nccl is not None:
            self._nccl.close()

    def __repr__(self) -> str:
        return f"Communicator(transport={self.transport}, rank={self.rank}, size={self.size})"


def run_inproc(size: int, fn: Callable[[Communicator], Any], **kwargs: Any) -> List[Any]:
    """Runs ``fn(comm)`` on ``size`` in-process ranks, one thread each, and returns the
    results in rank order. If any rank raises, the first error (lowest rank) is re-raised
    after all ranks have finished."""
    return _run_ranks(Communicator.inproc(size, **kwargs), fn)


def run_cuda_loopback(size: int, fn: Callable[[Communicator], Any], device: int = 0,
                      **kwargs: Any) -> List[Any]:
    """:func:`run_inproc` for ``size`` virtual ranks on CUDA device ``device``
    (:meth:`Communicator.cuda_loopback`)."""
    return _run_ranks(Communicator.cuda_loopback(size, device, **kwargs), fn)


def _run_ranks(comms: List[Communicator], fn: Callable[[Communicator], Any]) -> List[Any]:
    def body(comm: Communicator, r: int) -> Any:
        try:
            return fn(comm)
        finally:
            comm.close()

    return on_threads(comms, body)


def on_threads(ranks: List[Any], fn: Callable[[Any, int], Any]) -> List[Any]:
    """``fn(ranks[r], r)`` on one thread per rank; the results in rank order. If any rank
    raises, the first error (lowest rank) is re-raised after all ranks have finished."""
    size = len(ranks)
    results: List[Any] = [None] * size
    errors: List[Optional[BaseException]] = [None] * size

    def body(r: int) -> None:
        try:
            results[r] = fn(ranks[r], r)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), name=f"ccompress-inproc-{r}")
               for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results
