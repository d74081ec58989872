"""torchrun worker: GIFT on FSDP2 through the ccompress backend
(``compressed_group().use_gift(GIFT(model))``), 2 ranks, one launch, three groups:

- **bound** (nvfp4, no error feedback, every layer whitened): each rank's gradient shard
  against the fp64 average of the ranks' local gradients. Bound per element: the codec's
  reduce-scatter bound on the whitened inputs (FSDP2's layout: per rank chunk, the padded
  dim-0 shards of the group's parameters) mapped back through L^T, |E L^T| <= B |L|^T, plus
  64 x 2^-24 of the largest |gradient| for the fp32 transforms; biases: the bound itself.
- **parity** (codec "none", exact reduce-scatter): GIFT forced on, against the fp64 average,
  per weight shard ||out - avg||_F <= (N + 2) 2^-24 cond(L) mean_r ||G_r||_F (1 + 1e-6)
  + 2^-24 ||avg||_F (the wire's fp32 rounding of G L^-T, the float32 sum, the map back and
  the final cast); and the same model without GIFT on the same group, which must differ
  in bits (the transform ran) but lie within the sum of both bounds.
- **world** (nvfp4, error feedback, selection on, refresh every 2 steps, sketch): five
  AdamW steps; GIFT's moments, factors, selection and step are the same bits on every rank;
  a checkpoint (model, optimiser, the group's state_dict with GIFT's state and the residuals
  in whitened coordinates) taken after 3 steps replays steps 4 and 5 (5 refreshes: the
  residual remap) bit for bit.
And the misuses raise on every rank: a model outside fully_shard (DDP's way is the hook),
output-side whitening, a group the model is not sharded over, a state without GIFT, a
second GIFT on one group."""
import copy
import hashlib
import pickle

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import ccompress as cc
from ccompress.bounds import allreduce_error_bound
from ccompress.torch import GIFT, BackendOptions, compressed_group
from helpers.torch_backend.common import gather, ok, same_on_all_ranks, start

EPS32 = 2.0 ** -24
rank, size, ref = start("ccompress", pg_options=BackendOptions(
    reduce_scatter="nvfp4", error_feedback=True, min_numel=256))
world = compressed_group()


def ccgroup(**kw):
    return dist.new_group(backend="ccompress", pg_options=BackendOptions(min_numel=256, **kw))


g_bound, g_none = ccgroup(reduce_scatter="nvfp4", error_feedback=False), ccgroup()


def make_model():
    """The same weights on every rank; 37 and 21 rows: FSDP2 pads the last shard."""
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 37), torch.nn.GELU(),
                                torch.nn.Linear(37, 21), torch.nn.GELU(),
                                torch.nn.Linear(21, 8))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model


def shard(model, group):
    mesh = DeviceMesh.from_group(group, "cpu")
    for i in (0, 2, 4):
        fully_shard(model[i], mesh=mesh)
    return fully_shard(model, mesh=mesh)


def rank_input(r, k):
    """Correlated features with unequal scales: the case GIFT is for."""
    mix = torch.randn(48, 48, generator=torch.Generator().manual_seed(7)) / 7
    x = torch.randn(64, 48, generator=torch.Generator().manual_seed(100 * k + r))
    return (x @ (torch.eye(48) + mix)) * torch.linspace(0.1, 3.0, 48)


def loss(net, k):
    return net(rank_input(rank, k)).square().mean()


def local_grads(k):
    """Every rank's own gradients at step ``k`` (no collective), stacked (ranks, ...)."""
    m = make_model()
    loss(m, k).backward()
    return [torch.stack(gather(p.grad, ref)).double().numpy() for p in m.parameters()]


def rows(r, n):
    """FSDP2's dim-0 shard of rank r among ``size``: [start, stop) of n rows."""
    per = -(-n // size)
    return min(r * per, n), min((r + 1) * per, n)


def shard_grads(net):
    return [p.grad.to_local().double().numpy() for p in net.parameters()]


def digest(obj):
    return hashlib.sha256(pickle.dumps(obj)).hexdigest()


# ---- misuses: the same typed error on every rank ----
def raises(kind, match, fn):
    try:
        fn()
    except kind as e:
        assert match in str(e), e
    else:
        raise AssertionError(f"expected {kind.__name__} ({match})")


raises(cc.InvalidArgument, "in no fully_shard module",
       lambda: compressed_group(g_bound).use_gift(GIFT(make_model())))
raises(cc.Unsupported, "output_side", lambda: compressed_group(g_bound).use_gift(
    GIFT(shard(make_model(), g_bound), output_side=True)))
raises(cc.InvalidArgument, "another process group",
       lambda: compressed_group(g_bound).use_gift(GIFT(shard(make_model(), g_none))))
ok("gift fsdp errors")

# ---- bound: nvfp4 reduce-scatter of whitened gradients against fp64 ----
net = shard(make_model(), g_bound)
gift = GIFT(net, rank=8, refresh_every=1, select=False)
compressed_group(g_bound).use_gift(gift)
loss(net, 0).backward()
assert gift.step == 1 and all(gift.treated.values()) and len(gift.treated) == 3
stacks, got = local_grads(0), shard_grads(net)
names = ["0", "0", "2", "2", "4", "4"]  # weight, bias of each fully_shard module
worst = 0.0
for m in range(3):
    w, b = stacks[2 * m], stacks[2 * m + 1]
    lmat = gift.core.factors[names[2 * m]].dense()
    assert np.linalg.cond(lmat) > 2, "the test's factor must not be near the identity"
    out_rows, cols = w.shape[1], w.shape[2]
    per = -(-out_rows // size)
    wire_w = np.zeros((size, per * size, cols))
    wire_w[:, :out_rows] = w @ np.linalg.inv(lmat).T
    wire_b = np.zeros((size, per * size))
    wire_b[:, :out_rows] = b
    # the reduce-scatter input of each rank: chunk c = [weight rows of shard c, bias of c]
    wire = np.concatenate([np.concatenate([wire_w[:, c * per:(c + 1) * per].reshape(size, -1),
                                           wire_b[:, c * per:(c + 1) * per]], axis=1)
                           for c in range(size)], axis=1)
    bound = allreduce_error_bound(wire.astype(np.float32), "nvfp4", "reduce_scatter",
                                  op="avg")
    chunk = wire.shape[1] // size
    mine = bound[rank * chunk:(rank + 1) * chunk]
    lo, hi = rows(rank, out_rows)
    bw = mine[:per * cols].reshape(per, cols)[:hi - lo]
    ref_w, ref_b = w.mean(0)[lo:hi], b.mean(0)[lo:hi]
    b_out = bw @ np.abs(lmat).T + 64 * EPS32 * np.abs(w.mean(0)).max()
    err = np.abs(got[2 * m] - ref_w)
    assert np.all(err <= b_out), f"layer {names[2 * m]}: error {(err / b_out).max():.3g}x bound"
    worst = max(worst, float((err / b_out).max()))
    err_b = np.abs(got[2 * m + 1] - ref_b)
    assert np.all(err_b <= mine[per * cols:][:hi - lo] + EPS32 * np.abs(ref_b).max())
assert 0 < worst <= 1, worst
assert same_on_all_ranks([p.grad.full_tensor() for p in net.parameters()], ref), \
    "gathered gradients differ"
print(f"worst error {worst:.2f} of the bound", flush=True)
ok("gift fsdp bound")

# ---- parity: codec "none", GIFT forced, against fp64 and against no GIFT ----
net = shard(make_model(), g_none)
plain = shard(make_model(), g_none)
gift = GIFT(net, rank=8, refresh_every=1, select=False)
compressed_group(g_none).use_gift(gift)
loss(net, 1).backward()
loss(plain, 1).backward()
stacks, got, base = local_grads(1), shard_grads(net), shard_grads(plain)
for i, name in enumerate(names):
    lo, hi = rows(rank, stacks[i].shape[1])
    avg = stacks[i].mean(0)[lo:hi]
    parts = stacks[i][:, lo:hi]
    b_plain = (size + 1) * EPS32 * np.linalg.norm(np.abs(parts).sum(0))
    assert np.linalg.norm(base[i] - avg) <= b_plain
    if i % 2:  # biases travel as they are: the same bits
        assert np.array_equal(got[i], base[i])
        continue
    cond = np.linalg.cond(gift.core.factors[name].dense())
    norms = np.mean([np.linalg.norm(p) for p in parts])
    b_gift = (size + 2) * EPS32 * cond * norms * (1 + 1e-6) + EPS32 * np.linalg.norm(avg)
    assert np.linalg.norm(got[i] - avg) <= b_gift, (name, np.linalg.norm(got[i] - avg), b_gift)
    assert np.linalg.norm(got[i] - base[i]) <= b_gift + b_plain
    assert not np.array_equal(got[i], base[i]), "the transform did not run"
ok("gift fsdp parity")

# ---- world: nvfp4 + error feedback + selection; identical state; checkpoint replay ----
net = shard(make_model(), dist.group.WORLD)
gift = GIFT(net, rank=8, refresh_every=2, sketch=16)
world.use_gift(gift)
opt = torch.optim.AdamW(net.parameters(), lr=1e-2)


def train_step(k):
    opt.zero_grad(set_to_none=True)
    loss(net, k).backward()
    opt.step()


def local_params():
    return [p.to_local().detach().clone() for p in net.parameters()]


for k in range(3):
    train_step(k)
saved = copy.deepcopy((net.state_dict(), opt.state_dict(), world.state_dict()))
assert saved[2]["gift"]["step"] == 3 and saved[2]["error_feedback"], "no GIFT state/residual"
for k in (3, 4):
    train_step(k)
first, state = local_params(), world.state_dict()["gift"]
assert gift.step == 5 and set(gift.selection) == {"0", "2", "4"}
assert any(gift.treated.values()), "nvfp4 on correlated inputs: some layer should be whitened"
for name, row in gift.selection.items():
    assert row["step"] == 4 and gift.treated[name] == (row["err_plain"] > row["err_gift"])
factors = [torch.from_numpy(gift.core.factors[n].q.copy()) for n in sorted(gift.treated)]
assert same_on_all_ranks([torch.frombuffer(bytearray.fromhex(digest(state)), dtype=torch.uint8)]
                         + factors, ref), "GIFT state differs between ranks"
net.load_state_dict(saved[0])
opt.load_state_dict(saved[1])
world.load_state_dict(saved[2])
for k in (3, 4):
    train_step(k)
assert all(torch.equal(a, b) for a, b in zip(first, local_params())), \
    "the restored checkpoint did not replay steps 4 and 5"
assert digest(world.state_dict()["gift"]) == digest(state)
ok("gift fsdp state")

raises(cc.InvalidArgument, "one per group", lambda: world.use_gift(GIFT(net)))
raises(cc.InvalidArgument, "without GIFT",
       lambda: world.load_state_dict(compressed_group(g_bound).state_dict() | {
           "codecs": saved[2]["codecs"], "gift": None}))
ok("gift fsdp checkpoint errors")
dist.destroy_process_group()
