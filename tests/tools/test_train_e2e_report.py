"""perf/bench/train_e2e.py's tables from a run's JSON (the run itself needs root and network
namespaces): speed over gloo of the same rate (FSDP2 rows over fsdp-gloo), the no-overlap
ideal (compute plus the row's bytes at the link rate; none for hier), comm, loss against
gloo, CPU per rank and the step's phases where the run measured them, and the wide table's one line per row; the loss
study's table (held-out loss against the tuned exact row), and the study itself on 2 ranks."""
import json

import pytest

pytest.importorskip("matplotlib", reason="the report draws the plot with matplotlib")
from perf.bench import train_e2e  # noqa: E402


def row(name, rate, step_s, mb, loss=2.0, mode="ddp", same=True):
    return {"row": name, "rate": rate, "mode": mode, "step_s": step_s, "loss": loss,
            "bytes_per_step": mb * 1e6, "replicas_identical": same, "codec": "c",
            "parameters": 1_000_000}


ROWS = [row("gloo", 1.0, 0.600, 40.0), row("compute", 1.0, 0.200, 0.0),
        dict(row("hint8", 1.0, 0.300, 12.5, loss=2.02), cpu_s=0.150), row("fsdp-gloo", 1.0, 1.2, 40.0, mode="fsdp"),
        row("fsdp-hint8", 1.0, 0.8, 20.0, mode="fsdp"), row("hier-hint8", 1.0, 0.4, 20.0),
        row("gloo", None, 0.300, 40.0), row("compute", None, 0.200, 0.0),
        dict(row("hint8", None, 0.330, 12.5, loss=2.02, same=False), phases_s=[0.05, 0.2, 0.08])]


def test_derived_figures():
    d = {(r["row"], r["rate"]): x for r, x in zip(ROWS, train_e2e.derived(ROWS))}
    assert d["hint8", 1.0]["speed"] == "2.00x"
    assert d["hint8", 1.0]["ideal"] == "300"      # 200 ms + 12.5 MB at 1 Gbit/s = 100 ms
    assert d["hint8", 1.0]["comm"] == "33%"
    assert d["hint8", 1.0]["dloss"] == "+1.00%"
    assert d["fsdp-hint8", 1.0]["speed"] == "1.50x"  # over fsdp-gloo
    assert d["hier-hint8", 1.0]["ideal"] == "-"
    assert d["hint8", None]["ideal"] == "200" and d["hint8", None]["speed"] == "0.91x"
    assert d["hint8", None]["same"] == "NO" and d["compute", None]["same"] == "-"


def test_report_writes_both_tables(tmp_path):
    args = {"model": "lm", "nodes": 4, "ranks_per_node": 1, "steps": 40, "warmup": 5, "seed": 1}
    path = tmp_path / "e2e.json"
    path.write_text(json.dumps({"args": args, "tbf": "128k/5", "rows": ROWS}))
    assert train_e2e.report(path) == 0
    md = (tmp_path / "e2e.md").read_text()
    assert "| hint8 | c | 300 (2.00x) | 330 (0.91x) | 300 | 33% | 150 | - | 12.5 | +1.00% | yes |" in md
    assert "| unlimited | hint8 | c | 330 | 0.91x | 200 | 39% | - | 50 / 200 / 80 | 12.5 | 2.0200 | +1.00% | NO |" in md
    assert (tmp_path / "e2e.png").stat().st_size > 0


def seed_run(seed, losses):
    rows = {n: {"val_loss": v, "lr": 1e-3, "codec": "c", "replicas_identical": True,
                "parameters": 1_000_000, "ranks": 4, "ccompress_bytes_per_step": 2e6}
            for n, v in losses.items()}
    return {"args": {"model": "lm", "steps": 300, "eval_batches": 32}, "seed": seed, "rows": rows}


def test_loss_table_against_tuned_exact():
    """The tuned exact row is the exact row of lowest mean; each row's difference to it is the
    mean over seeds of the per-seed difference, with its standard error."""
    runs = [seed_run(1, {"gloo@1e-3": 2.00, "gloo@2e-3": 1.90, "hint8": 1.9095}),
            seed_run(2, {"gloo@1e-3": 2.10, "gloo@2e-3": 2.00, "hint8": 2.0}),
            seed_run(3, {"gloo@1e-3": 2.05, "gloo@2e-3": 1.95, "hint8": 1.9695})]
    lines = train_e2e.loss_table(runs)
    assert lines[0].startswith("tuned exact: gloo@2e-3")
    hint8 = next(x for x in lines if x.startswith("| hint8 |"))
    # +0.5%, 0%, +1.0%: mean +0.50%, standard error 0.5 / sqrt(3)
    assert "| 1.9095 | 2.0000 | 1.9695 | 1.9597 | +0.50% ± 0.29 | yes |" in hint8
    assert "| 0.001 | 2.0 |" in hint8  # ccompress's count; an exact ring's for the gloo rows:
    gloo = next(x for x in lines if x.startswith("| gloo@2e-3 |"))
    assert "| 0.001 | 6.0 |" in gloo and gloo.endswith("| - | yes |")
    with pytest.raises(ValueError, match="exact row"):
        train_e2e.loss_table([seed_run(1, {"hint8": 2.0})])


def test_moe_loss_table_tunes_on_the_exact_moe_rows():
    """--model moe: the exact rows are moe-gloo's (gradients and both all-to-alls exact); a
    row that compresses only the dispatch is not one, nor the compute row that sends nothing,
    even where their loss is lowest."""
    runs = []
    for seed in (1, 2):
        run = seed_run(seed, {"moe-gloo@1e-3": 2.0, "moe-gloo@2e-3": 1.9,
                              "moe-fp8-dispatch": 1.8, "moe-fp8-all": 1.919,
                              "moe-compute": 1.7})
        for r in run["rows"].values():
            r.update(dense_parameters=500_000, a2a_exact_bytes=3e6)
        run["args"]["model"] = "moe"
        runs.append(run)
    lines = train_e2e.loss_table(runs)
    assert lines[0].startswith("tuned exact: moe-gloo@2e-3")
    assert "| -5.26% ± 0.00 |" in next(x for x in lines if x.startswith("| moe-fp8-dispatch |"))
    assert "| +1.00% ± 0.00 |" in next(x for x in lines if x.startswith("| moe-fp8-all |"))
    # bytes: moe-gloo's dense ring and both exact all-to-alls; fp8 dispatch: ccompress's
    # count and the exact combine
    assert "| 0.001 | 11.0 |" in next(x for x in lines if x.startswith("| moe-gloo@2e-3 |"))
    assert "| 0.001 | 8.0 |" in next(x for x in lines if x.startswith("| moe-fp8-dispatch |"))
    assert "| 0.001 | 0.0 |" in next(x for x in lines if x.startswith("| moe-compute |"))
    assert not train_e2e.is_exact("moe-fp8-dispatch") and train_e2e.is_exact("moe-gloo@1e-3")
    assert not train_e2e.is_exact("moe-compute")


def test_loss_study_runs_under_torchrun(tmp_path):
    """The loss study end to end on 2 ranks, a few steps: every row reports a held-out loss and
    identical replicas."""
    pytest.importorskip("torch")
    assert train_e2e.loss_study(["--rows", "gloo@2e-3,hint8", "--ranks", "2", "--steps", "3",
                                 "--seeds", "1", "--eval-batches", "1",
                                 "--out", str(tmp_path)]) == 0
    got = json.loads((tmp_path / "lm-seed1.json").read_text())["rows"]
    assert set(got) == {"gloo@2e-3", "hint8"}
    assert all(r["val_loss"] > 0 and r["replicas_identical"] for r in got.values())
    assert got["hint8"]["lr"] == train_e2e.LOSS_LR["lm"] and got["gloo@2e-3"]["lr"] == 2e-3
    assert "tuned exact: gloo@2e-3" in (tmp_path / "lm-loss.md").read_text()


def test_loss_study_over_two_nodes_runs_hier(tmp_path):
    """--ranks-per-node 2 of 4 ranks: two torchrun agents over loopback, so hier rows see two
    nodes; without it a hier row is refused before anything starts."""
    pytest.importorskip("torch")
    with pytest.raises(SystemExit):
        train_e2e.loss_study(["--rows", "gloo,hier-hint8", "--ranks", "4", "--out",
                              str(tmp_path)])
    assert train_e2e.loss_study(["--rows", "gloo,hier-hint8", "--ranks", "4",
                                 "--ranks-per-node", "2", "--steps", "3", "--seeds", "1",
                                 "--eval-batches", "1", "--out", str(tmp_path)]) == 0
    got = json.loads((tmp_path / "lm-seed1.json").read_text())["rows"]
    assert set(got) == {"gloo", "hier-hint8"}
    assert all(r["val_loss"] > 0 and r["replicas_identical"] for r in got.values())
    assert got["hier-hint8"]["ranks"] == 4
    assert "2 nodes x 2 ranks" in (tmp_path / "lm-loss.md").read_text()
