"""The stateful gradient compression (error feedback, GIFT, TSR, PowerSGD) between real
processes (run under mpiexec, see conftest.py).

Every rank builds every rank's inputs from one seed, so each can compute the fp64
reference itself; outputs and states that must agree are compared by digest across ranks.
"""
import hashlib

import numpy as np
import pytest
from mpi4py import MPI

import ccompress as cc

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
F32_EPS = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module")
def comm():
    c = cc.Communicator.from_mpi(world.Dup(), timeout=60)  # a Dup'd handle has its high bit set
    yield c
    c.close()


def check_identical(arrays, what):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    digests = world.allgather(h.hexdigest())
    assert len(set(digests)) == 1, f"{what}: ranks differ"


def step_inputs(steps, n, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((size, n)) + 0.3).astype(np.float32) for _ in range(steps)]


def residual_sum(ef_state, n):
    """mean over ranks of the worker residuals + every owner's server residual (fp64)."""
    got = np.sum(world.allgather(ef_state["worker_residual"]), axis=0, dtype=np.float64) / size
    for r, server in enumerate(world.allgather(ef_state["server_residual"])):
        lo, hi = cc.chunk_range(n, size, r)
        got[lo:hi] += server
    return got


@pytest.mark.parametrize("codec,algo", [("fp8_e4m3:g128", "two_shot"),
                                        ("hint8:g32", "one_shot")])
def test_error_feedback_telescopes_and_resumes(comm, codec, algo):
    """Outputs identical on every rank, a NaN reported, the telescoping identity over the
    clean steps within fp32 rounding, and a checkpoint that resumes bit for bit."""
    n, steps = 5003, 8
    inputs = step_inputs(steps, n)
    inputs[2][size - 1, 17] = np.nan
    ef = cc.ErrorFeedback()
    ys = [comm.allreduce(x[rank], codec=codec, algo=algo, op="avg", error_feedback=ef)
          for x in inputs[:3]]
    assert world.allgather(ef.nonfinite)[size - 1] >= 1, "the NaN was not reported"
    saved = ef.state_dict()
    ys += [comm.allreduce(x[rank], codec=codec, algo=algo, op="avg", error_feedback=ef)
           for x in inputs[3:]]
    what = f"{codec} {algo}"
    check_identical(ys, what + " outputs")
    assert np.isfinite(ef.worker_residual).all() and np.isfinite(ef.server_residual).all()
    # Telescoping identity over the clean steps 3..: only fp32 rounding remains.
    got = np.sum([y.astype(np.float64) for y in ys[3:]], axis=0)
    got += residual_sum(ef.state_dict(), n) - residual_sum(saved, n)
    exact = sum(x.astype(np.float64).mean(axis=0) for x in inputs[3:])
    scale = max(float(np.abs(x).max()) for x in inputs[3:]) * size
    err = float(np.abs(got - exact).max())
    assert err <= steps * F32_EPS * scale, (what, err)
    # A checkpoint resumes bit for bit.
    restored = cc.ErrorFeedback()
    restored.load_state_dict(saved)
    again = [comm.allreduce(x[rank], codec=codec, algo=algo, op="avg",
                            error_feedback=restored) for x in inputs[3:5]]
    for a, b in zip(again, ys[3:5]):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), what + " resume"


def low_rank_steps():
    rng = np.random.default_rng(5)
    steps = [[{"w": (rng.standard_normal((64, 4)) @ rng.standard_normal((4, 48))
                     + 0.1 * rng.standard_normal((64, 48))).astype(np.float32),
               "b": rng.standard_normal(48).astype(np.float32)} for _ in range(size)]
             for _ in range(3)]
    mean = [np.mean([g["w"].astype(np.float64) for g in st], axis=0) for st in steps]
    return rng, steps, mean


def test_powersgd_shares_q_and_telescopes(comm):
    """PowerSGD: shared Q and outputs identical; error feedback telescopes."""
    from ccompress.compressors.powersgd import PowerSGD

    _, steps, mean = low_rank_steps()
    ps = PowerSGD(rank=4)
    outs = [ps.allreduce(comm, st[rank]) for st in steps]
    check_identical([o["w"] for o in outs] + [o["b"] for o in outs] + [ps.q["w"]], "powersgd")
    errors = world.allgather(ps.error["w"])
    total = sum(o["w"].astype(np.float64) for o in outs) + np.mean(errors, axis=0)
    assert np.abs(total - sum(mean)).max() < 1e-4 * np.abs(sum(mean)).max(), "powersgd EF"


def test_tsr_bases_identical_orthonormal_and_core(comm):
    """TSR: bases identical and orthonormal; the core is U^T mean(G) V."""
    from ccompress.compressors.tsr import TSR

    _, steps, mean = low_rank_steps()
    tsr = TSR(rank=6, refresh_every=2)
    res = [tsr.allreduce(comm, st[rank]) for st in steps]
    u, v = tsr.u["w"].astype(np.float64), tsr.v["w"].astype(np.float64)
    check_identical([tsr.u["w"], tsr.v["w"]] + [r.cores["w"] for r in res], "tsr")
    assert np.abs(u.T @ u - np.eye(6)).max() < 1e-5 and np.abs(v.T @ v - np.eye(6)).max() < 1e-5
    ref = u.T @ mean[2] @ v
    assert np.abs(res[2].cores["w"] - ref).max() < 1e-5 * np.abs(ref).max(), "tsr core"


def test_gift_moment_and_outputs_identical(comm):
    """GIFT with fp8: the averaged moment and the outputs are identical on every rank."""
    from ccompress.compressors.gift import NumpyGIFT as GIFT

    rng, steps, mean = low_rank_steps()
    x = rng.standard_normal((size, 300, 48)) * np.exp(rng.standard_normal(48))
    gift = GIFT(codec="fp8_e4m3:g128", rank=8)
    gift.observe(comm, {"w": (x[rank].T @ x[rank] / 300).astype(np.float32)})
    gift.layers = ["w"]
    outs = [gift.allreduce(comm, st[rank]) for st in steps]
    check_identical([gift.second_moment["w"], gift.factors["w"].q] + [o["w"] for o in outs],
                    "gift")
    err = np.linalg.norm(outs[0]["w"] - mean[0]) / np.linalg.norm(mean[0])
    assert err < 0.05, err
