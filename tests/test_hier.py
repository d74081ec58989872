"""algo="hier": exact (or intra-codec) reduce-scatter inside nodes, a compressed flat
all-reduce between nodes, an all-gather inside nodes; in-process ranks stand for nodes of
`ranks_per_node` consecutive ranks. Every result is checked against the fp64 sum with the
bound of both levels (ccompress.bounds.hier_error_bound) and for bit-identity."""
import numpy as np
import pytest

import ccompress as cc
from ccompress.bounds import hier_error_bound


def _parts(P, n, dtype, seed=0):
    rng = np.random.default_rng([seed, P, n])
    x = rng.standard_normal((P, n)).astype(np.float32)
    x[:, ::7] *= 30.0  # outlier channels, as tensor-parallel activations have
    return x.astype(cc._arrays.numpy_dtype(dtype)) if dtype != "float32" else x


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
    from ccompress._ranks import on_threads

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
