"""ccompress-fidelity: numbers against a NumPy reference, files, JSON, errors, exit codes."""
import json
import math
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import ccompress as cc
from ccompress.tools import fidelity


def run_tool(args, capsys):
    rc = fidelity.main([str(a) for a in args] + ["-q"])
    out, err = capsys.readouterr()
    return rc, out, err


def ref_metrics(y, ref):
    """The four numbers of a row, from scratch in fp64."""
    y = np.asarray(y, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    e = y - ref
    return {"relerr": np.linalg.norm(e) / np.linalg.norm(ref),
            "cosine": y @ ref / (np.linalg.norm(y) * np.linalg.norm(ref)),
            "maxabs": np.abs(e).max(),
            "snr_db": 10 * np.log10((ref @ ref) / (e @ e))}


def bf16(x):
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def outlier_parts(rng, ranks, tokens, channels):
    """TP-like partial sums: small dense values plus a few large outlier channels."""
    x = rng.standard_normal((ranks, tokens, channels)) * 0.1
    x[:, :, [3, 17]] *= 80.0
    return x.astype(np.float32)


def rows_of(path):
    with open(path) as f:
        return json.load(f)


def find(rows, **kw):
    hits = [r for r in rows if all(r[k] == v for k, v in kw.items())]
    assert len(hits) == 1, (kw, hits)
    return hits[0]


def test_npy_single_tensor_is_a_round_trip(tmp_path, rng, capsys):
    x = (rng.standard_normal((30, 100)) * np.exp(rng.standard_normal(100))).astype(np.float32)
    np.save(tmp_path / "w.npy", x)
    rc, out, _ = run_tool([tmp_path / "w.npy", "--json", tmp_path / "o.json"], capsys)
    assert rc == 0
    doc = rows_of(tmp_path / "o.json")
    rows = doc["rows"]
    # one rank only (a single tensor): one row per default codec, whatever the schedule
    assert {r["ranks"] for r in rows} == {1}
    assert len(rows) == len(fidelity.DEFAULT_CODECS)
    assert {r["algo"] for r in rows} == {fidelity.ANY_ALGO}
    n = x.size  # 3000: not a multiple of the group
    for algo in (fidelity.ANY_ALGO,):
        none = find(rows, codec="none", algo=algo)
        assert none["relerr"] == 0 and none["maxabs"] == 0 and none["snr_db"] is None
        assert none["bits"] == 32 and none["sent_bytes_per_elem"] == 0

        r = find(rows, codec="bf16", algo=algo)
        want = ref_metrics(bf16(x), x)
        for k in want:
            assert r[k] == pytest.approx(want[k], rel=1e-12), k
        assert r["bits"] == 16

        for spec in ("fp8_e4m3:g128", "fp8_e5m2:g128"):
            r = find(rows, codec=spec, algo=algo)
            y = cc.Codec.parse(spec).roundtrip(x)
            want = ref_metrics(y, x)
            for k in want:
                assert r[k] == pytest.approx(want[k], rel=1e-12), (spec, k)
            # payload n bytes (padded to 4) + one fp32 scale per 128 elements
            assert r["bits"] == pytest.approx(8 * (n + 4 * math.ceil(n / 128)) / n)
    e4 = find(rows, codec="fp8_e4m3:g128")["relerr"]
    e5 = find(rows, codec="fp8_e5m2:g128")["relerr"]
    assert 0.005 < e4 < e5 < 0.2
    assert "w" in out and "fp8_e4m3:g128" in out


def test_npz_stack_against_numpy_reference(tmp_path, rng, capsys):
    parts = outlier_parts(rng, 4, 64, 80)  # 5120 elements per rank
    np.savez(tmp_path / "tp_layer.npz", parts=parts, other=np.zeros(3, np.float32))
    rc, _, _ = run_tool([tmp_path / "tp_layer.npz", "--no-default-codecs", "--codec", "bf16",
                         "--algo", "one_shot", "--algo", "two_shot", "--ranks", "2,4",
                         "--json", tmp_path / "o.json"], capsys)
    assert rc == 0
    doc = rows_of(tmp_path / "o.json")
    assert doc["files"] == [{"file": str(tmp_path / "tp_layer.npz"), "tensor": "tp_layer",
                             "ranks": 4, "count": 5120, "dtype": "float32"}]
    rows = doc["rows"]
    assert len(rows) == 4
    flat = parts.reshape(4, -1)
    for k in (2, 4):
        # k ranks: contiguous groups of parts summed in fp64 (the exact result is unchanged)
        merged = np.stack([flat[g].astype(np.float64).sum(0)
                           for g in np.array_split(np.arange(4), k)]).astype(np.float32)
        ref = merged.astype(np.float64).sum(0)
        q = [bf16(p) for p in merged]
        acc = np.zeros_like(q[0])
        for p in q:  # fp32 accumulation in rank order
            acc = acc + p
        want = {"one_shot": acc,            # each rank decodes everything and sums
                "two_shot": bf16(acc)}      # the owner's sum is encoded once more
        for algo, y in want.items():
            r = find(rows, ranks=k, algo=algo)
            m = ref_metrics(y, ref)
            for key in m:
                assert r[key] == pytest.approx(m[key], rel=1e-9), (k, algo, key)
            assert r["ranks_identical"] and r["count"] == 5120 and r["bits"] == 16
            # two_shot: every rank sends 2(k-1)/k of the tensor; one_shot: (k-1) copies
            per = {"two_shot": 2 * (k - 1) / k, "one_shot": k - 1}[algo] * 2
            assert per <= r["sent_bytes_per_elem"] < per + 0.1
            assert len(r["payload_bytes"]) == k
    # two_shot quantizes twice, one_shot once
    two, one = (find(rows, ranks=4, algo=a)["relerr"] for a in ("two_shot", "one_shot"))
    assert two > one


def test_summary_medians_and_groups(tmp_path, rng, capsys):
    files = []
    for i, name in enumerate(["tp_a", "tp_b", "dp_c"]):
        p = tmp_path / f"{name}.npz"
        np.savez(p, parts=outlier_parts(rng, 4, 16, 64) * (i + 1))
        files.append(p)
    rc, out, _ = run_tool(files + ["--algo", "two_shot", "--algo", "ring", "--summary",
                                   "--json", tmp_path / "o.json"], capsys)
    assert rc == 0
    doc = rows_of(tmp_path / "o.json")
    assert len(doc["summary"]) == 1
    s = doc["summary"][0]
    assert (s["algo"], s["ranks"], s["groups"]) == ("two_shot", 4, ["dp", "tp"])
    by_codec = {e["codec"]: e for e in s["codecs"]}
    assert list(by_codec) == list(fidelity.DEFAULT_CODECS)
    for c, e in by_codec.items():
        rel = [r["relerr"] for r in doc["rows"]
               if r["codec"] == c and r["algo"] == "two_shot" and r["ranks"] == 4]
        assert len(rel) == 3 and e["tensors"] == 3
        assert e["relerr_median"] == pytest.approx(float(np.median(rel)))
        assert e["relerr_max"] == pytest.approx(max(rel))
        assert e["relerr_median_by_group"]["dp"] == pytest.approx(rel[2])
        assert e["relerr_median_by_group"]["tp"] == pytest.approx(np.median(rel[:2]))
    assert "# summary: two_shot at 4 ranks" in out
    assert "fp8_e4m3:g128" in out.split("# summary")[1]

    # one summary per --summary-algo, at the rank count asked for
    rc, out, _ = run_tool(files + ["--algo", "ring", "--algo", "one_shot", "--summary",
                                   "--summary-algo", "ring", "--summary-algo", "one_shot",
                                   "--summary-ranks", "1", "--json", tmp_path / "o.json"], capsys)
    assert rc == 0
    sums = rows_of(tmp_path / "o.json")["summary"]
    assert [(x["algo"], x["ranks"]) for x in sums] == [("ring", 1), ("one_shot", 1)]
    assert "# summary: ring at 1 ranks" in out and "# summary: one_shot at 1 ranks" in out


def test_bfloat16_stack_and_float64_input(tmp_path, rng, capsys):
    parts = rng.standard_normal((2, 1000)).astype(ml_dtypes.bfloat16)
    np.savez(tmp_path / "b.npz", parts=parts)
    np.save(tmp_path / "d.npy", rng.standard_normal(500))  # float64: read as float32
    rc, _, _ = run_tool([tmp_path / "b.npz", tmp_path / "d.npy", "--algo", "two_shot",
                         "--json", tmp_path / "o.json"], capsys)
    assert rc == 0
    rows = rows_of(tmp_path / "o.json")["rows"]
    r = find(rows, tensor="b", ranks=2, codec="bf16")
    assert r["dtype"] == "bfloat16" and r["bits"] == 16
    ref = parts.astype(np.float64).sum(0)
    want = ref_metrics(bf16(parts[0].astype(np.float32) + parts[1].astype(np.float32)), ref)
    assert r["relerr"] == pytest.approx(want["relerr"], rel=1e-9)
    assert find(rows, tensor="d", codec="none")["dtype"] == "float32"


@pytest.mark.parametrize("content,suffix,msg", [
    (b"hello", ".txt", "unsupported file type '.txt'"),
    (b"garbage", ".npy", "not a .npy file"),
    (b"PK\x03\x04broken", ".npz", "cannot read it as .npz"),
])
def test_bad_file_is_a_clear_error(tmp_path, capsys, content, suffix, msg):
    p = tmp_path / f"bad{suffix}"
    p.write_bytes(content)
    rc, out, err = run_tool([p], capsys)
    assert rc == 2
    assert f"ccompress-fidelity: error: {p}: " in err and msg in err
    assert out == ""


def test_bad_arguments(tmp_path, rng, capsys):
    np.save(tmp_path / "ints.npy", np.arange(10))
    rc, _, err = run_tool([tmp_path / "ints.npy"], capsys)
    assert rc == 2 and "dtype int64" in err
    rc, _, err = run_tool([tmp_path / "missing.npz"], capsys)
    assert rc == 2 and "no such file" in err
    np.save(tmp_path / "x.npy", rng.standard_normal(100).astype(np.float32))
    rc, _, err = run_tool([tmp_path / "x.npy", "--codec", "no_such_codec:g7"], capsys)
    assert rc == 2 and "codec 'no_such_codec:g7'" in err and "valid codec specs" in err
    rc, _, err = run_tool([tmp_path / "x.npy", "--ranks", "4"], capsys)
    assert rc == 2 and "nothing to measure" in err
    rc, _, err = run_tool([tmp_path / "x.npy", "--layout", "stacked"], capsys)
    assert rc == 2 and "stack of per-rank parts" in err
    with pytest.raises(SystemExit) as e:
        fidelity.main([str(tmp_path / "x.npy"), "--ranks", "0"])
    assert e.value.code == 2


def test_failed_run_gives_exit_status_1(tmp_path, rng, capsys, monkeypatch):
    np.save(tmp_path / "x.npy", rng.standard_normal(100).astype(np.float32))
    real = fidelity.measure

    def flaky(t, k, codec, algo):
        if codec.name == "bf16":
            raise cc.Unsupported("bf16 is off today")
        return real(t, k, codec, algo)

    monkeypatch.setattr(fidelity, "measure", flaky)
    rc, out, err = run_tool([tmp_path / "x.npy", "--algo", "ring", "--json",
                             tmp_path / "o.json"], capsys)
    assert rc == 1 and "bf16 is off today" in err
    rows = rows_of(tmp_path / "o.json")["rows"]
    assert find(rows, codec="bf16")["error"].startswith("Unsupported")
    assert "relerr" in find(rows, codec="fp8_e4m3:g128")


def test_safetensors(tmp_path, rng, capsys):
    st = pytest.importorskip("safetensors.numpy")
    parts = rng.standard_normal((4, 256)).astype(np.float32)
    st.save_file({"parts": parts, "step": np.array([7])}, str(tmp_path / "g.safetensors"))
    rc, _, _ = run_tool([tmp_path / "g.safetensors", "--algo", "two_shot",
                         "--json", tmp_path / "o.json"], capsys)
    assert rc == 0
    rows = rows_of(tmp_path / "o.json")["rows"]
    assert {r["ranks"] for r in rows} == {1, 4}
    r = find(rows, ranks=4, codec="none")
    assert r["relerr"] < 1e-6


def test_missing_optional_packages(tmp_path, rng, capsys, monkeypatch):
    (tmp_path / "g.safetensors").write_bytes(b"\0" * 16)
    np.save(tmp_path / "x.npy", rng.standard_normal(100).astype(np.float32))
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc, _, err = run_tool([tmp_path / "g.safetensors"], capsys)
    assert rc == 2 and "needs the safetensors package" in err and "pip install" in err
    rc, _, err = run_tool([tmp_path / "x.npy", "--plot", tmp_path / "p.png"], capsys)
    assert rc == 2 and "--plot needs matplotlib" in err


def test_plot(tmp_path, rng, capsys):
    pytest.importorskip("matplotlib")
    np.savez(tmp_path / "s.npz", parts=outlier_parts(rng, 2, 8, 64))
    rc, _, _ = run_tool([tmp_path / "s.npz", "--plot", tmp_path / "p.png"], capsys)
    assert rc == 0
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_line_exit_codes(tmp_path, rng):
    np.savez(tmp_path / "s.npz", parts=rng.standard_normal((2, 300)).astype(np.float32))
    cmd = [sys.executable, "-m", "ccompress.tools.fidelity"]
    ok = subprocess.run(cmd + [str(tmp_path / "s.npz"), "--algo", "tree"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "[fidelity] (1/1) s: 2 x 300 float32" in ok.stderr  # progress goes to stderr
    assert len([ln for ln in ok.stdout.splitlines() if not ln.startswith("#")]) == 8
    bad = subprocess.run(cmd + [str(tmp_path / "nope.npz")], capture_output=True, text=True)
    assert bad.returncode == 2 and "no such file" in bad.stderr


def test_auto_codecs_report_their_choice(tmp_path, rng, capsys):
    """auto8 runs through the tool; each row names the (codec, layout) the ranks chose, and
    its bits are that codec's."""
    col_scale = np.exp(2 * rng.standard_normal(48))
    parts = (rng.standard_normal((2, 32, 48)) * col_scale).astype(np.float32)
    np.savez(tmp_path / "t.npz", parts=parts)
    rc, _, _ = run_tool([tmp_path / "t.npz", "--codec", "auto8", "--no-default-codecs",
                         "--algo", "two_shot", "--json", tmp_path / "o.json"], capsys)
    assert rc == 0
    rows = [r for r in rows_of(tmp_path / "o.json")["rows"] if r["ranks"] == 2]
    assert rows and all(r["codec"] == "auto8" for r in rows)
    spec, layout = rows[0]["chosen"].split("/")
    assert layout in ("rows", "cols")
    n = parts[0].size
    assert rows[0]["bits"] == pytest.approx(8 * cc.Codec.parse(spec).wire_bytes(n) / n)
