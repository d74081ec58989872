"""What the data-parallel and tensor-parallel training examples share: options, start-up
under torchrun or mpiexec (torch.distributed, text, device), the optimiser, held-out loss,
the progress bar and the results file. The model and text come from tinylm.py."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np

if __package__:  # imported as examples.train_common (perf/ and research/ scripts)
    from . import tinylm
else:  # imported by a script run from examples/ (python examples/train_dp.py)
    import tinylm


VAL_SEED = 1234  # the held-out sample does not change with --seed


class _Parser(argparse.ArgumentParser):
    """Usage errors are printed by the first rank only (every rank parses the same command
    line under torchrun or mpiexec, and every rank exits)."""

    def error(self, message: str):
        if _launch_rank() == 0:
            self.print_usage(sys.stderr)
            self.exit(2, f"{self.prog}: error: {message}\n")
        self.exit(2)


def _launch_rank() -> int:
    for var in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def _codec(spec: str) -> str:
    import ccompress as cc

    try:
        return cc.Codec.parse(spec).name if not spec.startswith("auto") else spec
    except cc.CCompressError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def parser(description: str) -> argparse.ArgumentParser:
    """The options both examples take."""
    ap = _Parser(description=description)
    ap.add_argument("--codec", default="none", type=_codec,
                    help="ccompress codec of the all-reduces ('none': exact fp32)")
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step, all ranks together")
    ap.add_argument("--ctx", type=int, default=128, help="context length (bytes)")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (AdamW)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eval-batches", type=int, default=16,
                    help="held-out batches of 8 sequences for the validation loss")
    ap.add_argument("--evals", type=int, default=4, help="validation points during training")
    ap.add_argument("--corpus", default="", help="train on this text file or folder instead "
                    "of the Python documentation")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--json", default="", help="write the results (losses, bytes) here")
    return ap


class World:
    """The few object collectives the examples need (rank 0's text, loss sums, digests),
    over torch.distributed's world group, whichever launcher started it."""

    def __init__(self, dist) -> None:
        self.dist, self.rank, self.size = dist, dist.get_rank(), dist.get_world_size()

    def allgather(self, obj: Any) -> List[Any]:
        out: List[Any] = [None] * self.size
        self.dist.all_gather_object(out, obj)
        return out

    def bcast(self, obj: Any, root: int = 0) -> Any:
        box = [obj]
        self.dist.broadcast_object_list(box, src=root)
        return box[0]

    def allreduce(self, value: float) -> float:
        """The sum of a number over the ranks, added in rank order (the same on every rank)."""
        return float(sum(self.allgather(value)))


def _local_rank(rank: int) -> int:
    for var in ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return rank


def free_port() -> int:
    """A TCP port free on loopback now (a one-process group's, or local nodes' rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: argparse.Namespace):
    """torch.distributed (torchrun: env://; mpiexec: ranks from MPI, through
    ccompress.torch.init_process_group_from_mpi; a plain ``python``: one rank), torch
    threads, this rank's device and the text (read on rank 0, sent to the others).
    Returns (world, torch, device, train, val, info)."""
    import torch
    import torch.distributed as dist

    from ccompress.torch import init_process_group_from_mpi
    from ccompress.torch._common import mpi_launch_size

    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if (mpi_launch_size() or 1) > 1:
        init_process_group_from_mpi(backend)
    elif "RANK" in os.environ and "MASTER_ADDR" in os.environ:
        dist.init_process_group(backend)  # torchrun
    else:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                                world_size=1)
    world = World(dist)
    device = torch.device("cpu")
    if cuda:  # one GPU per rank of a node
        device = torch.device("cuda", _local_rank(world.rank) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    data = None
    if world.rank == 0:
        try:
            data = tinylm.load_text(*tinylm.find_corpus(args.corpus))
        except SystemExit as e:  # a usage error: every rank stops, rank 0 alone says why
            data = ("error", str(e.code))
    data = world.bcast(data, root=0)
    if isinstance(data[0], str):  # ("error", message)
        stop()
        if world.rank == 0:
            sys.exit(data[1])
        sys.exit(2)
    train, val, info = data
    return world, torch, device, train, val, info


def stop() -> None:
    """Ends torch.distributed (after the last collective)."""
    import torch.distributed as dist

    dist.destroy_process_group()


def make_optimizer(torch, model, lr: float):
    """AdamW (betas 0.9/0.95), weight decay 0.1 on matrices only, as perf/bench/make_tensors.py."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": other, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def val_batches(torch, args, val: np.ndarray, device) -> List[Any]:
    """The fixed held-out batches (same on every rank and every run, whatever --seed)."""
    rng = np.random.default_rng([VAL_SEED, 1])
    return [tuple(t.to(device) for t in tinylm.batch(torch, val, rng, 8, args.ctx))
            for _ in range(args.eval_batches)]


def mean_loss(torch, model, batches) -> float:
    """Mean loss of ``model`` over ``batches`` (eval mode, no gradients)."""
    model.eval()
    with torch.no_grad():
        losses = [float(model(x, y)) for x, y in batches]
    model.train()
    return float(np.mean(losses)) if losses else 0.0


def eval_steps(args) -> List[int]:
    """Steps after which the held-out loss is measured (the last one included)."""
    return sorted({args.steps * k // max(1, args.evals) for k in range(1, args.evals + 1)})


class Progress:
    """Rank 0's progress bar on stderr: loss and ccompress bytes per step. On a terminal
    it redraws one line; otherwise (a log file) it prints every 5% of the steps."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.t0 = total, enabled, time.time()
        self.tty = sys.stderr.isatty()
        self.every = max(1, total // 20)

    def update(self, step: int, loss: float, comm_bytes: int, note: str = "") -> None:
        if not self.enabled:
            return
        done = step + 1
        if not self.tty and done % self.every and done != self.total and not note:
            return
        el = time.time() - self.t0
        eta = el / done * (self.total - done)
        bar = "#" * (20 * done // self.total) + "-" * (20 - 20 * done // self.total)
        line = (f"step {done:5d}/{self.total} [{bar}] loss {loss:.4f} | comm "
                f"{comm_bytes / 2**20:7.3f} MiB/step | {el / done:5.2f} s/step | "
                f"eta {eta:4.0f}s{'  ' + note if note else ''}")
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if note or done == self.total else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def train(args, opt, step_fn: Callable[[int], float], eval_fn: Callable[[], float],
          bytes_sent: Callable[[], int], show: bool) -> Dict[str, Any]:
    """The loop both examples run: the learning-rate schedule, ``step_fn(step)`` (one
    optimiser step, returning the training loss), the bytes ccompress sent during it,
    ``eval_fn()`` (held-out loss) at :func:`eval_steps`, and the progress bar."""
    progress = Progress(args.steps, show)
    losses, vals, comm_bytes = [], [], []
    checkpoints = eval_steps(args)
    t0 = time.time()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = tinylm.lr_at(step, args.steps, args.lr)
        sent = bytes_sent()
        losses.append(step_fn(step))
        comm_bytes.append(bytes_sent() - sent)
        note = ""
        if step + 1 in checkpoints:
            vals.append((step + 1, eval_fn()))
            note = f"held-out loss {vals[-1][1]:.4f}"
        progress.update(step, losses[-1], comm_bytes[-1], note)
    # The first step of the DDP hook also agrees on the communicator: leave it out.
    return dict(val_loss=vals[-1][1], val_curve=vals, train_loss=losses,
                comm_bytes_per_step=float(np.mean(comm_bytes[1:] or comm_bytes)),
                seconds=time.time() - t0)


def say(world, *parts: Any) -> None:
    """Prints on rank 0 only."""
    if world.rank == 0:
        print(*parts, flush=True)


def finish(world, args, result: Dict[str, Any]) -> None:
    """Prints the summary and writes ``--json`` (rank 0)."""
    if world.rank != 0:
        return
    result["args"] = vars(args)
    print(f"final held-out loss {result['val_loss']:.4f} nats/byte after {args.steps} steps; "
          f"{result['comm_bytes_per_step'] / 2**20:.3f} MiB sent per step by rank 0 "
          f"(ccompress count); {result['seconds']:.0f} s", flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"results in {args.json}", flush=True)


def identical_on_all_ranks(world, tensors) -> bool:
    """Whether the bytes of ``tensors`` are the same on every rank (a digest per rank)."""
    import hashlib

    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().cpu().numpy().tobytes())
    return len(set(world.allgather(h.hexdigest()))) == 1
