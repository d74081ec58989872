"""The JAX primitive behind ccompress.jax's collectives: one primitive for the three kinds,
an ordered effect, its lowering to an XLA FFI custom call, and its JVP and transposes.

**Platforms.** On the CPU the custom call runs ccompress._jax_ffi's handlers; on a GPU
(where ccompress._cuda has its CUDA handlers and jaxlib a CUDA backend) the same target
runs ccompress._cuda's, which take XLA's stream and run the core's device collective on it
with a device communicator (``Communicator.from_nccl``).

The primitive works on flat (1-D) arrays; ccompress.jax reshapes around it. Its
parameters are hashable and the same on every rank: ``kind`` ("allreduce",
"reduce_scatter", "allgather"), ``comm`` (the registry id), ``size`` and ``rank`` (to type
the outputs), ``codec`` (a canonical spec), ``algo`` and ``op`` ("" where the kind has none),
``transpose_codec`` (the codec of the transposed collective) and ``feedback`` (two float32
error-feedback residuals follow the input, and their updates follow the output).

**Ordered effect.** Every call carries :data:`EFFECT`, an ordered effect: JAX threads a
token through the calls of a program (and between programs) in program order, and the
custom call consumes and produces it, so XLA never runs two collectives in another order
than the program's, on any rank.

**Transposes** (for ``jax.grad``): all-reduce's is the identity (divided by the rank
count for ``op="avg"``), as in Megatron's tensor parallelism, where the loss after it is the
same on every rank; reduce-scatter's is an all-gather and all-gather's a reduce-scatter, as
in Megatron's sequence parallelism; each runs with ``transpose_codec``.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import jax
import numpy as np
from jax._src import dispatch, effects
from jax._src.interpreters import ad, mlir
from jax.extend.core import Primitive

from .._internal.errors import Unsupported
from ._comms import ffi_module


class CollectiveEffect(effects.Effect):
    """The ordered effect of a ccompress collective."""

    def __repr__(self) -> str:
        # JAX names it when it refuses a program that spans several devices of one process.
        return ("ccompress.jax collective (one device per process: launch one process per "
                "device)")

    __str__ = __repr__


EFFECT = CollectiveEffect()
for _set in (effects.ordered_effects, effects.lowerable_effects,
             effects.control_flow_allowed_effects, effects.custom_derivatives_allowed_effects,
             effects.remat_allowed_effects):
    _set.add_type(CollectiveEffect)

collective_p = Primitive("ccompress_collective")
collective_p.multiple_results = True
collective_p.def_impl(partial(dispatch.apply_primitive, collective_p))

_TARGETS = {kind: f"ccompress_{kind}" for kind in ("allreduce", "reduce_scatter", "allgather")}
_registered = False
_cuda_registered = False


def cuda_handlers() -> Any:
    """The CUDA handlers of ccompress._cuda (a dict of capsules), or None where jaxlib has no
    CUDA backend or ccompress was built without them (no nvcc, or no jax at build time)."""
    try:
        jax.devices("cuda")
    except (RuntimeError, ValueError):  # no CUDA backend in this jaxlib, or JAX_PLATFORMS leaves it out
        return None
    try:
        from .. import _cuda
    except ImportError:
        return None
    return getattr(_cuda, "JAX_CUDA_HANDLERS", None)


def register_targets() -> None:
    """Registers the CPU handlers of ccompress._jax_ffi with XLA (once), and the CUDA
    handlers of ccompress._cuda where this build has them and jaxlib has a CUDA backend."""
    global _registered, _cuda_registered
    if _registered:
        return
    handlers = ffi_module().CPU_HANDLERS
    for kind, name in _TARGETS.items():
        jax.ffi.register_ffi_target(name, handlers[kind], platform="cpu")
    cuda = cuda_handlers()
    if cuda is not None:
        for kind, name in _TARGETS.items():
            jax.ffi.register_ffi_target(name, cuda[kind], platform="CUDA")
        _cuda_registered = True
    _registered = True


def out_size(kind: str, n: int, size: int) -> int:
    """Elements of the output of ``kind`` over ``n`` input elements and ``size`` ranks (a
    reduce-scatter's ``n`` is a multiple of ``size``)."""
    if kind == "allgather":
        return n * size
    if kind == "reduce_scatter":
        return n // size
    return n


def _abstract_eval(x: Any, *residuals: Any, kind: str, size: int, feedback: bool, **_: Any):
    out = jax.core.ShapedArray((out_size(kind, x.shape[0], size),), x.dtype)
    res = [jax.core.ShapedArray(r.shape, r.dtype) for r in residuals] if feedback else []
    return [out, *res], {EFFECT}


collective_p.def_effectful_abstract_eval(_abstract_eval)


def _lowering(ctx: Any, x: Any, *residuals: Any, kind: str, comm: int, codec: str, algo: str,
              op: str, feedback: bool, **_: Any) -> Sequence[Any]:
    token = ctx.tokens_in.get(EFFECT)
    result_types = [mlir.token_type()] + [mlir.aval_to_ir_type(ctx.module_context, a)
                                          for a in ctx.avals_out]
    operands = [token, x, *residuals]
    n_in = 2 + len(residuals)
    call = mlir.custom_call(
        _TARGETS[kind],
        result_types=result_types,
        operands=operands,
        backend_config={"comm": mlir.ir_attribute(np.int64(comm)),
                         "codec": mlir.ir_attribute(codec), "algo": mlir.ir_attribute(algo),
                         "op": mlir.ir_attribute(op)},
        api_version=4,
        has_side_effect=True,
        operand_layouts=[()] + [(0,)] * (n_in - 1),
        result_layouts=[()] + [(0,)] * (len(result_types) - 1),
        # The residuals are updated in place where XLA can (else it copies them first).
        operand_output_aliases={i: i for i in range(2, n_in)} if feedback else None,
    )
    results = list(call.results)
    ctx.set_tokens_out(mlir.TokenSet({EFFECT: results.pop(0)}))
    return results


def _lowering_cuda(ctx: Any, *args: Any, **params: Any) -> Sequence[Any]:
    if not _cuda_registered:
        raise Unsupported(
            "ccompress.jax on a GPU array: this ccompress build has no CUDA handlers "
            "(ccompress._cuda built with nvcc where jax was installed: CCOMPRESS_CUDA=ON bash "
            "scripts/setup.sh); run the program on the CPU or rebuild")
    return _lowering(ctx, *args, **params)


mlir.register_lowering(collective_p, _lowering, platform="cpu")
mlir.register_lowering(collective_p, _lowering_cuda, platform="cuda")


def _jvp(primals: Sequence[Any], tangents: Sequence[Any], **params: Any):
    """The collective is linear in x: its tangent is the same collective of x's tangent
    (which jax.grad never runs forward: it transposes it). Residuals carry no tangent."""
    outs = collective_p.bind(*primals, **params)
    t = ad.instantiate_zeros(tangents[0])
    t_out = collective_p.bind(t, **dict(params, feedback=False))[0]
    return outs, [t_out] + [ad.Zero.from_primal_value(r) for r in outs[1:]]


ad.primitive_jvps[collective_p] = _jvp


def _transpose(cts: Sequence[Any], x: Any, *residuals: Any, kind: str, size: int, op: str,
               transpose_codec: str, **params: Any):
    ct = cts[0]
    if type(ct) is ad.Zero:
        return [ad.Zero(x.aval)] + [None] * len(residuals)
    params = dict(params, size=size, transpose_codec=transpose_codec, codec=transpose_codec,
                  feedback=False)
    if kind == "allreduce":
        g = ct  # the identity: the loss after it is the same on every rank
    elif kind == "reduce_scatter":
        g = collective_p.bind(ct, kind="allgather", op="", **dict(params, algo=""))[0]
    else:
        g = collective_p.bind(ct, kind="reduce_scatter", op="sum", **dict(params, algo=""))[0]
    if op == "avg":
        g = g / size
    return [g] + [None] * len(residuals)


ad.primitive_transposes[collective_p] = _transpose
