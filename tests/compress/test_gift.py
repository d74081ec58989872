"""GIFT: the rank-r + diagonal factor against dense fp64 algebra, the transformed all-reduce
against the exact mean, identical state on every rank, layer selection, checkpoints."""
import hashlib

import numpy as np
import pytest

import ccompress as cc
from ccompress.compressors.gift import NumpyGIFT as GIFT, Whitening

P = 4


def anisotropic_moment(rng, d, tokens=400):
    """x^T x / tokens of activations with a few strong directions (like real inputs)."""
    x = rng.standard_normal((tokens, d)) * (0.2 + np.exp(rng.standard_normal(d)))
    x[:, :3] += 8 * rng.standard_normal((tokens, 1))
    return x.T @ x / tokens, x


def test_whitening_factor_matches_dense_algebra(rng):
    a, _ = anisotropic_moment(rng, 40)
    w = Whitening(a, rank=6, damping=1e-3)
    lam, u = np.linalg.eigh(a)
    lam, u = lam[::-1][:6], u[:, ::-1][:, :6]
    diag = np.maximum(np.diag(a) - (u * u) @ lam, 1e-3 * np.trace(a) / 40)
    a_hat = u @ np.diag(lam) @ u.T + np.diag(diag)
    l_dense = w.dense()
    assert np.abs(l_dense @ l_dense.T - a_hat).max() < 1e-10 * np.abs(a_hat).max()
    g = rng.standard_normal((7, 40))
    assert np.allclose(w.to_wire(g), g @ np.linalg.inv(l_dense).T, rtol=1e-9, atol=1e-12)
    assert np.allclose(w.from_wire(w.to_wire(g)), g, rtol=1e-10, atol=1e-12)


def run_gift(rng, codec, steps=3, error_feedback=True):
    d_in, d_out = 48, 20
    moments = [anisotropic_moment(rng, d_in)[0] for _ in range(P)]
    grads = [[{"w": rng.standard_normal((d_out, d_in)).astype(np.float32) @
               np.diag(np.linspace(0.1, 3, d_in)).astype(np.float32),
               "b": rng.standard_normal(d_out).astype(np.float32)} for _ in range(P)]
             for _ in range(steps)]

    def body(comm):
        gift = GIFT(codec=codec, rank=8, error_feedback=error_feedback)
        gift.observe(comm, {"w": moments[comm.rank]})
        gift.layers = ["w"]
        outs = [gift.allreduce(comm, g[comm.rank]) for g in grads]
        return outs, gift

    return body, moments, grads


def test_exact_codec_gives_the_mean_and_identical_state(rng):
    body, moments, grads = run_gift(rng, "none", steps=2)
    res = cc.run_inproc(P, body)
    outs, gift = res[0]
    a = np.mean([m.astype(np.float32).astype(np.float64) for m in moments], axis=0)
    assert np.abs(gift.second_moment["w"] - a).max() < 1e-6 * np.abs(a).max()
    for t in range(2):
        for k in ("w", "b"):
            ref = np.mean([g[k].astype(np.float64) for g in grads[t]], axis=0)
            assert np.abs(outs[t][k] - ref).max() < 1e-5 * np.abs(ref).max(), k
    digests = {hashlib.sha256(r[1].second_moment["w"].tobytes() + r[1].factors["w"].q.tobytes()
                              + r[0][1]["w"].tobytes()).hexdigest() for r in res}
    assert len(digests) == 1


@pytest.mark.parametrize("codec", ["fp8_e4m3:g128", "hint8:g32", "nvfp4"])
def test_lossy_codecs_bit_identical_with_feedback_identity(rng, codec):
    body, _, grads = run_gift(rng, codec, steps=4)
    res = cc.run_inproc(P, body)
    for t in range(4):
        assert len({r[0][t]["w"].tobytes() for r in res}) == 1
    # Error feedback in the transformed coordinates: sum_t out_t ~ sum_t mean G with the
    # remaining residual mapped back (only the last step's error remains, not the sum).
    total = sum(res[0][0][t]["w"].astype(np.float64) for t in range(4))
    ref = sum(np.mean([g["w"].astype(np.float64) for g in grads[t]], axis=0) for t in range(4))
    one = np.linalg.norm(res[0][0][3]["w"] - np.mean([g["w"] for g in grads[3]], axis=0))
    assert np.linalg.norm(total - ref) < 2.5 * one


def test_selection_is_measured_and_agreed(rng):
    a, x = anisotropic_moment(rng, 64, tokens=2000)
    iso = np.eye(32)

    def body(comm):
        gift = GIFT(codec="fp8_e4m3:g128", rank=8)
        gift.observe(comm, {"aniso": a, "iso": iso})
        delta = np.random.default_rng(comm.rank).standard_normal((2000, 16))
        grads = {"aniso": (delta.T @ x / 2000).astype(np.float32),
                 "iso": np.random.default_rng(9).standard_normal((16, 32)).astype(np.float32)}
        return gift.select(comm, grads, ["aniso", "iso"], min_gain=1.2), gift.selection

    res = cc.run_inproc(P, body)
    assert all(r == res[0] for r in res)  # every rank decided alike
    table = {row["layer"]: row for row in res[0][1]}
    assert table["iso"]["gain"] == pytest.approx(1.0, abs=0.05) and not table["iso"]["selected"]
    assert res[0][0] == [k for k in ("aniso",) if table[k]["selected"]]


def test_state_dict_round_trip(rng):
    body, _, grads = run_gift(rng, "fp8_e4m3:g128", steps=2)
    res = cc.run_inproc(P, body)
    states = [r[1].state_dict() for r in res]
    nxt = [{"w": rng.standard_normal((20, 48)).astype(np.float32),
            "b": rng.standard_normal(20).astype(np.float32)} for _ in range(P)]

    def resume(comm, fresh):
        gift = res[comm.rank][1]
        if fresh:
            gift = GIFT(codec="fp8_e4m3:g128", rank=8)
            gift.load_state_dict(states[comm.rank])
        return gift.allreduce(comm, nxt[comm.rank])["w"]

    a = cc.run_inproc(P, lambda c: resume(c, True))
    b = cc.run_inproc(P, lambda c: resume(c, False))
    assert a[0].tobytes() == b[0].tobytes()
    with pytest.raises(cc.InvalidArgument, match="GIFT state_dict"):
        GIFT().load_state_dict({})


def test_refresh_moves_the_worker_residual_into_the_new_coordinates(rng):
    body, _, _ = run_gift(rng, "fp8_e4m3:g128", steps=2)
    res = cc.run_inproc(P, body)
    new_moments = [anisotropic_moment(rng, 48)[0] for _ in range(P)]

    def refresh(comm):
        gift = res[comm.rank][1]
        n_w = 20 * 48  # "w" comes first in the packed buffer
        old = gift.factors["w"].from_wire(
            gift.ef.worker_residual[:n_w].reshape(20, 48).astype(np.float64))
        bias = gift.ef.worker_residual[n_w:].copy()
        gift.observe(comm, {"w": new_moments[comm.rank]})
        new = gift.factors["w"].from_wire(
            gift.ef.worker_residual[:n_w].reshape(20, 48).astype(np.float64))
        return old, new, bias, gift.ef.worker_residual[n_w:], gift.ef.server_residual

    for old, new, bias, bias_after, server in cc.run_inproc(P, refresh):
        assert np.abs(old).max() > 0
        assert np.allclose(new, old, rtol=1e-4, atol=1e-6 * np.abs(old).max())
        assert np.array_equal(bias, bias_after) and not server.any()


def test_sketched_moments_exact_for_low_rank_and_fewer_bytes(rng):
    """sketch=k: a rank-6 moment comes back exactly (Nystrom is exact up to rank k), with a
    diagonal added the diagonal is still exact (it is sent), every rank holds the same
    bits, in O(d k) bytes, not d x d; a rank above k is only approximated."""
    d, k = 96, 12
    common = rng.standard_normal((d, 6))  # every rank's moment in one 6-d subspace
    moments = [common @ c @ c.T @ common.T for c in rng.standard_normal((P, 6, 6))]
    extra = {"diag": np.zeros((d, d))}

    def body(comm, sketch):
        gift = GIFT(rank=8, sketch=sketch, seed=3)
        before = comm.bytes_sent
        gift.observe(comm, {"w": moments[comm.rank] + extra["diag"], "small": np.eye(8)})
        resumed = GIFT(rank=8, sketch=sketch, seed=3)
        resumed.load_state_dict(gift.state_dict())
        assert resumed.draws == gift.draws == (1 if sketch else 0)  # next sketch: new Omega
        return gift.second_moment, comm.bytes_sent - before

    def mean():
        return np.mean([(m + extra["diag"]).astype(np.float32).astype(np.float64)
                        for m in moments], axis=0)

    res = cc.run_inproc(P, lambda c: body(c, k))
    low = mean()
    assert np.abs(res[0][0]["w"] - low).max() < 1e-4 * np.abs(low).max()
    assert np.array_equal(res[0][0]["small"], np.eye(8))  # small layers go dense
    assert len({r[0]["w"].tobytes() for r in res}) == 1
    dense = cc.run_inproc(P, lambda c: body(c, 0))
    assert res[0][1] * 5 < dense[0][1]  # (k + 1) d + 64 floats against d^2 + 64
    extra["diag"] = np.diag(np.linspace(0.01, 0.5, d)) * np.abs(low).max()
    got, ref = cc.run_inproc(P, lambda c: body(c, k))[0][0]["w"], mean()
    assert np.allclose(np.diag(got), np.diag(ref), rtol=1e-5)
    assert np.abs(got - ref).max() > 1e-3 * np.abs(ref).max()  # full rank: approximated
    with pytest.raises(cc.InvalidArgument, match="sketch"):
        GIFT(sketch=-1)


def test_two_sided_factor_against_dense_algebra_and_identical_on_all_ranks(rng):
    """Output moments given: L_S^-1 G L_A^-T with L_A L_A^T and L_S L_S^T the rank-r +
    diagonal approximations (fp64 reference), the exact codec gives the mean, every rank
    holds the same bits, and the state round-trips."""
    d_in, d_out = 48, 20
    a_moments = [anisotropic_moment(rng, d_in)[0] for _ in range(P)]
    s_moments = [anisotropic_moment(rng, d_out)[0] for _ in range(P)]
    grads = [{"w": (rng.standard_normal((d_out, d_in)) * 3).astype(np.float32)}
             for _ in range(P)]

    def body(comm, codec):
        gift = GIFT(codec=codec, rank=6, damping=1e-3, damping_out=0.5)
        gift.observe(comm, {"w": a_moments[comm.rank]}, {"w": s_moments[comm.rank]})
        gift.layers = ["w"]
        resumed = GIFT(codec=codec, rank=6, damping=1e-3, damping_out=0.5)
        resumed.load_state_dict(gift.state_dict())
        return gift, gift.allreduce(comm, grads[comm.rank])["w"], resumed

    res = cc.run_inproc(P, lambda c: body(c, "none"))
    gift, out, resumed = res[0]
    for ms, got in ((a_moments, gift.second_moment["w"]), (s_moments, gift.output_moment["w"])):
        mean = np.mean([m.astype(np.float32).astype(np.float64) for m in ms], axis=0)
        assert np.abs(got - mean).max() < 1e-6 * np.abs(mean).max()
    la, ls = (Whitening(m, 6, damp).dense() for m, damp in
              ((gift.second_moment["w"], 1e-3), (gift.output_moment["w"], 0.5)))
    g = grads[0]["w"].astype(np.float64)
    ref = np.linalg.solve(ls, g) @ np.linalg.inv(la).T
    assert np.allclose(gift.factors["w"].to_wire(g), ref, rtol=1e-8,
                       atol=1e-10 * np.abs(ref).max())
    assert np.allclose(gift.factors["w"].from_wire(ref), g, rtol=1e-6, atol=1e-9)
    exact = np.mean([x["w"].astype(np.float64) for x in grads], axis=0)
    assert np.abs(out - exact).max() < 1e-5 * np.abs(exact).max()
    assert np.array_equal(resumed.factors["w"].to_wire(g), gift.factors["w"].to_wire(g))
    lossy = cc.run_inproc(P, lambda c: body(c, "fp8_e4m3:g128"))
    assert len({r[1].tobytes() + r[0].output_moment["w"].tobytes() for r in lossy}) == 1
    # against the same two quantizations emulated in NumPy (reduce-scatter, then the sum
    # again for the all-gather; group boundaries differ, so only the size is compared)
    codec, f = cc.Codec("fp8_e4m3:g128"), gift.factors["w"]
    wires = [codec.roundtrip(f.to_wire(x["w"].astype(np.float64)).astype(np.float32))
             for x in grads]
    emulated = f.from_wire(codec.roundtrip(np.mean(wires, axis=0).astype(np.float32)))
    ratio = np.linalg.norm(lossy[0][1] - exact) / np.linalg.norm(emulated - exact)
    assert 0.5 < ratio < 2, ratio
    with pytest.raises(cc.InvalidArgument, match="without input moments"):
        cc.run_inproc(P, lambda c: GIFT().observe(c, {}, {"w": s_moments[0]}))
