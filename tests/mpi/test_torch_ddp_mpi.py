"""ccompress.torch between real processes (run under mpiexec, see conftest.py; skipped
without torch). DistributedDataParallel over gloo with the compressed hook (float32 and
bfloat16 models): every bucket's average within the codec's bound of the fp64 average of
all ranks' bucket inputs, bit-identical on every rank, gradients and updated parameters
identical; tp_all_reduce over MPI; a process group whose ranks are a permutation of MPI's.
The tests run in file order on one process group (the last one replaces it).
"""
import hashlib
import socket

import numpy as np
import pytest
from mpi4py import MPI

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import ccompress as cc  # noqa: E402
from ccompress.torch import (ddp_comm_hook, init_process_group_from_mpi,  # noqa: E402
                             tp_all_reduce)
from ccompress.torch._common import communicator_for, world_communicator  # noqa: E402
from helpers.torch_helpers import check_reduced, rank_tensor, to_numpy  # noqa: E402

world = MPI.COMM_WORLD
rank, size = world.rank, world.size


def check_identical(t, what):
    digest = hashlib.sha256(to_numpy(t).view(np.uint8).tobytes()).hexdigest()
    digests = world.allgather(digest)
    assert len(set(digests)) == 1, f"{what}: ranks differ"


def gather(t):
    """Every rank's copy of ``t``, as tensors."""
    return [torch.from_numpy(a.astype(np.float32)).to(t.dtype)
            for a in world.allgather(to_numpy(t))]


@pytest.fixture(scope="module", autouse=True)
def process_group():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    init_process_group_from_mpi("gloo")
    assert dist.get_rank() == rank and dist.get_world_size() == size
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
    torch.set_num_threads(threads)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("codec", ["none", "hint8", "fp8_e4m3:g128"])
def test_ddp_hook_buckets_within_bound_and_identical(dtype, codec):
    """DDP + the hook: several buckets, exact and compressed."""
    dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 40)).to(dtype)
    ddp = DDP(model, bucket_cap_mb=0.004)  # ~1000 float32 per bucket: several buckets
    hook = ddp_comm_hook(codec=codec, error_feedback=False, algo="two_shot")
    seen = []

    def recording(state, bucket, hook=hook, seen=seen):
        before = bucket.buffer().clone()
        return hook(state, bucket).then(
            lambda f: seen.append((before, f.value().clone())) or f.value())

    ddp.register_comm_hook(state=None, hook=recording)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):  # one bucket in the first step; DDP then rebuilds them
        seen.clear()
        x = rank_tensor(rank, (16, 24), dtype, seed=step)
        ddp(x).float().square().mean().backward()
        assert len(seen) >= 1 + step, f"step {step}: {len(seen)} buckets"
        for i, (before, after) in enumerate(seen):
            what = f"{dtype} {codec} step {step} bucket {i}"
            assert after.dtype == dtype, what
            check_identical(after, what)
            check_reduced(after, gather(before), codec, "two_shot", op="avg", what=what)
        for name, p in model.named_parameters():
            check_identical(p.grad, f"{dtype} {codec} grad {name}")
        opt.step()
        opt.zero_grad()
    for name, p in model.named_parameters():
        check_identical(p.detach(), f"{dtype} {codec} parameter {name}")


def test_hook_registered_as_it_is():
    """DDP inspects the hook's signature; bf16 over gloo."""
    torch.manual_seed(1)
    model = torch.nn.Linear(40, 30).to(torch.bfloat16)
    ddp = DDP(model)
    ddp.register_comm_hook(state=None, hook=ddp_comm_hook(codec="hint8", error_feedback=False))
    local = rank_tensor(rank, (8, 40), torch.bfloat16, seed=5)
    ddp(local).float().sum().backward()
    check_identical(model.weight.grad, "registered hook")
    ref = torch.stack(gather(local)).double().sum(1).mean(0)  # d(sum y)/dW = mean_r sum_b x
    err = (model.weight.grad.double() - ref).abs().max() / ref.abs().max()
    assert err < 2e-2, float(err)  # hint8 (0.6% typical) plus the bf16 output cast


def test_error_feedback_in_ddp_keeps_replicas_identical():
    """Error feedback (the default) in DDP: one residual per bucket."""
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.GELU(), torch.nn.Linear(64, 40))
    ddp = DDP(model, bucket_cap_mb=0.004)
    hook = ddp_comm_hook(codec="fp8_e4m3:g128")
    ddp.register_comm_hook(state=None, hook=hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        ddp(rank_tensor(rank, (16, 24), seed=20 + step)).square().mean().backward()
        for name, p in model.named_parameters():
            check_identical(p.grad, f"error feedback step {step} grad {name}")
        opt.step()
        opt.zero_grad()
    state = hook.state_dict()["error_feedback"]
    assert len(state) >= 2 and all(v["state"]["worker_residual"] is not None
                                   for v in state.values())


def test_communicator_not_matching_the_group_is_refused():
    hook = ddp_comm_hook(codec="none", error_feedback=False, comm=cc.Communicator.inproc(1)[0])
    with pytest.raises(cc.MismatchError, match="rank 0 of 1"):
        hook.comm


def test_tp_all_reduce_over_mpi():
    """group=None: every MPI rank; forward and backward."""
    x = rank_tensor(rank, (9, 333), seed=11).requires_grad_()
    y = tp_all_reduce(x, codec="taco:g128")
    check_identical(y, "tp_all_reduce")
    parts = gather(x.detach())
    check_reduced(y, parts, "taco:g128", world_communicator().last_stats["algo"], what="tp")
    g = torch.full_like(y, 0.5)
    y.backward(g)
    assert torch.equal(x.grad, g)


def test_from_torch_and_a_subgroup_give_the_true_sum():
    """Under mpiexec too: from_torch (its TCP transport) and a subgroup (through it) give
    the true sums of their ranks' inputs."""
    x = rank_tensor(rank, (9, 333), seed=12)
    parts = gather(x)
    ft = cc.Communicator.from_torch()
    assert (ft.rank, ft.size, ft.transport) == (rank, size, "tcp")
    y = ft.allreduce(x, codec="hint8", algo="two_shot")
    check_reduced(y, parts, "hint8", "two_shot", what="from_torch under mpiexec")
    check_identical(y, "from_torch under mpiexec")
    evens = list(range(0, size, 2))
    sub = dist.new_group(evens)  # collective over every rank
    if rank in evens:
        y = tp_all_reduce(x, codec="bf16", group=sub)
        sc = communicator_for(sub)
        assert sc.size == len(evens) and sc.transport == "tcp", sc
        check_reduced(y, [parts[r] for r in evens], "bf16", sc.last_stats["algo"],
                      what="subgroup")


def test_communicator_follows_a_permuted_group():
    """A process group whose ranks run backwards relative to MPI's."""
    dist.destroy_process_group()
    port = None
    if rank == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    port = world.bcast(port)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=size - 1 - rank,
                            world_size=size)
    comm = communicator_for()
    assert comm.rank == dist.get_rank() == size - 1 - rank, (comm.rank, dist.get_rank())
    got = comm.allgather(np.array([float(dist.get_rank())], np.float32))
    assert got.reshape(-1).tolist() == list(range(size)), got
    dist.destroy_process_group()
