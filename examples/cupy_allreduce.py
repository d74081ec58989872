"""Compressed all-reduce of CuPy arrays on the caller's stream (one GPU per rank).

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/cupy_allreduce.py [--codec hint8] [--n 4194304]

Each rank fills a CuPy array on its own non-blocking stream and, without synchronising,
hands the array and the stream to ``comm.allreduce``: the collective is queued on that
stream (after the kernel that wrote x; NCCL between the GPUs), so work queued afterwards on
the same stream sees the result. Rank 0 prints the error against the exact (fp64) average
and the bytes ccompress sent.
"""
import argparse
import sys

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--codec", default="hint8")
    ap.add_argument("--algo", default="two_shot")
    ap.add_argument("--n", type=int, default=1 << 22, help="elements per rank")
    args = ap.parse_args()
    try:
        import cupy as cp
    except ImportError:
        sys.exit("this example needs CuPy and a CUDA GPU: pip install cupy-cuda12x")
    from mpi4py import MPI

    import ccompress as cc

    world = MPI.COMM_WORLD
    cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
    comm = cc.Communicator.from_mpi(world)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        x = cp.random.default_rng(world.rank).standard_normal(args.n, dtype=cp.float32)
        x *= float(world.rank + 1)
        sent = comm.bytes_sent
        y = comm.allreduce(x, codec=args.codec, algo=args.algo, op="avg", stream=stream.ptr)
        norm = cp.linalg.norm(y)  # queued behind the collective on the same stream
    stream.synchronize()
    sent = comm.bytes_sent - sent
    parts = world.gather(cp.asnumpy(x), root=0)
    got = cp.asnumpy(y)
    if world.rank == 0:
        ref = np.mean(np.stack(parts).astype(np.float64), axis=0)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        print(f"{world.size} ranks, {args.n} float32 per rank, codec {args.codec}, "
              f"{args.algo}: relative L2 error {err:.3e}; ||y|| {float(norm):.4g}; "
              f"rank 0 sent {sent / 2**20:.2f} MiB ({sent / args.n:.3f} B/element)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
