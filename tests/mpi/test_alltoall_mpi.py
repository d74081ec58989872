"""All-to-all between real processes (mpiexec; run at 4 and 3 ranks by
tests/collectives/test_mpi.py): uneven splits with empty pieces, every codec family, each
rank's output piece by piece bit for bit its sender's encode + decode and within the codec's
bound against fp64 (every rank builds every rank's input from the seed); splits that
sender and receiver disagree on raise MismatchError on every rank, and the group goes on."""
import numpy as np
import pytest

import ccompress as cc
from helpers.alltoall_checks import CODECS, check_received, inputs, split_table


@pytest.fixture(scope="module")
def comm(world):
    return cc.Communicator.from_mpi(world, timeout=60, slice_elems=128)


@pytest.mark.parametrize("codec", CODECS)
def test_uneven_splits_bit_for_bit_and_within_bound(comm, codec):
    r, P = comm.rank, comm.size
    table = split_table(np.random.default_rng(P), P, 400)
    xs = inputs(5, table, row_shape=(3,))
    y = comm.all_to_all(xs[r], codec=codec, in_splits=table[r], out_splits=table[:, r])
    check_received(y, xs, table, codec, r)


def test_splits_that_disagree_raise_everywhere_then_the_group_goes_on(comm):
    r, P = comm.rank, comm.size
    ins = [2] * P
    if r == P - 1:
        ins[0] = 3  # rank 0 expects 2
    with pytest.raises(cc.MismatchError, match=f"rank {P - 1} sends 3 elements to rank 0"):
        comm.all_to_all(np.ones(sum(ins), np.float32), in_splits=ins, out_splits=[2] * P)
    y = comm.all_to_all(np.full(2 * P, r, np.float32))
    assert np.array_equal(y, np.repeat(np.arange(P, dtype=np.float32), 2))
