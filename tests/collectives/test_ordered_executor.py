"""The ordered executor (the one NCCL runs: transfer groups posted in one global order, no host
wait in between) on the CPU, over an in-process transport whose groups each complete before
the next is posted, the strictest order a serial comm stream imposes. A group key that made
a rank wait for a peer waiting for it would deadlock here (TimeoutError after 60 s), and the
results must be bit-identical to the host-driven executor's."""
import numpy as np
import pytest

import ccompress as cc
from ccompress import _core
from helpers.common import gaussian_parts, run_on_threads, same_bits, same_bits_or_nan


def ordered_comms(size, **kwargs):
    group = _core.InprocGroup(size)
    comms = [cc.Communicator(group.transport(r, ordered=True), _keepalive=group, **kwargs)
             for r in range(size)]
    assert comms[0].transport == "inproc_ordered"
    return comms


def run_ranks(comms, fn):
    return run_on_threads(comms, lambda c, r: fn(c))


CASES = [
    # (ranks, n, codec, algo, slice)
    (2, 1000, "fp8_e4m3:g32", "ring", 96),
    (3, 4099, "hint8:g32", "ring", 256),
    (4, 777, "none", "two_shot", 64),
    (4, 5000, "fp8_e5m2:g64", "two_shot", 256),
    (5, 3001, "bf16", "tree", 128),
    (7, 2500, "taco:g64", "tree", 256),
    (3, 901, "nvfp4", "one_shot", 256),
    (4, 33, "fp16", "ring", 16),
    (6, 0, "fp8_e4m3:g32", "two_shot", 64),
]


@pytest.mark.parametrize("ranks,n,codec,algo,slice_elems", CASES)
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_ordered_allreduce_matches_host_executor(rng, ranks, n, codec, algo, slice_elems, op):
    parts = gaussian_parts(rng, ranks, n)
    call = lambda c: c.allreduce(parts[c.rank], codec=codec, algo=algo, op=op)  # noqa: E731
    want = cc.run_inproc(ranks, call, slice_elems=slice_elems)
    got = run_ranks(ordered_comms(ranks, slice_elems=slice_elems), call)
    assert same_bits(got)
    assert same_bits_or_nan([got[0], want[0]])


@pytest.mark.parametrize("ranks", [2, 3, 5])
def test_ordered_reduce_scatter_and_allgather_match(rng, ranks):
    parts = gaussian_parts(rng, ranks, 2001, "bfloat16")

    def call(c):
        return (c.reduce_scatter(parts[c.rank], codec="fp8_e4m3:g32"),
                c.allgather(parts[c.rank], codec="hint8:g32"))

    want = cc.run_inproc(ranks, call, slice_elems=128)
    got = run_ranks(ordered_comms(ranks, slice_elems=128), call)
    for r in range(ranks):
        assert same_bits_or_nan([got[r][0], want[r][0]])
        assert same_bits_or_nan([got[r][1], want[r][1]])


def test_group_keys_follow_dependencies(rng):
    """Over several calls with in-place outputs the ordered path stays in step (call numbers
    in the message headers) and keeps giving the host executor's bits."""
    ranks, n = 4, 1500
    parts = gaussian_parts(rng, ranks, n)

    def call(c):
        x = parts[c.rank].copy()
        for algo in ("ring", "two_shot", "tree", "one_shot"):
            c.allreduce(x, codec="fp8_e4m3:g32", algo=algo, out=x)
        return x

    want = cc.run_inproc(ranks, call, slice_elems=64)
    got = run_ranks(ordered_comms(ranks, slice_elems=64), call)
    assert same_bits(got) and same_bits_or_nan([got[0], want[0]])
    assert np.isfinite(got[0]).all()
