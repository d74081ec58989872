"""torchrun worker (3 ranks): the last rank stops after a warm-up; the others must raise
from their next collective within the group's timeout (argv[1]: ``compressed`` or
``delegated`` collective), and then the group must refuse further calls at once."""
import os
import sys
import time

import torch
import torch.distributed as dist

from helpers.torch_backend.common import rank_input, start
from ccompress.torch import BackendOptions

TIMEOUT = 10
kind = sys.argv[1]
rank, size, ref = start("ccompress", timeout_s=TIMEOUT, pg_options=BackendOptions(
    all_reduce="fp8_e4m3:g128", min_numel=1024))
x = rank_input(rank, 100_000)
ints = torch.arange(1000) * rank
dist.all_reduce(x.clone())
dist.all_reduce(ints.clone())
dist.barrier(group=ref)
if rank == size - 1:
    print(f"STOPPED rank {rank}", flush=True)
    os._exit(0)
time.sleep(1.0)
t0 = time.monotonic()
try:
    dist.all_reduce(x if kind == "compressed" else ints)
except Exception as e:  # noqa: BLE001 - any error is the point; its kind is printed
    took = time.monotonic() - t0
    print(f"RAISED rank {rank} after {took:.1f}s: {type(e).__name__}: {str(e)[:200]}", flush=True)
    assert took <= TIMEOUT + 10, f"raised only after {took:.1f}s"
else:
    raise SystemExit(f"rank {rank}: a collective with a stopped peer returned")
for call in (lambda: dist.all_reduce(torch.ones(10)), lambda: dist.barrier(),
             lambda: dist.all_reduce(x)):
    t0 = time.monotonic()
    try:
        call()
    except Exception as e:  # noqa: BLE001
        assert "unusable" in str(e), f"refused with an unexpected error: {e}"
        assert time.monotonic() - t0 < 2.0, "refusing took too long"
    else:
        raise SystemExit(f"rank {rank}: the group accepted a call after a failure")
print(f"OK refused rank {rank}", flush=True)
sys.stdout.flush()
os._exit(0)  # the group cannot be destroyed collectively any more
