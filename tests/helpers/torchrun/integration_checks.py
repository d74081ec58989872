"""torchrun worker of tests/test_torch_integration.py; argv[1] names the check.

inplace   in-place reduce_scatter_tensor (output = this rank's slice of the input, as ZeRO
          calls it) and all_gather_into_tensor (input = this rank's chunk of the output, as
          FSDP2 calls it) on the ccompress backend: codec none bit-identical to gloo's
          in-place result, fp8/bf16 within the codec's bound of it; a strided view
          compressed through a copy and written back; the group's counters.
mismatch  rank 1 sets CCOMPRESS_CODEC=hint8, rank 0 leaves it unset: init_process_group
          raises MismatchError on both, naming the option and the ranks.
compile   torch.compile(DDP(model)) on the backend against DDP(model) uncompiled: the same
          losses and parameters, bit for bit (codec from the environment).
compile_fsdp  torch.compile of a model sharded with fully_shard (FSDP2), hint8 reduce-scatter
          and bf16 all-gather, against the same model uncompiled: the same losses and
          parameters, bit for bit; every reduce-scatter and all-gather compressed.
gift_mismatch  use_gift on FSDP2 (fully_shard) with GIFT settings that differ between the
          ranks: MismatchError on every rank naming each setting and its ranks, nothing
          installed (a rank passing no GIFT: its own error, MismatchError on the other);
          then the same settings install and train; a rank that never calls
          use_gift makes the other raise after the group's timeout, naming it.
report    CCOMPRESS_REPORT=1: the first-collective log line and the summary at
          destroy_process_group (the test reads stderr).
hook_trace  CCOMPRESS_TRACE with two DDP comm hooks (hint8 with error feedback on
          ccompress's worker thread; fp8 with bf16 for vectors, in the calling thread): a
          span per bucket, named by the hook's codecs, whose bytes add up to the hook's
          stats().
"""
import os
import sys
import time
from datetime import timedelta


import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

CHECK = sys.argv[1]
RANK = int(os.environ["RANK"])

if CHECK == "mismatch":
    import ccompress.torch  # noqa: F401
    from ccompress import MismatchError

    if RANK == 1:
        os.environ["CCOMPRESS_CODEC"] = "hint8"
    else:
        os.environ.pop("CCOMPRESS_CODEC", None)
    t0 = time.monotonic()
    try:
        dist.init_process_group("ccompress", timeout=timedelta(seconds=600))
    except MismatchError as e:
        took = time.monotonic() - t0
        msg = str(e)
        assert "CCOMPRESS_CODEC" in msg and "[0]" in msg and "[1]" in msg, msg
        assert took < 60, took
        print(f"RAISED rank {RANK} in {took:.1f}s: {msg}", flush=True)
        print(f"OK mismatch {RANK}", flush=True)
        sys.exit(0)
    raise AssertionError("options that differ between ranks made a group")

from helpers.torch_backend.common import gather, rank_input, same_on_all_ranks, start  # noqa: E402
import ccompress as cc  # noqa: E402
from ccompress.bounds import allreduce_error_bound  # noqa: E402
from ccompress.torch import BackendOptions, compressed_group  # noqa: E402
from helpers.torch_helpers import check_reduced, to_numpy  # noqa: E402


def tiny_mlp():
    """The compile checks' model, the same on every rank (seed 0)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))


def train_3_steps(net, params, rank):
    """Three SGD steps of ``net`` on this rank's own data; the losses."""
    opt = torch.optim.SGD(params, lr=0.1)
    g = torch.Generator().manual_seed(7 + rank)
    run = []
    for step in range(3):
        xb, yb = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        loss = torch.nn.functional.mse_loss(net(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.append(float(loss))
    return run


def ok(name):
    print(f"OK {name} {dist.get_rank()}", flush=True)


if CHECK == "inplace":
    CODEC = "fp8_e4m3:g128"
    rank, size, ref = start(pg_options=BackendOptions(
        all_reduce=CODEC, reduce_scatter=CODEC, all_gather="bf16", algo="two_shot",
        min_numel=256))
    exact = dist.new_group(backend="ccompress", pg_options=BackendOptions(
        all_reduce="none", reduce_scatter="none", all_gather="none"))
    pg = compressed_group()
    n = 1000

    # reduce_scatter_tensor, output = own slice of the input
    x = rank_input(rank, n * size, seed=1)
    parts = gather(x, ref)
    for group in (None, exact, ref):
        buf = x.clone()
        out = buf[rank * n:(rank + 1) * n]
        dist.reduce_scatter_tensor(out, buf, group=group)
        if group is ref:
            gloo_rs = out.clone()
        elif group is exact:
            exact_rs = out.clone()
        else:
            comp_rs = out.clone()
    assert torch.equal(exact_rs, gloo_rs), "in-place reduce-scatter, codec none, differs from gloo"
    stack = np.stack([to_numpy(p).astype(np.float64) for p in parts])
    bound = allreduce_error_bound(stack, CODEC, "reduce_scatter")[rank * n:(rank + 1) * n]
    err = np.abs(to_numpy(comp_rs).astype(np.float64) - to_numpy(gloo_rs).astype(np.float64))
    # gloo's float32 sum is itself within fp32 rounding of the fp64 sum
    assert np.all(err <= bound + 1e-5 * np.abs(stack).sum(axis=0)[rank * n:(rank + 1) * n]), \
        err.max()
    assert not torch.equal(comp_rs, gloo_rs), "the fp8 reduce-scatter was not compressed"
    ok("inplace reduce_scatter")

    # all_gather_into_tensor, input = own chunk of the output
    x = rank_input(rank, n, seed=2)
    results = []
    for group in (None, exact, ref):
        buf = torch.zeros(n * size)
        buf[rank * n:(rank + 1) * n] = x
        dist.all_gather_into_tensor(buf, buf[rank * n:(rank + 1) * n], group=group)
        results.append(buf)
    comp_ag, exact_ag, gloo_ag = results
    assert torch.equal(exact_ag, gloo_ag)
    bf16 = gloo_ag.to(torch.bfloat16).to(torch.float32)
    assert torch.equal(comp_ag, bf16), "the bf16 in-place all-gather is not bf16(gloo's)"
    assert same_on_all_ranks([comp_ag], ref)
    ok("inplace all_gather")

    # a strided view: compressed through a contiguous copy, written back in place
    base = rank_input(rank, 2 * 4096, seed=3).view(4096, 2)
    keep = base[:, 1].clone()
    view = base[:, 0]
    assert not view.is_contiguous()
    before = pg.stats()["all_reduce"]["compressed"]
    parts = gather(view.contiguous(), ref)
    dist.all_reduce(view)
    assert pg.stats()["all_reduce"]["compressed"] == before + 1, pg.stats()
    check_reduced(base[:, 0].contiguous(), parts, CODEC, "two_shot", what="strided all_reduce")
    assert torch.equal(base[:, 1], keep), "the write-back touched the other column"
    ok("strided")

    # the counters: reasons and bytes
    s0 = pg.stats()
    dist.all_reduce(torch.ones(10))                        # small
    dist.all_reduce(torch.ones(5000, dtype=torch.float64))  # dtype
    dist.all_reduce(torch.ones(5000), op=dist.ReduceOp.MAX)  # op
    y = torch.ones(5000)
    dist.all_reduce(y)                                     # compressed
    s = pg.stats()
    ar = s["all_reduce"]
    for reason in ("small", "dtype", "op"):
        assert ar["delegated"][reason] == s0["all_reduce"]["delegated"][reason] + 1, s
    assert ar["compressed"] == s0["all_reduce"]["compressed"] + 1
    assert s["reduce_scatter"]["compressed"] == 1 and s["all_gather"]["compressed"] == 1, s
    assert 0 < ar["bytes_sent"] < ar["exact_bytes"], ar
    assert s["total"]["bytes_sent"] == pg.bytes_sent, (s["total"], pg.bytes_sent)
    assert compressed_group(exact).stats()["all_reduce"]["compressed"] == 0
    assert compressed_group(exact).stats()["reduce_scatter"]["delegated"]["codec none"] == 1
    ok("stats")

    # the DDP hook's counters
    from ccompress.torch import ddp_comm_hook

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=ref)
    hook = ddp_comm_hook(codec="hint8")
    ddp.register_comm_hook(state=None, hook=hook)
    for _ in range(2):
        ddp(torch.randn(4, 64)).sum().backward()
    hs = hook.stats()
    assert hs["calls"] == hs["compressed"] == 2 and 0 < hs["bytes_sent"] < hs["exact_bytes"], hs
    ok("hook stats")
    dist.destroy_process_group()

elif CHECK == "compile":
    rank, size, ref = start()
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 64
    losses, finals = [], []
    for compiled in (False, True):
        ddp = torch.nn.parallel.DistributedDataParallel(tiny_mlp())
        net = torch.compile(ddp) if compiled else ddp
        losses.append(train_3_steps(net, ddp.parameters(), rank))
        finals.append([p.detach().clone() for p in ddp.parameters()])
    assert losses[0] == losses[1], losses
    assert all(torch.equal(a, b) for a, b in zip(*finals))
    assert same_on_all_ranks(finals[1], ref)
    if rank == 0:
        print("losses", losses[1], "compressed calls",
              compressed_group().stats()["all_reduce"]["compressed"], flush=True)
    ok("compile")
    dist.destroy_process_group()

elif CHECK == "compile_fsdp":
    import torch._dynamo
    import torch._inductor.config
    from torch._dynamo.utils import counters
    from torch.distributed.fsdp import fully_shard

    # In-process compilation: a pool of compile workers costs more than it saves on a tiny
    # model (and on a CI machine's few cores).
    torch._inductor.config.compile_threads = 1
    rank, size, ref = start(pg_options=BackendOptions(
        all_reduce="hint8", reduce_scatter="hint8", all_gather="bf16", min_numel=128))
    pg = compressed_group()
    losses, finals, calls = [], [], []
    for compiled in (False, True):
        model = tiny_mlp()
        for layer in (model[0], model[2]):
            fully_shard(layer)
        fully_shard(model)
        net = torch.compile(model) if compiled else model  # compiled after fully_shard
        before = pg.stats()
        losses.append(train_3_steps(net, model.parameters(), rank))
        after = pg.stats()
        finals.append([p.full_tensor().detach().clone() for p in model.parameters()])
        calls.append({op: (after[op]["calls"] - before[op]["calls"],
                           after[op]["compressed"] - before[op]["compressed"])
                      for op in ("reduce_scatter", "all_gather")})
    assert counters["frames"]["ok"] >= 1, dict(counters["frames"])  # dynamo compiled
    # 2 fully_shard modules (the root holds no parameter): a reduce-scatter of each per step,
    # an all-gather of each in the forward and again in the backward; all compressed
    assert calls[0] == calls[1] == {"reduce_scatter": (6, 6), "all_gather": (12, 12)}, calls
    assert losses[0] == losses[1], losses
    assert all(torch.equal(a, b) for a, b in zip(*finals)), "compiled parameters differ"
    assert same_on_all_ranks(finals[1], ref), "replicas differ between ranks"
    if rank == 0:
        print("losses", losses[1], "calls", calls[1], flush=True)
    ok("compile_fsdp")
    dist.destroy_process_group()

elif CHECK == "gift_mismatch":
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    from ccompress.torch import GIFT

    OPTIONS = BackendOptions(reduce_scatter="hint8", min_numel=128)
    rank, size, ref = start(pg_options=OPTIONS)
    pg = compressed_group()

    def sharded(group=None):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                    torch.nn.Linear(32, 4))
        mesh = DeviceMesh.from_group(group, "cpu") if group is not None else None
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    def mismatch(group, gift):
        t0 = time.monotonic()
        try:
            group.use_gift(gift)
        except cc.MismatchError as e:
            print(f"RAISED rank {rank} in {time.monotonic() - t0:.1f}s: {e}", flush=True)
            gift.remove_hooks()
            return str(e)
        raise AssertionError("GIFT settings that differ between ranks were installed")

    net = sharded()
    msg = mismatch(pg, GIFT(net, rank=32 if rank == 0 else 16))
    assert "GIFT rank is 32 on ranks [0], 16 on ranks [1]" in msg, msg
    assert "GIFT refresh_every" not in msg, msg  # only what differs is named
    assert pg.gift is None  # nothing installed
    msg = mismatch(pg, GIFT(net, layers=["0"] if rank else None, sketch=8 * rank,
                            ema=0.5 + 0.25 * rank, select=bool(rank)))
    for part in ("GIFT layers is ['0', '2'] on ranks [0], ['0'] on ranks [1]",
                 "GIFT sketch is 0 on ranks [0], 8 on ranks [1]",
                 "GIFT ema is 0.5 on ranks [0], 0.75 on ranks [1]",
                 "GIFT select is False on ranks [0], True on ranks [1]"):
        assert part in msg, (part, msg)
    assert pg.gift is None
    try:  # a rank whose argument is no GIFT: its own error there, MismatchError elsewhere
        pg.use_gift(GIFT(net) if rank == 0 else "gift")
    except cc.MismatchError as e:
        assert rank == 0 and "GIFT settings could not be resolved on ranks [1]" in str(e), e
    except cc.InvalidArgument as e:
        assert rank == 1 and "needs a ccompress.torch.GIFT" in str(e), e
    else:
        raise AssertionError("use_gift took a GIFT on one rank and none on the other")
    assert pg.gift is None
    ok("gift mismatch")

    # the same settings: installed (a third call, under keys of its own), and it trains
    gift = GIFT(net, rank=8, refresh_every=1, select=False)
    pg.use_gift(gift)
    assert pg.gift is gift
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
    net(x).square().mean().backward()
    assert gift.step == 1 and all(gift.treated.values()) and len(gift.treated) == 2, gift.treated
    assert same_on_all_ranks([p.grad.full_tensor() for p in net.parameters()], ref)
    ok("gift agreed")

    # a rank that never calls use_gift: the other raises after the group's timeout
    short = dist.new_group(backend="ccompress", pg_options=OPTIONS,
                           timeout=timedelta(seconds=3))
    net = sharded(short)
    if rank == 0:
        msg = mismatch(compressed_group(short), GIFT(net))
        assert "ranks [1] did not call use_gift within the group's timeout" in msg, msg
    dist.barrier(group=ref)
    ok("gift missing")
    dist.destroy_process_group()

elif CHECK == "report":
    rank, size, ref = start()
    y = torch.ones(5000)
    dist.all_reduce(y)
    dist.all_reduce(torch.ones(10))
    dist.destroy_process_group()
    # made again over the same store with other options: agreed afresh, not against the
    # first group's
    os.environ["CCOMPRESS_CODEC"] = "bf16"
    dist.init_process_group("ccompress", timeout=timedelta(seconds=60))
    for _ in range(20):  # a configured codec that never engages: warned after 20 calls
        dist.all_reduce(torch.ones(8))
    y = torch.ones(5000)
    dist.all_reduce(y)
    assert torch.equal(y, torch.full((5000,), float(size)))
    assert compressed_group().stats()["all_reduce"]["compressed"] == 1
    ok("report")
    dist.destroy_process_group()

elif CHECK == "hook_trace":
    import json

    from ccompress.torch import ddp_comm_hook

    rank, size, ref = start()
    hooks = [ddp_comm_hook("hint8", algo="two_shot", process_group=dist.new_group(backend="gloo")),
             ddp_comm_hook("fp8_e4m3:g128", error_feedback=False, small_codec="bf16",
                           process_group=dist.new_group(backend="gloo"))]
    for hook in hooks:
        net = torch.nn.parallel.DistributedDataParallel(
            tiny_mlp(), process_group=hook._group)
        net.register_comm_hook(state=None, hook=hook)
        train_3_steps(net, net.parameters(), rank)
    with open(os.path.join(os.environ["CCOMPRESS_TRACE"], f"ccompress-trace-rank{rank}.json")) as f:
        events = json.load(f)
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    # tid 1: the world group (the backend); the hooks' traces start at their first bucket
    for tid, hook, name in ((2, hooks[0], "all_reduce hint8:g16:h128:s8 + error feedback"),
                            (3, hooks[1], "all_reduce fp8_e4m3:g128 + bf16 for vectors")):
        assert threads[tid] == f"ccompress DDP hook {tid} (rank {rank} of {size})", threads
        spans = [e for e in events if e["ph"] == "X" and e["tid"] == tid]
        st = hook.stats()
        assert len(spans) == st["calls"] == 3, (len(spans), st)  # a bucket a step
        assert {e["name"] for e in spans} == {name}, spans
        assert sum(e["args"]["bytes_sent"] for e in spans) == st["bytes_sent"] > 0, st
        assert sum(e["args"]["exact_bytes"] for e in spans) == st["exact_bytes"], st
        assert all(e["dur"] > 0 and e["pid"] == rank for e in spans), spans
    ok("hook_trace")
    dist.destroy_process_group()
