"""Run under torchrun (tests/pytorch/test_torchrun.py launches it): the ccompress.torch adapters find
their communicator from the torch group with no MPI. tp_all_reduce with the default group
is the true sum (within the codec's bound of the fp64 sum of every rank's input, replicas
bit-identical), never a rank's own tensor; the DDP hook on a plain gloo group, against the
same model without a hook: each bucket within the codec's bound of the fp64 average, the
exact codec bit for bit what ccompress.simulate gives, error feedback keeping replicas
identical; mismatched communicators and launches raise on every rank. Prints "OK <rank>".
"""
import hashlib
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ccompress as cc
from ccompress.torch import ddp_comm_hook, tp_all_reduce, tp_copy, world_communicator
from ccompress.torch._common import communicator_for
from helpers.torch_backend.common import final_barrier
from helpers.torch_helpers import check_reduced, rank_tensor, to_numpy

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)
dist.init_process_group("gloo")


def gather(t):
    """Every rank's copy of ``t`` (rank order)."""
    t = t.detach().contiguous()
    out = [torch.empty_like(t) for _ in range(size)]
    dist.all_gather(out, t)
    return out


def check_identical(t, what):
    d = hashlib.sha256(to_numpy(t).view(np.uint8).tobytes()).hexdigest()
    got = [None] * size
    dist.all_gather_object(got, d)
    assert len(set(got)) == 1, f"{what}: ranks differ"


def raises_everywhere(fn, exc, what):
    """fn() raises exc on this rank; every rank reports the same."""
    try:
        fn()
        ok = False
    except exc as e:
        ok, msg = True, str(e)
    flags = [None] * size
    dist.all_gather_object(flags, ok)
    assert all(flags), f"{what}: raised on ranks {flags}"
    return msg


# 1. tp_all_reduce(group=None): the sum over the torchrun world, forward; identity backward.
comm = world_communicator()
assert (comm.size, comm.rank, comm.transport) == (size, rank, "tcp"), comm
assert "mpi4py.MPI" not in sys.modules
for codec in ("none", "taco:g128", "hint8", "fp8_e4m3:g128"):
    x = rank_tensor(rank, (9, 333), seed=11).requires_grad_()
    y = tp_all_reduce(x, codec=codec)
    parts = gather(x)
    ratio = check_reduced(y, parts, codec, comm.last_stats["algo"], what=f"tp {codec}")
    check_identical(y, f"tp_all_reduce {codec}")
    ref = torch.stack(parts).double().sum(0)
    rel = float((y.detach().double() - ref).norm() / ref.norm())
    own = float((x.detach().double() - ref).norm() / ref.norm())
    assert rel < 0.1 < own, (rel, own)  # the sum, not this rank's own tensor
    g = torch.full_like(y, 0.5)
    y.backward(g)
    assert torch.equal(x.grad, g)
    if rank == 0:
        print(f"tp_all_reduce {codec}: relerr {rel:.2e} vs the fp64 sum ({ratio:.2f} of the "
              f"bound), identical on {size} ranks", flush=True)
x = rank_tensor(rank, (4, 100), seed=12).requires_grad_()
tp_copy(x, codec="bf16").backward(rank_tensor(rank, (4, 100), seed=13))
check_reduced(x.grad, gather(rank_tensor(rank, (4, 100), seed=13)), "bf16",
              comm.last_stats["algo"], what="tp_copy backward")

# 2. DDP on plain gloo: no hook, then the hook on the same model and data.
def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.GELU(), torch.nn.Linear(64, 40))


def grads_of(hook, make_hook=None):
    """Two DDP steps' gradients with ``hook`` (or ``make_hook(model)``), this rank's own
    gradients, and (input, output) of every bucket the hook saw in the last step."""
    model = make_model()
    ddp = DDP(model, bucket_cap_mb=0.004)  # ~1000 float32 per bucket: several buckets
    hook = make_hook(model) if make_hook else hook
    seen = []
    if hook is not None:
        def recording(state, bucket):
            before = bucket.buffer().clone()
            return hook(state, bucket).then(
                lambda f: seen.append((before, f.value().clone())) or f.value())

        ddp.register_comm_hook(state=None, hook=recording)
    x = rank_tensor(rank, (16, 24), seed=3)
    for _ in range(2):  # one bucket in the first step; DDP then rebuilds them
        seen.clear()
        model.zero_grad()
        ddp(x).square().mean().backward()
    local = make_model()  # this rank's own gradients, without DDP
    local(x).square().mean().backward()
    return ([p.grad.clone() for p in model.parameters()],
            [p.grad.clone() for p in local.parameters()], seen)


plain, local, _ = grads_of(None)
for p, l in zip(plain, local):
    parts = gather(l)
    ref = torch.stack(parts).double().mean(0)
    tol = size * 2.0**-23 * torch.stack(parts).double().abs().sum(0) / size
    assert torch.all((p.double() - ref).abs() <= tol + 1e-30), "gloo DDP vs fp64 average"
for codec in ("none", "fp8_e4m3:g128", "hint8"):
    hooked, local2, seen = grads_of(ddp_comm_hook(codec=codec, error_feedback=False,
                                                  algo="two_shot"))
    assert seen, "the hook was not called"
    for i, (before, after) in enumerate(seen):
        check_reduced(after, gather(before), codec, "two_shot", op="avg",
                      what=f"hook {codec} bucket {i}")
        check_identical(after, f"hook {codec} bucket {i}")
    for h, p, l in zip(hooked, plain, local2):
        parts = gather(l)
        if codec == "none":  # the exact codec: simulate's bits
            sim = cc.simulate.allreduce([to_numpy(q) for q in parts], "none", "two_shot", "avg")
            assert to_numpy(h).tobytes() == sim[rank].tobytes(), "hook none vs simulate"
            assert torch.allclose(h, p, rtol=1e-5, atol=1e-7), "hook none vs plain DDP"
        check_identical(h, f"hook {codec} grad")
    if rank == 0:
        err = max(float((h - p).abs().max() / p.abs().max()) for h, p in zip(hooked, plain))
        print(f"DDP hook {codec}: {len(seen)} buckets within the bound; max error against "
              f"plain gloo DDP {err:.2e} of the largest gradient", flush=True)

# 3. Error feedback (the default), three steps: replicas stay bit-identical.
def sgd_steps(make_hook, seed, what):
    """Three SGD steps of DDP with ``make_hook(model)``; asserts identical replicas."""
    model = make_model()
    ddp = DDP(model, bucket_cap_mb=0.004)
    ddp.register_comm_hook(state=None, hook=make_hook(model))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        ddp(rank_tensor(rank, (16, 24), seed=seed + step)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    for name, p in model.named_parameters():
        check_identical(p.detach(), f"{what} parameter {name}")


hook = ddp_comm_hook(codec="fp8_e4m3:g128")
sgd_steps(lambda model: hook, 20, "error feedback")
assert hook.comm.transport == "tcp" and len(hook.state_dict()["error_feedback"]) >= 2

# 4. Mismatches raise on every rank.
bad = ddp_comm_hook(codec="none", error_feedback=False, comm=cc.Communicator.inproc(1)[0])
msg = raises_everywhere(lambda: bad.comm, cc.MismatchError, "1-rank communicator")
assert "rank 0 of 1" in msg, msg
os.environ["PMI_SIZE"] = str(size + 1)  # as if mpiexec had started size+1 processes
group = dist.new_group(list(range(size)))
msg = raises_everywhere(lambda: communicator_for(group), cc.MismatchError, "MPI world size")
assert f"world of {size + 1}" in msg, msg
del os.environ["PMI_SIZE"]
assert communicator_for(group).size == size

# 5. TSRAdam resolves the world group too.
from ccompress.torch import TSRAdam  # noqa: E402

opt = TSRAdam(torch.nn.Linear(8, 8).named_parameters(), None)
assert opt.comm.size == size

# 6. GIFT inside the hook, with real DDP buckets (rebuilt after the first step): with the
# exact codec and every layer whitened, the gradients are plain DDP's within 1e-4 of the
# largest (the round trip's bound is in tests/pytorch/test_torch_gift.py); with nvfp4 and error
# feedback, 3 SGD steps leave bit-identical replicas and GIFT state on every rank.
from ccompress.torch import GIFT  # noqa: E402

gifts = []


def gift_hook(model):
    gifts.append(GIFT(model, rank=8, refresh_every=1, select=False))
    return ddp_comm_hook(codec="none", error_feedback=False, algo="two_shot", gift=gifts[-1])


whitened, _, seen = grads_of(None, gift_hook)
gift = gifts[0]
assert seen and all(gift.treated.values()) and len(gift.treated) == 2, gift.treated
for h, p in zip(whitened, plain):
    assert float((h - p).abs().max()) <= 1e-4 * float(p.abs().max()), "GIFT none vs plain DDP"
gifts.clear()


def nvfp4_gift_hook(model):
    gifts.append(GIFT(model, rank=8, refresh_every=2, sketch=8))
    return ddp_comm_hook(codec="nvfp4", gift=gifts[-1])


sgd_steps(nvfp4_gift_hook, 30, "GIFT")
gift = gifts[0]
check_identical(torch.from_numpy(np.concatenate(
    [gift.core.second_moment[n].reshape(-1) for n in gift.layers])), "GIFT moments")
assert gift.step == 3 and set(gift.selection) == {"0", "2"}

# GIFT settings that differ between ranks raise on every rank, from backward().
odd = make_model()
ddp = DDP(odd, bucket_cap_mb=0.004)
ddp.register_comm_hook(state=None, hook=ddp_comm_hook(
    codec="nvfp4", gift=GIFT(odd, rank=8, damping=0.3 if rank == 0 else 0.2)))
msg = raises_everywhere(lambda: ddp(rank_tensor(rank, (16, 24), seed=5)).sum().backward(),
                        RuntimeError, "GIFT settings")
assert "GIFT damping is 0.3 on ranks [0], 0.2 on ranks [1" in msg, msg

final_barrier()
print(f"OK {rank}", flush=True)
dist.destroy_process_group()
