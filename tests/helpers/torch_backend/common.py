"""Shared by the torchrun workers of tests/pytorch/test_torch_backend.py: start-up (torchrun's
env://), an exact gloo reference group, and replica checks through it."""
import hashlib
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

import ccompress.torch  # noqa: F401  (registers the backend)


def start(backend="ccompress", timeout_s=60, pg_options=None):
    """init_process_group under torchrun; returns (rank, size, gloo reference group)."""
    torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s),
                            pg_options=pg_options)
    ref = dist.new_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size(), ref


# The Works of the reference group's collectives, held to the end: gloo's worker thread
# frees a finished Work whose last reference it holds, and its tensors' Python objects then
# need the interpreter, which aborts the process when the script has ended (the checks below
# are a worker's last collectives). Freed by the main thread when the script's globals go.
_WORKS = []


def final_barrier():
    """``dist.barrier()`` as a worker's last collective before it prints OK and ends, its Work
    held here: a gloo barrier's Work holds the collectives before it (all_gather_object's,
    whose tensors have Python objects), and gloo's worker thread, dropping it last after the
    script had ended, needed the interpreter while it was torn down ("terminate called
    without an active exception", SIGABRT, 3 times in about 340 runs)."""
    work = dist.barrier(async_op=True)
    work.wait()
    _WORKS.append(work)


def gather(t, ref):
    """Every rank's copy of ``t`` (exact, over the gloo group), in rank order."""
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    work = dist.all_gather(out, t.contiguous(), group=ref, async_op=True)
    work.wait()
    _WORKS.append(work)
    return out


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def digests(tensors, ref):
    """Every rank's digest of ``tensors``, in rank order."""
    mine = torch.frombuffer(bytearray.fromhex(digest(tensors)), dtype=torch.uint8)
    return [bytes(d.tolist()).hex() for d in gather(mine, ref)]


def same_on_all_ranks(tensors, ref):
    """Whether the bytes of ``tensors`` are the same on every rank."""
    return len(set(digests(tensors, ref))) == 1


def ok(name):
    print(f"OK {name} rank {dist.get_rank()}", flush=True)


def rank_input(rank, n, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    scale = float(np.exp(np.random.default_rng([seed, rank]).standard_normal()))
    return (torch.randn(n, generator=g) * scale).to(dtype)
