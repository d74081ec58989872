"""A DistributedDataParallel communication hook that averages gradient buckets with a
compressed ccompress all-reduce.

    model = DistributedDataParallel(model)                      # gloo (CPU) or NCCL (GPU)
    hook = ccompress.torch.ddp_comm_hook(codec="hint8", error_feedback=True)
    model.register_comm_hook(state=None, hook=hook)

DDP hands the hook one flat bucket of gradients at a time, in bucket order on every rank,
and expects a ``torch.futures.Future`` that completes with the bucket averaged over the
ranks. The all-reduce runs in place on the bucket (float32, bfloat16 or float16), so every
rank ends with bit-identical gradients.
"""
from typing import Any, Callable, Dict, Optional, Union

import numpy as np
import torch
import torch.distributed as dist

from .._internal import errors as _errors
from .. import autocodec
from ..codec import Codec
from ..communicator import ALGOS, Communicator
from ..error_feedback import ErrorFeedback
from . import _common, _engagement, _trace
from . import gift as _gift


class CompressedAllreduceHook:
    """The callable :func:`ddp_comm_hook` returns: ``hook(state, bucket) -> Future``.

    It carries its own state (the ccompress communicator, one error-feedback residual per
    bucket index) and ignores DDP's ``state`` argument; :meth:`state_dict` /
    :meth:`load_state_dict` checkpoint the residuals.

    Parameters
    ----------
    codec, error_feedback, comm, process_group, algo, async_op, gift, small_codec
        As for :func:`ddp_comm_hook`.

    Raises
    ------
    InvalidArgument
        An unknown codec spec, algo or error_feedback value.
    Unsupported
        GIFT or small_codec with an auto codec, or error feedback with an auto codec or the
        ring or tree schedule.
    """

    def __init__(self, codec: Any = "fp8_e4m3:g128", error_feedback: Union[bool, str] = True,
                 comm: Optional[Communicator] = None, process_group: Any = None,
                 algo: str = "auto", async_op: Optional[bool] = None,
                 gift: Any = None, small_codec: Optional[str] = None) -> None:
        if gift is not None and autocodec.is_auto(codec):
            raise _errors.Unsupported(f"GIFT needs a fixed codec (got {codec!r}): its "
                                      "selection measures that codec's round trip")
        if not autocodec.is_auto(codec):
            codec = Codec.parse(codec).name  # a bad spec fails here, not inside backward
        if algo not in ALGOS:
            raise _errors.InvalidArgument(f"unknown algo {algo!r}; use one of {', '.join(ALGOS)}")
        self.codec: str = codec
        self.algo = algo
        if small_codec is not None:
            if gift is not None or autocodec.is_auto(codec):
                raise _errors.Unsupported(
                    "small_codec needs a fixed codec and no GIFT (got codec "
                    f"{codec!r}{', gift' if gift is not None else ''})")
            small_codec = Codec.parse(small_codec).name
        self.small_codec: Optional[str] = small_codec
        self.ef_parts = _ef_parts(error_feedback)
        self.error_feedback = bool(self.ef_parts) and codec != "none"
        if self.error_feedback and (autocodec.is_auto(codec) or algo in ("ring", "tree")):
            raise _errors.Unsupported(
                f"error feedback needs a fixed codec and the two_shot, one_shot or auto "
                f"schedule (got codec {codec!r}, algo {algo!r}); name a codec and algo, or "
                "pass error_feedback=False")
        self._given = comm
        self._comm: Optional[Communicator] = None
        self._group = process_group
        self._async = async_op
        # keyed by bucket index; (index, "small") for a small_codec part
        self._ef: Dict[Any, Any] = {}
        self._ef_numel: Dict[Any, int] = {}
        self._ef_layout: Dict[Any, Any] = {}
        self.gift = gift
        self._gift_agreed = False  # the ranks' GIFT settings compared (first bucket)
        if gift is not None:
            gift.attach(self.codec)
        self._pending_state: Optional[dict] = None
        self._calls = 0
        self._exact_bytes = 0
        self._trace: Optional[_trace.GroupTrace] = None  # CCOMPRESS_TRACE, at the first call
        self._sent_mark = 0
        self._trace_name = "all_reduce " + self.codec + "".join(
            part for part, on in ((f" + {small_codec} for vectors", small_codec is not None),
                                  (" + GIFT", gift is not None),
                                  (" + error feedback", self.error_feedback)) if on)
        self.__name__ = self.__qualname__ = f"ccompress_{self.codec}_hook"

    # ---- the hook ----
    # DDP checks these annotations, and reads the hook's __name__ (set in __init__).
    def __call__(self, state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buf = bucket.buffer()
        _common.check_tensor(buf, "the gradient bucket")
        comm = self.comm
        if self._calls == 0:
            _engagement.log_info(dist.get_rank() if dist.is_initialized() else 0,
                                 f"ccompress DDP hook: bucket all-reduces with {self.codec}, "
                                 f"algo {self.algo}" + (", error feedback"
                                                        if self.error_feedback else ""))
        self._calls += 1
        exact = _engagement.exact_ring_bytes("all_reduce", buf.numel(), buf.element_size(),
                                             comm.size)
        self._exact_bytes += exact
        if self._trace is None:
            self._trace = _trace.GroupTrace(comm.rank, comm.size, _trace.global_rank(comm.rank),
                                            label="ccompress DDP hook")
            self._sent_mark = comm.bytes_sent  # the communicator may have sent before
        start = _trace.now_us() if self._trace.on and not buf.is_cuda else None
        record = (lambda: self._record(start, buf.numel(), exact)) if start is not None \
            else (lambda: None)
        kwargs: Dict[str, Any] = dict(codec=self.codec, algo=self.algo, op="avg")
        if self.gift is not None:
            return self._call_gift(comm, bucket, buf, kwargs, record)
        if self.small_codec is not None:
            return self._call_split(comm, bucket, buf, record)
        if self.error_feedback:
            kwargs["error_feedback"] = self._feedback(bucket.index(), buf.numel())
        if buf.is_cuda:
            # Stream-ordered: the collective is queued on the current stream; a Future with
            # devices= makes DDP's later work wait for that stream.
            _common.allreduce(comm, buf, out=buf, **kwargs)
            fut = torch.futures.Future(devices=[buf.device])
            fut.set_result(buf)
            return fut
        if not self._run_async(comm):
            return self._run_now(buf, lambda: _common.allreduce(comm, buf, out=buf, **kwargs),
                                 record)
        return self._start(comm, buf, kwargs, record)

    def _record(self, start: float, numel: int, exact: int) -> None:
        """A host bucket's all-reduce as a CCOMPRESS_TRACE span from ``start`` to now. Called
        right after the call, before ccompress's worker thread starts the next one: the
        communicator's byte count grew by this call's bytes alone."""
        sent = self._comm.bytes_sent
        self._trace.call(self._trace_name, start, numel=numel,
                         bytes_sent=sent - self._sent_mark, exact_bytes=exact)
        self._sent_mark = sent

    @staticmethod
    def _run_now(buf: torch.Tensor, body: Callable[[], None],
                 record: Callable[[], None]) -> torch.futures.Future[torch.Tensor]:
        """``body()`` in the calling thread (:func:`_common.run_now`), then ``record()``."""
        def traced() -> None:
            try:
                body()
            finally:
                record()

        return _common.run_now(buf, traced)

    def _start(self, comm: Communicator, buf: torch.Tensor, kwargs: Dict[str, Any],
               record: Callable[[], None],
               then: Optional[Callable[[], None]] = None) -> torch.futures.Future[torch.Tensor]:
        """The bucket's all-reduce on ccompress's worker thread, overlapping backward: a
        Future completed with ``buf`` after ``then()`` (on that thread), or with the error.
        ``record()`` runs as soon as the all-reduce is over (the trace)."""
        fut = torch.futures.Future()
        work = _common.allreduce(comm, buf, out=buf, async_op=True, **kwargs)

        def done(w) -> None:
            record()
            try:
                w.wait()
                if then is not None:
                    then()
            except Exception as e:  # noqa: BLE001 - handed to DDP through the future
                fut.set_exception(e)
            else:
                fut.set_result(buf)

        work.add_done_callback(done)
        return fut

    def _call_gift(self, comm: Communicator, bucket: dist.GradBucket, buf: torch.Tensor,
                   kwargs: Dict[str, Any],
                   record: Callable[[], None]) -> torch.futures.Future[torch.Tensor]:
        """The bucket through GIFT: whiten the treated weights' gradients in place, the
        compressed all-reduce (error feedback in whitened coordinates), map them back. A
        refresh step runs in the calling thread: it adds exact collectives of its own, which
        must not overlap the bucket's. Other steps whiten here and overlap the all-reduce
        and the map back with backward, as the plain hook does (host buckets)."""
        def whiten() -> list:
            if not self._gift_agreed:  # factors differing between ranks would sum wrongly
                _common.agree(comm, _gift.settings(self.gift, self.codec), _gift.SETTINGS,
                              what="GIFT settings", fix="Build the same GIFT(...) on every rank")
                self._gift_agreed = True
            layout = self.gift.layout(bucket)
            ef = (self._feedback(bucket.index(), buf.numel(), layout)
                  if self.error_feedback else None)
            if ef is not None:
                kwargs["error_feedback"] = ef
            return self.gift.to_wire(comm, bucket, ef)

        if not (self.gift.collecting() or buf.is_cuda) and self._run_async(comm):
            try:
                treated = whiten()  # no collective on a step that does not refresh
            except Exception as e:  # noqa: BLE001 - DDP re-raises it from the future
                fut = torch.futures.Future()
                fut.set_exception(e)
                return fut
            return self._start(comm, buf, kwargs, record,
                               lambda: self.gift.from_wire(bucket, treated))

        def body() -> None:
            treated = whiten()
            _common.allreduce(comm, buf, out=buf, **kwargs)
            self.gift.from_wire(bucket, treated)

        return self._run_now(buf, body, record)

    def _call_split(self, comm: Communicator, bucket: dist.GradBucket, buf: torch.Tensor,
                    record: Callable[[], None]) -> torch.futures.Future[torch.Tensor]:
        """The bucket as two all-reduces: the gradients of its matrices (parameters of 2 or
        more dimensions) with ``codec``, those of its biases and norm gains (fewer) with
        ``small_codec``, each packed back to back, with a residual of its own (bucket
        index, "small" for the second). Run in the calling thread."""
        def body() -> None:
            parts: Dict[bool, list] = {False: [], True: []}
            for p, at in _common.bucket_offsets(bucket, "small_codec"):
                parts[p.dim() < 2].append(buf.narrow(0, at, p.numel()))
            for small, views in parts.items():
                if not views:
                    continue
                codec = self.small_codec if small else self.codec
                flat = torch.cat(views)
                kwargs: Dict[str, Any] = dict(codec=codec, algo=self.algo, op="avg")
                if self.error_feedback and codec != "none":
                    key = (bucket.index(), "small") if small else bucket.index()
                    kwargs["error_feedback"] = self._feedback(key, flat.numel())
                _common.allreduce(comm, flat, out=flat, **kwargs)
                for v, part in zip(views, flat.split([v.numel() for v in views])):
                    v.copy_(part)

        return self._run_now(buf, body, record)

    def stats(self) -> dict:
        """What the hook did on this rank, as :meth:`CompressedProcessGroup.stats` reports its
        all-reduces.

        Returns
        -------
        dict
            ``calls`` (buckets all-reduced, every one through ccompress with the hook's codec),
            ``compressed``, ``bytes_sent`` (ccompress's bytes, headers included) and
            ``exact_bytes`` (what an exact ring all-reduce of the same buckets sends: 2(P-1)/P of
            each bucket).
        """
        sent = self._comm.bytes_sent if self._comm is not None else 0
        return {"calls": self._calls, "compressed": self._calls if self.codec != "none" else 0,
                "bytes_sent": sent, "exact_bytes": self._exact_bytes}

    # ---- state ----
    @property
    def comm(self) -> "Communicator":
        """The ccompress communicator (derived from the process group on first use).

        Returns
        -------
        ccompress.Communicator
            The communicator.
        """
        if self._comm is None:
            self._comm = _common.communicator_for(self._group, self._given)
        return self._comm

    def _feedback(self, index: Any, numel: int, layout: Any = None) -> Any:
        """The residual of bucket ``index``; a new one when DDP rebuilt its buckets (after
        the first iteration) and the bucket's size changed (with GIFT: or its layout, the
        (layer, shape) of each parameter, as the residual is in per-layer coordinates)."""
        if self._ef_numel.get(index) != numel or self._ef_layout.get(index) != layout:
            self._ef[index] = ErrorFeedback(worker="worker" in self.ef_parts,
                                            server="server" in self.ef_parts)
            self._ef_numel[index] = numel
            self._ef_layout[index] = layout
            saved = (self._pending_state or {}).pop(index, None)
            if saved is not None and saved["numel"] == numel and \
                    _layout_of(saved) == layout:
                self._ef[index].load_state_dict(
                    {k: v.numpy() if isinstance(v, torch.Tensor) else v
                     for k, v in saved["state"].items()})
        return self._ef[index]

    def _run_async(self, comm: Communicator) -> bool:
        """Overlap with backward on ccompress's worker thread unless MPI forbids calls from
        a second thread (thread level below MPI_THREAD_MULTIPLE)."""
        safe = True
        if comm.transport == "mpi":
            MPI = _common._mpi()
            safe = MPI.Query_thread() >= MPI.THREAD_MULTIPLE
        if self._async is None:
            return safe
        if self._async and not safe:
            raise _errors.Unsupported(
                "async_op=True needs MPI initialised with MPI_THREAD_MULTIPLE (mpi4py's "
                "default); pass async_op=None or False")
        return bool(self._async)

    def state_dict(self) -> dict:
        """The state, for checkpoints.

        Returns
        -------
        dict
            Codec, algo and every bucket's error-feedback residual (per bucket index), the
            residuals as CPU tensors (``torch.load`` with ``weights_only=True`` reads them); the
            GIFT's state when there is one.
        """
        ef = {i: {"numel": self._ef_numel[i],
                  "state": {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                            for k, v in e.state_dict().items()}}
              for i, e in self._ef.items()}
        for i, entry in ef.items():
            if self._ef_layout.get(i) is not None:
                entry["layout"] = [[n, list(s)] for n, s in self._ef_layout[i]]
        out = {"codec": self.codec, "algo": self.algo, "error_feedback": ef}
        if self.small_codec is not None:
            out["small_codec"] = self.small_codec
        if self.gift is not None:
            out["gift"] = self.gift.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restores residuals saved by :meth:`state_dict` (applied per bucket on its next use,
        when its size matches).

        Parameters
        ----------
        state : dict
            What :meth:`state_dict` returned (on this rank).

        Raises
        ------
        InvalidArgument
            The state was saved with another codec or small_codec, or by a hook without GIFT
            where this one has one.
        """
        if state.get("codec") != self.codec:
            raise _errors.InvalidArgument(
                f"this state was saved with codec {state.get('codec')!r}, but the hook uses "
                f"{self.codec!r}; make a hook with the same codec")
        if state.get("small_codec") != self.small_codec:
            raise _errors.InvalidArgument(
                f"this state was saved with small_codec {state.get('small_codec')!r}, but "
                f"the hook uses {self.small_codec!r}; make a hook with the same one")
        if self.gift is not None:
            if state.get("gift") is None:
                raise _errors.InvalidArgument("this state was saved by a hook without GIFT; "
                                              "this hook has one")
            self.gift.load_state_dict(state["gift"])
        self._pending_state = dict(state.get("error_feedback", {}))
        self._ef.clear()
        self._ef_numel.clear()
        self._ef_layout.clear()


def ddp_comm_hook(codec: Any = "fp8_e4m3:g128", error_feedback: Union[bool, str] = True, *,
                  comm: Optional[Communicator] = None, process_group: Any = None,
                  algo: str = "auto", async_op: Optional[bool] = None,
                  gift: Any = None, small_codec: Optional[str] = None) -> CompressedAllreduceHook:
    """A hook for ``DistributedDataParallel.register_comm_hook(state=None, hook=...)``.

    Parameters
    ----------
    codec
        ccompress codec spec of the gradients on the wire (``"none"`` is exact).
    error_feedback
        keep each bucket's compression error and add it to the next step's
        gradients (one ``ccompress.ErrorFeedback`` per bucket; ignored for ``"none"``):
        ``True`` (both residuals), ``"worker"`` (only the residual of each rank's own
        quantization), ``"server"`` (only that of the owner's re-quantization of the sum
        in two_shot) or ``False``.
    comm
        the ccompress communicator; by default derived from ``process_group`` on
        first use (torchrun: the group's gloo point-to-point; mpiexec: MPI; see
        ``ccompress.torch._common.communicator_for``). Its rank and size must match the
        group's, else :class:`MismatchError`.
    process_group
        the group DDP reduces over (default: the world group).
    algo
        ccompress schedule (``auto``, ``two_shot``, ``ring``, ...).
    async_op
        run host collectives on ccompress's worker thread, overlapping backward
        (default: when the transport allows it).
    gift
        a :class:`ccompress.torch.GIFT` of the model: each hooked weight's gradient
        is whitened inside its bucket before the codec and mapped back after it, with the
        error feedback in whitened coordinates (``ccompress/torch/gift.py``). A refresh
        step's buckets run in the calling thread; between refreshes the all-reduce and the
        map back overlap backward as ``async_op`` says (host buckets). The first bucket
        compares every rank's GIFT settings: where any differs, every rank raises
        :class:`MismatchError`.
    small_codec
        the codec of the gradients of parameters with fewer than 2 dimensions
        (biases, norm gains; ``"none"``: exact), sent in an all-reduce of their own next
        to the matrices' (``codec``), each with its residual; None (default): one codec for
        the whole bucket. Not with GIFT; the bucket runs in the calling thread.

    Returns
    -------
    CompressedAllreduceHook
        The hook, with its own state (communicator, residuals).

    Raises
    ------
    InvalidArgument, Unsupported
        As :class:`CompressedAllreduceHook` does.
    """
    return CompressedAllreduceHook(codec, error_feedback, comm, process_group, algo, async_op,
                                   gift, small_codec)


def _ef_parts(error_feedback: Any) -> tuple:
    """The residuals an ``error_feedback`` argument keeps: () for off, ("worker",
    "server") for ``True``, or the one it names."""
    if isinstance(error_feedback, str):
        parts = {"worker": ("worker",), "server": ("server",)}.get(error_feedback)
        if parts is None:
            raise _errors.InvalidArgument(
                f"error_feedback={error_feedback!r}: use True, False, 'worker' or 'server'")
        return parts
    return ("worker", "server") if error_feedback else ()


def _layout_of(saved: dict) -> Any:
    """The (layer, shape) layout a saved residual belongs to (None: saved without GIFT)."""
    lay = saved.get("layout")
    return None if lay is None else tuple((n, tuple(s)) for n, s in lay)
