"""torchrun worker: a few training steps of a small MLP under DDP (no hook) or FSDP2
(fully_shard), on whatever backend argv names, configured as an unmodified script would be
(CCOMPRESS_* environment). Writes losses and digests of the parameters to argv[3] (rank 0)
and checks on every rank that the replicas (DDP: parameters; FSDP2: the full parameters
gathered from the shards) are bit-identical. With error feedback on, it also checks that a
checkpoint (model, optimiser, the group's state_dict) replays a step bit for bit."""
import copy
import json
import sys
import threading

import torch
import torch.distributed as dist

from helpers.torch_backend.common import digest, digests, ok, same_on_all_ranks, start
from ccompress import CCompressError
from ccompress.torch import compressed_group

mode, backend, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
STEPS = 5
rank, size, ref = start(backend)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128),
                            torch.nn.GELU(), torch.nn.Linear(128, 16))
if mode == "ddp":
    net = torch.nn.parallel.DistributedDataParallel(model)
else:
    from torch.distributed.fsdp import fully_shard

    for layer in (model[0], model[2], model[4]):
        fully_shard(layer)
    net = fully_shard(model)
opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
g = torch.Generator().manual_seed(100 + rank)
data = [(torch.randn(32, 64, generator=g), torch.randn(32, 16, generator=g)) for _ in range(STEPS)]


def step(i):
    x, y = data[i]
    loss = torch.nn.functional.mse_loss(net(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    total = loss.detach().clone()
    dist.all_reduce(total, group=ref)
    return float(total) / size


def full_params():
    return [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in net.parameters()]


def local_params():
    return [(p.to_local() if hasattr(p, "to_local") else p).detach().clone()
            for p in net.parameters()]


losses = [step(i) for i in range(STEPS - 1)]
pg = compressed_group() if backend == "ccompress" else None
ef = pg is not None and pg.options.error_feedback
if ef:  # a checkpoint taken now replays the next step bit for bit
    saved = (copy.deepcopy(net.state_dict()), copy.deepcopy(opt.state_dict()),
             copy.deepcopy(pg.state_dict()))
    assert saved[2]["error_feedback"], "error feedback is on but no residual was kept"
    step(STEPS - 1)
    first = local_params()
    net.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    pg.load_state_dict(saved[2])
losses.append(step(STEPS - 1))
if ef:
    assert all(torch.equal(a, b) for a, b in zip(first, local_params())), \
        "the restored checkpoint did not replay the step"
full = full_params()
assert same_on_all_ranks(full, ref), "replicas differ between ranks"
shards = digests(local_params(), ref)
if rank == 0:
    with open(out_path, "w") as f:
        json.dump(dict(losses=losses, full=digest(full), shards=shards,
                       bytes=pg.bytes_sent if pg is not None else 0,
                       residuals=len(pg.feedback.slots) if pg is not None else 0,
                       stats=pg.stats() if pg is not None else None,
                       auto=pg._policy.auto_choices if pg is not None else {}), f)
ok(f"train {mode} {backend}")
dist.destroy_process_group()
if pg is not None:  # destroy_process_group stopped ccompress's threads, not the exit
    alive = [t.name for t in threading.enumerate() if t.name.startswith("ccompress-")]
    assert not any(n.startswith(f"ccompress-r{rank}") for n in alive), alive
    try:
        pg.allreduce([torch.ones(4096)])
    except CCompressError as e:
        assert "shut down" in str(e), e
    else:
        raise AssertionError("a destroyed ccompress group accepted a collective")
