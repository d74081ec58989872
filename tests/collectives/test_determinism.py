"""Determinism across configurations. The slice size never changes a result (tested for
every codec family in test_collectives.py); neither does the order or timing in which
messages arrive (ranks delayed at random, many slices in flight), nor the transport (the
same call under mpiexec gives the bits of the in-process run: tests/mpi/test_collectives_mpi.py::
test_transport_does_not_change_a_result). Results
legitimately differ between algorithms (another summation order and number of
quantizations), never between runs or configurations of one algorithm."""
import time

import numpy as np
import pytest

import ccompress as cc
from helpers.common import gaussian_parts, same_bits

ALGOS = ["ring", "two_shot", "tree", "one_shot"]


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("codec", ["none", "bf16", "fp8_e4m3:g128:sr", "hint8", "hint4"])
def test_independent_of_arrival_order(rng, algo, codec):
    parts = gaussian_parts(rng, 4, 30_001)
    ref = cc.simulate.allreduce(list(parts), codec=codec, algo=algo)[0]

    def body(c):
        delay = np.random.default_rng(c.rank)
        outs = []
        for _ in range(3):
            time.sleep(float(delay.uniform(0, 0.01)))  # a different rank arrives last each time
            outs.append(c.allreduce(parts[c.rank], codec=codec, algo=algo, step=0))
        works = [c.allreduce(parts[c.rank], codec=codec, algo=algo, step=0, async_op=True)
                 for _ in range(2)]
        return outs + [w.wait() for w in works]

    res = cc.run_inproc(4, body, slice_elems=1024)  # ~8 slices per chunk in flight
    assert same_bits([ref] + [y for outs in res for y in outs])
