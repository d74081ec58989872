"""perf/bench/train_e2e.py's tables from a run's JSON (the run itself needs root and network
namespaces): speed over gloo of the same rate (FSDP2 rows over fsdp-gloo), the no-overlap
ideal (compute plus the row's bytes at the link rate; none for hier), comm, loss against
gloo, CPU per rank where the run measured it, and the wide table's one line per row."""
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
        row("hint8", None, 0.330, 12.5, loss=2.02, same=False)]


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
    assert "| hint8 | c | 300 (2.00x) | 330 (0.91x) | 300 | 33% | 150 | 12.5 | +1.00% | yes |" in md
    assert "| unlimited | hint8 | c | 330 | 0.91x | 200 | 39% | - | 12.5 | 2.0200 | +1.00% | NO |" in md
    assert (tmp_path / "e2e.png").stat().st_size > 0
