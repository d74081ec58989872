"""The collectives between real processes (run under mpiexec, see conftest.py; with 4 and
with 3 ranks).

Every check compares against an fp64 reference computed on every rank from the same seed,
and gathers every rank's output bytes to prove they are bit-identical."""
import hashlib
import time

import numpy as np
import pytest

import ccompress as cc
from ccompress._internal.arrays import numpy_dtype
from ccompress.bounds import allreduce_error_bound


@pytest.fixture(scope="module")
def comm(world):
    return cc.Communicator.from_mpi(world, timeout=60)


def parts_for(size, n, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.standard_normal((size, 1)))
    return (rng.standard_normal((size, n)) * scale).astype(numpy_dtype(dtype))


def check_identical(world, y, what):
    digest = hashlib.sha256(np.ascontiguousarray(y).view(np.uint8).tobytes()).hexdigest()
    digests = world.allgather(digest)
    assert len(set(digests)) == 1, f"{what}: ranks differ {digests}"


def rel_l2(y, ref):
    return float(np.linalg.norm(np.asarray(y, np.float64) - ref) / np.linalg.norm(ref))


def test_communicator_is_the_mpi_world(world, comm):
    assert comm.rank == world.rank and comm.size == world.size and comm.transport == "mpi"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_every_schedule_within_bound_and_identical(world, comm, dtype):
    """Every algorithm, none and fp8, odd sizes, sum and avg."""
    rank, size = world.rank, world.size
    for n in (0, 1, 7, 4099, 100_003):
        parts = parts_for(size, n, dtype, seed=n)
        for codec in ("none", "fp8_e4m3:g128"):
            for algo in ("ring", "two_shot", "tree", "one_shot", "auto"):
                for op in ("sum", "avg"):
                    y = comm.allreduce(parts[rank], codec=codec, algo=algo, op=op)
                    what = f"{dtype} n={n} {codec} {algo} {op}"
                    assert y.dtype == parts.dtype and y.shape == (n,), what
                    check_identical(world, y, what)
                    ref = parts.astype(np.float64).sum(axis=0) / (size if op == "avg" else 1)
                    used = comm.last_stats["algo"]
                    bound = allreduce_error_bound(parts, codec, used, op=op, dtype=dtype)
                    err = np.abs(y.astype(np.float64) - ref)
                    assert np.all(err <= bound), (what, float((err / bound).max()))


def test_fp8_relative_error_on_gaussian_data(world, comm):
    """The acceptance numbers on Gaussian float32 data."""
    parts = parts_for(world.size, 1 << 20, seed=7)
    ref = parts.astype(np.float64).sum(axis=0)
    limits = {"two_shot": 4.5e-2, "ring": 6e-2, "tree": 6e-2}
    for algo, limit in limits.items():
        y = comm.allreduce(parts[world.rank], codec="fp8_e4m3:g128", algo=algo)
        check_identical(world, y, algo)
        e = rel_l2(y, ref)
        assert e <= limit, (algo, e)
    y = comm.allreduce(parts[world.rank], codec="none", algo="two_shot")
    assert rel_l2(y, ref) <= 1e-6


def test_in_place_out_and_async(world, comm):
    rank = world.rank
    parts = parts_for(world.size, 1 << 20, seed=7)
    ref = parts.astype(np.float64).sum(axis=0)
    x = parts[rank].copy()
    expected = comm.allreduce(parts[rank], codec="fp8_e4m3:g128", algo="two_shot")
    assert comm.allreduce(x, codec="fp8_e4m3:g128", algo="two_shot", out=x) is x
    assert np.array_equal(x, expected)
    works = [comm.allreduce(parts[rank] * k, codec="fp8_e4m3:g128", async_op=True)
             for k in (1, 2)]
    a, b = (w.wait() for w in works)
    check_identical(world, b, "async")
    assert rel_l2(b, 2 * ref) <= 4.5e-2


def test_reduce_scatter_and_allgather(world, comm):
    rank, size = world.rank, world.size
    parts = parts_for(size, 1 << 20, seed=7)
    ref = parts.astype(np.float64).sum(axis=0)
    rs = comm.reduce_scatter(parts[rank], codec="fp8_e4m3:g128", op="avg")
    lo, hi = cc.chunk_range(parts.shape[1], size, rank)
    bound = allreduce_error_bound(parts, "fp8_e4m3:g128", "reduce_scatter", op="avg")
    assert np.all(np.abs(rs - ref[lo:hi] / size) <= bound[lo:hi])
    ag = comm.allgather(parts[rank][:1000], codec="bf16")
    check_identical(world, ag, "allgather")
    assert np.array_equal(ag[rank], cc.Codec.parse("bf16").roundtrip(parts[rank][:1000]))


@pytest.mark.parametrize("field", ["count", "dtype", "codec", "algo"])
def test_mismatch_raises_on_every_rank_then_the_group_works_on(world, comm, field):
    """One rank passing another count, dtype, codec or algo: MismatchError on every rank
    within seconds, naming that rank; the next call works."""
    rank, size = world.rank, world.size
    odd = rank == size - 1
    n = 101 if (field == "count" and odd) else 100
    dtype = np.float16 if (field == "dtype" and odd) else np.float32
    codec = "bf16" if (field == "codec" and odd) else "fp8_e4m3:g128"
    algo = "ring" if (field == "algo" and odd) else "two_shot"
    start = time.monotonic()
    with pytest.raises(cc.MismatchError) as e:
        comm.allreduce(np.ones(n, dtype), codec=codec, algo=algo)
    elapsed = time.monotonic() - start
    assert elapsed < 5, elapsed
    assert f"rank {size - 1} called" in str(e.value), str(e.value)
    y = comm.allreduce(np.ones(10, np.float32))
    assert np.all(y == size)


def test_transport_does_not_change_a_result(world, comm):
    """The bits of the in-process run (simulate), every codec family and schedule."""
    parts = parts_for(world.size, 20_011, seed=5)
    for codec in ("none", "bf16", "fp8_e4m3:g128:sr", "taco:g128", "hint8", "nvfp4", "hint4"):
        for algo in ("ring", "two_shot", "tree", "one_shot"):
            y = comm.allreduce(parts[world.rank], codec=codec, algo=algo, step=0)
            sim = cc.simulate.allreduce(list(parts), codec=codec, algo=algo)[world.rank]
            assert np.array_equal(y.view(np.uint32), sim.view(np.uint32)), (codec, algo)


def test_derived_communicator(world):
    """Ranks reversed by Split: MPICH hands out its handle as a large unsigned number."""
    rank, size = world.rank, world.size
    rev = cc.Communicator.from_mpi(world.Split(0, size - 1 - rank))
    assert rev.rank == size - 1 - rank and rev.size == size
    got = rev.allgather(np.array([rev.rank], np.float32))
    assert got.reshape(-1).tolist() == list(range(size)), got


def test_mpi_default_slice_means_fewer_messages_same_bits(world, comm):
    """A call without slice_elems is cut by the MPI transport's longer default slice
    (MpiTransport::kSliceElems, 4x DEFAULT_SLICE_ELEMS): the same message headers as with that
    slice_elems given, fewer than with DEFAULT_SLICE_ELEMS, and the same bits as either,
    within the fp64 bound and identical on every rank."""
    slice_elems = comm.slice_elems
    assert slice_elems == 4 * cc._core.DEFAULT_SLICE_ELEMS
    short = cc.Communicator.from_mpi(world, timeout=60, slice_elems=cc._core.DEFAULT_SLICE_ELEMS)
    given = cc.Communicator.from_mpi(world, timeout=60, slice_elems=slice_elems)
    n = world.size * slice_elems + 4099  # two slices per chunk, or five of the short ones
    parts = parts_for(world.size, n, seed=11)
    codec = "fp8_e4m3:g128"
    runs = {}
    for name, c in (("default", comm), ("given", given), ("short", short)):
        y = c.allreduce(parts[world.rank], codec=codec, algo="two_shot")
        runs[name] = (y, c.last_stats["header_bytes"])
    y = runs["default"][0]
    check_identical(world, y, codec)
    if world.rank == 0:  # the ranks hold the same bits: one bound check covers them all
        ref = parts.astype(np.float64).sum(axis=0)
        bound = allreduce_error_bound(parts, codec, "two_shot")
        assert np.all(np.abs(y.astype(np.float64) - ref) <= bound)
    for name in ("given", "short"):
        assert np.array_equal(runs[name][0].view(np.uint32), y.view(np.uint32)), name
    assert runs["default"][1] == runs["given"][1] < runs["short"][1], runs
