"""ccompress.torch under torchrun (CPU, gloo, no MPI): launches the worker scripts of
tests/helpers/torchrun/ with `python -m torch.distributed.run --standalone` and checks that every
rank finished (each prints "OK <rank>"), or, for the fault checks, that every surviving rank
raised within the communicator's timeout instead of hanging."""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.reference.mpiexec import mpi_unusable, mpiexec, needs_mpi

torch = pytest.importorskip("torch", reason="the torchrun tests need PyTorch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("this torch build has no gloo", allow_module_level=True)

HERE = Path(__file__).resolve().parents[1]  # tests/: the workers import helpers.*
WORKERS = HERE / "helpers" / "torchrun"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(WORKERS)] + sys.path)
    env["OMP_NUM_THREADS"] = "1"
    for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"):
        env.pop(k, None)  # a test run under mpiexec must not make the workers look like one
    return env


def torchrun(script, nproc, *args, timeout=420, env=None):
    """Runs tests/helpers/torchrun/<script> on nproc processes; returns the completed process."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "--monitor-interval=1", str(WORKERS / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**_env(), **(env or {})}, cwd=HERE)


def assert_ok(proc, nproc):
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    for r in range(nproc):
        assert f"OK {r}" in proc.stdout, out[-8000:]
    print(proc.stdout)


@pytest.mark.parametrize("nproc,transport", [(2, "tcp"), (4, "tcp"), (2, "gloo")])
def test_from_torch_matches_simulate(nproc, transport):
    """Every algo x codec through from_torch, over its TCP transport and over gloo
    point-to-point: simulate's bits, the fp64 bound, identical ranks."""
    assert_ok(torchrun("comm_checks.py", nproc, env={"CCOMPRESS_TRANSPORT": transport}), nproc)


@pytest.mark.parametrize("nproc", [2, 4])
def test_adapters_under_torchrun(nproc):
    """tp_all_reduce is the true sum, the DDP hook on plain gloo matches DDP without it,
    mismatches raise on every rank: no MPI anywhere."""
    assert_ok(torchrun("adapter_checks.py", nproc), nproc)


def test_tsr_adam_under_torchrun(tmp_path):
    """TSRAdam(comm=None) on the world group with no MPI: parameters and shared state
    bit-identical on 4 ranks, the update within 1e-6 of its fp64 expansion, a
    torch.save/torch.load checkpoint resuming bit for bit, and its steps in CCOMPRESS_TRACE."""
    assert_ok(torchrun("tsr_checks.py", 4, env={"CCOMPRESS_TRACE": str(tmp_path)}), 4)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_env_ranks(script, nproc, *args):
    """nproc processes with env:// variables set by hand (what torchrun sets), without
    torchrun's agent, which would stop the survivors itself once one rank dies."""
    port = _free_port()
    procs = []
    for r in range(nproc):
        env = _env()
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   LOCAL_RANK=str(r), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc))
        procs.append(subprocess.Popen([sys.executable, str(WORKERS / script), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, cwd=HERE))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    return procs, outs


@pytest.mark.parametrize("fault", ["silent", "killed"])
def test_stopped_peer_makes_others_raise(fault):
    """The last rank stops answering (sleeps, or exits) in the middle of the calls: every
    other rank raises (CollectiveTimeout for a silent peer) within the timeout, and its
    communicator then refuses further calls."""
    nproc = 3
    t0 = time.monotonic()
    procs, outs = launch_env_ranks("fault_checks.py", nproc, fault)
    elapsed = time.monotonic() - t0
    for r in range(nproc - 1):
        assert procs[r].returncode == 0, f"rank {r}:\n{outs[r][-4000:]}"
        assert f"RAISED {r}" in outs[r], outs[r][-4000:]
        assert f"OK {r}" in outs[r], outs[r][-4000:]
        print(outs[r])
    assert elapsed < 120, f"the survivors took {elapsed:.0f} s"


ONE_PROCESS = r"""
import os, sys, torch
import ccompress as cc
from ccompress.torch import tp_all_reduce, world_communicator
x = torch.randn(5, 7)
if sys.argv[1] == "alone":  # no launcher, no torch.distributed: one rank, its own sum
    y = tp_all_reduce(x, codec="none")
    assert torch.equal(y, x) and world_communicator().size == 1
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % sys.argv[2], rank=0,
                            world_size=1)
    assert torch.equal(tp_all_reduce(x, codec="none"), x)
    assert world_communicator().size == 1 and "mpi4py.MPI" not in sys.modules
else:  # torchrun's variables without init_process_group: refused, not a 1-rank "sum"
    os.environ.update(WORLD_SIZE="2", RANK="0")
    try:
        tp_all_reduce(x, codec="none")
    except cc.InvalidArgument as e:
        assert "WORLD_SIZE=2" in str(e), e
    else:
        raise AssertionError("a 1-rank sum under a 2-process launch")
print("OK")
"""


@pytest.mark.parametrize("mode", ["alone", "torchrun_env_without_init"])
def test_one_process_path(mode):
    """One process: tp_all_reduce is the sum of one rank (no MPI needed); torchrun's
    environment without torch.distributed initialised raises instead."""
    env = _env()
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    proc = subprocess.run([sys.executable, "-c", ONE_PROCESS, mode, str(_free_port())],
                          capture_output=True, text=True, timeout=120, env=env, cwd=HERE)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_nccl_id_through_store_without_gpu():
    """CUDA arrays through from_torch up to where NCCL would load (no GPU here): the NCCL
    unique id travels through the group's store to every rank."""
    assert_ok(torchrun("nccl_store_checks.py", 2), 2)


@pytest.mark.parametrize("nproc", [2, 4])
def test_backend_alltoall_under_torchrun(nproc):
    """The ccompress backend's all_to_all_single and all_to_all with their own codec: every
    piece bit for bit the sender's encode, within the codec's bound of fp64, uneven splits,
    an int64 call delegated, the counters, autograd's backward on the same group, dispatch
    and combine on two groups, a codec differing between ranks raising on every rank
    (tests/helpers/torchrun/alltoall_backend_checks.py)."""
    assert_ok(torchrun("alltoall_backend_checks.py", nproc), nproc)


def test_moe_model_under_torchrun():
    """examples/moelm.py over 4 ranks: its experts sharded and reached by all-to-all compute
    what one process holding them all computes; DDP over its dense weights keeps them
    bit-identical (tests/helpers/torchrun/moe_checks.py)."""
    assert_ok(torchrun("moe_checks.py", 4), 4)


@pytest.mark.parametrize("example", ["train_dp.py", "train_tp.py"])
def test_training_examples_under_torchrun(example, tmp_path):
    """examples/train_dp.py and train_tp.py run under torchrun (2 processes, 3 steps, this
    repository's README as the text) and keep their replicas bit-identical."""
    text = (HERE.parent / "README.md").read_text(encoding="utf-8")
    corpus = tmp_path / "text.txt"
    corpus.write_text(text * (1 + 120_000 // len(text)), encoding="utf-8")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--monitor-interval=1", str(HERE.parent / "examples" / example), "--codec", "hint8",
           "--steps", "3", "--evals", "1", "--eval-batches", "2", "--batch", "4",
           "--corpus", str(corpus)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(),
                          cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "bit-identical on all 2 ranks: yes" in proc.stdout, out[-6000:]
    assert "final held-out loss" in proc.stdout, out[-6000:]


MPI_MISMATCH = r"""
import socket, sys, torch, torch.distributed as dist
from mpi4py import MPI
import ccompress as cc
from ccompress.torch import tp_all_reduce
with socket.socket() as s:  # each process its own 1-rank torch world
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
try:
    tp_all_reduce(torch.ones(4), codec="none")
except cc.MismatchError as e:
    assert "world of 2" in str(e), e
    print(f"OK {MPI.COMM_WORLD.rank}", flush=True)
"""


@needs_mpi
def test_mpi_world_larger_than_torch_world_raises():
    """mpiexec -n 2 with a 1-rank torch world in each process: every rank raises instead of
    returning its own tensor as the sum."""
    proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-c", MPI_MISMATCH],
                          capture_output=True, text=True, timeout=180, env=_env(), cwd=HERE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "OK 0" in proc.stdout and "OK 1" in proc.stdout, out[-4000:]


BACKEND_LAUNCH = r"""
import hashlib, json, os, sys, torch, torch.distributed as dist
from ccompress.torch import compressed_group, init_process_group_from_mpi
if sys.argv[1] == "mpiexec":
    init_process_group_from_mpi("ccompress")
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"]) == (str(dist.get_rank()), "2")
    assert os.environ["LOCAL_WORLD_SIZE"] == "2" and os.environ["LOCAL_RANK"] == os.environ["RANK"]
else:
    dist.init_process_group("ccompress", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=0,
                            world_size=1)
rank, size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(3):
    torch.manual_seed(100 + 10 * rank + step)
    loss = ddp(torch.randn(8, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
digests = [None] * size
dist.all_gather_object(digests, hashlib.sha256(flat.numpy().tobytes()).hexdigest())
assert len(set(digests)) == 1, "replicas differ"
stats = compressed_group().stats()["all_reduce"]
assert stats["compressed"] == 3 and (stats["bytes_sent"] > 0) == (size > 1), stats
events = json.load(open(os.path.join(os.environ["CCOMPRESS_TRACE"],
                                     f"ccompress-trace-rank{rank}.json")))
assert all(e["pid"] == rank for e in events), events[:3]
assert sum(e["ph"] == "X" for e in events) == stats["compressed"], events
print(f"OK {rank}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("launch", ["mpiexec", "one_process"])
def test_backend_launch_modes(launch, tmp_path):
    """init_process_group("ccompress") beyond torchrun: under mpiexec through
    init_process_group_from_mpi (which sets torchrun's RANK, WORLD_SIZE, LOCAL_RANK and
    LOCAL_WORLD_SIZE), and in one process alone. DDP with hint8 keeps the replicas
    identical, its 3 bucket all-reduces go through ccompress (sending bytes where there is
    more than one rank), and each process's CCOMPRESS_TRACE file is named by its global
    rank."""
    env = {**_env(), "CCOMPRESS_CODEC": "hint8", "CCOMPRESS_MIN_NUMEL": "1000",
           "CCOMPRESS_TRACE": str(tmp_path), "CCOMPRESS_LOG": "0"}
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT"):
        env.pop(k, None)
    if launch == "mpiexec":
        if mpi_unusable() is not None:
            pytest.skip(f"MPI unavailable: {mpi_unusable()}")
        cmd, n = [mpiexec(), "-n", "2", sys.executable, "-c", BACKEND_LAUNCH, "mpiexec"], 2
    else:
        cmd, n = [sys.executable, "-c", BACKEND_LAUNCH, "one", str(_free_port())], 1
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=HERE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for r in range(n):
        assert f"OK {r}" in proc.stdout, out[-6000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        [f"ccompress-trace-rank{r}.json" for r in range(n)]


def test_from_store_numbers_each_store_object_once():
    """Store keys of from_store are numbered per store object: a store made after another
    was freed must not inherit its number through a reused id (ranks where the id was
    reused would wait on other keys than the rest: the backend's second group hung so)."""
    from ccompress.communicator import Communicator
    from ccompress._internal import torch_p2p as _p2p

    base = dist.HashStore()
    numbers = []
    for i in range(20):  # freed each round: CPython would hand its id to the next one
        store = dist.PrefixStore(f"s{i}/", base)
        comm = _p2p.from_store(Communicator, store, 0, 1)
        numbers.append(_p2p._MADE[id(store)])
        comm.close()
        del store, comm
    assert numbers == [0] * 20
