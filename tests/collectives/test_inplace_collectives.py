"""In-place all-gather and reduce-scatter as FSDP2 and ZeRO-style code call them, on in-process
ranks: the all-gather's input is this rank's chunk of its output, the reduce-scatter's output
is this rank's slice of its input. Every rank computes what separate buffers give (bit for
bit), whatever the addresses, so no rank refuses a call its peers run."""
import numpy as np
import pytest

import ccompress as cc
from ccompress.communicator import run_inproc

CODECS = ["none", "bf16", "fp8_e4m3:g128", "hint8"]


def _parts(size, n, seed=0):
    return [np.random.default_rng([seed, r]).standard_normal(n).astype(np.float32)
            for r in range(size)]


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("codec", CODECS)
def test_allgather_input_inside_output(size, codec):
    n = 1000
    parts = _parts(size, n)

    def run(comm):
        ref = comm.allgather(parts[comm.rank], codec=codec)
        buf = np.zeros(size * n, np.float32)
        mine = buf[comm.rank * n:(comm.rank + 1) * n]
        mine[:] = parts[comm.rank]
        got = comm.allgather(mine, codec=codec, out=buf)
        return np.asarray(ref).reshape(-1), np.asarray(got).reshape(-1), buf

    for ref, got, buf in run_inproc(size, run):
        assert got.tobytes() == ref.tobytes() and buf.tobytes() == ref.tobytes()


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("codec", CODECS)
def test_reduce_scatter_output_is_own_slice(size, codec):
    n = 999 * size

    def run(comm):
        x = _parts(size, n, seed=1)[comm.rank]
        ref = comm.reduce_scatter(x.copy(), codec=codec)
        lo, hi = cc._core.chunk_range(n, size, comm.rank)
        buf = x.copy()
        got = comm.reduce_scatter(buf, codec=codec, out=buf[lo:hi])
        return ref, got, buf[lo:hi], x

    for r, (ref, got, inside, x) in enumerate(run_inproc(size, run)):
        assert got.tobytes() == ref.tobytes() and inside.tobytes() == ref.tobytes(), r


def test_other_overlaps_compute_as_separate_buffers():
    """Any overlap (not only the framework forms) reads a copy of the input: one rank, so
    the all-reduce is the identity and the all-gather a copy."""
    (comm,) = cc.Communicator.inproc(1)
    big = np.arange(32, dtype=np.float32)
    expect = big[:16].copy()
    comm.allreduce(big[:16], out=big[8:24])
    assert np.array_equal(big[8:24], expect)
    x = np.arange(16, dtype=np.float32)
    assert np.array_equal(comm.allgather(x, out=x).reshape(-1), np.arange(16))


def test_same_verdict_on_every_rank():
    """Rank 0's in-place form starts at the input's address, rank 1's does not: both run."""
    def run(comm):
        buf = np.ones(2 * 64, np.float32)
        return comm.allgather(buf[comm.rank * 64:(comm.rank + 1) * 64], out=buf).sum()

    assert run_inproc(2, run) == [128.0, 128.0]


def test_a_check_that_fails_on_one_rank_fails_on_all():
    """7 elements over 2 ranks: chunks of 4 and 3. An output of 3 elements on both ranks is
    right for rank 1 only: rank 0 raises InvalidArgument, rank 1 MismatchError, at once, and
    the next call runs on both (no rank waits for a call its peer never made)."""
    def run(comm):
        try:
            comm.reduce_scatter(np.ones(7, np.float32), out=np.zeros(3, np.float32))
        except cc.CCompressError as e:
            got = type(e)
        else:
            got = None
        return got, float(comm.allreduce(np.ones(8, np.float32)).sum()), comm.usable

    (e0, s0, u0), (e1, s1, u1) = run_inproc(2, run, timeout=30)
    assert (e0, e1) == (cc.InvalidArgument, cc.MismatchError)
    assert s0 == s1 == 16.0 and u0 and u1


def test_a_check_that_fails_on_every_rank_keeps_the_steps():
    def run(comm):
        try:
            comm.allreduce(np.ones(8, np.float32), out=np.zeros(5, np.float32))
        except cc.InvalidArgument:
            pass
        return comm._step

    assert run_inproc(3, run, timeout=30) == [0, 0, 0]
