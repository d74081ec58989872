"""Megatron-style tensor parallelism with compressed all-reduces.

A column-parallel linear holds a slice of the output features, a row-parallel linear the
matching slice of its input features; chained (attention QKV -> out projection, MLP up ->
down), the pair needs one all-reduce in forward, of the row-parallel layer's partial
outputs (:func:`tp_all_reduce`), and one in backward, of the column-parallel layer's input
gradients (:func:`tp_copy`). Both go through a ccompress communicator with a codec, so the
activations (and their gradients) cross the wire as e.g. ``taco:g128`` or ``hint8``. Every
rank gets bit-identical sums, so the replicated parts of the model (embeddings, norms,
biases of row-parallel layers) get identical gradients and stay identical.

Every rank of the group must run the same layers on inputs of the same shape, in the same
order (as in any tensor-parallel model).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .._internal.errors import InvalidArgument
from ..communicator import Communicator
from . import _common


def _resolve(group: Any) -> Communicator:
    """A ccompress communicator from ``group``: itself, None (every process of the launch:
    torchrun, mpiexec or one process), or a torch.distributed process group."""
    return _common.resolve(group)


class _SumForward(torch.autograd.Function):
    """Forward: sum over the group. Backward: identity (each rank's partial output had the
    whole output's gradient)."""

    @staticmethod
    def forward(ctx, x, comm, codec, algo):  # noqa: D102
        return _common.allreduce(comm, x, codec=codec, algo=algo, op="sum")

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return grad, None, None, None


class _SumBackward(torch.autograd.Function):
    """Forward: identity. Backward: sum of the input gradients over the group (each rank's
    shard of the next layer contributed part of it)."""

    @staticmethod
    def forward(ctx, x, comm, codec, algo):  # noqa: D102
        ctx.args = (comm, codec, algo)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        comm, codec, algo = ctx.args
        return _common.allreduce(comm, grad, codec=codec, algo=algo, op="sum"), None, None, None


def tp_all_reduce(x: torch.Tensor, codec: Any = "none", group: Any = None,
                  algo: str = "auto") -> torch.Tensor:
    """Sum of ``x`` over the tensor-parallel group, compressed with ``codec``; the gradient
    passes through unchanged (Megatron's reduce-from-model-parallel-region). Every rank gets
    the same bits.

    Parameters
    ----------
    x : torch.Tensor
        This rank's partial result (float32, bfloat16 or float16).
    codec : str or ccompress.Codec, default "none"
        The codec of the sum.
    group : ccompress.Communicator or torch.distributed.ProcessGroup, optional
        The tensor-parallel group: a ccompress Communicator, a torch.distributed process
        group, or None for every process of the launch (torch.distributed's world once
        initialised, under torchrun or mpiexec; a single process alone).
    algo : str, default "auto"
        The ccompress schedule.

    Returns
    -------
    torch.Tensor
        The sum, like ``x``.
    """
    _common.check_tensor(x, "x")
    return _SumForward.apply(x, _resolve(group), codec, algo)


def tp_copy(x: torch.Tensor, codec: Any = "none", group: Any = None,
            algo: str = "auto") -> torch.Tensor:
    """``x`` unchanged in forward; in backward the sum of its gradient over the group,
    compressed with ``codec`` (Megatron's copy-to-model-parallel-region).

    Parameters
    ----------
    x : torch.Tensor
        The replicated input.
    codec : str or ccompress.Codec, default "none"
        The codec of the sum.
    group : ccompress.Communicator or torch.distributed.ProcessGroup, optional
        The tensor-parallel group: a ccompress Communicator, a torch.distributed process
        group, or None for every process of the launch (torch.distributed's world once
        initialised, under torchrun or mpiexec; a single process alone).
    algo : str, default "auto"
        The ccompress schedule.

    Returns
    -------
    torch.Tensor
        ``x`` (a new autograd node).
    """
    _common.check_tensor(x, "x")
    return _SumBackward.apply(x, _resolve(group), codec, algo)


def _split(n: int, ways: int, what: str) -> int:
    if n % ways:
        raise InvalidArgument(f"{what} {n} is not divisible by {ways}; choose sizes that the "
                              "tensor-parallel degree (times parts) divides")
    return n // ways


class ColumnParallelLinear(nn.Module):
    """``y = x W^T + b`` with this rank's slice of the output features (rows of W).

    Its output is sharded: feed it to a :class:`RowParallelLinear` (through an activation
    or attention that works per feature or per head). Backward sums the input gradient over
    the group with ``codec``. ``parts`` > 1 slices each of ``parts`` equal blocks of the
    output features (fused QKV: every rank gets its heads' q, k and v).

    The full layer is initialised like ``nn.Linear`` and then sliced, so every rank must
    draw from the same torch random state (same seed); or use :meth:`from_linear`.

    Parameters
    ----------
    in_features, out_features : int
        The full layer's sizes.
    bias : bool, default True
        Whether it has a bias.
    group, codec, algo
        As for :func:`tp_all_reduce` (the codec of the input gradient's sum).
    parts : int, default 1
        Equal blocks of the output features, each sliced.
    device, dtype : optional
        As for ``nn.Linear``.

    Raises
    ------
    InvalidArgument
        out_features not divisible by parts times the group's size.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 group: Any = None, codec: Any = "none", algo: str = "auto", parts: int = 1,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self._init(nn.Linear(in_features, out_features, bias, device=device, dtype=dtype),
                   _resolve(group), codec, algo, parts)

    def _init(self, full: nn.Linear, comm: Communicator, codec: Any, algo: str, parts: int) -> None:
        self.comm, self.codec, self.algo, self.parts = comm, codec, algo, parts
        self.in_features = full.in_features
        self.out_features = full.out_features
        per = _split(full.out_features, parts * comm.size, "out_features")
        take = lambda t: t.detach().reshape(parts, comm.size, per, *t.shape[1:])[:, comm.rank]  # noqa: E731
        self.weight = nn.Parameter(take(full.weight).reshape(parts * per, -1).clone())
        self.bias = None if full.bias is None else nn.Parameter(take(full.bias).reshape(-1).clone())

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, group: Any = None, codec: Any = "none",
                    algo: str = "auto", parts: int = 1) -> "ColumnParallelLinear":
        """This rank's slice of an existing ``nn.Linear`` (the same on every rank).

        Parameters
        ----------
        linear : torch.nn.Linear
            The full layer.
        group, codec, algo
            As for :func:`tp_all_reduce`.
        parts : int, default 1
            Equal blocks of the output features, each sliced (fused QKV).

        Returns
        -------
        ColumnParallelLinear
            The layer with this rank's rows.

        Raises
        ------
        InvalidArgument
            out_features not divisible by parts times the group's size.
        """
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._init(linear, _resolve(group), codec, algo, parts)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        """The layer applied to a replicated input.

        Parameters
        ----------
        x : torch.Tensor
            The input, the same on every rank.

        Returns
        -------
        torch.Tensor
            This rank's output features.
        """
        return F.linear(tp_copy(x, self.codec, self.comm, self.algo), self.weight, self.bias)

    def extra_repr(self) -> str:
        """The sizes, this rank's share, the group and the codec, for ``repr``.

        Returns
        -------
        str
            The description.
        """
        return (f"in_features={self.in_features}, out_features={self.out_features} "
                f"(this rank {self.weight.shape[0]}), rank={self.comm.rank}/{self.comm.size}, "
                f"codec={self.codec}, parts={self.parts}")


class RowParallelLinear(nn.Module):
    """``y = x W^T + b`` where ``x`` holds this rank's slice of the input features (a
    :class:`ColumnParallelLinear`'s output) and W the matching columns: the partial
    products are summed over the group with ``codec`` (:func:`tp_all_reduce`), then the
    bias, replicated on every rank, is added once.

    Initialised like :class:`ColumnParallelLinear` (same random state on every rank).

    Parameters
    ----------
    in_features, out_features : int
        The full layer's sizes.
    bias : bool, default True
        Whether it has a bias.
    group, codec, algo
        As for :func:`tp_all_reduce` (the codec of the partial products' sum).
    device, dtype : optional
        As for ``nn.Linear``.

    Raises
    ------
    InvalidArgument
        in_features not divisible by the group's size.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 group: Any = None, codec: Any = "none", algo: str = "auto",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self._init(nn.Linear(in_features, out_features, bias, device=device, dtype=dtype),
                   _resolve(group), codec, algo)

    def _init(self, full: nn.Linear, comm: Communicator, codec: Any, algo: str) -> None:
        self.comm, self.codec, self.algo = comm, codec, algo
        self.in_features = full.in_features
        self.out_features = full.out_features
        per = _split(full.in_features, comm.size, "in_features")
        w = full.weight.detach()[:, comm.rank * per:(comm.rank + 1) * per]
        self.weight = nn.Parameter(w.clone())
        self.bias = None if full.bias is None else nn.Parameter(full.bias.detach().clone())

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, group: Any = None, codec: Any = "none",
                    algo: str = "auto") -> "RowParallelLinear":
        """This rank's columns of an existing ``nn.Linear`` (the same on every rank).

        Parameters
        ----------
        linear : torch.nn.Linear
            The full layer.
        group, codec, algo
            As for :func:`tp_all_reduce`.

        Returns
        -------
        RowParallelLinear
            The layer with this rank's columns.

        Raises
        ------
        InvalidArgument
            in_features not divisible by the group's size.
        """
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._init(linear, _resolve(group), codec, algo)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        """The layer applied to this rank's input features.

        Parameters
        ----------
        x : torch.Tensor
            This rank's slice of the input features.

        Returns
        -------
        torch.Tensor
            The full output, the same bits on every rank.
        """
        y = tp_all_reduce(F.linear(x, self.weight), self.codec, self.comm, self.algo)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        """The sizes, this rank's share, the group and the codec, for ``repr``.

        Returns
        -------
        str
            The description.
        """
        return (f"in_features={self.in_features} (this rank {self.weight.shape[1]}), "
                f"out_features={self.out_features}, rank={self.comm.rank}/{self.comm.size}, "
                f"codec={self.codec}")

