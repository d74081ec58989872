"""The alpha-beta model's formulas, checked against hand computations."""
import pytest

from ccompress import perfmodel as pm


def system(ranks=4, gbit=1.0, alpha=0.0):
    return pm.System("t", ranks, pm.Link(pm.gbit(gbit), alpha, per_message=0.0),
                     slice_elems=1)


def test_transfer_bound_two_shot_matches_hand_count():
    # 4 ranks, 1 byte per element, kernels infinitely fast: the time is the bytes a rank
    # sends (2 (p-1)/p n) over the link, plus one slice's transfer.
    n = 1 << 20
    c = pm.CodecCost("x", 1.0, float("inf"), float("inf"))
    t = pm.collective_time(system(), n, 4, c, "two_shot")
    assert t == pytest.approx(2 * 3 / 4 * n / pm.gbit(1) + 1 / pm.gbit(1))


def test_kernel_bound_when_codec_is_slow():
    n = 1 << 20
    c = pm.CodecCost("slow", 1.0, 1e6, 1e6)
    t = pm.collective_time(system(gbit=1000), n, 4, c, "two_shot")
    kernels = n / 1e6 + n / 1e6 + n / 4 / 1e6 + n / 1e6
    assert t == pytest.approx(kernels, rel=1e-3)


def test_baseline_is_the_better_of_ring_and_tree():
    n = 1 << 20
    s = pm.System("t", 4, pm.Link(pm.gbit(1), 0.0), reduce_rate=float("inf"))
    assert pm.baseline_time(s, n, 4) == pytest.approx(2 * 3 / 4 * n * 4 / pm.gbit(1))
    slow = pm.System("t", 1024, pm.Link(pm.gbit(100), 1e-3), reduce_rate=float("inf"))
    tree = 2 * n * 4 / pm.gbit(100) + 2 * 10 * 1e-3
    assert pm.baseline_time(slow, n, 4) == pytest.approx(tree)


def test_compression_pays_on_slow_links_only():
    n = 16 << 20
    fp8 = pm.CodecCost("fp8", 1.03, 0.5e9, 1.3e9)
    slow, fast = system(gbit=1), system(gbit=400)
    assert pm.collective_time(slow, n, 4, fp8, "two_shot") < pm.baseline_time(slow, n, 4) / 3
    assert pm.collective_time(fast, n, 4, fp8, "two_shot") > pm.baseline_time(fast, n, 4)


def test_best_respects_the_error_budget():
    n = 1 << 20
    a = pm.CodecCost("a", 0.5, 1e12, 1e12)
    b = pm.CodecCost("b", 2.0, 1e12, 1e12)
    errors = {("a", "two_shot"): 0.1, ("b", "two_shot"): 0.001}
    t, codec, algo = pm.best(system(), n, 4, [a, b], errors, budget=0.01)
    assert (codec, algo) == ("b", "two_shot")
    _, codec, _ = pm.best(system(), n, 4, [a, b])
    assert codec == "a"
    with pytest.raises(ValueError):
        pm.best(system(), n, 4, [a], errors, budget=1e-6)


def test_choose_algo_is_the_argmin_of_the_model():
    fp8 = pm.CodecCost("fp8", 1.03, 0.5e9, 1.3e9)
    slow_latency = pm.System("t", 8, pm.Link(pm.gbit(100), 1e-3, per_message=0.0))
    for n in (1 << 8, 1 << 14, 1 << 20, 1 << 26):
        times = {a: pm.collective_time(slow_latency, n, 4, fp8, a) for a in pm.ALGOS}
        assert pm.choose_algo(slow_latency, n, 4, fp8) == min(times, key=times.get)
    # Latency-bound small messages want few rounds; on a slow link large ones want the
    # fewest bytes in the fewest rounds (two_shot: ring sends as much in more rounds).
    assert pm.choose_algo(slow_latency, 256, 4, fp8) == "one_shot"
    slow_link = pm.System("t", 8, pm.Link(pm.gbit(1), 1e-3, per_message=0.0))
    assert pm.choose_algo(slow_link, 1 << 26, 4, fp8) == "two_shot"


def test_algo_model_feeds_auto_on_every_rank():
    import numpy as np

    import ccompress as cc

    fp8 = cc.Codec.parse("fp8_e4m3:g128")
    # A latency-bound system makes one_shot the pick for small sizes (the built-in
    # heuristic would pick two_shot above 64 KiB); the model's pick must be what runs, on
    # every rank, and give exactly what an explicit call with that algo gives.
    cost = pm.CodecCost(fp8.name, fp8.wire_bytes(1 << 20) / (1 << 20), 1e9, 1e9)
    model = pm.AlgoModel(pm.System("t", 1, pm.Link(pm.gbit(100), 10e-3, per_message=0.0)),
                         (cost,))
    n = 1 << 15
    expect = model.choose(n, 4, fp8.name, 4)
    assert expect == "one_shot"
    assert cc.Communicator.inproc(1)[0]._model is None

    def body(comm):
        x = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
        y = comm.allreduce(x, codec=fp8, algo="auto")
        algo = comm.last_stats["algo"]
        z = comm.allreduce(x, codec=fp8, algo=expect)
        unknown = comm.allreduce(x, codec="bf16", algo="auto")  # no cost: built-in heuristic
        return y, z, algo, comm.last_stats["algo"], unknown

    res = cc.run_inproc(4, body, model=model)
    for y, z, algo, fallback, _ in res:
        assert algo == expect
        assert fallback == cc._core.choose_algo(n, "float32", cc.Codec.parse("bf16")._c, 4)
        np.testing.assert_array_equal(y, z)
        np.testing.assert_array_equal(y, res[0][0])
    with pytest.raises(cc.InvalidArgument, match="AlgoModel"):
        cc.Communicator.inproc(2, model="fast")
