"""GIFT on FSDP2's reduce-scatters: what :meth:`CompressedProcessGroup.use_gift` installs.

FSDP2 (``fully_shard``) shards each parameter along dim 0 and reduce-scatters a param
group's gradients from one flat buffer: per rank chunk, the padded dim-0 shards of the
group's parameters back to back in the group's order. Input-side whitening G -> G L^-T acts
on each row by itself, so every rank whitens all rows of its own gradient there (the rank's
weight, cut into row shards), the reduce-scatter sums the whitened rows, and each rank maps
its output shard, the rows FSDP keeps, back with L^T. A custom ``ReduceScatter`` of each
``fully_shard`` module whose param group holds hooked weights knows those offsets (the
param group's ``fsdp_params``); it runs the backend's own reduce-scatter (codec, error
feedback) with the whitening in between. Output-side whitening (L_S^-1 G) mixes rows, which
no rank holds together here: it is refused.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from .._internal import errors as _errors
from ._options import auto_candidate
from ._policy import agree
from .gift import GIFT, SETTINGS, Place, settings as _settings


def settings(pg: Any, gift: GIFT) -> Dict[str, Any]:
    """``gift``'s settings on this rank (:func:`ccompress.torch.gift.settings`) with the
    codec :func:`install` binds its selection to, the group's reduce_scatter codec."""
    if not isinstance(gift, GIFT):
        raise _errors.InvalidArgument(f"use_gift needs a ccompress.torch.GIFT, got "
                                      f"{type(gift).__name__}")
    if auto_candidate(pg.options.reduce_scatter) is not None:
        raise _errors.Unsupported(
            f"use_gift needs a fixed reduce_scatter codec, the one GIFT's selection measures; "
            f"this group's is {pg.options.reduce_scatter!r} (chosen at the first call). Name "
            "the codec (CCOMPRESS_CODEC or BackendOptions(reduce_scatter=...))")
    return _settings(gift, pg.options.reduce_scatter)


def use(pg: Any, gift: GIFT) -> None:
    """``pg.use_gift(gift)`` (``CompressedProcessGroup.use_gift`` says what it does): every
    rank's :func:`settings` compared through the group's store, then :func:`install`."""
    if pg.gift is not None:
        raise _errors.InvalidArgument("this group uses a GIFT already (one per group)")
    pg._gift_calls += 1  # every call compares under keys of its own
    try:
        mine: Any = settings(pg, gift)
    except _errors.CCompressError as e:
        mine = e
    agree(pg._store, f"{pg._prefix}ccompress/gift/{pg._gift_calls}", pg.rank(), pg.size(),
          pg._timeout, mine, SETTINGS, what="GIFT settings", absent="did not call use_gift",
          needed="every rank of the group must call use_gift, with the same GIFT",
          fix="Build the same GIFT(...) on every rank")
    install(pg, gift)
    pg.gift = gift


def install(pg: Any, gift: GIFT) -> int:
    """Sets a whitening reduce-scatter on every ``fully_shard`` module of ``gift.model``
    whose param group holds a hooked weight; returns how many. Raises, alike on every rank
    (the checks read only the model's structure), where that cannot be done soundly.
    ``gift`` is a GIFT: :func:`settings`, which use_gift calls first, checks that."""
    if gift.output_side:
        raise _errors.Unsupported(
            "GIFT with output_side=True whitens L_S^-1 G, which mixes the rows that FSDP2 "
            "shards between ranks; on FSDP2 use output_side=False (the DDP hook "
            "ddp_comm_hook(gift=...) supports both sides)")
    from torch.distributed.fsdp import FSDPModule

    found: List[Tuple[Any, Any, str]] = []
    covered = set()
    for name, mod in gift.model.named_modules():
        if not isinstance(mod, FSDPModule):
            continue
        groups = mod._get_fsdp_state()._fsdp_param_groups
        hooked = [fp for g in groups for fp in g.fsdp_params if _layer(gift, fp) is not None]
        if not hooked:
            continue
        where = name or "the root module"
        if len(groups) != 1:
            raise _errors.Unsupported(f"fully_shard module {where} has {len(groups)} param "
                                      "groups (per-parameter meshes); GIFT needs one")
        group = groups[0]
        if group._reduce_scatter_process_group is not pg or type(group.mesh_info).__name__ \
                != "FSDPMeshInfo":
            raise _errors.InvalidArgument(
                f"fully_shard module {where} reduce-scatters over another process group (or "
                "a 2-D HSDP mesh) than the ccompress group use_gift was called on; call it "
                "on that module's group (1-D mesh)")
        for fp in hooked:
            if fp.fsdp_placement.dim != 0 or len(fp._orig_size) != 2:
                raise _errors.Unsupported(
                    f"GIFT layer {_layer(gift, fp)} is sharded on dim "
                    f"{fp.fsdp_placement.dim}; GIFT on FSDP2 needs dim-0 shards of 2-D weights")
            covered.add(_layer(gift, fp))
        found.append((mod, group, where))
    missing = sorted(set(gift.layers) - covered)
    if not found or missing:
        raise _errors.InvalidArgument(
            f"GIFT layers {missing} are in no fully_shard module of this model: the ccompress "
            "backend applies GIFT to FSDP2's reduce-scatters only, where it knows each "
            "parameter's rows. Call fully_shard first; for DDP pass gift= to "
            "ccompress.torch.ddp_comm_hook instead; or choose GIFT(layers=...)")
    gift.attach(pg.options.reduce_scatter)  # the codec its selection measures
    comm_class = _comm_class()
    for mod, group, where in found:
        mod.set_custom_reduce_scatter(comm_class(pg, gift, group, where))
    return len(found)


def _layer(gift: GIFT, fp: Any) -> Optional[str]:
    """The GIFT layer whose weight the FSDPParam ``fp`` is, or None."""
    info = fp._module_info
    return gift._module_of.get(id(info.module)) if info.param_name == "weight" else None


def _comm_class() -> type:
    """The ReduceScatter subclass (FSDP2's interface, imported only when FSDP2 is used)."""
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

    class GiftReduceScatter(ReduceScatter):
        """FSDP2's reduce-scatter of one param group through GIFT (module docstring)."""

        def __init__(self, pg: Any, gift: GIFT, group: Any, where: str) -> None:
            self.pg, self.gift, self.group, self.where = pg, gift, group, where

        def allocate(self, size: Any, *, dtype: torch.dtype,
                     device: torch.device) -> torch.Tensor:
            return torch.empty(*size, dtype=dtype, device=device)

        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                     group: Any, op: Any, async_op: bool = False) -> Optional[dist.Work]:
            if group is not self.pg:
                raise _errors.MismatchError(f"fully_shard module {self.where} reduce-scatters "
                                            "over another group than the one GIFT serves")
            before, after = self.places(input_tensor.numel())
            treated: List[Place] = []

            def whiten(ef: Any) -> None:
                treated.extend(self.gift.whiten(self.pg.communicator(), input_tensor,
                                                before, ef))

            opts = dist.ReduceScatterOptions()
            opts.reduceOp = op
            self.pg._reduce_scatter(output_tensor, input_tensor, opts, whiten).wait()
            names = {p.layer for p in treated}
            self.gift.unwhiten(output_tensor, [p for p in after if p.layer in names])
            self.gift.end_step_after_backward()
            return None

        def places(self, numel: int) -> Tuple[List[Place], List[Place]]:
            """The hooked weights' row shards in the reduce-scatter's input (all ranks'
            chunks: shape (ranks, shard rows, in)) and in this rank's output shard."""
            size = self.pg.size()
            fps = self.group.fsdp_params
            chunk = sum(math.prod(fp.padded_sharded_param_size) for fp in fps)
            if chunk * size != numel:
                raise _errors.Unsupported(
                    f"fully_shard module {self.where} reduce-scatters {numel} elements, its "
                    f"parameters hold {chunk * size}: some had no gradient this step. GIFT on "
                    "FSDP2 needs a gradient for every parameter of a hooked module's group")
            before, after, at = [], [], 0
            for fp in fps:
                layer = _layer(self.gift, fp)
                if layer is not None:
                    rows, cols = fp.padded_sharded_param_size
                    before.append(Place(layer, (size, rows, cols), (chunk, cols, 1), at,
                                        fp._orig_size[0]))
                    mine = fp.sharded_size[0]
                    if mine:
                        after.append(Place(layer, (mine, cols), (cols, 1), at, mine))
                at += math.prod(fp.padded_sharded_param_size)
            return before, after

    return GiftReduceScatter
