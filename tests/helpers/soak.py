"""Bounded soak of the collectives over one communicator (in-process or MPI).

Every rank draws the same random sequence of calls from one seed: all-reduce (every codec
family, every schedule, sum and avg), reduce-scatter and all-gather, three dtypes, sizes
from 0 to max_n, in place and out of place, and groups of up to three async calls in flight
at once. After each call every rank checks its result against an fp64 reference and the
stated bound (ccompress.bounds; one rank per call, in turn, to share the cost), and all
ranks compare a digest of their output through an exact all-gather, so a wrong or
non-identical result on any rank fails the run on every rank at that iteration. Resident
memory is sampled after a warm-up (one call per codec at max_n, so the per-thread scratch
has reached its size) and at the end; it must not grow by more than RSS_TOLERANCE.

    mpiexec -n 3 python tests/helpers/soak.py --iterations 300       # MPI; prints "SOAK OK <rank> ..."
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import os
import time

import numpy as np

import ccompress as cc
from ccompress._internal.arrays import numpy_dtype
from ccompress.bounds import allreduce_error_bound

CODECS = ["none", "bf16", "fp16", "fp8_e4m3:g128", "fp8_e5m2:g32", "fp8_e4m3:g64:sr",
          "taco:g128", "hint8", "hint8:g32:h256:s16", "nvfp4", "hnvfp4:g16", "hint4", "bf16:sr"]
ALGOS = ["ring", "two_shot", "tree", "one_shot", "auto"]
DTYPES = ["float32", "bfloat16", "float16"]
# Resident memory may grow by this much over a run (allocator noise, measured at 6-8 MiB for
# 100 to 1000 iterations); one leaked 64 KiB slice per call would add ~100 MiB in 1500 calls.
RSS_TOLERANCE = 16 << 20
M_MMAP_THRESHOLD = -3  # mallopt parameter (glibc malloc.h)


def _steady_allocator() -> None:
    """Large blocks always from mmap, returned to the system when freed. glibc otherwise
    raises its mmap threshold after the first large free and serves later large arrays from
    the heap, whose fragmentation makes resident memory wander by tens of MiB."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 64 << 10)
    except (OSError, AttributeError):
        pass


def rss_bytes() -> int:
    """Resident memory after returning freed heap pages to the system (glibc malloc_trim),
    so that what stays is memory in use, not the allocator's free lists."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _draw(rng, max_n: int) -> dict:
    kind = rng.choice(["allreduce"] * 6 + ["reduce_scatter", "allgather"])
    n = 0 if rng.random() < 0.03 else int(np.exp(rng.uniform(0, np.log(max_n))))
    return dict(kind=str(kind), n=n, codec=str(rng.choice(CODECS)), algo=str(rng.choice(ALGOS)),
                dtype=str(rng.choice(DTYPES)), op=str(rng.choice(["sum", "avg"])),
                inplace=bool(kind == "allreduce" and rng.random() < 0.3),
                seed=int(rng.integers(1 << 30)))


def _parts(call: dict, size: int) -> np.ndarray:
    r = np.random.default_rng(call["seed"])
    x = r.standard_normal((size, call["n"])) * np.exp(r.standard_normal((size, 1)))
    return x.astype(np.float32).astype(numpy_dtype(call["dtype"]))


def _issue(comm, call: dict, parts: np.ndarray, async_op: bool):
    x = parts[comm.rank].copy()
    kw = dict(codec=call["codec"], async_op=async_op)
    if call["kind"] == "allreduce":
        out = x if call["inplace"] else np.empty_like(x)
        return comm.allreduce(x, algo=call["algo"], op=call["op"], out=out, **kw)
    if call["kind"] == "reduce_scatter":
        return comm.reduce_scatter(x, op=call["op"], **kw)
    return comm.allgather(x, **kw)


def _within_bound(comm, call: dict, parts: np.ndarray, y: np.ndarray, algo: str) -> bool:
    size, n = parts.shape
    f = call["dtype"]
    if call["kind"] == "allgather":
        return all(np.all(np.abs(y[r].astype(np.float64) - parts[r].astype(np.float64)) <=
                          allreduce_error_bound(parts[r:r + 1], call["codec"], "one_shot", dtype=f))
                   for r in range(size))
    ref = parts.astype(np.float64).sum(axis=0) / (size if call["op"] == "avg" else 1)
    if call["kind"] == "reduce_scatter":
        lo, hi = cc.chunk_range(n, size, comm.rank)
        bound = allreduce_error_bound(parts, call["codec"], "reduce_scatter", call["op"], f)
        return bool(np.all(np.abs(y.astype(np.float64) - ref[lo:hi]) <= bound[lo:hi]))
    bound = allreduce_error_bound(parts, call["codec"], algo, call["op"], f)
    return bool(np.all(np.abs(y.astype(np.float64) - ref) <= bound))


def _agree(comm, it: int, call: dict, y: np.ndarray, ok: bool) -> None:
    """All ranks learn whether every rank's result is within its bound and (except for
    reduce-scatter, whose chunks differ) whether all outputs are bit-identical."""
    shared = call["kind"] != "reduce_scatter"
    d = hashlib.sha256(np.ascontiguousarray(y).view(np.uint8).tobytes()).digest()
    word = int.from_bytes(d[:6], "little") if shared else 0
    v = np.array([word & 0xFFFFFF, word >> 24, float(ok)], np.float32)  # exact in float32
    table = comm.allgather(v)
    bad = [r for r in range(comm.size) if table[r, 2] != 1]
    if bad:
        raise AssertionError(f"iteration {it} {call}: rank(s) {bad} out of bound")
    if shared and not (table[:, :2] == table[0, :2]).all():
        raise AssertionError(f"iteration {it} {call}: ranks hold different bits")


def soak(comm, iterations: int, seed: int = 0, max_n: int = 1 << 17) -> dict:
    """Runs the soak on this rank; returns counts and the resident-memory samples."""
    rng = np.random.default_rng(seed)
    _steady_allocator()
    for codec in CODECS:  # warm-up: largest runs, so scratch buffers have their final size
        comm.allreduce(np.ones(max_n, np.float32), codec=codec, algo="two_shot")
        comm.allreduce(np.ones(max_n, np.float32), codec=codec, algo="one_shot")
    rss0, it, calls = rss_bytes(), 0, 0
    while it < iterations:
        batch = [_draw(rng, max_n) for _ in range(int(rng.choice([1, 1, 2, 3])))]
        async_op = len(batch) > 1
        parts = [_parts(c, comm.size) for c in batch]
        handles = [_issue(comm, c, p, async_op) for c, p in zip(batch, parts)]
        for call, p, h in zip(batch, parts, handles):
            y = h.wait() if async_op else h
            algo = comm.last_stats["algo"] if not async_op else None
            ok = True
            if (it + calls) % comm.size == comm.rank:
                if algo is None:  # several calls in flight: resolve auto as the library does
                    algo = call["algo"] if call["algo"] != "auto" else cc._core.choose_algo(
                        call["n"], call["dtype"], cc.Codec.parse(call["codec"])._c, comm.size)
                ok = _within_bound(comm, call, p, y, algo)
            _agree(comm, it, call, y, ok)
            calls += 1
        it += 1
    rss1 = rss_bytes()
    return dict(iterations=it, calls=calls, rss_start=rss0, rss_end=rss1)


def main() -> None:
    from mpi4py import MPI

    ap = argparse.ArgumentParser(description="MPI soak (see the module docstring)")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-n", type=int, default=1 << 17)
    a = ap.parse_args()
    comm = cc.Communicator.from_mpi(MPI.COMM_WORLD, timeout=120)
    t0 = time.monotonic()
    res = soak(comm, a.iterations, a.seed, a.max_n)
    grew = res["rss_end"] - res["rss_start"]
    assert grew <= RSS_TOLERANCE, f"rank {comm.rank}: resident memory grew by {grew} bytes"
    print(f"SOAK OK {comm.rank} calls {res['calls']} rss {res['rss_start'] >> 20} -> "
          f"{res['rss_end'] >> 20} MiB in {time.monotonic() - t0:.1f} s", flush=True)
    comm.close()


if __name__ == "__main__":
    main()
