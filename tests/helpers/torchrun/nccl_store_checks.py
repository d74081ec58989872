"""Run under torchrun (tests/pytorch/test_torchrun.py launches it): the CUDA side of
Communicator.from_torch up to where NCCL would load, on a machine without a GPU. A CUDA
array (an object that says so through __dlpack_device__) sends the call to from_nccl with
the group's store in place of MPI: here, without a GPU, every rank raises (Unsupported);
with a stand-in CUDA module, rank 0's NCCL unique id reaches every rank through the store
and nccl_rank gets (id, size, rank, device); a root that never publishes makes the others
raise CollectiveTimeout. Prints "OK <rank>".
"""
import os

import torch.distributed as dist

import ccompress as cc
import ccompress._internal.transports as ccm  # where from_nccl meets the CUDA module
from helpers.torch_backend.common import final_barrier

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")


class FakeCudaArray:
    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0


def all_same(v):
    got = [None] * size
    dist.all_gather_object(got, v)
    return got


comm = cc.Communicator.from_torch(timeout=30)
try:
    comm.allreduce(FakeCudaArray(), codec="bf16")
except cc.CCompressError as e:
    # What is missing on a machine without a GPU: the CUDA module (a CPU build), libnccl,
    # or (CUDA module and libnccl present) a CUDA device; or NCCL failed on rank 0, and the
    # others timed out waiting for its id.
    assert any(w in str(e) for w in ("CUDA module", "libnccl", "CUDA device", "NCCL")), e
    raised = True
else:
    raised = False
assert all(all_same(raised)), "a CUDA array without a GPU must raise on every rank"


class Loaded(Exception):
    pass


class FakeCuda:
    """The three calls from_nccl makes of ccompress._cuda."""
    made = []

    def nccl_unique_id(self, path):
        assert rank == 0, "only rank 0 makes the id"
        return os.urandom(128)

    def device_count(self):
        return 1

    def nccl_rank(self, uid, n, r, device, path):
        self.made.append((uid, n, r, device, path))
        raise Loaded  # this is where libnccl would start


ccm._cuda_module = lambda: FakeCuda()
ccm._nccl_path = lambda: "/fake/libnccl.so.2"
for call in range(2):  # twice: each call's id under its own store key
    try:
        comm.allreduce(FakeCudaArray(), codec="bf16")
    except Loaded:
        pass
    uid, n, r, device, path = FakeCuda.made[-1]
    assert (n, r, device, path) == (size, rank, 0, "/fake/libnccl.so.2")
    ids = all_same(uid)
    assert len(ids[0]) == 128 and all(i == ids[0] for i in ids), f"call {call}: ids differ"
    if call == 1:
        assert ids[0] != first, "the second call reused the first id"
    first = ids[0]

# A root that never publishes the id: the others raise CollectiveTimeout, not wait forever.
from ccompress._internal.torch_p2p import StoreBroadcast  # noqa: E402

if rank != 0:
    silent = StoreBroadcast(comm._mpi_comm.store, rank, size, "ccompress-test/silent", 2.0)
    try:
        silent.bcast(None)
    except cc.CollectiveTimeout as e:
        assert "did not publish" in str(e), e
    else:
        raise AssertionError("bcast returned without the root")
final_barrier()
print(f"OK {rank}", flush=True)
dist.destroy_process_group()
