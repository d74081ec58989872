"""Run under `mpiexec -disable-auto-cleanup` by tests/collectives/test_mpi_faults.py: one rank (VICTIM)
is killed (SIGKILL) or frozen (SIGSTOP) by a timer while it is inside a stream of
all-reduces (it writes the time to <outdir>/struck first); every other rank must leave its
collective with a clear error within the communicator's timeout, find the communicator
unusable, and write one line to <outdir>/rank<r>.txt: error class, seconds from the start
of the failing call to the error, state of the communicator afterwards, message.

    mpiexec -disable-auto-cleanup -n 3 python tests/helpers/mpi_faults.py kill|stop OUTDIR [TIMEOUT]
"""
import os
import signal
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

import ccompress as cc

VICTIM = 1
mode, outdir = sys.argv[1], sys.argv[2]
timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
world = MPI.COMM_WORLD
rank = world.rank
with open(os.path.join(outdir, f"pid{rank}"), "w") as f:  # for the harness's cleanup
    f.write(str(os.getpid()))
comm = cc.Communicator.from_mpi(world, timeout=timeout)
x = np.ones(1 << 18, np.float32)
y = comm.allreduce(x, codec="fp8_e4m3:g128", algo="ring")  # everyone alive: works
assert np.all(y == world.size)
world.Barrier()

if rank == VICTIM:
    sig = signal.SIGKILL if mode == "kill" else signal.SIGSTOP

    def strike():
        with open(os.path.join(outdir, "struck"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), sig)

    threading.Timer(0.2, strike).start()

start = time.monotonic()
try:
    while True:  # the victim never leaves this loop; the others leave it by the error
        start = time.monotonic()
        comm.allreduce(x, codec="fp8_e4m3:g128", algo="ring")
except cc.CCompressError as e:
    elapsed = time.monotonic() - start
    assert not comm.usable
    try:
        comm.allreduce(x[:10])
        after = "usable"
    except cc.CCompressError as e2:
        after = "unusable" if "unusable" in str(e2) else type(e2).__name__
    line = f"{type(e).__name__}\t{elapsed:.3f}\t{after}\t{' '.join(str(e).split())}\n"
    with open(os.path.join(outdir, f"rank{rank}.txt.tmp"), "w") as f:
        f.write(line)
    os.rename(os.path.join(outdir, f"rank{rank}.txt.tmp"), os.path.join(outdir, f"rank{rank}.txt"))
    # hydra may tear the whole job down once one process has left (it fails to talk to the
    # dead one): leave only when every survivor has reported.
    others = [os.path.join(outdir, f"rank{r}.txt") for r in range(world.size) if r != VICTIM]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(os.path.exists(f) for f in others):
        time.sleep(0.05)
# MPI_Finalize would wait for the missing rank: leave without it.
os._exit(0)
