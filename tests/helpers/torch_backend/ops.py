"""torchrun worker: every op on the ccompress backend. Delegated ops (other reductions,
integer and float64 tensors, small tensors, broadcast, barrier, all_to_all, send/recv,
lists) are bit-identical to a gloo group's; all_reduce, reduce_scatter_tensor and
all_gather_into_tensor are compressed, within their bound of the fp64 result and
bit-identical on every rank; Work objects wait and give futures."""
import sys

import numpy as np
import torch
import torch.distributed as dist

from helpers.torch_backend.common import gather, ok, rank_input, same_on_all_ranks, start
import ccompress as cc
from ccompress.bounds import allreduce_error_bound
from ccompress.torch import BackendOptions, compressed_group
from helpers.torch_helpers import check_reduced, to_numpy

CODEC = sys.argv[1] if len(sys.argv) > 1 else "fp8_e4m3:g128"
MIN = 1024
opts = BackendOptions(all_reduce=CODEC, reduce_scatter=CODEC, all_gather="bf16",
                      algo="two_shot", min_numel=MIN)
rank, size, ref = start(pg_options=opts)
pg = compressed_group()
assert pg.name() == "ccompress" and dist.get_backend() == "ccompress"
W = dist.group.WORLD


def exact_as_gloo(fn, *tensors):
    """fn(tensors, group) on the backend and on gloo gives the same bits."""
    mine = [t.clone() for t in tensors]
    theirs = [t.clone() for t in tensors]
    sent = pg.bytes_sent
    fn(mine, W)
    fn(theirs, ref)
    assert pg.bytes_sent == sent, "a delegated op went through ccompress"
    for a, b in zip(mine, theirs):
        assert a.dtype == b.dtype and torch.equal(a.view(-1).view(torch.uint8),
                                                  b.view(-1).view(torch.uint8)), fn


big = rank_input(rank, 5000)
for op in (dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT):
    exact_as_gloo(lambda ts, g: dist.all_reduce(ts[0], op=op, group=g), big)
exact_as_gloo(lambda ts, g: dist.all_reduce(ts[0], group=g), (big * 1000).to(torch.int64))
exact_as_gloo(lambda ts, g: dist.all_reduce(ts[0], group=g), big.double())
exact_as_gloo(lambda ts, g: dist.all_reduce(ts[0], group=g), big[:MIN - 1].clone())
exact_as_gloo(lambda ts, g: dist.all_reduce(ts[0], group=g), torch.tensor(float(rank)))
exact_as_gloo(lambda ts, g: dist.broadcast(ts[0], src=size - 1, group=g), big)
exact_as_gloo(lambda ts, g: dist.all_to_all_single(ts[1], ts[0], group=g),
              rank_input(rank, 40 * size), torch.zeros(40 * size))
exact_as_gloo(lambda ts, g: dist.all_gather(list(ts[1:]), ts[0], group=g),
              big, *[torch.zeros(5000) for _ in range(size)])
exact_as_gloo(lambda ts, g: dist.reduce_scatter_tensor(ts[1], ts[0], group=g),
              (rank_input(rank, 2000 * size) * 100).to(torch.int32),
              torch.zeros(2000, dtype=torch.int32))
exact_as_gloo(lambda ts, g: dist.reduce(ts[0], dst=0, group=g), big)
exact_as_gloo(lambda ts, g: dist.gather(ts[0], list(ts[1:]) if rank == 0 else None, dst=0,
                                        group=g), big, *[torch.zeros(5000) for _ in range(size)])
dist.barrier()
if rank == 0:
    dist.send(big, 1)
    dist.send(big * 2, 1, group=ref)
elif rank == 1:
    a, b = torch.zeros(5000), torch.zeros(5000)
    dist.recv(a, 0)
    dist.recv(b, 0, group=ref)
    assert torch.equal(a, rank_input(0, 5000)) and torch.equal(b, a * 2)
ok("delegated")

# The compressed collectives: bound of the fp64 result, the same bits on every rank.
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg")):
        x = rank_input(rank, 5000, dtype, seed=3)
        y = x.clone()
        sent = pg.bytes_sent
        dist.all_reduce(y, op=op)
        assert pg.bytes_sent > sent, "the all-reduce was not compressed"
        parts = gather(x, ref)
        check_reduced(y, parts, CODEC, "two_shot", op=name, what=f"all_reduce {dtype} {name}")
        assert same_on_all_ranks([y], ref), f"all_reduce {dtype} {name}: ranks differ"

        n = 1024 * size
        x = rank_input(rank, n, dtype, seed=4)
        out = torch.empty(n // size, dtype=dtype)
        dist.reduce_scatter_tensor(out, x, op=op)
        stack = np.stack([to_numpy(p).astype(np.float64) for p in gather(x, ref)])
        lo, hi = cc.chunk_range(n, size, rank)
        exact = stack.sum(axis=0)[lo:hi] / (size if name == "avg" else 1)
        bound = allreduce_error_bound(stack, CODEC, "reduce_scatter", op=name,
                                      dtype=str(dtype).split(".")[1])[lo:hi]
        err = np.abs(to_numpy(out).astype(np.float64) - exact)
        assert np.all(err <= bound), f"reduce_scatter {dtype} {name}: {err.max()} > bound"

    x = rank_input(rank, 3000, dtype, seed=5)
    out = torch.empty(3000 * size, dtype=dtype)
    dist.all_gather_into_tensor(out, x)
    bf16 = cc.Codec.parse("bf16")
    for r, part in enumerate(gather(x, ref)):
        want = bf16.roundtrip(to_numpy(part))
        assert np.array_equal(to_numpy(out[r * 3000:(r + 1) * 3000]).view(np.uint8),
                              np.asarray(want).view(np.uint8)), f"all_gather part {r}"
    assert same_on_all_ranks([out], ref)
ok("compressed")

# Work objects: async wait, futures with the output.
x = rank_input(rank, 5000)
work = dist.all_reduce(x, async_op=True)
assert work.wait() is True
fut = dist.all_reduce(x, async_op=True).get_future()
res = fut.wait()
assert isinstance(res, list) and res[0] is x, res
out = torch.empty(5000 * size)
w = dist.all_gather_into_tensor(out, x, async_op=True)
w.wait()
assert same_on_all_ranks([x, out], ref)
ok("work")
dist.destroy_process_group()
