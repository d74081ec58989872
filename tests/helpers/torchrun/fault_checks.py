"""Run by tests/pytorch/test_torchrun.py as N env:// processes: after a few good all-reduces over
Communicator.from_torch, the last rank stops ("silent": sleeps past the timeout; "killed":
exits at once). Every other rank must raise within the communicator's timeout (a silent peer:
CollectiveTimeout), and its communicator must then refuse further calls. Survivors print
"RAISED <rank>" and "OK <rank>".
"""
import os
import sys
import time

import numpy as np
import torch.distributed as dist

import ccompress as cc

TIMEOUT = 5.0
fault = sys.argv[1]
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")
comm = cc.Communicator.from_torch(timeout=TIMEOUT)
x = np.full(100_000, float(rank + 1), np.float32)
for _ in range(3):
    y = comm.allreduce(x, codec="bf16", algo="two_shot")
    assert np.all(y == size * (size + 1) / 2), y[:4]

if rank == size - 1:  # the peer that stops
    if fault == "killed":
        os._exit(3)
    time.sleep(2 * TIMEOUT)
    os._exit(0)

t0 = time.monotonic()
try:
    comm.allreduce(x, codec="bf16", algo="two_shot")
except cc.CCompressError as e:
    elapsed = time.monotonic() - t0
    print(f"rank {rank}: {type(e).__name__} after {elapsed:.1f} s: {e}", flush=True)
    assert elapsed < TIMEOUT + 3.0, f"raised after {elapsed:.1f} s, timeout {TIMEOUT} s"
    if fault == "silent":
        assert isinstance(e, cc.CollectiveTimeout), type(e)
        assert elapsed < 2 * TIMEOUT  # before the silent peer woke up
    assert ".cc:" not in str(e).split(" [")[0], f"a source path in the message: {e}"
    assert "GLHF" not in str(e), e
    print(f"RAISED {rank}", flush=True)
else:
    raise AssertionError("the all-reduce with a stopped peer returned")
assert not comm.usable
try:
    comm.allreduce(x)
except cc.CCompressError as e:
    assert "unusable" in str(e), e
else:
    raise AssertionError("a broken communicator accepted another call")
print(f"OK {rank}", flush=True)
# The group has lost a member: skip the collective teardown that would wait for it.
os._exit(0)
