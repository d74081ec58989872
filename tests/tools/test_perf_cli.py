"""The command-line tools as a user meets them: ccompress-perf's model rows, its refusal to
run as an accidental single rank, its --help, and ccompress-info's versions."""
import argparse
import json
import os
import subprocess
import sys

import pytest

import ccompress as cc
from ccompress.tools import perf, perfmodel as pm
from ccompress.tools.info import build_info


def test_perf_inproc_prints_measured_then_model_rows(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc = perf.main(["allreduce", "--inproc", "2", "-b", "64K", "-e", "64K", "-n", "1", "-w", "0",
                    "--codec", "none", "--codec", "fp8_e4m3:g128", "--algo", "two_shot",
                    "--link-gbps", "1,10", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "shared memory" in text  # how to read a one-host table is said in the output
    model = [line for line in text.splitlines() if line.startswith("# model ")]
    # a header, then per rate the baseline and each measured codec x algo
    assert len(model) == 1 + 2 * 3, text
    assert "MODEL, not measured" in text
    data = json.loads(out.read_text())
    assert {r["codec"] for r in data["model_rows"]} == {"none", "fp8_e4m3:g128"}
    fp8_1g = next(r for r in data["model_rows"] if r["codec"] == "fp8_e4m3:g128" and r["gbit"] == 1)
    # at 1 Gbit/s the wire dominates: the model's fp8 time is below its uncompressed baseline
    assert fp8_1g["model_time_us"] < fp8_1g["model_baseline_us"]
    assert fp8_1g["model_error"] == pm.VALIDATION_ERROR[1.0]


def test_perf_model_rows_of_one_host_model_a_node_per_rank(tmp_path, capsys):
    """Ranks that all share one node (mpiexec on one machine) have no link between them:
    the model rows put each on its own node, so the link rate changes their times."""
    out = tmp_path / "rows.json"
    rc = perf.main(["allreduce", "--inproc", "2", "--ranks-per-node", "2", "-b", "64K",
                    "-e", "64K", "-n", "1", "-w", "0", "--codec", "fp8_e4m3:g128",
                    "--algo", "two_shot", "--link-gbps", "1,10", "--json", str(out)])
    assert rc == 0
    assert "modelled one per node" in capsys.readouterr().out
    rows = json.loads(out.read_text())["model_rows"]
    t = {r["gbit"]: r["model_baseline_us"] for r in rows}
    assert t[1] > 2 * t[10], rows  # the uncompressed baseline is wire-bound at 1 Gbit/s


def test_perf_without_model_rows(capsys):
    rc = perf.main(["allreduce", "--inproc", "2", "-b", "4K", "-e", "4K", "-n", "1", "-w", "0",
                    "--codec", "bf16", "--link-gbps", "none"])
    assert rc == 0
    assert "# model" not in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["reduce_scatter", "allgather"])
def test_perf_measures_hier_reduce_scatter_and_allgather(tmp_path, kind):
    """--algo hier adds the hierarchical row after the flat one, checked against its own
    bound (every element within it, the bits of all ranks alike for allgather)."""
    out = tmp_path / "rows.json"
    rc = perf.main([kind, "--inproc", "8", "--ranks-per-node", "4", "-b", "64K", "-e", "64K",
                    "-n", "1", "-w", "0", "--codec", "hint8", "--algo", "hier",
                    "--intra-codec", "bf16" if kind == "reduce_scatter" else "none",
                    "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert rc == 0 and [r["algo"] for r in rows] == [
        "two_shot" if kind == "reduce_scatter" else "one_shot", "hier"]
    assert all(r["wrong"] == 0 and r["relerr"] < 0.02 for r in rows), rows
    with pytest.raises(SystemExit):
        perf.main([kind, "--inproc", "2", "--algo", "ring"])


def test_perf_measures_alltoall_against_each_senders_encoding(tmp_path):
    """ccompress-perf alltoall: each rank's output within the bound and, piece by piece, the
    bits its sender's Codec.roundtrip gives (#wrong counts both); --algo does not apply."""
    out = tmp_path / "rows.json"
    rc = perf.main(["alltoall", "--inproc", "3", "-b", "12K", "-e", "48K", "-f", "4", "-n", "1",
                    "-w", "0", "--codec", "none", "--codec", "nvfp4", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert rc == 0 and [(r["codec"], r["algo"]) for r in rows] == [
        ("none", "pairwise"), ("nvfp4", "pairwise")] * 2
    assert all(r["wrong"] == 0 and r["wrong_identity"] == 0 for r in rows), rows
    assert rows[1]["relerr"] < 0.2 and rows[1]["ratio"] > 3, rows
    with pytest.raises(SystemExit):
        perf.main(["alltoall", "--inproc", "2", "--algo", "ring"])


def test_validation_error_is_only_claimed_near_validated_rates():
    assert pm.validation_error(1.0) == pm.VALIDATION_ERROR[1.0]
    assert pm.validation_error(8.0) == pm.VALIDATION_ERROR[10.0]
    assert pm.validation_error(100.0) is None


def test_perf_refuses_a_one_rank_mpi_world():
    pytest.importorskip("mpi4py")
    try:
        from ccompress import _mpi  # noqa: F401
    except ImportError:
        pytest.skip("MPI transport not built")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "MPI"))}
    r = subprocess.run([sys.executable, "-m", "ccompress.tools.perf", "allreduce", "-b", "4K", "-e",
                        "4K"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "1-rank MPI world" in r.stderr and "--inproc" in r.stderr
    assert "size" not in r.stdout  # no table was printed


def test_perf_help_gives_units_and_defaults(capsys):
    with pytest.raises(SystemExit):
        perf.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal width
    for piece in ("bytes of input per rank", "(default: 1M)", "(default: 64M)", "Gbit/s",
                  "(default: 1,10,100)", "(default: 5)"):
        assert piece in text, piece


def test_info_reports_installed_torch_without_importing_it():
    try:
        from importlib.metadata import version
        expected = version("torch")
    except Exception:
        pytest.skip("torch is not installed")
    code = ("import sys, json; from ccompress.tools.info import build_info; i = build_info(); "
            "print(json.dumps([i['torch'], 'torch' in sys.modules]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    reported, imported = json.loads(r.stdout)
    assert reported == expected and not imported


def test_info_reports_a_missing_library_as_none():
    from ccompress.tools.info import _installed_version
    assert _installed_version("ccompress_no_such_module") is None
    assert _installed_version("numpy") == build_info()["numpy"]


def emulated_net():
    """perf/bench/emulated_net.py as a module (its table functions; nothing is run)."""
    from perf.bench import emulated_net as en
    return en


def test_emulated_net_overlap_share():
    """perf/bench/emulated_net.py's hidden share: (t_cpu + t_wire - t) / min(t_cpu, t_wire),
    from the unlimited-link time, the rate's wire time and the measured time."""
    en = emulated_net()
    row = {"size": 64, "codec": "fp8", "algo": "two_shot"}
    wire = 125_000_000 // 8  # 0.125 s at 1 Gbit/s

    def hidden(t_cpu, t):
        free = [dict(row, time_us=t_cpu * 1e6)]
        limited = [dict(row, time_us=t * 1e6, wire_bytes=wire),
                   dict(row, codec="MPI_Allreduce", time_us=1e6, wire_bytes=wire)]
        (line,) = en.overlap_table(free, limited, 1.0)
        return int(line.split()[-1].rstrip("%"))

    assert hidden(0.25, 0.3125) == 50   # half of the 0.125 s wire time hidden
    assert hidden(0.25, 0.375) == 0     # serial
    assert hidden(0.25, 0.25) == 100    # all of it
    assert hidden(0.25, 0.5) == 0       # slower than serial: clipped


def test_emulated_net_tbf_setting_and_burst_marking():
    """--tbf BURST/LATENCY_MS, or 'old' (2 x rate/250 bytes, at least 256 KiB; 100 ms); a row is
    marked when a rank moves under 10 bursts per call, so a 64 MiB all-reduce's compressed
    traffic (about 26 MB per rank for fp8, 14 MB for a 4-bit codec) is marked under the old
    10 Gbit/s bucket and not under a 128 KiB one."""
    en = emulated_net()
    assert en.tbf_setting("128k/5", 10.0) == (128 * 1024, 5.0)
    assert en.tbf_setting("1M/0.5", 1.0) == (1 << 20, 0.5)
    assert en.tbf_setting("old", 10.0) == (10_000_000, 100.0)
    assert en.tbf_setting("old", 1.0) == (1_000_000, 100.0)
    assert en.tbf_setting("old", 0.1) == (256 * 1024, 100.0)
    for bad in ("128k", "x/5", "128k/fast"):
        with pytest.raises(argparse.ArgumentTypeError, match="BURST/LATENCY_MS"):
            en.tbf_setting(bad, 1.0)
    old, new = en.tbf_setting("old", 10.0)[0], en.tbf_setting(en.TBF, 10.0)[0]
    for wire in (26_000_000, 14_000_000):
        assert en.in_burst(wire, old) and not en.in_burst(wire, new)
    assert en.in_burst(10 * new - 1, new) and not en.in_burst(10 * new, new)


def test_perf_slice_elems_option(tmp_path, capsys):
    """--slice-elems reaches the communicator: the run reports it, and a shorter slice means
    more messages, hence more header bytes on the wire, for the same (checked) result;
    repeated, it measures each codec at each slice size."""
    def rows(extra):
        out = tmp_path / "rows.json"
        rc = perf.main(["allreduce", "--inproc", "2", "-b", "256K", "-e", "256K", "-n", "1",
                        "-w", "0", "--codec", "fp8_e4m3:g128", "--algo", "two_shot",
                        "--link-gbps", "none", "--json", str(out)] + extra)
        assert rc == 0
        data = json.loads(out.read_text())
        shown = ", ".join(map(str, data["slice_elems"]))
        assert f"# slice_elems {shown}" in capsys.readouterr().out
        assert all(r["wrong"] == 0 and r["cpu_us"] > 0 for r in data["rows"])
        return data

    (default,) = rows([])["rows"]
    assert default["slice_elems"] == cc._core.DEFAULT_SLICE_ELEMS
    assert default["codec"] == "fp8_e4m3:g128"
    data = rows(["--slice-elems", "4096", "--slice-elems", str(cc._core.DEFAULT_SLICE_ELEMS)])
    assert data["slice_elems"] == [4096, cc._core.DEFAULT_SLICE_ELEMS]
    short, long = data["rows"]
    assert (short["codec"], short["slice_elems"]) == ("fp8_e4m3:g128/s4096", 4096)
    assert long["wire_bytes"] == default["wire_bytes"] < short["wire_bytes"]


def test_emulated_net_speedup_row_with_and_without_checks():
    """perf/bench/emulated_net.py's speedup line: MPI's time over ours, and a rank's CPU time of
    both; a run without checks (-c 0) shows '-' for relerr and #wrong."""
    en = emulated_net()
    base = {"size": 64, "codec": "MPI_Allreduce", "algo": "-", "time_us": 3e5, "cpu_us": 1e5,
            "wire_bytes": 10 ** 9, "ratio": 1.0, "relerr": None, "wrong": None}
    ours = dict(base, codec="fp8", algo="two_shot", time_us=1e5, cpu_us=5e4,
                wire_bytes=2.5 * 10 ** 8, ratio=3.88)
    (line,) = en.speedup_table([base, ours], 1.0, 1000)
    assert line.split()[-7:] == ["3.00x", "-", "3.88", "-", "-", "50.0", "100.0"], line
    (line,) = en.speedup_table([base, dict(ours, relerr=0.0364, wrong=0)], 1.0, 1000)
    assert line.split()[-7:] == ["3.00x", "-", "3.88", "3.64e-02", "0", "50.0", "100.0"], line


def test_emulated_net_paired_speedup_of_an_interleaved_run():
    """In an interleaved run the paired speedup takes the baseline's time over ours round by
    round: a stall that slowed one round of both rows (and the second half of the baseline's
    median) leaves it at the undisturbed ratio, where the ratio of medians moves."""
    en = emulated_net()
    base = {"size": 64, "codec": "MPI_Allreduce", "algo": "-", "cpu_us": 1e5,
            "wire_bytes": 10 ** 9, "ratio": 1.0, "relerr": None, "wrong": None,
            "times_us": [300.0, 300.0, 1200.0, 900.0, 300.0], "time_us": 300.0}
    ours = dict(base, codec="fp8", algo="two_shot", wire_bytes=2.5 * 10 ** 8, ratio=3.88,
                times_us=[100.0, 100.0, 400.0, 300.0, 100.0], time_us=100.0)
    (line,) = en.speedup_table([base, ours], 10.0, 1000, interleaved=True)
    assert line.split()[-7:-5] == ["3.00x", "3.00x"], line
    assert ours["paired_speedup"] == 3.0
    slow = dict(ours, times_us=[100.0, 400.0, 400.0, 300.0, 100.0], time_us=300.0)
    (line,) = en.speedup_table([base, slow], 10.0, 1000, interleaved=True)
    assert line.split()[-7:-5] == ["1.00x", "3.00x"], line


class _OneRank:
    """A group of one rank for perf.timed: no barrier, the identity as its reductions."""
    size = 1
    cpu_clock = staticmethod(lambda: 0.0)

    def barrier(self):
        pass

    def reduce(self, a, op):
        return a


def test_timed_takes_the_rows_in_turn():
    """perf.timed runs every function's warm-ups, then an iteration of each in turn, and gives
    each its own times."""
    calls = []
    fns = [lambda i=i: calls.append(i) for i in range(3)]
    out = perf.timed(_OneRank(), fns, warmup=2, iters=4)
    assert calls == [0, 0, 1, 1, 2, 2] + [0, 1, 2] * 4
    assert len(out) == 3 and all(len(t) == 4 and len(c) == 4 for t, c in out)


def test_perf_interleave_measures_the_same_rows(tmp_path, capsys):
    """--interleave times the rows of a size in turn: the same rows, checked, each with its
    own times, printed once per size, and the header says so."""
    def rows(extra):
        out = tmp_path / "rows.json"
        rc = perf.main(["allreduce", "--inproc", "2", "-b", "64K", "-e", "128K", "-n", "3",
                        "-w", "1", "--codec", "fp8_e4m3:g128", "--codec", "hint8",
                        "--algo", "two_shot", "--algo", "ring", "--link-gbps", "none",
                        "--json", str(out)] + extra)
        assert rc == 0
        return json.loads(out.read_text())["rows"], capsys.readouterr().out

    plain, _ = rows([])
    mixed, text = rows(["--interleave"])
    assert "the rows of a size interleaved" in text
    key = lambda r: (r["size"], r["codec"], r["algo"], r["wire_bytes"])  # noqa: E731
    assert [key(r) for r in mixed] == [key(r) for r in plain]
    assert all(r["wrong"] == 0 and len(r["times_us"]) == 3 and r["time_us"] > 0 for r in mixed)
    printed = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(printed) == len(mixed)
