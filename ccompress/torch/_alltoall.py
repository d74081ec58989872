"""The ``ccompress`` backend's all-to-all: torch's two forms (``all_to_all_single``, torch's
``alltoall_base``, and the list form ``all_to_all``) as one ccompress all-to-all whose piece
for each destination is encoded on its own, with the group's ``all_to_all`` codec; exact
through the inner group where the codec is ``"none"`` or the call cannot be compressed
(``stats()`` says why). Error feedback never applies (the pieces change every call).

With splits, and in the list form, ``min_numel`` does not apply: the ranks' sizes differ,
and every rank must take the same path.
"""
from __future__ import annotations

import math
from typing import Any, List

import torch
import torch.distributed as dist

from . import _engagement
from ._runner import writable_flat


def single(pg: Any, output: torch.Tensor, input: torch.Tensor, output_splits: List[int],
           input_splits: List[int], opts: Any = None) -> dist._Work:
    """``all_to_all_single`` on the group ``pg``.

    Parameters
    ----------
    pg : CompressedProcessGroup
        The group.
    output, input : torch.Tensor
        As torch's ``all_to_all_single``: rows of dim 0 go to the ranks in order.
    output_splits, input_splits : list of int
        Rows received from and sent to each rank; empty for equal pieces.
    opts : torch.distributed.AllToAllOptions, optional
        Passed on where the call is delegated.

    Returns
    -------
    torch.distributed.Work
        The compressed call's, or the inner group's where it is delegated.
    """
    runner, size = pg._runner, pg._runner.size
    ins = [int(s) for s in input_splits] if input_splits else None
    outs = [int(s) for s in output_splits] if output_splits else None
    dims, numel = input.dim(), input.numel()
    fits = dims >= 1 and output.dtype == input.dtype
    rows = input.shape[0] if dims else 0
    # Elements of a row (on a rank with no rows too).
    row = numel // rows if rows else math.prod(input.shape[1:])
    own = (ins[runner.rank] if ins and len(ins) == size else rows // size) * row
    exact = _engagement.exact_alltoall_bytes(numel, own, input.element_size())
    codec, why = pg._policy.decide("all_to_all", input, "sum", output, fits, runner,
                                   sized=ins is None and outs is None)
    if why is not None:
        return runner.delegate(lambda: pg._inner.all_to_all_single(
            output, input, output_splits, input_splits, opts or dist.AllToAllOptions()),
            "all_to_all", why, [input], pg.options.all_to_all, exact)
    # Flat, the splits in elements: the same pieces, and an input without rows (a rank that
    # sends nothing) passes as an empty vector.
    y, finish = writable_flat(output)
    kw = dict(out=y, codec=codec, in_splits=None if ins is None else [s * row for s in ins],
              out_splits=None if outs is None else [s * row for s in outs])
    return runner.run("all_to_all", input.detach().contiguous().view(-1), kw, [output],
                      "all_to_all", lambda: pg._policy.label("all_to_all", codec, None),
                      finish, exact, opts)


def listed(pg: Any, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
           opts: Any = None) -> dist._Work:
    """``all_to_all`` (the list form) on the group ``pg``: the inputs, flattened, are one
    all-to-all whose piece for rank ``j`` is ``inputs[j]``, received into a flat buffer and
    copied into ``outputs``. Exact where the codec is ``"none"`` or the tensors differ in
    dtype, device or layout.

    Parameters
    ----------
    pg : CompressedProcessGroup
        The group.
    outputs, inputs : list of torch.Tensor
        One per rank, as torch's ``all_to_all``.
    opts : torch.distributed.AllToAllOptions, optional
        Passed on where the call is delegated.

    Returns
    -------
    torch.distributed.Work
        The compressed call's, or the inner group's where it is delegated.
    """
    n, me = pg._runner.size, pg._runner.rank
    first = inputs[0] if inputs else None
    fits = (len(inputs) == n and len(outputs) == n and all(
        t.dtype == first.dtype and t.device == first.device and t.layout == torch.strided
        for t in list(inputs) + list(outputs)))
    exact = sum(t.numel() * t.element_size() for j, t in enumerate(inputs) if j != me)
    plan = pg._policy.config.codecs["all_to_all"]
    if fits and plan.spec != "none":
        x = torch.cat([t.detach().reshape(-1) for t in inputs])  # a copy: contiguous
        y = torch.empty(sum(t.numel() for t in outputs), dtype=x.dtype, device=x.device)
        codec, why = pg._policy.decide("all_to_all", x, "sum", y, True, pg._runner,
                                       sized=False)
    else:
        codec, why = None, "codec none" if plan.spec == "none" else "shape"
    if why is not None:
        return pg._runner.delegate(lambda: pg._inner.alltoall(
            outputs, inputs, opts or dist.AllToAllOptions()), "all_to_all", why,
            list(inputs), pg.options.all_to_all, exact)
    kw = dict(out=y, codec=codec, in_splits=[t.numel() for t in inputs],
              out_splits=[t.numel() for t in outputs])

    def finish() -> None:
        for o, piece in zip(outputs, torch.split(y, kw["out_splits"])):
            o.detach().copy_(piece.view(o.shape))

    return pg._runner.run("all_to_all", x, kw, list(outputs), "all_to_all",
                          lambda: pg._policy.label("all_to_all", codec, None), finish, exact,
                          opts)
