"""TSR refresh sketches through a wire codec (``sketch_codec``), on in-process ranks: bf16
sketches cost half the refresh bytes, give bases identical on every rank, and span the mean
gradient's top subspace as well as exact sketches do (fp64 SVD reference)."""
import numpy as np

import ccompress as cc
from ccompress.compressors.tsr import TSR

P, RANK = 4, 4
SHAPE = (96, 64)


def grads_with_gap(rng):
    """[rank] gradients: a shared rank-4 signal with a clear spectral gap plus small noise."""
    left = np.linalg.qr(rng.standard_normal((SHAPE[0], RANK)))[0]
    right = np.linalg.qr(rng.standard_normal((SHAPE[1], RANK)))[0]
    signal = left @ np.diag([4.0, 3.0, 2.5, 2.0]) @ right.T
    noise = 0.02 * np.abs(signal).mean()
    return [(signal + noise * rng.standard_normal(SHAPE)).astype(np.float32) for _ in range(P)]


def run(grads, sketch_codec):
    """Two steps (the first refreshes): bases, cores and bytes sent after each step."""
    def body(comm):
        tsr = TSR(rank=RANK, refresh_every=2, sketch_codec=sketch_codec)
        sent = []
        for _ in range(2):
            out = tsr.allreduce(comm, {"w": grads[comm.rank]})
            sent.append(comm.bytes_sent)
        return tsr.u["w"].copy(), tsr.v["w"].copy(), out.cores["w"].copy(), sent

    return cc.run_inproc(P, body)


def captured(basis, ref):
    """Fraction of span(ref) inside span(basis) (1: all of it)."""
    return float(np.linalg.norm(basis.astype(np.float64).T @ ref) ** 2 / ref.shape[1])


def test_bf16_sketches_halve_refresh_bytes_and_keep_the_subspace(rng):
    grads = grads_with_gap(rng)
    mean = np.mean([g.astype(np.float64) for g in grads], axis=0)
    w, _, zt = np.linalg.svd(mean)
    ref_u, ref_v = w[:, :RANK], zt[:RANK].T
    exact, coarse = run(grads, "none"), run(grads, "bf16")
    for res in (exact, coarse):  # bases and cores bit-identical on every rank
        for i in range(3):
            assert len({r[i].tobytes() for r in res}) == 1
    for res in (exact, coarse):
        u, v = res[0][0], res[0][1]
        assert captured(u, ref_u) > 0.999 and captured(v, ref_v) > 0.999
    # bytes of the refresh = first step - second step (same cores); bf16: 2 of 4 bytes
    refresh = [r[0][3][0] - (r[0][3][1] - r[0][3][0]) for r in (exact, coarse)]
    assert 0.45 * refresh[0] < refresh[1] < 0.55 * refresh[0], refresh
    assert exact[0][3][1] - exact[0][3][0] == coarse[0][3][1] - coarse[0][3][0]
