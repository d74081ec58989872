"""Run under torchrun (tests/pytorch/test_torchrun.py launches it on 2 and 4 ranks): the
``ccompress`` backend's all-to-all, on groups made with ``BackendOptions(all_to_all=CODEC)``.

- all_to_all_single with uneven splits (an empty piece among them; a rank that sends
  nothing) and rows of 3 elements, and with equal pieces; the list form all_to_all: every piece received is bit for bit the
  sender's ``codec.roundtrip`` of it, and within the codec's bound of fp64
  (helpers.alltoall_checks.check_received).
- An int64 all-to-all on the same group: delegated exactly ("dtype"), the exact result.
- stats(): calls, compressed, delegated by reason, bytes sent against the bytes an exact
  all-to-all sends (about a quarter at fp8 for float32).
- Autograd through torch.distributed.nn.functional.all_to_all_single: the backward
  all-to-all runs on the same group with its codec (the gradient received is the codec's
  roundtrip of what the peers sent back).
- Dispatch on an fp8 group and combine on an exact one: the round trip gives back the
  dispatch codec's roundtrip of every piece, bit for bit; the exact group delegates.
- A codec that differs between ranks: new_group raises MismatchError on every rank, fast.
Prints "OK <rank>".
"""
import os
import sys
import time
import warnings
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnnf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import ccompress as cc  # noqa: E402
import ccompress.torch as cct  # noqa: E402
from helpers.alltoall_checks import check_received, inputs, piece, split_table  # noqa: E402
from helpers.torch_backend.common import final_barrier  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning,  # torch 2.13 deprecates it
                        message="torch.distributed.nn.functional.all_to_all_single")
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)
dist.init_process_group("gloo")
ROW = (3,)


def group(codec, **kw):
    return dist.new_group(backend="ccompress", pg_options=cct.BackendOptions(all_to_all=codec,
                                                                             **kw))


def exchange(g, table, xs, row_shape=ROW):
    """all_to_all_single of this rank's input (xs[rank]) with the splits of ``table``."""
    x = torch.from_numpy(xs[rank])
    out = torch.empty((int(table[:, rank].sum()),) + row_shape, dtype=x.dtype)
    dist.all_to_all_single(out, x, [int(s) for s in table[:, rank]],
                           [int(s) for s in table[rank]], group=g)
    return out


rng = np.random.default_rng(11)
for codec in ("fp8_e4m3:g128", "mxfp8", "nvfp4"):
    g = group(codec)
    pg = cct.compressed_group(g)
    # uneven splits, an empty piece among them
    table = split_table(rng, size, 40)
    xs = inputs(1, table, ROW)
    check_received(exchange(g, table, xs).numpy(), xs, table, codec, rank)
    # equal pieces, no splits passed (min_numel applies: these are above it)
    even = np.full((size, size), 800)  # 2400 elements a piece: above min_numel
    xs = inputs(2, even, ROW)
    out = torch.empty_like(torch.from_numpy(xs[rank]))
    dist.all_to_all_single(out, torch.from_numpy(xs[rank]), group=g)
    check_received(out.numpy(), xs, even, codec, rank)
    # the list form: piece j of rank i is inputs[j] of rank i, flattened
    xs = inputs(3, table, ())
    ins = [torch.from_numpy(np.ascontiguousarray(piece(xs[rank], table, rank, j)))
           for j in range(size)]
    outs = [torch.empty(int(table[i][rank])) for i in range(size)]
    dist.all_to_all(outs, ins, group=g)
    check_received(torch.cat(outs).numpy(), xs, table, codec, rank)
    # a rank that sends nothing at all (rank 0) still takes the compressed path with its peers
    quiet = split_table(rng, size, 20, zeros=False)
    quiet[0] = 0
    xs = inputs(4, quiet, ROW)
    check_received(exchange(g, quiet, xs).numpy(), xs, quiet, codec, rank)
    s = pg.stats()["all_to_all"]
    assert s["calls"] == 4 and s["compressed"] == 4, s
    dist.destroy_process_group(g)

# an integer all-to-all on a compressed group is delegated exactly; the stats count both
g = group("fp8_e4m3:g128", min_numel=64)
pg = cct.compressed_group(g)
n = 256 * size
ints = torch.arange(n, dtype=torch.int64) + 1000 * rank
got = torch.empty_like(ints)
dist.all_to_all_single(got, ints, group=g)
want = torch.cat([torch.arange(rank * 256, (rank + 1) * 256) + 1000 * i for i in range(size)])
assert torch.equal(got, want), "the delegated int64 all-to-all is not exact"
small = torch.ones(8 * size)
dist.all_to_all_single(torch.empty_like(small), small, group=g)  # below min_numel: exact
x = torch.randn(4096 * size)
dist.all_to_all_single(torch.empty_like(x), x, group=g)
s = pg.stats()["all_to_all"]
assert s["calls"] == 3 and s["compressed"] == 1, s
assert s["delegated"]["dtype"] == 1 and s["delegated"]["small"] == 1, s
exact = 4 * 4096 * (size - 1)  # every float32 piece but this rank's own
assert s["exact_bytes"] == exact, (s, exact)
assert 0.25 * exact < s["bytes_sent"] <= 0.3 * exact, s  # fp8, a scale per 128, headers
assert s["delegated_exact_bytes"] == 8 * 256 * (size - 1) + 4 * 8 * (size - 1), s
assert pg.stats()["total"]["calls"] == 3

# autograd: the backward all-to-all runs on the same group, with its codec
codec = "fp8_e4m3:g128"
table = split_table(rng, size, 30, zeros=False)
xs, ws = inputs(4, table, ROW), inputs(5, table.T, ROW)
x = torch.from_numpy(xs[rank]).requires_grad_()
y = dnnf.all_to_all_single(torch.empty((int(table[:, rank].sum()),) + ROW), x,
                           [int(s) for s in table[:, rank]], [int(s) for s in table[rank]],
                           group=pg)
check_received(y.detach().numpy(), xs, table, codec, rank)
(y * torch.from_numpy(ws[rank])).sum().backward()
check_received(x.grad.numpy(), ws, table.T, codec, rank)  # what the peers sent back
s = pg.stats()["all_to_all"]
assert s["calls"] == 5 and s["compressed"] == 3, s
dist.destroy_process_group(g)

# dispatch compressed, combine exact: a group per direction
dispatch, combine = group("fp8_e4m3:g128"), group("none")
c = cc.Codec.parse("fp8_e4m3:g128")
table = split_table(rng, size, 50)
xs = inputs(6, table, ROW)
y = exchange(dispatch, table, xs)
back = exchange(combine, table.T, [None] * rank + [y.numpy()] + [None] * (size - rank - 1))
want = np.concatenate([c.roundtrip(np.ascontiguousarray(piece(xs[rank], table, rank, j)))
                       for j in range(size)])
assert np.array_equal(back.numpy().view(np.uint32), want.view(np.uint32)), \
    "fp8 dispatch and exact combine do not give back the dispatch codec's roundtrip"
sd, sc = (cct.compressed_group(q).stats()["all_to_all"] for q in (dispatch, combine))
assert sd["compressed"] == 1 and sc["compressed"] == 0, (sd, sc)
assert sc["delegated"]["codec none"] == 1 and sc["bytes_sent"] == 0, sc
dist.destroy_process_group(dispatch)
dist.destroy_process_group(combine)

# a codec that differs between ranks: every rank raises, none hangs
t0 = time.monotonic()
try:
    dist.new_group(backend="ccompress", timeout=timedelta(seconds=600),
                   pg_options=cct.BackendOptions(all_to_all="mxfp8" if rank else "fp8_e4m3"))
except cc.MismatchError as e:
    assert "all_to_all" in str(e) and "CCOMPRESS_ALLTOALL_CODEC" in str(e), str(e)
    assert time.monotonic() - t0 < 60
else:
    raise AssertionError("a codec that differs between ranks made the group")
final_barrier()
print(f"OK {rank}", flush=True)
