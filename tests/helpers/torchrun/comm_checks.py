"""Run under torchrun (tests/pytorch/test_torchrun.py launches it): Communicator.from_torch
over its TCP transport (or gloo point-to-point with CCOMPRESS_TRANSPORT=gloo), no MPI. Every
algo x codec all-reduce (sum and avg), reduce-scatter and
all-gather through from_torch gives the bits ccompress.simulate gives for the same inputs,
within the stated bound of the fp64 reference, bit-identical on every rank; async calls;
a communicator over a subgroup; the NCCL id through the group's store. Prints "OK <rank>".
"""
import hashlib
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import ccompress as cc
from ccompress.bounds import allreduce_error_bound

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)
dist.init_process_group("gloo")
assert "mpi4py.MPI" not in sys.modules, "from_torch must not need MPI"


def part(r, n, seed):
    """Rank r's input, the same on every process (so each can simulate all ranks)."""
    rng = np.random.default_rng([seed, r])
    return (rng.standard_normal(n) * np.exp(rng.standard_normal())).astype(np.float32)


def digests_agree(a, what):
    d = hashlib.sha256(np.ascontiguousarray(a).view(np.uint8).tobytes()).hexdigest()
    got = [None] * size
    dist.all_gather_object(got, d)
    assert len(set(got)) == 1, f"{what}: ranks differ"


comm = cc.Communicator.from_torch(timeout=60)
TRANSPORT = {"tcp": "tcp", "gloo": "torch_gloo"}[os.environ.get("CCOMPRESS_TRANSPORT", "tcp")]
assert (comm.rank, comm.size, comm.transport) == (rank, size, TRANSPORT), comm
assert "mpi4py.MPI" not in sys.modules

# 1. allreduce: every algo x codecs, sum and avg, against simulate bit for bit and fp64.
CODECS = ["none", "bf16", "fp8_e4m3:g128", "hint8", "nvfp4", "taco:g128:sr"]
checked = 0
for seed, n in enumerate([1, 1000, 40_003]):
    parts = [part(r, n, seed) for r in range(size)]
    ref = np.stack(parts).astype(np.float64).sum(axis=0)
    for codec in CODECS:
        for algo in ("ring", "two_shot", "tree", "one_shot"):
            for op in ("sum", "avg"):
                what = f"allreduce n={n} {codec} {algo} {op}"
                y = comm.allreduce(parts[rank], codec=codec, algo=algo, op=op, step=0)
                sim = cc.simulate.allreduce(parts, codec=codec, algo=algo, op=op)[rank]
                assert y.tobytes() == sim.tobytes(), f"{what}: differs from simulate"
                bound = allreduce_error_bound(np.stack(parts), codec, algo, op=op)
                err = np.abs(y.astype(np.float64) - (ref / size if op == "avg" else ref))
                assert np.all(err <= bound), f"{what}: error {err.max()} over the bound"
                digests_agree(y, what)
                checked += 1

# 2. reduce_scatter, allgather, async, in place, bfloat16.
parts = [part(r, 5001, 7) for r in range(size)]
for codec in ("none", "fp8_e4m3:g128", "hint8"):
    rs = comm.reduce_scatter(parts[rank], codec=codec)
    assert rs.tobytes() == cc.simulate.reduce_scatter(parts, codec=codec)[rank].tobytes(), codec
    ag = comm.allgather(parts[rank], codec=codec)
    assert ag.tobytes() == cc.simulate.allgather(parts, codec=codec)[rank].tobytes(), codec
    digests_agree(ag, f"allgather {codec}")
work = comm.allreduce(parts[rank], codec="bf16", algo="two_shot", async_op=True)
y = work.wait()
assert y.tobytes() == cc.simulate.allreduce(parts, codec="bf16", algo="two_shot")[rank].tobytes()
x = torch.from_numpy(parts[rank].copy()).to(torch.bfloat16)
out = comm.allreduce(x, codec="fp8_e4m3:g128", out=x)  # a torch tensor, in place
assert out is x and out.dtype == torch.bfloat16
digests_agree(x.view(torch.int16).numpy(), "bf16 in place")
assert comm.bytes_sent > 0

# 2b. A rank that calls with another count: MismatchError on every rank, and the
#     communicator stays usable (the call check exchanges headers first).
try:
    comm.allreduce(np.ones(10 + (rank == 0), np.float32), codec="bf16")
except cc.MismatchError as e:
    mismatch = str(e)
else:
    mismatch = None
got = [None] * size
dist.all_gather_object(got, mismatch is not None)
assert all(got), f"MismatchError on ranks {got}"
assert comm.usable
y = comm.allreduce(np.ones(7, np.float32))
assert np.all(y == size), y

# 3. A subgroup (ranks 1.. in reverse order) made collectively by its members only.
if size >= 3:
    members = list(range(size - 1, 0, -1))
    sub = dist.new_group(members, use_local_synchronization=True) if rank in members else None
    if rank in members:
        sc = cc.Communicator.from_torch(sub, timeout=60)
        assert sc.size == size - 1 and sc.rank == dist.get_rank(sub), (sc, rank)
        sub_parts = [part(members[g], 333, 9) for g in range(size - 1)]
        y = sc.allreduce(sub_parts[sc.rank], codec="hint8", algo="ring")
        sim = cc.simulate.allreduce(sub_parts, codec="hint8", algo="ring")[sc.rank]
        assert y.tobytes() == sim.tobytes(), "subgroup"
    dist.barrier()

# 3b. A ProcessGroupGloo made directly from a store (as a torch.distributed backend makes
#     its inner group): used as it is (over gloo), or its store to meet over TCP; the store
#     carries the NCCL id too.
from datetime import timedelta  # noqa: E402

store = dist.PrefixStore("ccompress-test-inner", dist.distributed_c10d._get_default_store())
inner = dist.ProcessGroupGloo(store, rank, size, timedelta(seconds=60))
ic = cc.Communicator.from_torch(inner, store=store, timeout=60)
assert (ic.rank, ic.size) == (rank, size)
y = ic.allreduce(parts[rank], codec="fp8_e4m3:g128", algo="two_shot")
assert y.tobytes() == cc.simulate.allreduce(parts, "fp8_e4m3:g128", "two_shot")[rank].tobytes()
assert ic._mpi_comm.bcast(b"id" if rank == 0 else None) == b"id"
# Made outside torch.distributed, the group is not stopped by destroy_process_group: a gloo
# group left to the interpreter's teardown can abort the process at exit ("terminate called
# without an active exception"), so its threads stop here, as the backend stops its own.
ic.close()
inner.shutdown()
del inner

# 4. The NCCL id's way through the store: the same bytes on every rank, twice in a row.
from ccompress._internal.torch_p2p import StoreBroadcast  # noqa: E402

b = comm._mpi_comm
assert isinstance(b, StoreBroadcast) and (b.Get_rank(), b.Get_size()) == (rank, size)
for k in range(2):
    uid = os.urandom(128) if rank == 0 else None
    got = b.bcast(uid, root=0)
    assert isinstance(got, bytes) and len(got) == 128
    digests_agree(np.frombuffer(got, np.uint8), f"store bcast {k}")

# 5. Node topology from torchrun (LOCAL_WORLD_SIZE: one standalone node holds every rank), and
#    algo="hier" over nodes of 2 given explicitly: the bits of in-process ranks in that layout.
assert comm.ranks_per_node == int(os.environ["LOCAL_WORLD_SIZE"]) == size
if size % 2 == 0:
    hc = cc.Communicator.from_torch(timeout=60, ranks_per_node=2)
    y = hc.allreduce(parts[rank], codec="hint8", algo="hier", inter_algo="two_shot")
    want = cc.run_inproc(size, lambda c: c.allreduce(parts[c.rank], codec="hint8", algo="hier",
                                                     inter_algo="two_shot"), ranks_per_node=2)
    assert y.tobytes() == want[rank].tobytes(), "hier under torchrun"
    digests_agree(y, "hier under torchrun")
    hc.close()

comm.barrier()
comm.close()
print(f"rank {rank}: {checked} all-reduces over {size} ranks equal simulate's bits", flush=True)
dist.destroy_process_group()
print(f"OK {rank}", flush=True)
