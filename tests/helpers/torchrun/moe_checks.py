"""Run under torchrun (tests/pytorch/test_torchrun.py launches it): examples/moelm.py's
expert-parallel MoE LM over gloo groups.

- Sharded over the ranks, its loss on each rank's quarter of a batch, averaged, and each
  expert's gradient equal what one process holding all eight experts computes on the whole
  batch (the load-balancing loss off, a capacity no token overflows): the dispatch and
  combine all-to-alls and the experts' gradient scaling are exact.
- Two training steps with DDP over the dense weights and the whole-model clipping of
  moelm.clip_grad_norm leave the dense weights bit-identical on every rank, and the experts
  different (each rank trains its own).
Prints "OK <rank>".
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
from examples import moelm  # noqa: E402
from helpers.torch_backend.common import digest, final_barrier  # noqa: E402

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)
dist.init_process_group("gloo")
own = [dist.new_group([r]) for r in range(size)][rank]  # a one-rank group per rank
D, LAYERS, HEADS, CTX, EXPERTS = 32, 2, 4, 8, 8
local = EXPERTS // size

# 1. the sharded model against one process holding every expert, on the same batch
moelm.AUX_LOSS = 0.0
g = torch.Generator().manual_seed(7)
idx = torch.randint(0, 256, (2 * size, CTX + 1), generator=g)
x, y = idx[:, :-1], idx[:, 1:]
mine = slice(2 * rank, 2 * rank + 2)
kw = dict(experts=EXPERTS, top_k=2, capacity_factor=EXPERTS / 2, hidden=48, seed=3)
ref = moelm.build_model(torch, D, LAYERS, HEADS, CTX, dispatch_group=own, combine_group=own, **kw)
ref_loss = ref(x, y)
ref_loss.backward()
model = moelm.build_model(torch, D, LAYERS, HEADS, CTX, **kw)
loss = model(x[mine], y[mine])
loss.backward()
losses = [None] * size
dist.all_gather_object(losses, float(loss.detach()))
mean = sum(losses) / size
assert abs(mean - float(ref_loss.detach())) <= 1e-5 * abs(float(ref_loss.detach())), mean
want = dict(ref.named_parameters())
for name, p in model.named_parameters():
    parts = name.split(".")
    if ".experts." in name:  # h.L.moe.experts.J...: this rank's expert J is rank*local + J
        parts[4] = str(rank * local + int(parts[4]))
        w = want[".".join(parts)].grad
        err = float((p.grad - w).abs().max() / w.abs().max())
        assert err <= 1e-5, f"{name}: gradient off by {err:.2e} of its largest element"

# 2. DDP over the dense weights, whole-model clipping: dense replicas bit-identical
moelm.AUX_LOSS = 0.01
model = moelm.build_model(torch, D, LAYERS, HEADS, CTX, experts=EXPERTS, seed=3)
net = moelm.dense_ddp(torch, model)
side = dist.new_group(backend="gloo")
opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
experts = {id(p) for p in model.expert_parameters()}
assert len(experts) == LAYERS * local * 4
for step in range(2):
    g = torch.Generator().manual_seed(100 * step + rank)  # different data on every rank
    idx = torch.randint(0, 256, (2, CTX + 1), generator=g)
    net(idx[:, :-1], idx[:, 1:]).backward()
    norm = moelm.clip_grad_norm(torch, model, 0.05, side)
    norms = [None] * size
    dist.all_gather_object(norms, norm)
    assert len(set(norms)) == 1, f"the clipping norm differs between ranks: {norms}"
    opt.step()
    opt.zero_grad(set_to_none=True)
dense = [p.detach() for p in model.parameters() if id(p) not in experts]
mine = [p.detach() for p in model.parameters() if id(p) in experts]
got = [None] * size
dist.all_gather_object(got, (digest(dense), digest(mine)))
assert len({d for d, _ in got}) == 1, "the dense replicas differ between ranks"
assert len({e for _, e in got}) == size, "two ranks hold the same experts"
final_barrier()
print(f"OK {rank}", flush=True)
