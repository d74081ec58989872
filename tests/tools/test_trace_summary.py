"""ccompress.tools.trace on hand-made CCOMPRESS_TRACE files: the k-th call of a (group, op,
size) on every rank is one collective; spread (first to last rank's call) and after last
(last rank's call to the last result) are medians over calls after the warm-up; a size that
one rank never called is left out; perf/bench/train_e2e.py names group k after its k-th
backend row. (tests/pytorch/test_torch_integration.py::test_trace_files checks the files the
backend writes.)"""
import json

from ccompress.tools import trace


def write(path, rank, calls):
    """calls: (tid, name, numel, start ms, duration ms, bytes)."""
    events = [{"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {}}]
    events += [{"ph": "X", "name": name, "pid": rank, "tid": tid, "ts": 1e3 * t, "dur": 1e3 * d,
                "args": {"numel": n, "bytes_sent": b, "exact_bytes": 4 * n}}
               for tid, name, n, t, d, b in calls]
    events.append({"ph": "i", "s": "t", "name": "all_reduce exact (small)", "pid": rank,
                   "tid": 1, "ts": 0.0, "args": {"numel": 8}})
    (path / f"ccompress-trace-rank{rank}.json").write_text(json.dumps(events))


def test_spread_and_after_last(tmp_path):
    # two steps of one group: a small bucket, then a big one; rank 1 is 10 ms late at the
    # first step and 30 ms late at the second; rank 0 alone has a 77-element call
    h = "all_reduce hint8"
    write(tmp_path, 0, [(1, h, 100, 0, 12, 50), (1, h, 9000, 5, 60, 4000),
                        (1, h, 100, 100, 32, 50), (1, h, 9000, 105, 80, 4000), (1, h, 77, 300, 1, 9)])
    write(tmp_path, 1, [(1, h, 100, 10, 2, 70), (1, h, 9000, 20, 45, 4200),
                        (1, h, 100, 130, 2, 70), (1, h, 9000, 140, 45, 4200)])
    rows = trace.summarize(trace.load(str(tmp_path)), skip=0)
    assert [(r["numel"], r["calls"]) for r in rows] == [(100, 2), (9000, 2)]
    small, big = rows
    assert small["spread_ms"] == 20.0 and small["after_last_ms"] == 2.0  # medians of 10/30, 2/2
    # on a rank: the median over calls of the ranks' mean, (12 + 2) / 2 and (32 + 2) / 2
    assert small["rank_ms"] == 12.0 and small["bytes_sent"] == 60.0
    # big: spread 15 and 35 -> 25; after last: max(65, 65) - 20 = 45 and max(185, 185) - 140 = 45
    assert big["spread_ms"] == 25.0 and big["after_last_ms"] == 45.0
    # skip=1: the second step alone
    small, big = trace.summarize(trace.load(str(tmp_path)), skip=1)
    assert small["spread_ms"] == 30.0 and big["spread_ms"] == 35.0 and small["calls"] == 2
    text = trace.table(rows, {1: "hint8-row"})
    assert "| hint8-row | all_reduce hint8 | 9000 | 2 | 25 | 45 |" in text, text


def test_e2e_names_groups_after_backend_rows_then_hook_rows(tmp_path, capsys):
    """The backend rows' groups are made before the first step, the hooks' traces start at
    their first bucket: a hook row listed first is still the last group."""
    from perf.bench import train_e2e

    h, f, k = "all_reduce hint8", "all_reduce fp8", "all_reduce hint8 (hook)"
    write(tmp_path, 0, [(1, h, 100, 0, 5, 50), (2, f, 100, 10, 5, 50), (3, k, 100, 20, 5, 50)])
    write(tmp_path, 1, [(1, h, 100, 1, 4, 50), (2, f, 100, 11, 4, 50), (3, k, 100, 21, 4, 50)])
    train_e2e.trace_summary(tmp_path, ["gloo", "hook-hint8", "hint8", "compute", "fp8-noef",
                                       "tsr"], 0, 1.0)
    text = (tmp_path / "summary.md").read_text()
    assert "at 1 Gbit/s" in text and "| hint8 | all_reduce hint8 | 100 |" in text, text
    assert "| fp8-noef | all_reduce fp8 | 100 |" in text, text
    assert "| hook-hint8 | all_reduce hint8 (hook) | 100 |" in text, text
    assert text in capsys.readouterr().out
