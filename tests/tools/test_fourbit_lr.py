"""perf/diagnose/fourbit_lr.py on a tiny model for a few steps: every error it reports is
measured against the float64 mean of the ranks' real gradients, exact communication measures
zero, an 8-bit codec errs far less than a 4-bit one, and the two stages' errors make up the
whole all-reduce's."""
import json

import pytest

pytest.importorskip("torch")
from perf.diagnose import fourbit_lr  # noqa: E402


def test_layer_kinds():
    assert [fourbit_lr.kind(n) for n in (
        "tok_emb.weight", "pos_emb", "h.0.ln1.weight", "ln_f.bias", "h.1.attn_qkv.bias",
        "h.0.attn_out.weight", "h.1.mlp_up.weight")] == [
        "emb", "pos", "norm", "norm", "bias", "attn", "mlp"]


def test_errors_of_exact_8bit_and_4bit(tmp_path):
    out = tmp_path / "d.json"
    assert fourbit_lr.main(["--lr", "4e-3", "--steps", "3", "--at", "2", "--codecs",
                            "none,hint8,nvfp4", "--d-model", "32", "--layers", "1",
                            "--seq", "2", "--ctx", "16", "--json", str(out)]) == 0
    got = json.loads(out.read_text())["results"]
    assert [(r["step"], r["codec"]) for r in got] == [
        (2, c) for c in ("none", "hint8", "nvfp4")]
    for r in got:
        e = r["errors"]
        assert set(e) == {"all", *fourbit_lr.KINDS}
        if r["codec"] == "none":  # exact float32 sums of the parts: float32 rounding only
            assert all(v[m] < 1e-6 for v in e.values() for m in ("grad", "rs", "ag", "tensor"))
            continue
        bound = 0.02 if r["codec"] == "hint8" else 0.25  # one step's relative error
        assert 0 < e["all"]["grad"] < bound
        # in Adam's units the error is larger early (v holds a few steps' squares only)
        assert 0 < e["all"]["adam"] < 1.0
        # two quantizations: the whole all-reduce's squared error is about the two stages'
        both = (e["all"]["rs"] ** 2 + e["all"]["ag"] ** 2) ** 0.5
        assert 0.8 * both < e["all"]["grad"] < 1.2 * both
    by = {(r["codec"], m): r["errors"]["all"][m] for r in got for m in ("grad", "adam")}
    assert by["hint8", "grad"] < by["nvfp4", "grad"] / 5
    assert by["hint8", "adam"] < by["nvfp4", "adam"]


def test_rejects_steps_outside_the_run():
    with pytest.raises(SystemExit):
        fourbit_lr.main(["--steps", "4", "--at", "4"])


def test_error_feedback_and_auto_choices(tmp_path):
    """With error feedback every codec runs at every step: the compensated result's momentum
    errs less than the uncompensated one's, the stages are not re-measured, and every auto
    choice is one of auto4's candidates, made for the bucket and for every tensor."""
    from ccompress import autocodec

    out = tmp_path / "d.json"
    assert fourbit_lr.main(["--lr", "4e-3", "--steps", "8", "--at", "7", "--codecs", "nvfp4",
                            "--ef", "off,on", "--auto", "auto4", "--d-model", "32",
                            "--layers", "1", "--seq", "2", "--ctx", "16",
                            "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    by = {r["ef"]: r["errors"]["all"] for r in got["results"]}
    assert set(by) == {"off", "on"}
    assert by["on"]["rs"] is None and by["off"]["rs"] > 0
    # momentum of 8 steps: the residuals carry what each step dropped into the next
    assert 0 < by["on"]["mom"] < 0.8 * by["off"]["mom"] < 0.25
    assert by["on"]["grad"] < 0.5  # one compensated step errs by two residuals at most
    names = {c.name for c in autocodec.candidates("auto4")}
    (pick,) = got["auto"]
    assert pick["spec"] == "auto4" and pick["bucket"][0] in names
    assert len(pick["tensors"]) == 16 and all(c in names and lay in ("rows", "cols")
                                              for c, lay, _ in pick["tensors"].values())


def test_rejects_bad_ef_and_auto():
    with pytest.raises(SystemExit):
        fourbit_lr.main(["--steps", "4", "--at", "2", "--ef", "maybe"])
    with pytest.raises(SystemExit):
        fourbit_lr.main(["--steps", "4", "--at", "2", "--auto", "nvfp4"])
