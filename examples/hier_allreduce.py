"""algo="hier" under mpiexec or torchrun: exact inside each node, compressed between nodes.

    .venv/bin/mpiexec -n 4 .venv/bin/python examples/hier_allreduce.py --ranks-per-node 2
    .venv/bin/python -m torch.distributed.run --standalone --nproc_per_node 4 \
        examples/hier_allreduce.py --torch --ranks-per-node 2

On a real cluster leave --ranks-per-node out: from_mpi finds the nodes from MPI's shared-memory
groups, from_torch from torchrun's LOCAL_WORLD_SIZE. On one host both report one node, so the
flag splits the ranks into pretend nodes of that many consecutive ranks. Every rank checks its
result against the fp64 sum with the bound of both levels, and that all ranks hold the same
bits.
"""
from __future__ import annotations

import argparse
import hashlib

import numpy as np

import ccompress as cc
from ccompress.tools.bounds import hier_error_bound


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torch", action="store_true", help="torchrun (from_torch), not mpiexec")
    ap.add_argument("--ranks-per-node", type=int, default=None)
    ap.add_argument("--codec", default="fp8_e4m3:g128")
    args = ap.parse_args()
    kw = {} if args.ranks_per_node is None else {"ranks_per_node": args.ranks_per_node}
    if args.torch:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        comm = cc.Communicator.from_torch(**kw)

        def gather(obj):
            out = [None] * dist.get_world_size()
            dist.all_gather_object(out, obj)
            return out
    else:
        from mpi4py import MPI

        comm = cc.Communicator.from_mpi(MPI.COMM_WORLD, **kw)
        gather = MPI.COMM_WORLD.allgather
    rng = np.random.default_rng(0)
    parts = rng.standard_normal((comm.size, 100_000)).astype(np.float32)
    y = comm.allreduce(parts[comm.rank], codec=args.codec, algo="hier")
    rs = comm.reduce_scatter(parts[comm.rank], codec=args.codec, algo="hier")
    g = comm.ranks_per_node
    exact = parts.astype(np.float64).sum(axis=0)
    ok = bool(np.all(np.abs(y - exact) <= hier_error_bound(parts, args.codec, "two_shot", g)))
    lo, hi = cc._core.chunk_range(parts.shape[1], comm.size, comm.rank)
    rs_bound = hier_error_bound(parts, args.codec, "two_shot", g, kind="reduce_scatter")
    ok &= bool(np.all(np.abs(rs - exact[lo:hi]) <= rs_bound[lo:hi]))
    same = len(set(gather(hashlib.sha256(y.tobytes()).hexdigest()))) == 1
    if comm.rank == 0:
        print(f"{comm.size} ranks, nodes of {g}: allreduce and reduce_scatter within the bound "
              f"on every rank: {all(gather(ok))}; allreduce bit-identical: {same}")
    else:
        gather(ok)
    comm.close()
    return 0 if ok and same else 1


if __name__ == "__main__":
    raise SystemExit(main())
