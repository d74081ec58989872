"""The torch integration as a user meets it, under torchrun (2 CPU processes): in-place
reduce-scatter and all-gather (ZeRO's and FSDP2's forms) on the ccompress backend against
gloo, FSDP2 training with a compressed reduce-scatter and all-gather against exact, options
that differ between ranks raising at group creation, torch.compile of DDP and of FSDP2, the
log line and the CCOMPRESS_REPORT summary, and the environment's errors. Workers:
tests/torchrun/integration_checks.py and tests/torch_backend/train.py."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the ccompress.torch "
                                            "tests need it; ccompress itself does not)")

import ccompress as cc  # noqa: E402

HERE = Path(__file__).resolve().parents[1]  # tests/: the workers import helpers.*
ENV = ("CCOMPRESS_CODEC", "CCOMPRESS_ALLGATHER_CODEC", "CCOMPRESS_ALGO",
       "CCOMPRESS_ERROR_FEEDBACK", "CCOMPRESS_MIN_NUMEL", "CCOMPRESS_LOG", "CCOMPRESS_REPORT")


def torchrun(script, *args, env=None, nproc=2, timeout=300):
    """Runs ``script`` (a path under tests/) on ``nproc`` processes; returns (rc, stdout,
    stderr), without the caller's CCOMPRESS_* settings."""
    e = {k: v for k, v in os.environ.items() if k not in ENV}
    e.update(env or {}, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
             PYTHONPATH=os.pathsep.join([str(HERE)] + sys.path))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "--monitor-interval=1", str(HERE / script),
           *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e,
                       cwd=HERE)
    return p.returncode, p.stdout, p.stderr


def check_ok(script, *args, names, env=None, nproc=2):
    rc, out, err = torchrun(script, *args, env=env, nproc=nproc)
    assert rc == 0, (out + err)[-6000:]
    for name in names:
        for r in range(nproc):
            assert f"OK {name} {r}" in out, (out + err)[-6000:]
    return out, err


def test_inplace_reduce_scatter_and_all_gather_against_gloo():
    """ZeRO's reduce_scatter_tensor (output = own slice of the input) and FSDP2's
    all_gather_into_tensor (input = own chunk of the output): codec none bit-identical to
    gloo's in-place result, fp8_e4m3:g128 within the codec's bound of it, bf16 exactly
    bf16(gloo's); a strided view compressed through a copy and written back; stats()
    counting each delegation reason and fewer bytes than an exact ring."""
    check_ok("helpers/torchrun/integration_checks.py", "inplace",
             names=["inplace reduce_scatter", "inplace all_gather", "strided", "stats",
                    "hook stats"])


def _train(tmp_path, backend, env=None):
    path = tmp_path / f"{backend}_{len(list(tmp_path.iterdir()))}.json"
    rc, out, err = torchrun("helpers/torch_backend/train.py", "fsdp", backend, path, env=env)
    assert rc == 0 and out.count(f"OK train fsdp {backend} rank") == 2, (out + err)[-6000:]
    return json.loads(path.read_text())


def test_fsdp2_compressed_reduce_scatter_and_all_gather(tmp_path):
    """FSDP2 (fully_shard) on the backend with CCOMPRESS_CODEC=fp8_e4m3:g128 and
    CCOMPRESS_ALLGATHER_CODEC=bf16 (FSDP2 gathers in place): both ops compressed on every
    call, replicas identical (checked by the worker), each loss within 2% of gloo's (bf16
    parameters in the forward, fp8 gradients)."""
    gloo = _train(tmp_path, "gloo")
    lossy = _train(tmp_path, "ccompress", env={
        "CCOMPRESS_CODEC": "fp8_e4m3:g128", "CCOMPRESS_ALLGATHER_CODEC": "bf16",
        "CCOMPRESS_MIN_NUMEL": "1024"})
    s = lossy["stats"]
    for op in ("reduce_scatter", "all_gather"):
        assert s[op]["compressed"] > 0 and s[op]["bytes_sent"] < s[op]["exact_bytes"], s
    assert lossy["full"] != gloo["full"]
    for a, b in zip(lossy["losses"], gloo["losses"]):
        assert abs(a - b) <= 0.02 * abs(b), (lossy["losses"], gloo["losses"])


def test_options_that_differ_raise_at_group_creation():
    """Rank 1 with CCOMPRESS_CODEC=hint8, rank 0 without: both raise MismatchError from
    init_process_group within seconds (the group timeout is 10 minutes), naming the
    variable and the ranks."""
    t0 = time.monotonic()
    out, _ = check_ok("helpers/torchrun/integration_checks.py", "mismatch", names=["mismatch"])
    assert time.monotonic() - t0 < 120
    assert out.count("RAISED rank") == 2


def test_configuration_error_is_one_line_per_rank():
    """A configuration error under torchrun (CCOMPRESS_CODEC=hint9), uncaught in the script,
    leaves one readable line per rank, on stderr and again in torchrun's summary at the end
    (the ranks' error files), with no traceback of ccompress's or a chained one; every rank
    fails at init_process_group, within seconds. (Every configuration error is one line
    without a cause: test_torch_backend_options.py.)"""
    error = "InvalidArgument: CCOMPRESS_CODEC='hint9': unknown codec 'hint9'; did you mean"
    t0 = time.monotonic()
    rc, out, err = torchrun("helpers/torch_backend/config_error.py",
                            env={"CCOMPRESS_CODEC": "hint9"}, timeout=120)
    assert time.monotonic() - t0 < 100
    text = out + err
    assert rc != 0 and "UNEXPECTED" not in text, text[-6000:]
    summary = "\n".join(err.splitlines()[-25:])  # torchrun's, the last lines it prints
    for r in range(2):
        line = f"[ccompress] rank {r}: {error}"
        assert text.count(line) == 2 and f"traceback : {line}" in summary, text[-6000:]
    assert "During handling of the above exception" not in text, text[-6000:]
    assert "The above exception was the direct cause" not in text, text[-6000:]
    assert "ccompress/torch" not in text, text[-6000:]  # no frame of ccompress's


def test_gift_settings_that_differ_raise_at_use_gift():
    """use_gift on FSDP2 with GIFT(rank=32) on rank 0 and GIFT(rank=16) on rank 1: both
    raise MismatchError naming "GIFT rank" and the ranks, and install nothing (several
    differing settings are each named; a rank passing no GIFT raises its own error, the
    other MismatchError); the same settings then install and train; a rank that never calls
    use_gift makes the other raise after the group's timeout (3 s here)."""
    out, _ = check_ok("helpers/torchrun/integration_checks.py", "gift_mismatch",
                      names=["gift mismatch", "gift agreed", "gift missing"])
    # searched in the whole output: the two ranks' prints may interleave within a line
    ranks = re.findall(r"RAISED rank (\d) in [\d.]+s: GIFT settings differ between ranks: "
                       r"GIFT rank is 32 on ranks \[0\], 16 on ranks \[1\]", out)
    assert sorted(ranks) == ["0", "1"], out[-4000:]
    assert re.findall(r"RAISED rank (\d) in [\d.]+s: ranks \[1\] did not call use_gift", out) \
        == ["0"], out[-4000:]
    assert out.count("RAISED rank") == 5, out[-4000:]  # 2 mismatches on 2 ranks, 1 missing


def test_torch_compile_ddp_on_the_backend():
    """torch.compile(DDP(model)) with hint8: the same losses and parameters, bit for bit, as
    DDP(model) uncompiled, through DDP's bucket rebuild at the second step."""
    check_ok("helpers/torchrun/integration_checks.py", "compile", names=["compile"],
             env={"CCOMPRESS_CODEC": "hint8", "CCOMPRESS_MIN_NUMEL": "256"})


def test_torch_compile_fsdp2_on_the_backend():
    """torch.compile of a model sharded with fully_shard (FSDP2), hint8 reduce-scatter and
    bf16 all-gather, every one compressed: the same losses and parameters, bit for bit, as
    the model uncompiled over three steps; replicas identical across ranks."""
    check_ok("helpers/torchrun/integration_checks.py", "compile_fsdp", names=["compile_fsdp"])


def test_log_line_and_report():
    """Rank 0 logs what each op does at the first collective (visible without any logging
    set-up); CCOMPRESS_REPORT=1 prints the counters at destroy_process_group;
    CCOMPRESS_LOG=0 silences the line. A configured codec that has not engaged in 20 calls
    gets a warning. The group made again afterwards with other options
    (the same store) agrees on its own options, not the first group's."""
    _, err = check_ok("helpers/torchrun/integration_checks.py", "report", names=["report"],
                      env={"CCOMPRESS_REPORT": "1"})
    assert "all_reduce: exact (CCOMPRESS_CODEC is not set)" in err, err[-3000:]
    assert err.count("ccompress backend:") == 2 and "all_reduce: bf16, algo auto" in err
    assert err.count("none of its first 20 calls was compressed") == 1, err[-3000:]
    assert "all_reduce is configured with codec bf16" in err and "small: 20" in err
    assert "ccompress report (rank 0)" in err and "delegated exactly: codec none 2" in err, err
    _, err = check_ok("helpers/torchrun/integration_checks.py", "report", names=["report"],
                      env={"CCOMPRESS_LOG": "0", "CCOMPRESS_CODEC": "hint8"})
    assert "ccompress backend:" not in err and "ccompress report" not in err


def test_trace_files(tmp_path):
    """CCOMPRESS_TRACE=DIR: each rank's file is a JSON Chrome trace with a complete event per
    compressed call (its op, codec, elements and bytes) and an instant event per delegated
    one, per group; the summary tool aligns the ranks' calls; a directory without traces is
    an error naming it."""
    from ccompress.tools import trace

    check_ok("helpers/torchrun/integration_checks.py", "report", names=["report"],
             env={"CCOMPRESS_TRACE": str(tmp_path), "CCOMPRESS_LOG": "0"})
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["ccompress-trace-rank0.json", "ccompress-trace-rank1.json"], files
    for rank in (0, 1):
        events = json.loads((tmp_path / f"ccompress-trace-rank{rank}.json").read_text())
        calls = [e for e in events if e["ph"] == "X"]
        assert [(e["name"], e["tid"], e["pid"]) for e in calls] == [("all_reduce bf16", 2, rank)]
        a = calls[0]["args"]
        # bf16 halves the exact ring's 2 (P-1)/P x 5000 x 4 bytes; headers on top
        assert a["numel"] == 5000 and a["exact_bytes"] == 20000, a
        assert 10000 < a["bytes_sent"] < 11000 and calls[0]["dur"] > 0, a
        exact = [(e["name"], e["tid"]) for e in events if e["ph"] == "i"]
        assert exact == [("all_reduce exact (codec none)", 1)] * 2 + \
            [("all_reduce exact (small)", 2)] * 20, exact
    rows = trace.summarize(trace.load(str(tmp_path)))
    assert [(r["group"], r["name"], r["numel"], r["calls"]) for r in rows] == \
        [(2, "all_reduce bf16", 5000, 1)], rows
    assert 0 <= rows[0]["spread_ms"] and 0 < rows[0]["after_last_ms"], rows
    p = subprocess.run([sys.executable, "-m", "ccompress.tools.trace", str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "| 2 | all_reduce bf16 | 5000 | 1 |" in p.stdout, p
    p = subprocess.run([sys.executable, "-m", "ccompress.tools.trace", str(tmp_path / "none")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "none: no ccompress-trace-*.json files" in p.stderr, p


def test_trace_of_ddp_hooks(tmp_path):
    """CCOMPRESS_TRACE covers the DDP comm hook too: a span per bucket on both of its paths
    (ccompress's worker thread, the calling thread), its bytes adding up to stats()."""
    check_ok("helpers/torchrun/integration_checks.py", "hook_trace", names=["hook_trace"],
             env={"CCOMPRESS_TRACE": str(tmp_path), "CCOMPRESS_LOG": "0"})


def test_trace_directory_that_cannot_be_written(monkeypatch, tmp_path):
    """A CCOMPRESS_TRACE that names a file, not a directory: InvalidArgument naming the
    variable, its value and what it accepts, when the group is made."""
    from ccompress.torch import _trace

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CCOMPRESS_TRACE", str(tmp_path / "file"))
    with pytest.raises(cc.InvalidArgument, match="CCOMPRESS_TRACE=.*file.*accepts a directory"):
        _trace.GroupTrace(0, 1, 0)


@pytest.mark.parametrize("var,value,accepted", [
    ("CCOMPRESS_CODEC", "hnit8", "CCOMPRESS_CODEC accepts a codec spec"),
    ("CCOMPRESS_CODEC", "auto8", "CCOMPRESS_CODEC accepts a codec spec"),
    ("CCOMPRESS_ALLGATHER_CODEC", "bf17", "CCOMPRESS_ALLGATHER_CODEC accepts a codec spec"),
    ("CCOMPRESS_ALGO", "butterfly", "CCOMPRESS_ALGO accepts one of auto, ring"),
    ("CCOMPRESS_ERROR_FEEDBACK", "maybe", "accepted values: 1, true"),
    ("CCOMPRESS_MIN_NUMEL", "abc", "CCOMPRESS_MIN_NUMEL accepts an integer >= 0"),
    ("CCOMPRESS_MIN_NUMEL", "-3", "CCOMPRESS_MIN_NUMEL accepts an integer >= 0"),
    ("CCOMPRESS_LOG", "loud", "accepted values: 1, true"),
    ("CCOMPRESS_REPORT", "yes please", "accepted values: 1, true"),
])
def test_environment_errors_name_the_variable(monkeypatch, var, value, accepted):
    from ccompress.torch import BackendOptions
    from ccompress.torch import _engagement

    for k in ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(var, value)
    with pytest.raises(cc.CCompressError) as e:
        if var in ("CCOMPRESS_LOG", "CCOMPRESS_REPORT"):
            _engagement.env_flag(var, False)
        else:
            BackendOptions().resolved()
    assert f"{var}={value!r}" in str(e.value) and accepted in str(e.value), str(e.value)


def test_engagement_warning_skips_small_calls_beside_a_compressing_op(caplog):
    """20 small all-reduces warn when nothing of the group compresses, and do not when the
    group's reduce-scatters compress (FSDP2's scalars beside its gradients); a reason other
    than size warns either way."""
    from ccompress.torch import _engagement

    def warnings(compressing, reason="small"):
        stats = _engagement.OpStats()
        if compressing:
            stats.compressed("reduce_scatter", 1000)
        caplog.clear()
        for _ in range(_engagement.ENGAGE_CHECK_CALLS):
            stats.delegated("all_reduce", reason, 40)
            stats.check_engaged("all_reduce", "hint8", 0)
        return [r for r in caplog.records if "none of its first" in r.getMessage()]

    with caplog.at_level("WARNING", logger="ccompress.torch"):
        assert len(warnings(False)) == 1
        assert warnings(True) == []
        assert len(warnings(True, reason="dtype")) == 1


def _train_dp(*args):
    e = {k: v for k, v in os.environ.items() if k not in ENV}
    e.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--monitor-interval=1", str(HERE.parent / "examples" / "train_dp.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=e, cwd=HERE)


@pytest.mark.parametrize("args,message", [
    (["--corpus", "/nonexistent/text"], "--corpus /nonexistent/text: no such file"),
    (["--codec", "hnit8"], "did you mean hint8"),
])
def test_train_dp_usage_errors_from_rank_0_alone(args, message):
    p = _train_dp(*args)
    assert p.returncode != 0
    assert (p.stdout + p.stderr).count(message) == 1, (p.stdout + p.stderr)[-4000:]
    assert "[rank1]" not in p.stderr, p.stderr[-4000:]


def test_train_dp_on_a_fresh_machine():
    """No --corpus and (where python3-doc is absent) no Python documentation: the example
    trains on the standard library's docstrings, which it extracts itself."""
    p = _train_dp("--codec", "hint8", "--steps", "2", "--evals", "1", "--eval-batches", "1",
                  "--batch", "4", "--d-model", "32", "--layers", "1", "--ctx", "32")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    assert "bit-identical on all 2 ranks: yes" in p.stdout, out[-4000:]
