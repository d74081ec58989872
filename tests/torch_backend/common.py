"""Shared by the torchrun workers of tests/test_torch_backend.py: start-up (torchrun's
env://), an exact gloo reference group, and replica checks through it."""
import hashlib
import os
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/: torch_helpers

import ccompress.torch  # noqa: E402,F401  (registers the backend)


def start(backend="ccompress", timeout_s=60, pg_options=None):
    """init_process_group under torchrun; returns (rank, size, gloo reference group)."""
    torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s),
                            pg_options=pg_options)
    ref = dist.new_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size(), ref


def gather(t, ref):
    """Every rank's copy of ``t`` (exact, over the gloo group), in rank order."""
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous(), group=ref)
    return out


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def same_on_all_ranks(tensors, ref):
    """Whether the bytes of ``tensors`` are the same on every rank."""
    d = [None] * dist.get_world_size()
    dist.all_gather_object(d, digest(tensors), group=ref)
    return len(set(d)) == 1


def ok(name):
    print(f"OK {name} rank {dist.get_rank()}", flush=True)


def rank_input(rank, n, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    scale = float(np.exp(np.random.default_rng([seed, rank]).standard_normal()))
    return (torch.randn(n, generator=g) * scale).to(dtype)
