"""algo="hier": exact (or intra-codec) sums inside nodes, compressed between nodes, the result
shared back (all-reduce), or stopping at the owner (reduce-scatter); all-gather forwarding
each encoding inside the nodes; in-process ranks stand for nodes of `ranks_per_node`
consecutive ranks. Every result is checked against the fp64 sum with the bound of both
levels (ccompress.bounds.hier_error_bound) and for bit-identity."""
import numpy as np
import pytest

import ccompress as cc
from ccompress.bounds import hier_error_bound


def _parts(P, n, dtype, seed=0):
    rng = np.random.default_rng([seed, P, n])
    x = rng.standard_normal((P, n)).astype(np.float32)
    x[:, ::7] *= 30.0  # outlier channels, as tensor-parallel activations have
    return x.astype(cc._internal.arrays.numpy_dtype(dtype)) if dtype != "float32" else x


def _run(parts, G, **kw):
    P = parts.shape[0]
    outs = cc.run_inproc(P, lambda c: (c.allreduce(parts[c.rank], algo="hier", **kw),
                                       c.last_stats), ranks_per_node=G)
    return [o for o, _ in outs], [s for _, s in outs]


def _check(parts, G, outs, codec, inter_algo, intra_codec="none", op="sum"):
    dtype = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}.get(
        parts.dtype, "bfloat16")
    for r, y in enumerate(outs):
        assert y.tobytes() == outs[0].tobytes(), f"rank {r} differs from rank 0"
    ref = parts.astype(np.float64).sum(axis=0) / (parts.shape[0] if op == "avg" else 1)
    bound = hier_error_bound(parts, codec, inter_algo, G, intra_codec, op, dtype)
    err = np.abs(outs[0].astype(np.float64) - ref)
    bad = np.flatnonzero(~(err <= bound))
    assert bad.size == 0, f"{bad.size} elements outside the bound, first {bad[:5]}: " \
                          f"err {err[bad[:5]]} bound {bound[bad[:5]]}"
    return err, bound


@pytest.mark.parametrize("P,G", [(8, 2), (8, 4), (16, 4), (16, 8), (32, 8), (64, 8), (64, 16)])
def test_hier_at_scale_bit_identical_and_within_both_levels_bounds(P, G):
    parts = _parts(P, 4097, "float32")
    outs, stats = _run(parts, G, codec="fp8_e4m3:g128", inter_algo="two_shot")
    _check(parts, G, outs, "fp8_e4m3:g128", "two_shot")
    assert {s["algo"] for s in stats} == {"hier"}


@pytest.mark.parametrize("codec", ["fp8_e4m3:g128", "hint8", "nvfp4", "bf16"])
@pytest.mark.parametrize("inter_algo", ["two_shot", "ring", "tree", "one_shot"])
def test_every_inter_node_schedule_and_codec(codec, inter_algo):
    parts = _parts(8, 1000, "float32", seed=1)
    outs, _ = _run(parts, 2, codec=codec, inter_algo=inter_algo)
    _check(parts, 2, outs, codec, inter_algo)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_dtypes_ops_and_a_lossy_intra_codec(dtype, op):
    parts = _parts(8, 333, dtype, seed=2)
    for intra in ("none", "bf16"):
        outs, _ = _run(parts, 4, codec="hint8", inter_algo="two_shot", intra_codec=intra, op=op)
        _check(parts, 4, outs, "hint8", "two_shot", intra, op)


@pytest.mark.parametrize("n", [0, 1, 3, 33])
def test_tensors_smaller_than_a_node(n):
    parts = _parts(8, n, "float32", seed=3)
    outs, _ = _run(parts, 4, codec="fp8_e4m3:g128", inter_algo="ring")
    _check(parts, 4, outs, "fp8_e4m3:g128", "ring")


def test_degenerate_topologies_match_their_flat_schedule():
    parts = _parts(4, 2000, "float32", seed=4)
    # One rank per node: the levels inside nodes vanish, leaving the flat schedule's bits.
    hier, _ = _run(parts, 1, codec="hint8", inter_algo="two_shot")
    flat = cc.simulate.allreduce(list(parts), codec="hint8", algo="two_shot")
    assert hier[0].tobytes() == flat[0].tobytes()
    # One node: an exact reduce-scatter and all-gather, the codec never used.
    one_node, _ = _run(parts, 4, codec="nvfp4")
    exact = cc.simulate.allreduce(list(parts), codec="none", algo="two_shot")
    assert one_node[0].tobytes() == exact[0].tobytes()


@pytest.mark.parametrize("intra", ["none", "bf16"])
def test_in_place_gives_the_same_bits(intra):
    # Each rank's shard lands in its own output before the inter-node level reads it; in
    # place, that output is the input the reduce-scatter is still reading.
    parts = _parts(8, 5000, "float32", seed=5)
    ref, _ = _run(parts, 4, codec="hint8", inter_algo="two_shot", intra_codec=intra)
    work = parts.copy()
    outs = cc.run_inproc(8, lambda c: c.allreduce(work[c.rank], algo="hier", codec="hint8",
                                                  inter_algo="two_shot", intra_codec=intra,
                                                  out=work[c.rank]), ranks_per_node=4)
    for r in range(8):
        assert outs[r].tobytes() == ref[0].tobytes() == work[r].tobytes()


def test_uneven_nodes_raise_clearly():
    with pytest.raises(cc.Unsupported, match="nodes of 4"):
        cc.Communicator.inproc(6, ranks_per_node=4)


def test_hier_needs_a_topology_and_flat_algos_refuse_hier_options():
    def body(c):
        with pytest.raises(cc.InvalidArgument, match="ranks_per_node"):
            c.allreduce(np.ones(8, np.float32), algo="hier")
        with pytest.raises(cc.InvalidArgument, match="algo='hier' only"):
            c.allreduce(np.ones(8, np.float32), algo="two_shot", intra_codec="bf16")
        return True
    assert all(cc.run_inproc(2, body))


def test_ranks_disagreeing_on_the_topology_raise_on_every_rank():
    from ccompress._internal.ranks import on_threads

    group = cc.Communicator.inproc(4)
    for c, g in zip(group, [2, 2, 2, 4]):
        c._ranks_per_node = g  # as if rank 3 had been given another ranks_per_node

    def body(c, r):
        with pytest.raises(cc.MismatchError, match="ranks_per_node"):
            c.allreduce(np.ones(64, np.float32), algo="hier", codec="bf16")
        return True
    assert all(on_threads(group, body))


def test_auto_picks_hier_where_the_cost_model_says_it_pays():
    from ccompress import perfmodel as pm

    fp8 = pm.CodecCost("fp8_e4m3:g128", 1.03, 1e10, 1e10)
    slow_network = pm.System("2 nodes", 8, pm.Link(pm.gbit(1), 5e-6), ranks_per_node=4,
                             intra=pm.Link(100e9, 1e-6), reduce_rate=1e10)
    model = pm.AlgoModel(slow_network, (fp8,))
    n = 1 << 20
    assert model.choose_call(n, 4, fp8.name, 8, 4)[0] == "hier"
    # Without nodes (or with a slow link inside them) the flat schedules stay.
    assert model.choose_call(n, 4, fp8.name, 8, None)[0] != "hier"
    slow_inside = pm.AlgoModel(pm.System("slow node", 8, pm.Link(pm.gbit(100), 5e-6), 4,
                                         pm.Link(pm.gbit(1), 1e-6), reduce_rate=1e10), (fp8,))
    assert slow_inside.choose_call(n, 4, fp8.name, 8, 4)[0] != "hier"

    parts = _parts(8, 4000, "float32", seed=6)
    res = cc.run_inproc(8, lambda c: (c.allreduce(parts[c.rank], codec="fp8_e4m3:g128"),
                                      c.last_stats["algo"]), ranks_per_node=4, model=model)
    assert {a for _, a in res} == {"hier"}
    inter = model.choose_call(4000, 4, fp8.name, 8, 4)[1]
    _check(parts, 4, [y for y, _ in res], "fp8_e4m3:g128", inter)


def _ordered_group(P, G):
    group = cc._core.InprocGroup(P)
    return [cc.Communicator(group.transport(r, ordered=True), _keepalive=group,
                            ranks_per_node=G) for r in range(P)]


@pytest.mark.parametrize("P,G", [(8, 2), (12, 4), (16, 4), (32, 8), (40, 8), (64, 16)])
def test_reduce_scatter_and_allgather_at_scale(P, G):
    from ccompress._internal.ranks import on_threads

    parts = _parts(P, 4097, "float32", seed=8)
    codec = "fp8_e4m3:g128"

    def body(c):
        rs = c.reduce_scatter(parts[c.rank], codec=codec, algo="hier")
        rs_stats = c.last_stats
        ag = c.allgather(parts[c.rank][:300], codec=codec, algo="hier")
        assert c.last_stats["algo"] == "hier"  # the hierarchical plan ran, not the flat one
        flat = c.allgather(parts[c.rank][:300], codec=codec)
        return rs, rs_stats, ag, flat

    res = cc.run_inproc(P, body, ranks_per_node=G)
    ref = parts.astype(np.float64).sum(axis=0)
    bound = hier_error_bound(parts, codec, "two_shot", G, kind="reduce_scatter")
    for r, (rs, stats, ag, flat) in enumerate(res):
        lo, hi = cc._core.chunk_range(parts.shape[1], P, r)
        assert np.all(np.abs(rs.astype(np.float64) - ref[lo:hi]) <= bound[lo:hi]), r
        assert stats["algo"] == "hier" and stats["quantizations"] == 2
        # One encoding of each part, forwarded: the flat all-gather's bits on every rank.
        assert ag.tobytes() == res[0][2].tobytes() == flat.tobytes()
    # Arrival order changes nothing: the ordered (NCCL-style) executor gives the same bits.
    ordered = on_threads(_ordered_group(P, G), lambda c, r: (
        c.reduce_scatter(parts[r], codec=codec, algo="hier"),
        c.allreduce(parts[r], codec=codec, algo="hier")))
    hier, _ = _run(parts, G, codec=codec)
    for r, (rs, ar) in enumerate(ordered):
        assert rs.tobytes() == res[r][0].tobytes() and ar.tobytes() == hier[0].tobytes()


@pytest.mark.parametrize("P,G", [(12, 4), (24, 8), (40, 8)])
def test_odd_node_counts_all_reduce(P, G):
    parts = _parts(P, 1001, "float32", seed=9)
    outs, stats = _run(parts, G, codec="hint8")
    _check(parts, G, outs, "hint8", "two_shot")
    assert {s["quantizations"] for s in stats} == {3}


@pytest.mark.parametrize("op", ["sum", "avg"])
def test_reduce_scatter_dtypes_and_a_lossy_intra_codec(op):
    for dtype in ("float32", "bfloat16"):
        parts = _parts(8, 777, dtype, seed=10)
        res = cc.run_inproc(8, lambda c: c.reduce_scatter(parts[c.rank], codec="hint8", op=op,
                                                          algo="hier", intra_codec="bf16"),
                            ranks_per_node=4)
        ref = parts.astype(np.float64).sum(axis=0) / (8 if op == "avg" else 1)
        bound = hier_error_bound(parts, "hint8", "two_shot", 4, "bf16", op, dtype,
                                 kind="reduce_scatter")
        for r, y in enumerate(res):
            lo, hi = cc._core.chunk_range(777, 8, r)
            assert np.all(np.abs(y.astype(np.float64) - ref[lo:hi]) <= bound[lo:hi]), (dtype, r)


def test_reduce_scatter_and_allgather_refuse_other_algos():
    def body(c):
        with pytest.raises(cc.InvalidArgument, match="algo=None"):
            c.reduce_scatter(np.ones(8, np.float32), algo="ring")
        with pytest.raises(cc.InvalidArgument, match="algo='hier' only"):
            c.reduce_scatter(np.ones(8, np.float32), intra_codec="bf16")
        return True
    assert all(cc.run_inproc(4, body, ranks_per_node=2))
