"""GIFT for PyTorch models: the geometry-informed gradient transform of
:mod:`ccompress.compressors.gift` (its module docstring has the method) fed by hooks on
the model and applied inside the DDP communication hook, or on FSDP2's reduce-scatters
through the ``ccompress`` backend.

    gift = ccompress.torch.GIFT(model, rank=32, refresh_every=50, sketch=32)
    ddp.register_comm_hook(None, ccompress.torch.ddp_comm_hook(
        "nvfp4", error_feedback=True, gift=gift))
    # or, after fully_shard on the ccompress backend (input side only):
    ccompress.torch.compressed_group().use_gift(gift)

Both paths whiten the rows of a weight's gradient where they lie in a flat buffer
(:class:`Place`): a DDP bucket holds each weight whole, FSDP2's reduce-scatter input holds
it as dim-0 row shards (``ccompress/torch/_gift_fsdp.py``); the text below says "bucket"
for either.

- **Statistics.** Forward hooks on the chosen ``nn.Linear`` layers add each layer's input
  moment ``x^T x`` (float64, over all tokens) during the training forward of every refresh
  step (every ``refresh_every`` steps, the first included); with ``output_side=True`` a
  hook on the layer's output adds ``delta^T delta`` of its loss gradient as well. Nothing is
  collected on the other steps, in eval mode or under ``torch.no_grad``.
- **Refresh.** In the hook of a refresh step, for the layers whose weights are in the
  bucket, the moments are all-reduced exactly through the hook's communicator (dense, or
  a shared-seed Nystrom sketch with ``sketch=k``), folded into the EMA and factored
  (:meth:`ccompress.compressors.gift.NumpyGIFT.observe`): every rank derives its factors
  from the same bits.
- **Selection** (``select=True``, the default): at each refresh every rank measures one
  codec round trip of its own gradient of each layer, in natural and in whitened
  coordinates (:func:`ccompress.compressors.gift.roundtrip_errors`); the figures are
  averaged over the ranks, and a layer is whitened only where its error falls (plain >
  ``min_gain`` x whitened). A layer whose error would rise stays in natural coordinates,
  so GIFT never makes a layer's measured error worse. The table is :attr:`selection`.
- **Transform.** Inside the bucket each treated weight's gradient G is replaced by
  ``G L^-T`` (both sides: ``L_S^-1 G L_A^-T``) before the compressed all-reduce and mapped
  back after it; biases and untreated tensors travel as they are. The hook's error feedback
  then lives in whitened coordinates; on a refresh the worker residual of every layer whose
  transform changed is mapped into the new coordinates and the bucket's server residual
  (a chunk in the old coordinates) is dropped.

Embeddings are not hooked: a tied embedding (a language model's input table reused as its
output head) gets its gradient from two products with different K-FAC factors, and one
factor per weight does not fit it. The factors are computed in float64 on the host (NumPy,
:mod:`ccompress.compressors.gift`'s math) at each refresh; the per-step transforms run in float32 in
place, on the gradients' own device (a float32 copy of each factor is kept there), so CUDA
gradients stay on the GPU. float32 adds a relative error near 2^-24 x the matrices' widths,
far below any lossy codec's (the bound is stated in tests/pytorch/test_torch_gift.py).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch

from .._internal import errors as _errors
from ..compressors import gift as _gift
from .._internal.flat import allreduce_many
from ..codec import Codec
from ._common import bucket_offsets

LayerChoice = Union[None, Iterable[str], Callable[[str, torch.nn.Module], bool]]


# The settings every rank must share (the hook and use_gift compare them across ranks): the
# setting -> its name in MismatchError's message (``settings`` gives the values).
SETTINGS = {k: f"GIFT {k}" for k in (
    "rank", "refresh_every", "layers", "sketch", "output_side", "ema", "damping",
    "damping_out", "select", "min_gain", "seed")}
SETTINGS["codec"] = "GIFT codec (the one its selection measures)"


def settings(gift: "GIFT", codec: str) -> Dict[str, Any]:
    """A GIFT's settings on this rank, as JSON values over the keys of :data:`SETTINGS`
    (what the hook and ``use_gift`` compare across ranks).

    Parameters
    ----------
    gift : GIFT
        The GIFT.
    codec : str
        The codec its selection measures.

    Returns
    -------
    dict
        The constructor's arguments as resolved (``layers``: the hooked layers' names) and
        the codec.
    """
    core = gift.core
    return {"rank": int(core.rank), "refresh_every": gift.refresh_every,
            "layers": list(gift.layers), "sketch": int(core.sketch),
            "output_side": gift.output_side, "ema": float(core.ema),
            "damping": float(core.damping), "damping_out": float(core.damping_out),
            "select": gift.select_layers, "min_gain": gift.min_gain, "seed": int(core.seed),
            "codec": str(codec)}


class GIFT:
    """Geometry-informed compression of a model's weight gradients (module docstring).

    Parameters
    ----------
    model
        the module whose ``nn.Linear`` layers are hooked (the module DDP wraps, or
        the DDP wrapper itself: names are taken without its ``module.`` prefix).
    rank
        rank of the low-rank part of each input moment (and output moment).
    refresh_every
        steps between refreshes of the statistics and the selection (the
        first step is one); a step is one DDP reduction (one call of the last bucket).
    layers
        which layers: None for every ``nn.Linear``, a list of module names, or a
        predicate ``f(name, module) -> bool``.
    sketch
        0 to all-reduce the dense moments (in x in per layer); k > 0 for a k-column
        Nystrom sketch plus the diagonal (in x (k + 1)), far fewer bytes for wide layers.
    output_side
        also whiten the output side (both K-FAC factors, backward hooks).
    ema
        EMA weight of the old moments per refresh (see
        :class:`ccompress.compressors.gift.NumpyGIFT`).
    damping
        floor of the input factor's residual diagonal, relative to its mean.
    damping_out
        the same for the output factor.
    select
        whiten a layer only where one measured round trip errs less (default);
        False whitens every hooked layer once it has statistics.
    min_gain
        with ``select``, whiten where plain error > min_gain x whitened error.
    seed
        seed of the shared sketch matrices (the same on every rank).

    Raises
    ------
    InvalidArgument
        No nn.Linear layer to hook, layers that are not nn.Linear modules of the model, or
        an invalid setting.
    """

    def __init__(self, model: torch.nn.Module, rank: int = 32, refresh_every: int = 50,
                 layers: LayerChoice = None, sketch: int = 0, output_side: bool = False,
                 ema: float = 0.5, damping: float = 0.3, damping_out: float = 1.0,
                 select: bool = True, min_gain: float = 1.0, seed: int = 0) -> None:
        if not isinstance(model, torch.nn.Module):
            raise _errors.InvalidArgument(f"GIFT needs a torch.nn.Module, got "
                                          f"{type(model).__name__}")
        if int(refresh_every) < 1:
            raise _errors.InvalidArgument(f"GIFT refresh_every {refresh_every} must be >= 1")
        if int(rank) < 1:
            raise _errors.InvalidArgument(f"GIFT rank {rank} must be >= 1")
        if min_gain < 1.0:
            raise _errors.InvalidArgument(f"GIFT min_gain {min_gain} must be >= 1 (below 1 a "
                                          "layer whose error rises would be whitened)")
        # The math (moments' all-reduce and EMA, factors, sketches) is ccompress.compressors.gift's.
        self.core = _gift.NumpyGIFT(codec="none", rank=int(rank), ema=ema, damping=damping,
                               error_feedback=False, sketch=sketch, seed=seed,
                               damping_out=damping_out)
        self.refresh_every, self.output_side = int(refresh_every), bool(output_side)
        self.select_layers, self.min_gain = bool(select), float(min_gain)
        self.codec: Optional[Codec] = None  # the hook's codec (attach)
        self.step = 0  # completed reductions
        self.treated: Dict[str, bool] = {}  # layer -> whitened now
        self.selection: Dict[str, Dict[str, Any]] = {}  # layer -> the last refresh's figures
        self._moments: Dict[str, List[Any]] = {}  # layer -> [x^T x, tokens, d^T d, tokens]
        self._layer_of: Dict[int, str] = {}  # id(weight) -> layer name
        self._module_of: Dict[int, str] = {}  # id(nn.Linear) -> layer name (FSDP2 swaps weights)
        self.model = model
        self._task = -1  # the backward pass whose end ends the step (FSDP2)
        self._handles: List[Any] = []
        self._refreshed: set = set()  # layers refreshed during this step
        self._device_factors: Dict[int, Tuple[Any, Dict[Any, List[_Side]]]] = {}  # id(factor)
        for name, mod in _chosen(model, layers):
            self._layer_of[id(mod.weight)] = name
            self._module_of[id(mod)] = name
            self._handles.append(mod.register_forward_hook(self._forward_hook(name)))
        if not self._layer_of:
            raise _errors.InvalidArgument("GIFT found no nn.Linear layer to hook (check "
                                          "`layers`)")

    # ---- statistics ----
    @property
    def layers(self) -> List[str]:
        """The hooked layers' names.

        Returns
        -------
        list of str
            Sorted.
        """
        return sorted(self._layer_of.values())

    def collecting(self) -> bool:
        """Whether this step's training forward gathers statistics (a refresh step).

        Returns
        -------
        bool
            True every ``refresh_every`` steps.
        """
        return self.step % self.refresh_every == 0

    def _forward_hook(self, name: str):
        def hook(mod: torch.nn.Module, inputs: Any, output: torch.Tensor) -> None:
            if not (mod.training and torch.is_grad_enabled() and self.collecting()):
                return
            x = inputs[0].detach().reshape(-1, mod.in_features).to(torch.float64)
            slot = self._moments.setdefault(name, [0.0, 0, 0.0, 0])
            slot[0] = slot[0] + (x.T @ x).cpu()
            slot[1] += x.shape[0]
            if self.output_side and output.requires_grad:
                def grad_hook(d: torch.Tensor) -> None:
                    d = d.detach().reshape(-1, mod.out_features).to(torch.float64)
                    slot[2] = slot[2] + (d.T @ d).cpu()
                    slot[3] += d.shape[0]
                output.register_hook(grad_hook)
        return hook

    def remove_hooks(self) -> None:
        """Detaches the forward hooks (the transform keeps its last factors)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    # ---- called by the DDP hook ----
    def attach(self, codec: str) -> None:
        """Binds the codec whose round trip the selection measures (the hook's, or the
        backend's reduce-scatter codec).

        Parameters
        ----------
        codec : str
            The codec spec.

        Raises
        ------
        InvalidArgument
            This GIFT serves another codec already (one GIFT per hook or group), or an unknown
            spec.
        """
        c = Codec.parse(codec)
        if self.codec is not None and self.codec.name != c.name:
            raise _errors.InvalidArgument(
                f"this GIFT serves codec {self.codec.name!r} already; make one GIFT per hook "
                f"or group (got {c.name!r})")
        self.codec = self.core.codec = c

    def layout(self, bucket: Any) -> tuple:
        """What a residual in a bucket's whitened coordinates belongs to.

        Parameters
        ----------
        bucket : torch.distributed.GradBucket
            A DDP bucket.

        Returns
        -------
        tuple of (str, tuple of int)
            (layer name, or "" for an unhooked tensor, shape) of each parameter, in order.
        """
        return tuple((self._layer_of.get(id(p), ""), tuple(p.shape))
                     for p in bucket.parameters())

    def places(self, bucket: Any) -> List["Place"]:
        """Where the hooked weights' gradients lie in a DDP bucket's flat buffer. DDP lays the
        bucket's parameters out back to back in ``bucket.parameters()`` order.

        Parameters
        ----------
        bucket : torch.distributed.GradBucket
            A DDP bucket.

        Returns
        -------
        list of Place
            One per hooked weight in the bucket.

        Raises
        ------
        InvalidArgument
            A layout that does not add up to the buffer.
        """
        out = []
        for p, at in bucket_offsets(bucket, "GIFT"):
            if id(p) in self._layer_of:
                cols = p.shape[-1]
                rows = p.numel() // cols
                out.append(Place(self._layer_of[id(p)], (rows, cols), (cols, 1), at, rows))
        return out

    def to_wire(self, comm: Any, bucket: Any, feedback: Any = None) -> List["Place"]:
        """Whitens the treated gradients of a DDP bucket in place (:meth:`whiten`).

        Parameters
        ----------
        comm : ccompress.Communicator
            The hook's communicator.
        bucket : torch.distributed.GradBucket
            A DDP bucket.
        feedback : ccompress.ErrorFeedback, optional
            The bucket's residuals (in whitened coordinates).

        Returns
        -------
        list of Place
            What :meth:`from_wire` needs.
        """
        return self.whiten(comm, bucket.buffer(), self.places(bucket), feedback)

    def from_wire(self, bucket: Any, treated: List["Place"]) -> None:
        """Maps a DDP bucket's averaged whitened gradients back (in place); ends the step after
        the last bucket.

        Parameters
        ----------
        bucket : torch.distributed.GradBucket
            A DDP bucket.
        treated : list of Place
            What :meth:`to_wire` returned.
        """
        self.unwhiten(bucket.buffer(), treated)
        if bucket.is_last():
            self.end_step()

    # ---- on any flat gradient buffer (DDP bucket, FSDP2 reduce-scatter input) ----
    def whiten(self, comm: Any, flat: torch.Tensor, places: List["Place"],
               feedback: Any = None) -> List["Place"]:
        """Whitens the treated layers' rows of a flat gradient buffer in place (a DDP bucket,
        or FSDP2's reduce-scatter input).

        On a refresh step it first refreshes the statistics, factors and selection of the layers
        at ``places`` (collectives on ``comm``: every rank must call this for the same places in
        the same order); then replaces each treated layer's rows G by G L^-T.

        Parameters
        ----------
        comm : ccompress.Communicator
            The communicator of the buffer's collective.
        flat : torch.Tensor
            The buffer, contiguous 1-D.
        places : list of Place
            The hooked weights in it.
        feedback : ccompress.ErrorFeedback, optional
            The buffer's residuals (in whitened coordinates), remapped where a layer's
            transform changed.

        Returns
        -------
        list of Place
            The treated places.
        """
        if self.collecting():
            self._refresh(comm, flat, places, feedback)
        out = [p for p in places if self.treated.get(p.layer)]
        for p in out:
            self._transform(p.view(flat), self.core.factors[p.layer], forward=True)
        return out

    def unwhiten(self, flat: torch.Tensor, places: List["Place"]) -> None:
        """Maps the rows at ``places`` of a reduced buffer back: H -> H L^T (in place).

        Parameters
        ----------
        flat : torch.Tensor
            The reduced buffer.
        places : list of Place
            What :meth:`whiten` returned.
        """
        for p in places:
            self._transform(p.view(flat), self.core.factors[p.layer], forward=False)

    def _transform(self, view: torch.Tensor, factor: Any, forward: bool) -> None:
        """``view <- view L^-T`` (forward; both sides: ``L_S^-1 view L_A^-T``) or
        ``view L^T`` (``L_S view L_A^T``), in place, in float32 on the view's device. A view
        of more than two dimensions is a stack of row blocks (FSDP2's shards)."""
        hit = self._device_factors.get(id(factor))
        if hit is None or hit[0] is not factor:
            hit = self._device_factors[id(factor)] = (factor, {})
        sides = hit[1].get(view.device)
        if sides is None:
            ws = (factor.right, factor.left) if isinstance(factor, _gift.Kronecker) else (factor,)
            sides = hit[1][view.device] = [_Side.of(w, view.device) for w in ws]
        for block in view.unbind(0) if view.dim() > 2 else (view,):
            m = block.to(torch.float32).contiguous().view(-1, block.shape[-1])
            pairs = list(zip(sides, (m, m.t())))  # input side on the rows, output on columns
            for side, mat in pairs if forward else pairs[::-1]:
                side.rows(mat, forward)
            if m.data_ptr() != block.data_ptr():
                block.copy_(m.view(block.shape))

    def end_step(self) -> None:
        """Ends a step (one gradient reduction of the model): drops a refresh step's
        moments and advances :attr:`step`."""
        if self.collecting():
            self._moments.clear()
        self.step += 1

    def end_step_after_backward(self) -> None:
        """Ends the step when the backward pass now running finishes (FSDP2 reduce-scatters
        once per param group inside it: the pass is the step); outside a backward pass, at
        once."""
        task = torch._C._current_graph_task_id()
        if task < 0:
            self.end_step()
        elif task != self._task:
            self._task = task
            torch.autograd.Variable._execution_engine.queue_callback(self.end_step)

    def _refresh(self, comm: Any, flat: torch.Tensor, places: List["Place"],
                 feedback: Any) -> None:
        """Moments of these layers -> EMA -> factors -> selection -> residual remap."""
        have = [p for p in places if p.layer in self._moments]
        if not have:
            return
        before = {p.layer: self._current(p.layer) for p in places}
        moments = {p.layer: self._moments[p.layer][0].numpy() / max(self._moments[p.layer][1], 1)
                   for p in have}
        outs = {p.layer: self._moments[p.layer][2].numpy() / max(self._moments[p.layer][3], 1)
                for p in have if self.output_side and self._moments[p.layer][3]}
        self.core.observe(comm, moments, outs or None)
        if self.select_layers and self.codec is not None:
            errs = np.array([_gift.roundtrip_errors(self.codec, self.core.factors[p.layer],
                                                    _host(p.view(flat))[:p.rows])
                             for p in have], np.float32).reshape(-1, 2)
            errs = allreduce_many(comm, [errs])[0]
            for p, (plain, white) in zip(have, errs.astype(np.float64)):
                ok = bool(plain > self.min_gain * white)
                self.treated[p.layer] = ok
                self.selection[p.layer] = {"layer": p.layer, "step": self.step,
                                           "err_plain": plain, "err_gift": white,
                                           "gain": plain / max(white, 1e-30), "selected": ok}
        else:
            self.treated.update({p.layer: True for p in have})
        if feedback is not None:
            self._remap(feedback, places, before,
                        {p.layer: self._current(p.layer) for p in places})
        live = {id(f) for f in self.core.factors.values()}
        self._device_factors = {k: v for k, v in self._device_factors.items() if k in live}

    def _remap(self, feedback: Any, places: List["Place"], before: Dict[str, Any],
               after: Dict[str, Any]) -> None:
        """Maps the worker residual of each layer whose transform changed from the old
        coordinates into the new ones (None: natural coordinates), and drops the server
        residual (a chunk owned in the old coordinates)."""
        changed = [p for p in places if before[p.layer] is not after[p.layer]]
        state = feedback.state_dict()
        if not changed or state["worker_residual"] is None:
            return
        res = torch.from_numpy(np.asarray(state["worker_residual"], np.float32).copy())
        for p in changed:
            old, new = before[p.layer], after[p.layer]
            if old is not None:
                self._transform(p.view(res), old, forward=False)
            if new is not None:
                self._transform(p.view(res), new, forward=True)
        state["worker_residual"] = res.numpy()
        if state["server_residual"] is not None:
            state["server_residual"] = np.zeros_like(state["server_residual"])
        feedback.load_state_dict(state)

    def _current(self, layer: str) -> Any:
        """The factor the layer's gradient travels through now (None: natural coordinates)."""
        return self.core.factors.get(layer) if self.treated.get(layer) else None

    # ---- state ----
    def state_dict(self) -> Dict[str, Any]:
        """The state, for checkpoints (the hook's residuals are the hook's:
        :meth:`CompressedAllreduceHook.state_dict`).

        Returns
        -------
        dict
            Step, EMA moments (the same on every rank; factors are rebuilt from them), which
            layers are whitened, and the selection table.
        """
        return {"step": self.step, "treated": dict(self.treated),
                "selection": {k: dict(v) for k, v in self.selection.items()},
                "core": self.core.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` output (the same layers must be hooked).

        Parameters
        ----------
        state : mapping
            What :meth:`state_dict` returned.

        Raises
        ------
        InvalidArgument
            Not a GIFT state_dict, or one with layers this GIFT does not hook.
        """
        try:
            core, step = state["core"], int(state["step"])
            treated, selection = dict(state["treated"]), dict(state["selection"])
        except (KeyError, TypeError, ValueError) as e:
            raise _errors.InvalidArgument(f"not a ccompress.torch.GIFT state_dict ({e})") from e
        unknown = sorted(set(core.get("second_moment", {})) - set(self._layer_of.values()))
        if unknown:
            raise _errors.InvalidArgument(f"this state has layers {unknown} that this GIFT "
                                          "does not hook; build it on the same model")
        self.core.load_state_dict(core)
        self.step, self.treated, self.selection = step, treated, selection
        self._moments.clear()

    def memory_bytes(self) -> int:
        """Bytes held by the statistics and factors, for overhead reports.

        Returns
        -------
        int
            Host arrays and their float32 copies on the gradients' devices.
        """
        total = sum(m.nbytes for m in self.core.second_moment.values())
        total += sum(m.nbytes for m in self.core.output_moment.values())
        for f in self.core.factors.values():
            for w in (f.right, f.left) if isinstance(f, _gift.Kronecker) else (f,):
                total += w.q.nbytes + w.dsqrt.nbytes + w.fwd.nbytes + w.back.nbytes
        for _, per_device in self._device_factors.values():
            total += sum(t.nbytes for sides in per_device.values() for s in sides for t in s)
        return int(total)


def _chosen(model: torch.nn.Module, layers: LayerChoice):
    """(name, module) of the hooked layers: nn.Linear, filtered by ``layers``."""
    named = [(n[len("module."):] if n.startswith("module.") else n, m)
             for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    if layers is None:
        return named
    if callable(layers):
        return [(n, m) for n, m in named if layers(n, m)]
    want = set(layers)
    found = {n for n, _ in named}
    if want - found:
        raise _errors.InvalidArgument(f"GIFT layers {sorted(want - found)} are not nn.Linear "
                                      f"modules of the model (it has {sorted(found)})")
    return [(n, m) for n, m in named if n in want]


class Place(NamedTuple):
    """Where one hooked weight's gradient lies in a flat buffer: the view
    ``flat.as_strided(size, stride, offset)`` (offset from the buffer's start), whose last
    dimension is the weight's input dimension. Read as a matrix of rows, its first ``rows``
    rows are the weight's (FSDP2 pads dim 0 with zero rows). The transforms act on each row
    by itself, so any set of whole rows can be whitened alone: a DDP bucket holds the
    weight whole, FSDP2's reduce-scatter input holds it as ``size[0]`` row shards."""

    layer: str
    size: tuple  # of ints (a plain type: NamedTuple annotations are read outside this module)
    stride: tuple  # of ints
    offset: int
    rows: int

    def view(self, flat: torch.Tensor) -> torch.Tensor:
        """The weight's gradient rows in ``flat``.

        Parameters
        ----------
        flat : torch.Tensor
            The buffer, contiguous 1-D.

        Returns
        -------
        torch.Tensor
            ``flat.as_strided(size, stride, offset)``.

        Raises
        ------
        InvalidArgument
            ``flat`` is not a contiguous 1-D tensor.
        """
        if flat.dim() != 1 or not flat.is_contiguous():
            raise _errors.InvalidArgument("GIFT places index a contiguous 1-D buffer")
        return flat.as_strided(self.size, self.stride, flat.storage_offset() + self.offset)


def _host(g: torch.Tensor) -> np.ndarray:
    """A gradient view as a float64 host matrix (rows by its last dimension)."""
    return g.detach().to("cpu", torch.float64).reshape(-1, g.shape[-1]).numpy()


class _Side(NamedTuple):
    """One :class:`ccompress.compressors.gift.Whitening` factor as float32 tensors on one
    device: the rows of a matrix go G -> G L^-T = (G / d) M^-1 and back H -> H L^T = (H M) d, with
    M^-1 = I + Q diag(fwd) Q^T and M = I + Q diag(back) Q^T (the module docstring of
    :mod:`ccompress.compressors.gift`)."""

    dsqrt: torch.Tensor
    q: torch.Tensor
    fwd: torch.Tensor
    back: torch.Tensor

    @classmethod
    def of(cls, w: Any, device: torch.device) -> "_Side":
        return cls(*(torch.tensor(a, dtype=torch.float32, device=device)
                     for a in (w.dsqrt, w.q, w.fwd, w.back)))

    def rows(self, m: torch.Tensor, forward: bool) -> None:
        """Transforms the rows of the float32 matrix ``m`` in place (``m`` may be a
        transposed view: then its columns, the output side's)."""
        if forward:
            m.div_(self.dsqrt)
            m.addmm_(torch.mm(m, self.q).mul_(self.fwd), self.q.t())
        else:
            m.addmm_(torch.mm(m, self.q).mul_(self.back), self.q.t())
            m.mul_(self.dsqrt)
