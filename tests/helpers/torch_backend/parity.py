"""torchrun worker: DDP gradient parity in the pattern of PyTorch's comm-hook tests. The
same model and inputs give, on every rank, its local gradient (``no_sync``) and the
reduced one; the reduced gradient must be within the codec's bound of the fp64 sum of the
local gradients (DDP divides by the world size first, then sums), bit-identical on every
rank, and, for the exact codec, bit-identical to plain gloo DDP's.

argv: ``hook CODEC`` (gloo group + ccompress.torch.ddp_comm_hook) or ``backend CODEC``
(the ccompress backend, plain DDP, codec through pg_options)."""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.torch_backend.common import gather, ok, same_on_all_ranks, start
from ccompress.torch import BackendOptions, ddp_comm_hook
from helpers.torch_helpers import check_reduced

how, codec = sys.argv[1], sys.argv[2]
ALGO = "two_shot"
if how == "backend":
    rank, size, ref = start("ccompress", pg_options=BackendOptions(
        all_reduce=codec, algo=ALGO, min_numel=1))
else:
    rank, size, ref = start("gloo")


def model():
    torch.manual_seed(7)  # one parameter: the bucket is its gradient, laid out as it is
    return torch.nn.Linear(96, 80, bias=False)


ddp = DDP(model())
plain = DDP(model(), process_group=ref)  # gloo, no hook: the reference
if how == "hook":
    ddp.register_comm_hook(state=None, hook=ddp_comm_hook(codec=codec, error_feedback=False,
                                                          algo=ALGO))
for it in range(3):
    x = torch.randn(16, 96, generator=torch.Generator().manual_seed(10 * it + rank))
    with ddp.no_sync():
        ddp(x).square().sum().backward()
    local = ddp.module.weight.grad.clone()
    ddp.zero_grad()
    ddp(x).square().sum().backward()
    reduced = ddp.module.weight.grad
    plain.zero_grad()
    plain(x).square().sum().backward()
    parts = [g / size for g in gather(local, ref)]  # what DDP sums
    check_reduced(reduced.view(-1), [p.view(-1) for p in parts], codec, ALGO, op="sum",
                  what=f"{how} {codec} step {it}")
    assert same_on_all_ranks([reduced], ref), "ranks hold different gradients"
    if codec == "none" and (how == "backend" or size == 2):
        # the backend delegates exact all-reduces to gloo; the hook's exact sum in rank
        # order equals gloo's where the order cannot matter (2 ranks)
        assert torch.equal(reduced, plain.module.weight.grad), "exact codec differs from gloo"
    ddp.zero_grad()
ok(f"parity {how} {codec}")
dist.destroy_process_group()
