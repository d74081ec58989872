"""Optimizer-aware fidelity: the Adam-normalised and Adam-update errors against a reference
written here element by element in Python floats, a case where they and L2 disagree, the
command line's sequence mode, and auto8:adam's choice."""
import json
import math

import numpy as np
import pytest

import ccompress as cc
from ccompress import adam_fidelity
from ccompress.tools import fidelity
from ccompress import autocodec

B1, B2, EPS = 0.9, 0.95, 1e-8


def adam_reference(gs, ghs, m0, v0, step0, b1=B1, b2=B2, eps=EPS):
    """Per step (adam error, update error, update cosine), one element at a time."""
    n = len(gs[0])
    m, v = [float(x) for x in m0], [float(x) for x in v0]
    mh, vh = list(m), list(v)
    out = []
    for i, (g, gh) in enumerate(zip(gs, ghs)):
        t = step0 + i + 1
        ae = ar = ue = ur = uu = dot = 0.0
        for j in range(n):
            gj, hj = float(g[j]), float(gh[j])
            m[j] = b1 * m[j] + (1 - b1) * gj
            v[j] = b2 * v[j] + (1 - b2) * gj * gj
            mh[j] = b1 * mh[j] + (1 - b1) * hj
            vh[j] = b2 * vh[j] + (1 - b2) * hj * hj
            scale = math.sqrt(v[j] / (1 - b2 ** t)) + eps
            ae += ((hj - gj) / scale) ** 2
            ar += (gj / scale) ** 2
            u = m[j] / (1 - b1 ** t) / scale
            uh = mh[j] / (1 - b1 ** t) / (math.sqrt(vh[j] / (1 - b2 ** t)) + eps)
            ue += (uh - u) ** 2
            ur += u * u
            uu += uh * uh
            dot += u * uh
        out.append((math.sqrt(ae / ar), math.sqrt(ue / ur), dot / math.sqrt(ur * uu)))
    return out


def two_scale(rng, n, steps=1, ranks=1, small=1e-2):
    """Gradients whose coordinates are of two kinds mixed in every scale group: scale 1 and
    scale ``small``, the same coordinates at every step (so their second moments differ)."""
    scale = np.where(np.arange(n) % 2 == 0, 1.0, small)
    g = rng.standard_normal((steps, ranks, n)) * scale
    return g.astype(np.float32), scale


def test_adam_pair_matches_an_elementwise_reference(rng):
    n, steps = 40, 4
    gs = rng.standard_normal((steps, n)) * np.exp(rng.standard_normal(n))
    ghs = gs + 0.05 * rng.standard_normal((steps, n)) * np.abs(gs).mean()
    m0 = 0.1 * rng.standard_normal(n)
    v0 = np.abs(rng.standard_normal(n)) * 0.5
    pair = adam_fidelity.AdamPair(n, (B1, B2), EPS, m0, v0, step=7)
    want = adam_reference(gs, ghs, m0, v0, 7)
    for g, gh, (a, u, c) in zip(gs, ghs, want):
        got = pair.step(g, gh)
        assert got["adam"] == pytest.approx(a, rel=1e-10)
        assert got["update"] == pytest.approx(u, rel=1e-10)
        assert got["update_cos"] == pytest.approx(c, rel=1e-12)
    # From zeros the first step's v̂ is g²: adam is the RMS per-element relative error.
    first = adam_fidelity.AdamPair(n, (B1, B2), EPS).step(gs[0], ghs[0])
    rel = (ghs[0] - gs[0]) / (np.abs(gs[0]) + EPS)
    assert first["adam"] == pytest.approx(math.sqrt(np.mean(rel ** 2)), rel=1e-6)  # up to eps


def test_l2_and_the_adam_metric_disagree_on_small_coordinates(rng):
    """hint8's integer grid per group errs 4-5x less than fp8 in L2 here, but on the
    coordinates whose gradients are always small (tiny v) its error is of their own size:
    Adam-normalised, fp8 is the better codec by far."""
    (g,), scale = two_scale(rng, 4096)
    g = g[0]
    w = adam_fidelity.adam_weights(scale ** 2)
    err = {}
    for spec in ("fp8_e4m3:g128", "hint8:g32"):
        y = cc.Codec.parse(spec).roundtrip(g).astype(np.float64)
        l2 = np.linalg.norm(y - g) / np.linalg.norm(g)
        adam = adam_fidelity.weighted_relerr(y, g, w)
        # the same from scratch: every element against its own scale
        ref = math.sqrt(sum(((a - b) / (s + EPS)) ** 2 for a, b, s in zip(y, g, scale))
                        / sum((b / (s + EPS)) ** 2 for b, s in zip(g, scale)))
        assert adam == pytest.approx(ref, rel=1e-9)
        err[spec] = (l2, adam)
    assert err["hint8:g32"][0] < err["fp8_e4m3:g128"][0] / 3  # L2: hint8 much better
    assert err["hint8:g32"][1] > err["fp8_e4m3:g128"][1] * 3  # Adam: fp8 much better


def test_sequence_on_the_command_line(tmp_path, rng, capsys):
    """One rank (each step one round trip), three steps, a state file: the row's adam,
    update and updcos are the means of the reference's per-step values."""
    n = 512
    seq, _ = two_scale(rng, n, steps=3)
    for t in range(3):
        np.savez(tmp_path / f"s{t}.npz", parts=seq[t])
    m0 = (0.01 * rng.standard_normal(n)).astype(np.float32)
    v0 = (np.abs(rng.standard_normal(n)) * 1e-3).astype(np.float32)
    np.savez(tmp_path / "state.npz", exp_avg=m0, exp_avg_sq=v0, step=np.int64(20))
    rc = fidelity.main([str(tmp_path / f"s{t}.npz") for t in range(3)] + [
        "--sequence", "--adam-state", str(tmp_path / "state.npz"), "--betas", f"{B1},{B2}",
        "--metric", "adam,update", "--no-default-codecs", "--codec", "fp8_e4m3:g128",
        "--algo", "two_shot", "--json", str(tmp_path / "o.json"), "-q"])
    out = capsys.readouterr().out
    assert rc == 0 and "updcos" in out
    (row,) = json.loads((tmp_path / "o.json").read_text())["rows"]
    assert row["steps"] == 3 and row["tensor"] == "s0..s2"
    codec = cc.Codec.parse("fp8_e4m3:g128")
    gs = [seq[t][0].astype(np.float64) for t in range(3)]
    ghs = [codec.roundtrip(seq[t][0]).astype(np.float64) for t in range(3)]
    want = adam_reference(gs, ghs, m0, v0, 20)
    for i, name in enumerate(("adam", "update", "update_cos")):
        assert row[name] == pytest.approx(np.mean([w[i] for w in want]), rel=1e-9), name
    assert row["relerr"] == pytest.approx(np.mean(
        [np.linalg.norm(h - g) / np.linalg.norm(g) for g, h in zip(gs, ghs)]), rel=1e-9)


def test_sequence_errors_are_readable(tmp_path, rng, capsys):
    np.savez(tmp_path / "a.npz", parts=rng.standard_normal((1, 64)).astype(np.float32))
    np.savez(tmp_path / "st.npz", exp_avg_sq=np.ones(10, np.float32), step=np.int64(3))
    rc = fidelity.main([str(tmp_path / "a.npz"), "--metric", "adam", "--adam-state",
                        str(tmp_path / "st.npz"), "-q"])
    assert rc == 2 and "has 10 elements, the tensor 64" in capsys.readouterr().err
    with pytest.raises(cc.InvalidArgument, match="betas"):
        adam_fidelity.AdamPair(4, (1.0, 0.9))


def run_auto(parts, spec):
    def body(c):
        codec = spec() if callable(spec) else spec
        ys = [c.allreduce(p[c.rank], codec=codec, algo="two_shot", op="avg") for p in parts]
        return ys, dict(c.last_stats), codec

    return cc.run_inproc(parts[0].shape[0], body)


def test_auto8_adam_picks_fp8_where_l2_picks_hint8(rng):
    steps, _ = two_scale(rng, 8192, steps=3, ranks=2)
    plain = run_auto(steps[:1], "auto8")
    assert plain[0][1]["codec"].startswith("hint8")
    adam = run_auto(steps[:1], "auto8:adam")
    # An unrotated FP8 format (per-group fp32 scales, or MX's E8M0 ones), the same on both ranks
    fp8 = adam[0][1]["codec"]
    assert fp8 in ("fp8_e4m3:g128", "mxfp8") and [r[1]["codec"] for r in adam] == [fp8] * 2
    assert adam[0][1]["auto"] == "auto8:adam"
    # With state: the running second moment is of the results, so the ranks keep the same.
    res = run_auto(steps, lambda: autocodec.AutoCodec("auto8"))
    (ys0, st0, a0), (ys1, st1, a1) = res
    assert st0["codec"] == st1["codec"] == fp8 and st0["auto"] == "auto8:adam"
    assert a0.calls == 3 and np.array_equal(a0.v, a1.v)
    want = sum((1 - 0.999) * 0.999 ** (2 - i) * ys0[i].astype(np.float64) ** 2
               for i in range(3))
    np.testing.assert_allclose(a0.v, want, rtol=1e-12)
    # A supplied second moment that is flat makes the Adam ranking an L2 ranking again.
    flat = lambda: _supplied(np.ones(8192))  # noqa: E731
    assert run_auto(steps[:1], flat)[0][1]["codec"] == plain[0][1]["codec"]


def _supplied(v):
    a = autocodec.AutoCodec("auto8", metric="adam")
    a.set_second_moment(v)
    return a


def test_autocodec_arguments_are_checked():
    with pytest.raises(cc.InvalidArgument, match="auto8 or auto4"):
        autocodec.AutoCodec("auto9")
    with pytest.raises(cc.InvalidArgument, match=">= 0"):
        autocodec.AutoCodec().set_second_moment(-np.ones(3))
    assert autocodec.is_auto("auto4:adam") and not autocodec.is_auto("auto8:cosine")
