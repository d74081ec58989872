"""ccompress.torch tensor parallelism on in-process ranks: tp_all_reduce / tp_copy forward
and backward against fp64 references within the codec's bound, and the
ColumnParallelLinear -> RowParallelLinear pair against the unsharded layers."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the ccompress.torch "
                                            "tests need it; ccompress itself does not)")

import ccompress as cc  # noqa: E402
from ccompress.torch import (ColumnParallelLinear, RowParallelLinear, tp_all_reduce,  # noqa: E402
                             tp_copy)
from helpers.torch_helpers import check_reduced, rank_tensor, same_bits  # noqa: E402

CODECS = ["none", "taco:g128", "hint8", "fp8_e4m3:g128"]
N = 4


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tp_all_reduce_forward_backward(codec, dtype):
    shape = (3, 37, 64)  # 7104 elements: not a multiple of the ranks or the scale groups
    grad_out = rank_tensor(99, shape, dtype)  # the same upstream gradient on every rank

    def body(comm):
        x = rank_tensor(comm.rank, shape, dtype).requires_grad_()
        y = tp_all_reduce(x, codec=codec, group=comm)
        y.backward(grad_out)
        return y.detach(), x.grad, comm.last_stats["algo"]

    res = cc.run_inproc(N, body)
    ys = [r[0] for r in res]
    assert same_bits(ys), "ranks got different sums"
    assert ys[0].dtype == dtype and ys[0].shape == shape
    parts = [rank_tensor(r, shape, dtype) for r in range(N)]
    check_reduced(ys[0], parts, codec, res[0][2], what=f"{codec} {dtype}")
    for _, grad, _ in res:  # backward is the identity
        assert torch.equal(grad, grad_out)


@pytest.mark.parametrize("codec", ["none", "hint8"])
def test_tp_copy_sums_gradients(codec):
    shape = (5, 300)

    def body(comm):
        x = rank_tensor(7, shape).requires_grad_()  # replicated input
        y = tp_copy(x, codec=codec, group=comm)
        assert torch.equal(y, x)  # forward is the identity
        y.backward(rank_tensor(comm.rank, shape, seed=3))
        return x.grad, comm.last_stats["algo"]

    res = cc.run_inproc(N, body)
    grads = [r[0] for r in res]
    assert same_bits(grads)
    check_reduced(grads[0], [rank_tensor(r, shape, seed=3) for r in range(N)], codec, res[0][1])


@pytest.mark.parametrize("codec", ["none", "taco:g128", "hint8"])
def test_column_row_pair_matches_unsharded(codec):
    """Row(gelu(Column(x))) on 4 ranks: forward within the all-reduce bound of the ranks'
    partial products, whose fp64 sum is the unsharded layer pair; weight gradients equal
    slices of the unsharded model's; the input gradient within the backward bound."""
    d_in, hidden, d_out = 48, 128, 40
    torch.manual_seed(5)
    full1, full2 = torch.nn.Linear(d_in, hidden), torch.nn.Linear(hidden, d_out)
    x0, g = torch.randn(6, 11, d_in), torch.randn(6, 11, d_out)

    def body(comm):
        col = ColumnParallelLinear.from_linear(full1, group=comm, codec=codec)
        row = RowParallelLinear.from_linear(full2, group=comm, codec=codec)
        x = x0.clone().requires_grad_()
        h = torch.nn.functional.gelu(col(x))
        y = row(h)
        partial = torch.nn.functional.linear(h, row.weight).detach()
        algo_fwd = comm.last_stats["algo"]
        (y * g).sum().backward()
        return dict(y=y.detach(), partial=partial, xg=x.grad, algo_fwd=algo_fwd,
                    algo_bwd=comm.last_stats["algo"], cw=col.weight.grad, cb=col.bias.grad,
                    rw=row.weight.grad, rb=row.bias.grad)

    res = cc.run_inproc(N, body)
    assert same_bits([r["y"] for r in res]) and same_bits([r["xg"] for r in res])
    # Forward: y - bias is the compressed sum of the partial products.
    partials = [r["partial"] for r in res]
    check_reduced(res[0]["y"] - full2.bias.detach(), partials, codec, res[0]["algo_fwd"],
                  what="forward")
    # The partial products add up to the unsharded pair (fp64 reference).
    f1, f2 = copy.deepcopy(full1).double(), copy.deepcopy(full2).double()
    with torch.no_grad():
        ref_y = f2(torch.nn.functional.gelu(f1(x0.double())))
    psum = torch.stack(partials).double().sum(0) + full2.bias.double()
    assert torch.allclose(psum, ref_y, rtol=0, atol=1e-5 * ref_y.abs().max().item())
    # Weight gradients are slices of the unsharded model's (no codec on their path).
    xr = x0.double().requires_grad_()
    (f2(torch.nn.functional.gelu(f1(xr))) * g.double()).sum().backward()
    per = hidden // N
    for r, out in enumerate(res):
        rows = slice(r * per, (r + 1) * per)
        for got, want in ((out["cw"], f1.weight.grad[rows]), (out["cb"], f1.bias.grad[rows]),
                          (out["rw"], f2.weight.grad[:, rows]), (out["rb"], f2.bias.grad)):
            assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-5 * want.abs().max().item())
    # Input gradient: the compressed sum of each rank's x-gradient share.
    shares = [_input_grad_share(x0, full1, full2, g, r) for r in range(N)]
    check_reduced(res[0]["xg"], shares, codec, res[0]["algo_bwd"], what="backward")
    assert torch.allclose(torch.stack(shares).double().sum(0), xr.grad, rtol=0,
                          atol=1e-5 * xr.grad.abs().max().item())


def _input_grad_share(x0, full1, full2, g, r):
    """Rank r's part of dL/dx: the gradient through its own slice of the hidden units."""
    per = full1.out_features // N
    rows = slice(r * per, (r + 1) * per)
    x = x0.clone().requires_grad_()
    pre = torch.nn.functional.linear(x, full1.weight[rows].detach(), full1.bias[rows].detach())
    y = torch.nn.functional.linear(torch.nn.functional.gelu(pre), full2.weight[:, rows].detach())
    (y * g).sum().backward()
    return x.grad


def test_fused_parts_and_errors():
    torch.manual_seed(0)
    qkv = torch.nn.Linear(16, 3 * 32)

    def body(comm):
        col = ColumnParallelLinear.from_linear(qkv, group=comm, parts=3)
        w = qkv.weight.detach().reshape(3, 32, 16)[:, comm.rank * 8:(comm.rank + 1) * 8]
        assert torch.equal(col.weight, w.reshape(24, 16))
        with pytest.raises(cc.InvalidArgument, match="not divisible"):
            ColumnParallelLinear(16, 30, group=comm)
        with pytest.raises(cc.InvalidArgument, match="not divisible"):
            RowParallelLinear(18, 8, group=comm)
        with pytest.raises(cc.InvalidArgument, match="float64"):
            tp_all_reduce(torch.zeros(4, dtype=torch.float64), group=comm)
        with pytest.raises(cc.InvalidArgument, match="torch.Tensor"):
            tp_all_reduce(np.zeros(4, np.float32), group=comm)
        return True

    assert cc.run_inproc(N, body) == [True] * N
