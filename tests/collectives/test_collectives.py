"""All-reduce, reduce-scatter and all-gather over in-process ranks (threads as ranks).

Each test builds its own fp64 (or exact fp32 re-composition) reference next to the
assertion and checks bit-identical output on every rank."""
import numpy as np
import pytest

import ccompress as cc
from ccompress.bounds import allreduce_error_bound
from helpers.common import gaussian_parts, rel_l2, same_bits

ALGOS = ["ring", "two_shot", "tree", "one_shot"]
SIZES = [0, 1, 2, 7, 128, 129, 1000, 10007]


@pytest.mark.parametrize("algo", ALGOS + ["auto"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("codec", ["none", "fp8_e4m3:g128"])
def test_allreduce_bounds_and_bit_identity(rng, algo, nranks, codec):
    for n in SIZES:
        parts = gaussian_parts(rng, nranks, n)
        comms_stats = []

        def body(c):
            y = c.allreduce(parts[c.rank], codec=codec, algo=algo)
            comms_stats.append(c.last_stats["algo"])
            return y

        res = cc.run_inproc(nranks, body, slice_elems=256)
        assert same_bits(res), (n, "ranks differ")
        ref = parts.astype(np.float64).sum(axis=0)
        used = comms_stats[0]
        assert all(s == used for s in comms_stats)
        bound = allreduce_error_bound(parts, codec, used)
        err = np.abs(res[0].astype(np.float64) - ref)
        assert np.all(err <= bound), (n, float((err / bound).max()))
        if codec == "none" and n:
            assert rel_l2(res[0], ref) <= 1e-6


def _rt(codec, x):
    return cc.Codec.parse(codec).roundtrip(np.ascontiguousarray(x, dtype=np.float32))


def _expected(parts, codec, algo, op):
    """The schedule re-composed from single-codec round trips in fp32, in the order the
    schedules promise (rank order for sums, decode(partial) + x for ring hops, own +
    left + right in the tree)."""
    P, n = parts.shape
    div = np.float32(P if op == "avg" else 1)
    out = np.empty(n, np.float32)
    if P == 1:
        return _rt(codec, parts[0] / div)
    if algo in ("two_shot", "ring"):
        for c in range(P):
            lo, hi = cc.chunk_range(n, P, c)
            x = parts[:, lo:hi]
            if algo == "two_shot":
                acc = _rt(codec, x[0])
                for p in range(1, P):
                    acc = acc + _rt(codec, x[p])
                out[lo:hi] = _rt(codec, acc / div)
            else:
                partial = _rt(codec, x[c])
                for k in range(1, P):
                    s = partial + x[(c + k) % P]
                    partial = _rt(codec, s / div if k == P - 1 else s)
                out[lo:hi] = partial
        return out
    if algo == "one_shot":
        acc = _rt(codec, parts[0])
        for p in range(1, P):
            acc = acc + _rt(codec, parts[p])
        return acc / div
    if algo == "tree":
        def subtree(r):
            acc = parts[r].astype(np.float32)
            for ch in (2 * r + 1, 2 * r + 2):
                if ch < P:
                    acc = acc + subtree(ch)
            return _rt(codec, acc / div if r == 0 else acc)
        return subtree(0)
    raise AssertionError(algo)


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("codec", ["none", "fp8_e4m3:g128", "fp8_e5m2:g32", "bf16"])
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_schedule_matches_recomposition(rng, algo, nranks, codec, op):
    """Bit-exact against the schedule rebuilt from Codec round trips in NumPy."""
    parts = gaussian_parts(rng, nranks, 3001)
    res = cc.simulate.allreduce(list(parts), codec=codec, algo=algo, op=op, slice_elems=512)
    expected = _expected(parts, codec, algo, op)
    assert same_bits(res)
    np.testing.assert_array_equal(res[0], expected)


@pytest.mark.parametrize("algo,limit", [("two_shot", 4.5e-2), ("ring", 6e-2), ("tree", 6e-2),
                                        ("one_shot", 4.5e-2)])
def test_fp8_relative_error_at_four_ranks(rng, algo, limit):
    parts = gaussian_parts(rng, 4, 100_003)
    res = cc.simulate.allreduce(list(parts), codec="fp8_e4m3:g128", algo=algo)
    ref = parts.astype(np.float64).sum(axis=0)
    assert same_bits(res)
    assert rel_l2(res[0], ref) <= limit


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("codec", ["none", "fp8_e4m3:g128", "bf16"])
@pytest.mark.parametrize("algo", ALGOS)
def test_16bit_inputs(rng, dtype, codec, algo):
    parts = gaussian_parts(rng, 4, 4099, dtype)
    for op in ("sum", "avg"):
        res = cc.simulate.allreduce(list(parts), codec=codec, algo=algo, op=op, slice_elems=1024)
        assert res[0].dtype == parts.dtype
        assert same_bits(res)
        ref = parts.astype(np.float64).sum(axis=0) / (4 if op == "avg" else 1)
        used = algo
        bound = allreduce_error_bound(parts, codec, used, op=op, dtype=dtype)
        err = np.abs(res[0].astype(np.float64) - ref)
        assert np.all(err <= bound), float((err / bound).max())


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("codec", ["fp8_e4m3:g64", "fp8_e4m3:g128:sr", "taco:g128", "hint8",
                                   "hint8:g32:s16:sr", "nvfp4", "hnvfp4:g16", "hint4", "mxfp8",
                                   "mxfp4"])
def test_deterministic_and_independent_of_slice_size(rng, algo, codec):
    """Slices are multiples of every scale group, rotation block and run scale, and rounding
    noise follows the global element index: any slice size gives the same bits. 140,011
    elements: more than one 65536-element piece (nvfp4, hint4) per chunk. The MX families
    have 32-element blocks and no pieces, and their 32-element slice unit makes each
    one-element-slice run thousands of messages: 20,011 elements cover them."""
    parts = gaussian_parts(rng, 3, 20_011 if codec.startswith("mx") else 140_011)
    runs = [cc.simulate.allreduce(list(parts), codec=codec, algo=algo, slice_elems=s)
            for s in (1, 5000, 1, None)]
    assert same_bits([r[0] for r in runs] + runs[0])


@pytest.mark.parametrize("algo", ALGOS)
def test_in_place_and_out(rng, algo):
    parts = gaussian_parts(rng, 3, 5000)
    expected = cc.simulate.allreduce(list(parts), codec="fp8_e4m3:g128", algo=algo)[0]

    def body(c):
        x = parts[c.rank].copy()
        y = c.allreduce(x, codec="fp8_e4m3:g128", algo=algo, out=x)
        assert y is x
        out = np.full(5000, np.nan, np.float32)
        z = c.allreduce(parts[c.rank], codec="fp8_e4m3:g128", algo=algo, out=out)
        assert z is out
        return x, out

    for x, out in cc.run_inproc(3, body, slice_elems=256):
        np.testing.assert_array_equal(x, expected)
        np.testing.assert_array_equal(out, expected)


def test_async_handles_keep_order(rng):
    parts = gaussian_parts(rng, 4, 3000)

    def body(c):
        works = [c.allreduce(parts[c.rank] * (k + 1), codec="fp8_e4m3:g128", async_op=True)
                 for k in range(3)]
        sync = c.allreduce(parts[c.rank], codec="none")
        return [w.wait() for w in works], sync

    res = cc.run_inproc(4, body)
    for k in range(3):
        expected = cc.simulate.allreduce(list(parts * (k + 1)), codec="fp8_e4m3:g128")[0]
        for works, _ in res:
            np.testing.assert_array_equal(works[k], expected)
    ref = parts.astype(np.float64).sum(axis=0)
    assert rel_l2(res[0][1], ref) <= 1e-6
    assert same_bits([s for _, s in res])


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("codec", ["none", "fp8_e4m3:g128"])
def test_reduce_scatter(rng, nranks, codec):
    for n in (0, 1, 5, 1001):
        parts = gaussian_parts(rng, nranks, n)
        res = cc.simulate.reduce_scatter(list(parts), codec=codec, op="avg")
        ref = parts.astype(np.float64).mean(axis=0)
        bound = allreduce_error_bound(parts, codec, "reduce_scatter", op="avg")
        pieces = []
        for r, y in enumerate(res):
            lo, hi = cc.chunk_range(n, nranks, r)
            assert y.shape == (hi - lo,)
            assert np.all(np.abs(y - ref[lo:hi]) <= bound[lo:hi])
            pieces.append(y)
        assert sum(p.size for p in pieces) == n


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("codec", ["none", "fp8_e4m3:g128", "bf16"])
def test_allgather(rng, nranks, codec):
    parts = gaussian_parts(rng, nranks, 777).reshape(nranks, 7, 111)
    res = cc.simulate.allgather(list(parts), codec=codec)
    assert same_bits(res)
    assert res[0].shape == (nranks, 7, 111)
    for r in range(nranks):
        np.testing.assert_array_equal(res[0][r], cc.Codec.parse(codec).roundtrip(parts[r]))


def test_nan_stays_in_its_element(rng):
    parts = gaussian_parts(rng, 4, 1024)
    parts[2, 300] = np.nan
    parts[1, 700] = np.inf
    for codec in ("fp8_e4m3:g128", "fp8_e5m2:g128", "none"):
        y = cc.simulate.allreduce(list(parts), codec=codec, algo="two_shot")[0]
        bad = np.flatnonzero(~np.isfinite(y))
        assert list(bad) == [300, 700], (codec, bad)
        assert np.isnan(y[300])


def test_stats_count_bytes(rng):
    n = 40_000
    parts = gaussian_parts(rng, 4, n)

    def body(c):
        c.allreduce(parts[c.rank], codec="fp8_e4m3:g128", algo="two_shot")
        return dict(c.last_stats), c.bytes_sent

    res = cc.run_inproc(4, body)
    codec = cc.Codec.parse("fp8_e4m3:g128")
    for r, (stats, sent) in enumerate(res):
        assert stats["quantizations"] == 2
        assert stats["payload_bytes"] + stats["header_bytes"] == sent
        # Rank r sends 3 foreign chunks and 3 copies of its own reduced chunk.
        lo, hi = cc.chunk_range(n, 4, r)
        own = codec.wire_bytes(hi - lo)
        others = sum(codec.wire_bytes(b - a) for a, b in
                     (cc.chunk_range(n, 4, c) for c in range(4) if c != r))
        assert stats["payload_bytes"] == others + 3 * own


@pytest.mark.parametrize("codec", ["fp8_e5m2:g32", "fp8_e4m3:g128:sr", "taco:g128",
                                   "taco_e5m2:g64", "hint8", "hint8:g32:s16", "hint8:g64:s32:sr",
                                   "nvfp4", "hnvfp4:g16", "hint4", "hint4:g32:s16:sr", "mxfp8",
                                   "mxfp8_e5m2", "mxfp4"])
@pytest.mark.parametrize("algo", ALGOS)
def test_every_codec_within_its_bound(rng, codec, algo):
    """Outlier columns every 97 elements, odd sizes, one to five ranks: the bound of
    ccompress.bounds (per-codec constants, rotations mapped back) holds and ranks agree."""
    for nranks, n in ((1, 777), (3, 5003), (5, 1001)):
        parts = gaussian_parts(rng, nranks, n)
        parts[:, ::97] *= 30
        res = cc.simulate.allreduce(list(parts), codec=codec, algo=algo)
        assert same_bits(res)
        err = np.abs(res[0].astype(np.float64) - parts.astype(np.float64).sum(axis=0))
        bound = allreduce_error_bound(parts, codec, algo)
        assert np.all(err <= bound), (nranks, n, float((err / bound).max()))
