"""The ``ccompress`` torch.distributed backend under torchrun (CPU, gloo inside, 2-4
processes): every op (tests/helpers/torch_backend/ops.py), DDP gradient parity with and without the
hook (parity.py), unmodified DDP and FSDP2 training configured from the environment
(train.py), GIFT on FSDP2 (gift_fsdp.py), a stopped peer (peer_loss.py) and a failed
collective under DDP (ddp_failure.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the ccompress.torch "
                                            "tests need it; ccompress itself does not)")

HERE = Path(__file__).resolve().parents[1]  # tests/: the workers import helpers.*
WORKERS = HERE / "helpers" / "torch_backend"
CCOMPRESS_ENV = ("CCOMPRESS_CODEC", "CCOMPRESS_ALLGATHER_CODEC", "CCOMPRESS_ALGO",
                 "CCOMPRESS_ERROR_FEEDBACK", "CCOMPRESS_MIN_NUMEL")


def torchrun(worker, nproc, *args, env=None, timeout=300, expect_ok=True):
    """Runs tests/helpers/torch_backend/<worker> on ``nproc`` processes under torchrun (without the
    caller's CCOMPRESS_* settings); asserts it exits 0 unless ``expect_ok`` is False.
    Returns its output (each test counts the OK lines of its ranks)."""
    e = {k: v for k, v in os.environ.items() if k not in CCOMPRESS_ENV}
    e.update(env or {}, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
             PYTHONPATH=os.pathsep.join([str(WORKERS), str(HERE)] + sys.path))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", str(WORKERS / worker), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e,
                          cwd=WORKERS)
    out = proc.stdout + proc.stderr
    if expect_ok:
        assert proc.returncode == 0, out[-6000:]
    return out


@pytest.mark.parametrize("nproc,codec", [(2, "fp8_e4m3:g128"), (3, "hint8"), (4, "bf16")])
def test_ops_delegated_exact_compressed_within_bound(nproc, codec):
    out = torchrun("ops.py", nproc, codec)
    for what in ("delegated", "compressed", "work"):
        assert out.count(f"OK {what} rank") == nproc, out[-4000:]


@pytest.mark.parametrize("how", ["hook", "backend"])
@pytest.mark.parametrize("nproc,codec", [(2, "none"), (3, "fp8_e4m3:g128"), (4, "hint8"),
                                         (2, "mxfp8"), (3, "mxfp4")])
def test_ddp_gradient_parity(how, nproc, codec):
    out = torchrun("parity.py", nproc, how, codec)
    assert out.count(f"OK parity {how} {codec} rank") == nproc


def _train(tmp_path, mode, backend, nproc, env=None):
    path = tmp_path / f"{mode}_{backend}_{len(list(tmp_path.iterdir()))}.json"
    out = torchrun("train.py", nproc, mode, backend, path, env=env)
    assert out.count(f"OK train {mode} {backend} rank") == nproc
    return json.loads(path.read_text())


@pytest.mark.parametrize("mode,nproc", [("ddp", 2), ("fsdp", 2), ("fsdp", 4)])
def test_unmodified_training(tmp_path, mode, nproc):
    """Exact (CCOMPRESS_CODEC unset): losses, replicas and every shard bit-identical to a
    gloo run. Lossy (hint8, error feedback on, as an unmodified script would be configured):
    ccompress sent the gradients, each loss within 1% of the exact run's, replicas
    bit-identical (checked by the worker), error-feedback checkpoint replayed bit for bit
    (checked by the worker)."""
    gloo = _train(tmp_path, mode, "gloo", nproc)
    exact = _train(tmp_path, mode, "ccompress", nproc)
    assert exact["bytes"] == 0, "the exact codec went through ccompress"
    assert exact["losses"] == gloo["losses"]
    assert exact["full"] == gloo["full"] and exact["shards"] == gloo["shards"]
    lossy = _train(tmp_path, mode, "ccompress", nproc, env={
        "CCOMPRESS_CODEC": "hint8", "CCOMPRESS_ERROR_FEEDBACK": "1",
        "CCOMPRESS_MIN_NUMEL": "1024"})
    assert lossy["bytes"] > 0 and lossy["residuals"] == (1 if mode == "ddp" else 3)
    assert lossy["full"] != gloo["full"], "the lossy run computed exactly what gloo did"
    for a, b in zip(lossy["losses"], gloo["losses"]):
        assert abs(a - b) <= 0.01 * abs(b), (lossy["losses"], gloo["losses"])


@pytest.mark.parametrize("codec", ["mxfp8", "mxfp4"])
def test_mx_training_against_exact(tmp_path, codec):
    """DDP training with an MX codec on the backend (error feedback on): ccompress sent the
    gradients, each loss within 1% of the exact (gloo) run's, replicas bit-identical and the
    error-feedback checkpoint replayed bit for bit (checked by the worker)."""
    gloo = _train(tmp_path, "ddp", "gloo", 2)
    lossy = _train(tmp_path, "ddp", "ccompress", 2, env={
        "CCOMPRESS_CODEC": codec, "CCOMPRESS_ERROR_FEEDBACK": "1", "CCOMPRESS_MIN_NUMEL": "1024"})
    assert lossy["bytes"] > 0 and lossy["full"] != gloo["full"]
    for a, b in zip(lossy["losses"], gloo["losses"]):
        assert abs(a - b) <= 0.01 * abs(b), (lossy["losses"], gloo["losses"])


@pytest.mark.parametrize("mode,spec,cand", [("ddp", "auto", "hint8"), ("fsdp", "auto", "hint8"),
                                            ("ddp", "auto:nvfp4", "nvfp4")])
def test_auto_codec_times_both_and_agrees(tmp_path, mode, spec, cand):
    """CCOMPRESS_CODEC=auto (or auto:nvfp4): the op's first call times it exact and with
    hint8 (nvfp4) on every rank and every rank keeps the same one (the worker checks the
    replicas are identical); the choice is logged once, on rank 0; the losses are within 1%
    of gloo's, and bit for bit gloo's when exact was chosen."""
    kind = "all_reduce" if mode == "ddp" else "reduce_scatter"
    gloo = _train(tmp_path, mode, "gloo", 2)
    path = tmp_path / f"auto_{mode}.json"
    out = torchrun("train.py", 2, mode, "ccompress", path,
                   env={"CCOMPRESS_CODEC": spec, "CCOMPRESS_MIN_NUMEL": "1024"})
    auto = json.loads(path.read_text())
    assert auto["auto"].get(kind) in (cand, "none"), auto["auto"]
    assert out.count(f"{kind} codec auto:") == 1, out[-4000:]
    assert f" ms with {cand} (wall plus CPU" in out and f"{spec} (exact or {cand}" in out
    if auto["auto"][kind] == "none":  # exact: gloo's own collective, bit for bit
        assert auto["losses"] == gloo["losses"] and auto["full"] == gloo["full"]
    assert auto["bytes"] > 0  # the timing ran through ccompress at least
    for a, b in zip(auto["losses"], gloo["losses"]):
        assert abs(a - b) <= 0.01 * abs(b), (auto["losses"], gloo["losses"])


def test_gift_on_fsdp2():
    """compressed_group().use_gift(GIFT(model)) on FSDP2, 2 ranks, one launch (the bounds
    are stated in tests/helpers/torch_backend/gift_fsdp.py): nvfp4 shards within the codec's bound
    mapped through L^T of the fp64 average; codec "none" within fp32 rounding of it and of
    FSDP2 without GIFT; identical GIFT state on every rank; a checkpoint replaying two steps
    bit for bit; misuses raising typed errors on every rank."""
    out = torchrun("gift_fsdp.py", 2)
    for what in ("errors", "bound", "parity", "state", "checkpoint errors"):
        assert out.count(f"OK gift fsdp {what} rank") == 2, out[-4000:]


@pytest.mark.parametrize("how", ["backend", "hook"])
def test_failed_collective_raises_from_backward(how):
    """A compressed all-reduce that fails under DDP raises from loss.backward() on every rank
    (it crashed the process when DDP read the failed future in C++)."""
    out = torchrun("ddp_failure.py", 2, how, timeout=120)
    assert out.count(f"OK failure {how} rank") == 2, out[-4000:]


@pytest.mark.parametrize("kind", ["compressed", "delegated"])
def test_stopped_peer_raises_and_group_refuses(kind):
    out = torchrun("peer_loss.py", 3, kind, timeout=120, expect_ok=False)
    assert "STOPPED rank 2" in out, out[-4000:]
    for r in (0, 1):
        assert f"RAISED rank {r}" in out and f"OK refused rank {r}" in out, out[-4000:]
