"""torchrun worker: a compressed collective that fails on ccompress's worker thread under DDP
(argv[1]: ``backend``, the ccompress backend; ``hook``, gloo with ccompress's DDP hook) must
make ``loss.backward()`` raise on every rank, with the collective's message: DDP reads the
Work's future in C++, where an exception stored as the future's value was taken for the
gradient (a segmentation fault). The failure is injected into the communicator's run."""
import sys

import torch
import torch.distributed as dist

import ccompress.communicator
from ccompress._internal.errors import Unsupported
from ccompress.torch import BackendOptions, ddp_comm_hook
from helpers.torch_backend.common import ok, start

how = sys.argv[1]


def failing_run(self, call):
    raise Unsupported("injected failure of a compressed collective")


ccompress.communicator.Communicator._run = failing_run
if how == "backend":
    rank, size, ref = start("ccompress", pg_options=BackendOptions(all_reduce="hint8"))
else:
    rank, size, ref = start("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.Linear(128, 128))
ddp = torch.nn.parallel.DistributedDataParallel(model)
if how == "hook":
    ddp.register_comm_hook(state=None, hook=ddp_comm_hook(codec="hint8"))
try:
    ddp(torch.randn(4, 128)).sum().backward()
except RuntimeError as e:
    assert "injected failure of a compressed collective" in str(e), str(e)
else:
    raise SystemExit(f"rank {rank}: backward returned although its all-reduce failed")
dist.barrier(group=ref)
ok(f"failure {how}")
dist.destroy_process_group()
