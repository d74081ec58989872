"""PowerSGD, TSR and TSR-Adam against fp64 references, on in-process ranks."""
import hashlib

import numpy as np
import pytest

import ccompress as cc
from ccompress.compressors.powersgd import PowerSGD
from ccompress.compressors.tsr import TSR
from ccompress.compressors.tsr_adam import NumpyTSRAdam as TSRAdam

P = 4


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def rank_grads(rng, shapes, steps):
    """[step][rank] -> {name: gradient}; matrices of low effective rank plus noise."""
    out = []
    for _ in range(steps):
        per_rank = [{} for _ in range(P)]
        for k, shape in shapes.items():
            cols = int(np.prod(shape[1:]))
            base = rng.standard_normal((shape[0], 3)) @ rng.standard_normal((3, cols))
            for r in range(P):
                noise = 0.1 * rng.standard_normal(base.shape)
                per_rank[r][k] = (base + noise).reshape(shape).astype(np.float32)
        out.append(per_rank)
    return out


SHAPES = {"w1": (48, 32), "w2": (40, 2, 12), "b": (32,), "tiny": (2, 2)}


def exact_mean(step_grads, k):
    return np.mean([g[k].astype(np.float64) for g in step_grads], axis=0)


def test_powersgd_full_rank_is_exact(rng):
    grads = rank_grads(rng, SHAPES, 2)

    def body(comm):
        ps = PowerSGD(rank=48)  # >= every side: P Q^T spans everything
        ps.compressible = lambda shape: len(shape) >= 2 and shape[0] > 2
        return [ps.allreduce(comm, g[comm.rank]) for g in grads]

    res = cc.run_inproc(P, body)
    for t in range(2):
        for k in SHAPES:
            ref = exact_mean(grads[t], k) if t == 0 else None
            if t == 0:
                err = np.abs(res[0][t][k] - ref).max() / np.abs(ref).max()
                assert err < 1e-5, (k, err)
            assert len({digest(r[t][k]) for r in res}) == 1


def test_powersgd_low_rank_error_feedback_and_state(rng):
    grads = rank_grads(rng, SHAPES, 6)

    def body(comm):
        ps = PowerSGD(rank=2)
        outs = [ps.allreduce(comm, g[comm.rank]) for g in grads]
        return outs, ps

    res = cc.run_inproc(P, body)
    ps0 = res[0][1]
    assert set(ps0.q) == {"w1", "w2"}  # vectors and tiny matrices go exact
    for r in range(P):
        assert digest(*[res[r][1].q[k] for k in ("w1", "w2")]) == \
            digest(*[ps0.q[k] for k in ("w1", "w2")])
    # Error feedback identity: sum_t out_t + mean_i e_i = sum_t mean_i G_i (fp32 rounding).
    for k in ("w1", "w2"):
        total = sum(res[0][0][t][k].astype(np.float64) for t in range(6))
        total += np.mean([res[r][1].error[k] for r in range(P)], axis=0).reshape(total.shape)
        ref = sum(exact_mean(grads[t], k) for t in range(6))
        assert np.abs(total - ref).max() < 1e-4 * np.abs(ref).max(), k
    assert np.array_equal(res[0][0][0]["b"], exact_mean(grads[0], "b").astype(np.float32)) or \
        np.abs(res[0][0][0]["b"] - exact_mean(grads[0], "b")).max() < 1e-6
    state = ps0.state_dict()
    other = PowerSGD(rank=2)
    other.load_state_dict(state)
    assert other.step == 6 and digest(*other.q.values()) == digest(*ps0.q.values())


def test_tsr_core_is_projected_exact_sum_and_bases_orthonormal(rng):
    grads = rank_grads(rng, SHAPES, 3)

    def body(comm):
        tsr = TSR(rank=4, refresh_every=2)
        steps = [tsr.allreduce(comm, g[comm.rank]) for g in grads]
        return steps, {k: (tsr.u[k].copy(), tsr.v[k].copy()) for k in tsr.u}, tsr.state_dict()

    res = cc.run_inproc(P, body)
    steps, bases, _ = res[0]
    assert set(bases) == {"w1", "w2"}
    for k, (u, v) in bases.items():
        for b in (u, v):
            assert np.abs(b.T.astype(np.float64) @ b - np.eye(b.shape[1])).max() < 1e-5
    # Step 2 (after the refresh at step 2): the core is U^T mean(G) V in fp64.
    for k, (u, v) in bases.items():
        mean = exact_mean(grads[2], k).reshape(u.shape[0], -1)
        ref = u.astype(np.float64).T @ mean @ v.astype(np.float64)
        got = steps[2].cores[k]
        assert np.abs(got - ref).max() < 1e-5 * np.abs(ref).max(), k
        # The refreshed bases capture the mean gradient (rank 3 + small noise).
        approx = u.astype(np.float64) @ ref @ v.astype(np.float64).T
        assert np.linalg.norm(approx - mean) < 0.1 * np.linalg.norm(mean), k
    assert set(steps[2].rotations) == {"w1", "w2"} and not steps[1].rotations
    for k in ("b", "tiny"):
        assert np.abs(steps[0].dense[k] - exact_mean(grads[0], k)).max() < 1e-6
    # Identical state on every rank (bases, cores).
    for r in range(1, P):
        assert digest(*[a for k in sorted(res[r][1]) for a in res[r][1][k]]) == \
            digest(*[a for k in sorted(bases) for a in bases[k]])
        assert digest(*[res[r][0][2].cores[k] for k in ("w1", "w2")]) == \
            digest(*[steps[2].cores[k] for k in ("w1", "w2")])


def test_tsr_counts_real_bytes(rng):
    grads = rank_grads(rng, {"w": (256, 128)}, 3)

    def body(comm):
        tsr = TSR(rank=8, refresh_every=100)
        sent = []
        for g in grads:
            before = comm.bytes_sent
            tsr.allreduce(comm, g[comm.rank])
            sent.append(comm.bytes_sent - before)
        return sent, comm.last_stats

    sent, stats = cc.run_inproc(P, body)[0]
    # Refresh step: sketches (256 x 13) and (13 x 128); later steps only an 8 x 8 core:
    # two_shot sends 3 of its 4 chunks (16 floats each) out twice.
    assert stats["algo"] == "two_shot"
    assert sent[1] == sent[2] == 2 * (P - 1) * 16 * 4 + stats["header_bytes"]
    assert sent[0] > 20 * sent[1]


@pytest.mark.parametrize("on_refresh", ["rotate", "reset"])
def test_tsr_adam_full_rank_matches_adam_in_rotated_coordinates(rng, on_refresh):
    """With r = full rank and one refresh, TSR-Adam's update is U Adam(U^T G V) V^T: check it
    against that fp64 reference, and that all ranks hold the same parameters."""
    shapes = {"w": (12, 8), "b": (8,)}
    # A fresh basis makes the core of that step's mean gradient diagonal: its off-diagonal
    # elements are fp32 noise, whose sign Adam's first step would follow. eps = 1e-3 keeps
    # such elements' updates negligible in both computations.
    grads = [[{k: rng.standard_normal(sh).astype(np.float32) for k, sh in shapes.items()}
              for _ in range(P)] for _ in range(3)]
    init = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}

    def body(comm):
        params = {k: v.copy() for k, v in init.items()}
        tsr = TSR(rank=8, refresh_every=1000)
        opt = TSRAdam(params, tsr, lr=0.01, eps=1e-3, on_refresh=on_refresh)
        for g in grads:
            opt.step(comm, g[comm.rank])
        return params, tsr.u["w"], tsr.v["w"], opt.state_dict()

    res = cc.run_inproc(P, body)
    params, u, v, _ = res[0]
    u, v = u.astype(np.float64), v.astype(np.float64)
    ref = {k: init[k].astype(np.float64) for k in init}
    m = {k: 0.0 for k in init}
    s = {k: 0.0 for k in init}
    for t, g in enumerate(grads, 1):
        for k in init:
            c = exact_mean(g, k)
            c = u.T @ c @ v if k == "w" else c
            m[k] = 0.9 * m[k] + 0.1 * c
            s[k] = 0.999 * s[k] + 0.001 * c * c
            upd = (m[k] / (1 - 0.9 ** t)) / (np.sqrt(s[k] / (1 - 0.999 ** t)) + 1e-3)
            ref[k] -= 0.01 * (u @ upd @ v.T if k == "w" else upd)
    for k in init:
        assert np.abs(params[k] - ref[k]).max() < 1e-4, k
    for r in range(1, P):
        assert digest(*res[r][0].values()) == digest(*params.values())


def test_tsr_adam_rotation_carries_moments(rng):
    """A refresh that only permutes and flips basis vectors must leave the full-space moment
    U m V^T unchanged when rotated (and zero it when reset)."""
    tsr = TSR(rank=3)
    tsr.u["w"] = np.eye(5, 3, dtype=np.float32)
    tsr.v["w"] = np.eye(4, 3, dtype=np.float32)
    opt = TSRAdam({"w": np.zeros((5, 4), np.float32)}, tsr)
    opt.state["w"] = {"t": 3, "m": rng.standard_normal((3, 3)).astype(np.float32),
                      "v": rng.random((3, 3)).astype(np.float32)}
    full_m = tsr.u["w"] @ opt.state["w"]["m"] @ tsr.v["w"].T
    full_v = tsr.u["w"] @ opt.state["w"]["v"] @ tsr.v["w"].T
    perm_u = np.eye(5, dtype=np.float32)[:, [2, 0, 1]] * np.array([1, -1, 1], np.float32)
    perm_v = np.eye(4, dtype=np.float32)[:, [1, 2, 0]]
    ru, rv = perm_u.T @ tsr.u["w"], perm_v.T @ tsr.v["w"]
    opt._carry(opt.state["w"], ru, rv)
    assert np.allclose(perm_u @ opt.state["w"]["m"] @ perm_v.T, full_m, atol=1e-6)
    # v is carried per basis vector, whatever its sign.
    assert np.allclose(np.abs(perm_u) @ opt.state["w"]["v"] @ np.abs(perm_v).T, full_v,
                       atol=1e-6)
    opt.on_refresh = "reset"
    opt._carry(opt.state["w"], ru, rv)
    assert opt.state["w"]["t"] == 0 and not opt.state["w"]["m"].any()


def test_bad_arguments():
    with pytest.raises(cc.InvalidArgument):
        PowerSGD(rank=0)
    with pytest.raises(cc.InvalidArgument):
        TSR(refresh_every=0)
    with pytest.raises(cc.InvalidArgument, match="rotate"):
        TSRAdam({}, TSR(), on_refresh="keep")
    with pytest.raises(cc.InvalidArgument, match="float32"):
        TSRAdam({"w": np.zeros(3)}, TSR())
    with pytest.raises(cc.InvalidArgument, match="TSR state_dict"):
        TSR().load_state_dict({})
    with pytest.raises(cc.InvalidArgument, match="unknown parameters"):
        TSRAdam({"w": np.zeros(3, np.float32)}, TSR(), weight_decay={"x": 0.1})


@pytest.mark.parametrize("codec", ["none", "fp8_e4m3:g128"])
def test_tsr_error_feedback_telescopes_and_lossy_cores(rng, codec):
    grads = rank_grads(rng, {"w": (40, 24)}, 5)

    def body(comm):
        tsr = TSR(rank=3, refresh_every=2, error_feedback=True, codec=codec)
        outs = []
        for g in grads:
            step = tsr.allreduce(comm, g[comm.rank])
            outs.append(tsr.expand("w", step.cores["w"]).astype(np.float64))
        return outs, tsr.error["w"]

    res = cc.run_inproc(P, body)
    assert len({r[0][-1].tobytes() for r in res}) == 1
    # sum_t U_t C_t V_t^T + mean_i e_i = sum_t mean_i G_i, whatever the bases did; a lossy
    # core codec adds its own error each step (it is not fed back).
    total = sum(res[0][0]) + np.mean([r[1] for r in res], axis=0)
    ref = sum(exact_mean(g, "w") for g in grads)
    err = np.linalg.norm(total - ref) / np.linalg.norm(ref)
    assert err < (1e-5 if codec == "none" else 0.05), err


class _Counting:
    """A communicator that counts its all-reduce calls (and passes them on)."""

    def __init__(self, comm):
        self.comm, self.calls = comm, 0

    def allreduce(self, x, **kw):
        self.calls += 1
        return self.comm.allreduce(x, **kw)


def test_tsr_dense_codec_packs_one_collective(rng):
    """dense_codec = the cores' codec: one collective per (non-refresh) step, the dense
    tensors near their fp64 mean (a loose bound, 0.15 of the largest |mean|: e4m3 rounds
    each element to 2^-4 of itself, twice in two_shot, on partial sums of up to 4 ranks) and
    not exact; the default keeps them exact (to fp32 rounding) in a second collective."""
    shapes = {"w": (40, 24), "b": (24,)}
    grads = rank_grads(rng, shapes, 3)

    def body(comm, dense_codec):
        c = _Counting(comm)
        tsr = TSR(rank=3, refresh_every=100, codec="fp8_e4m3:g128", dense_codec=dense_codec)
        outs = [tsr.allreduce(c, g[comm.rank]) for g in grads]
        return c.calls, outs

    for dense_codec, per_step in (("fp8_e4m3:g128", 1), ("none", 2)):
        res = cc.run_inproc(P, lambda comm: body(comm, dense_codec))
        calls, outs = res[0]
        assert calls == 2 + len(grads) * per_step, (dense_codec, calls)  # refresh: 2
        assert len({digest(*(o.dense["b"] for o in r[1])) for r in res}) == 1
        for o, g in zip(outs, grads):
            ref = exact_mean(g, "b")
            err = np.abs(o.dense["b"] - ref).max() / np.abs(ref).max()
            assert err < (1e-6 if dense_codec == "none" else 0.15), (dense_codec, err)
            if dense_codec != "none":
                assert err > 0  # really through the codec
