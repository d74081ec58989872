"""Error feedback (ccompress.ErrorFeedback): the telescoping identity against fp64, bounded
drift, bit-identical results, NaN kept out of residuals, checkpoints, refused schedules."""
import numpy as np
import pytest

import ccompress as cc
from helpers.common import same_bits

P = 4
F32_EPS = float(np.finfo(np.float32).eps)


def steps_of_inputs(rng, steps, n, bias=0.3):
    """Per-step, per-rank inputs with a common bias, so plain rounding errors pile up."""
    return [(rng.standard_normal((P, n)) + bias).astype(np.float32) for _ in range(steps)]


def run_steps(inputs, codec, algo, op="avg", feedback=True, size=P, states=None):
    """Runs every step on `size` in-process ranks; returns (outputs per step [rank][step],
    the ErrorFeedback of each rank)."""
    def body(comm):
        ef = (states[comm.rank] if states else cc.ErrorFeedback()) if feedback else None
        ys = [comm.allreduce(x[comm.rank], codec=codec, algo=algo, op=op, error_feedback=ef)
              for x in inputs]
        if feedback:
            assert comm.last_stats["algo"] in ("two_shot", "one_shot")
        return ys, ef

    res = cc.run_inproc(size, body)
    return [r[0] for r in res], [r[1] for r in res]


def identity_residue(outputs, efs, inputs, op, size=P):
    """sum_t y_t + (server residuals) + (worker residuals)/divisor - exact sum, in fp64.

    Each quantization keeps e <- v - decode(encode(v)), so the sums telescope:
    sum_t y_t = sum_t exact_t - mean_p(e_w,p) - e_s (avg), and only fp32 rounding remains.
    """
    div = size if op == "avg" else 1
    exact = sum(x[:size].astype(np.float64).sum(axis=0) for x in inputs) / div
    got = np.sum([y.astype(np.float64) for y in outputs[0]], axis=0)
    got += sum(ef.worker_residual.astype(np.float64) for ef in efs) / div
    n = exact.size
    for r, ef in enumerate(efs):
        lo, hi = cc.chunk_range(n, size, r)
        if ef.server_residual is not None:
            got[lo:hi] += ef.server_residual
    return got - exact


CODECS = ["fp8_e4m3:g128", "hint8:g32", "nvfp4", "fp8_e5m2:g64:sr"]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("algo,op", [("two_shot", "avg"), ("two_shot", "sum"),
                                     ("one_shot", "avg"), ("auto", "sum")])
def test_feedback_identity_and_bounded_drift(rng, codec, algo, op):
    steps, n = 12, 3001
    inputs = steps_of_inputs(rng, steps, n)
    outs, efs = run_steps(inputs, codec, algo, op)
    for t in range(steps):
        assert same_bits([o[t] for o in outs]), f"step {t}: ranks differ"
    # Telescoping identity: only fp32 additions remain (a few per element per step).
    scale = max(float(np.abs(x).max()) for x in inputs) * P
    residue = identity_residue(outs, efs, inputs, op)
    assert np.abs(residue).max() <= steps * F32_EPS * scale, np.abs(residue).max()
    # Drift of the running sum stays at one step's error; without feedback it grows.
    div = P if op == "avg" else 1
    exact = sum(x.astype(np.float64).sum(axis=0) for x in inputs) / div
    drift_fb = np.linalg.norm(np.sum(outs[0], axis=0, dtype=np.float64) - exact)
    plain, _ = run_steps(inputs, codec, algo, op, feedback=False)
    drift_plain = np.linalg.norm(np.sum(plain[0], axis=0, dtype=np.float64) - exact)
    one_step = np.linalg.norm(plain[0][-1].astype(np.float64)
                              - inputs[-1].astype(np.float64).sum(axis=0) / div)
    assert drift_fb <= 1.5 * one_step, (drift_fb, one_step)
    assert drift_fb < 0.5 * drift_plain, (drift_fb, drift_plain)


def test_one_shot_keeps_worker_residual_only(rng):
    inputs = steps_of_inputs(rng, 3, 500)
    _, efs = run_steps(inputs, "fp8_e4m3:g128", "one_shot")
    for ef in efs:
        assert np.any(ef.worker_residual != 0)
        assert not np.any(ef.server_residual)


def test_single_rank_identity(rng):
    inputs = [x[:1] for x in steps_of_inputs(rng, 5, 777)]
    outs, efs = run_steps(inputs, "hint8:g32", "two_shot", "sum", size=1)
    residue = identity_residue(outs, efs, inputs, "sum", size=1)
    assert np.abs(residue).max() <= 40 * F32_EPS * float(np.abs(inputs[0]).max())


def test_nan_and_inf_never_enter_a_residual(rng):
    n = 1000
    inputs = steps_of_inputs(rng, 3, n)
    inputs[0][1, 10] = np.nan
    inputs[0][2, 700] = np.inf
    outs, efs = run_steps(inputs, "fp8_e4m3:g128", "two_shot")
    for ef in efs:
        assert np.isfinite(ef.worker_residual).all() and np.isfinite(ef.server_residual).all()
    # The poisoned step is reported (ranks 1 and 2 at least; owners of the poisoned chunks
    # too), and the following clean steps are finite again: nothing carried the NaN over.
    assert efs[1].nonfinite >= 1 and efs[2].nonfinite >= 1
    assert sum(ef.nonfinite for ef in efs) >= 4
    assert not np.isfinite(outs[0][0]).all()
    assert np.isfinite(outs[0][1]).all() and np.isfinite(outs[0][2]).all()


def test_state_dict_round_trip(rng):
    inputs = steps_of_inputs(rng, 5, 2049)
    outs, _ = run_steps(inputs, "fp8_e4m3:g128", "two_shot")
    _, efs = run_steps(inputs[:3], "fp8_e4m3:g128", "two_shot")
    saved = [ef.state_dict() for ef in efs]
    efs[0].worker_residual[:] = 7  # the saved copy must not alias live state
    restored = []
    for s in saved:
        ef = cc.ErrorFeedback()
        ef.load_state_dict(s)
        restored.append(ef)
    resumed, _ = run_steps(inputs[3:], "fp8_e4m3:g128", "two_shot", states=restored)
    for r in range(P):
        for t in range(2):
            assert same_bits([resumed[r][t], outs[r][3 + t]])


def test_load_state_dict_rejects_bad_state():
    ef = cc.ErrorFeedback()
    ef.buffers(10, 2, 0)
    state = ef.state_dict()
    state["worker_residual"] = np.full(10, np.nan)
    with pytest.raises(cc.InvalidArgument, match="NaN"):
        cc.ErrorFeedback().load_state_dict(state)
    state["worker_residual"] = np.zeros(9)
    with pytest.raises(cc.InvalidArgument, match="needs 10"):
        cc.ErrorFeedback().load_state_dict(state)
    with pytest.raises(cc.InvalidArgument, match="state_dict"):
        cc.ErrorFeedback().load_state_dict({"worker": True})


@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_hop_by_hop_schedules_are_refused(algo):
    def body(comm):
        with pytest.raises(cc.Unsupported, match="two_shot"):
            comm.allreduce(np.ones(100, np.float32), codec="fp8_e4m3:g128", algo=algo,
                           error_feedback=cc.ErrorFeedback())
    cc.run_inproc(P, body)


def test_one_state_per_tensor_and_fixed_codec():
    def body(comm):
        ef = cc.ErrorFeedback()
        comm.allreduce(np.ones(100, np.float32), codec="fp8_e4m3:g128", error_feedback=ef)
        with pytest.raises(cc.InvalidArgument, match="one ErrorFeedback per tensor"):
            comm.allreduce(np.ones(50, np.float32), codec="fp8_e4m3:g128", error_feedback=ef)
        with pytest.raises(cc.Unsupported, match="fixed codec"):
            comm.allreduce(np.ones(100, np.float32), codec="auto8", error_feedback=ef)
        with pytest.raises(cc.InvalidArgument, match="ErrorFeedback"):
            comm.allreduce(np.ones(100, np.float32), codec="fp8_e4m3:g128", error_feedback={})
    cc.run_inproc(2, body)


def test_bfloat16_inputs_keep_float32_residuals(rng):
    from ccompress._internal.arrays import numpy_dtype
    bf16 = numpy_dtype("bfloat16")
    inputs = [x.astype(bf16) for x in steps_of_inputs(rng, 6, 1500)]
    outs, efs = run_steps(inputs, "fp8_e4m3:g128", "two_shot")
    assert outs[0][0].dtype == bf16 and efs[0].worker_residual.dtype == np.float32
    for t in range(6):
        assert same_bits([o[t] for o in outs])
    # The output cast to bfloat16 (8 bits of mantissa) is outside the feedback loop.
    residue = identity_residue(outs, efs, inputs, "avg")
    assert np.abs(residue).max() <= 6 * 2.0 ** -8 * 3 * float(np.abs(inputs[0]).max())


def test_reduce_scatter_worker_residual_identity(rng):
    steps, n = 6, 1001
    inputs = steps_of_inputs(rng, steps, n)

    def body(comm):
        ef = cc.ErrorFeedback(server=False)
        ys = [comm.reduce_scatter(x[comm.rank], codec="fp8_e4m3:g128", error_feedback=ef)
              for x in inputs]
        return np.sum(ys, axis=0, dtype=np.float64), ef.worker_residual

    res = cc.run_inproc(P, body)
    exact = sum(x.astype(np.float64).sum(axis=0) for x in inputs)
    got = np.concatenate([r[0] for r in res]) + np.sum([r[1] for r in res], axis=0)
    assert np.abs(got - exact).max() <= steps * F32_EPS * P * float(np.abs(inputs[0]).max() * 2)
    plain_err = np.abs(np.concatenate([r[0] for r in res]) - exact).max()
    assert plain_err > 100 * np.abs(got - exact).max()  # the residual term is what closes it


def test_in_place_matches_out_of_place(rng):
    inputs = steps_of_inputs(rng, 3, 70_001)  # several slices per chunk

    def body(comm, in_place):
        ef = cc.ErrorFeedback()
        ys = []
        for x in inputs:
            buf = x[comm.rank].copy()
            ys.append(comm.allreduce(buf, codec="fp8_e4m3:g128", algo="two_shot", op="avg",
                                     error_feedback=ef, out=buf if in_place else None))
        return ys, ef.worker_residual

    a = cc.run_inproc(P, lambda c: body(c, True), slice_elems=8192)
    b = cc.run_inproc(P, lambda c: body(c, False), slice_elems=8192)
    for r in range(P):
        for t in range(3):
            assert same_bits([a[r][0][t], b[r][0][t]])
        assert same_bits([a[r][1], b[r][1]])
