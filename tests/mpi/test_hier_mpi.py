"""algo="hier" (allreduce, reduce_scatter, allgather) between real processes: 4 ranks as 2
nodes x 2 (ranks_per_node given, since mpiexec here puts every rank on one host), and the
topology MPI reports on one host."""
import hashlib

import numpy as np
import pytest

import ccompress as cc
from ccompress.bounds import hier_error_bound


def test_one_host_is_one_node(world):
    comm = cc.Communicator.from_mpi(world, timeout=60)
    assert comm.ranks_per_node == world.size  # MPI's shared-memory group spans the host


@pytest.mark.parametrize("codec,inter_algo", [("fp8_e4m3:g128", "two_shot"),
                                              ("hint8", "ring"), ("nvfp4", "one_shot")])
def test_two_nodes_of_two_bit_identical_within_both_levels(world, codec, inter_algo):
    if world.size % 2:
        pytest.skip("needs an even rank count")
    comm = cc.Communicator.from_mpi(world, timeout=60, ranks_per_node=2)
    rng = np.random.default_rng(7)
    parts = rng.standard_normal((world.size, 50_001)).astype(np.float32)
    y = comm.allreduce(parts[world.rank], codec=codec, algo="hier", inter_algo=inter_algo)
    assert comm.last_stats["algo"] == "hier"
    digests = world.allgather(hashlib.sha256(y.tobytes()).hexdigest())
    assert len(set(digests)) == 1, digests
    ref = parts.astype(np.float64).sum(axis=0)
    bound = hier_error_bound(parts, codec, inter_algo, 2)
    err = np.abs(y.astype(np.float64) - ref)
    assert np.all(err <= bound), float((err / bound).max())


def test_two_nodes_of_two_reduce_scatter_and_allgather(world):
    if world.size % 2:
        pytest.skip("needs an even rank count")
    comm = cc.Communicator.from_mpi(world, timeout=60, ranks_per_node=2)
    rng = np.random.default_rng(8)
    parts = rng.standard_normal((world.size, 30_001)).astype(np.float32)
    rs = comm.reduce_scatter(parts[world.rank], codec="hint8", algo="hier")
    assert comm.last_stats["algo"] == "hier"
    lo, hi = cc._core.chunk_range(parts.shape[1], world.size, world.rank)
    ref = parts.astype(np.float64).sum(axis=0)[lo:hi]
    bound = hier_error_bound(parts, "hint8", "two_shot", 2, kind="reduce_scatter")[lo:hi]
    assert np.all(np.abs(rs.astype(np.float64) - ref) <= bound)
    ag = comm.allgather(parts[world.rank][:5000], codec="fp8_e4m3:g128", algo="hier")
    flat = comm.allgather(parts[world.rank][:5000], codec="fp8_e4m3:g128")
    assert ag.tobytes() == flat.tobytes()  # one encoding of each part, forwarded
    digests = world.allgather(hashlib.sha256(ag.tobytes()).hexdigest())
    assert len(set(digests)) == 1, digests
