#!/usr/bin/env python3
"""Data-parallel training of the tiny byte-level GPT (examples/tinylm.py) on real text with
every gradient-communication method of ccompress, same seed and steps, under mpiexec:

    .venv/bin/mpiexec -n 4 .venv/bin/python -m research.train_compare.train_compare --methods all
    .venv/bin/python -m research.train_compare.train_report        # table -> perf/results/training.md, plot -> perf/plots/

Methods: exact (float32 two_shot), fp8 / hint8 / nvfp4 / hint4 each without and with library error
feedback (``_ef``), gift (fp8 + GIFT whitening + error feedback), tsr / tsr_reset (TSR-Adam,
moments rotated / reset on refresh), powersgd (rank 4, error feedback, then AdamW).
Every method's gradients travel through one ccompress Communicator; bytes per step are the
transport's own counter (``comm.bytes_sent``, headers included) on this rank. Each method
writes build/train_compare/<method>.json (loss curves, final held-out loss, bytes, wall time,
a check that all ranks hold bit-identical parameters).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread per rank: ranks share the cores
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples.tinylm import batch, build_model, find_corpus, load_text, lr_at  # noqa: E402
from perf.common.train_methods import METHODS, add_tsr_options, make_method  # noqa: E402


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default="all", help="comma list, or 'all': " + ",".join(METHODS))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-seqs", type=int, default=64, help="held-out windows (split over ranks)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gift-ema", type=float, default=None,
                    help="EMA weight of the old activation moment per collection (GIFT's default)")
    ap.add_argument("--gift-every", type=int, default=50,
                    help="steps between GIFT's activation-moment collections")
    ap.add_argument("--gift-sketch", type=int, default=0,
                    help="GIFT: all-reduce a k-column Nystrom sketch of the moments (0: dense)")
    ap.add_argument("--gift-rank", type=int, default=32, help="GIFT: rank of each factor")
    ap.add_argument("--gift-output", action="store_true",
                    help="GIFT: the output-side K-FAC factor too (two-sided whitening)")
    add_tsr_options(ap)
    ap.add_argument("--tag", default="", help="suffix of the result names (variants)")
    ap.add_argument("--corpus", default="")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "train_compare"))
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    import torch
    from mpi4py import MPI

    import ccompress as cc

    torch.set_num_threads(1)
    world = MPI.COMM_WORLD
    rank, size = world.rank, world.size
    log = (lambda m: print(m, flush=True)) if rank == 0 else (lambda m: None)
    files, desc = find_corpus(args.corpus)
    train, val, info = load_text(files, desc)
    names = METHODS if args.methods == "all" else args.methods.split(",")
    for name in names:
        if name not in METHODS:
            raise SystemExit(f"unknown method {name}; use {', '.join(METHODS)}")
    os.makedirs(args.out, exist_ok=True)
    log(f"text: {info['corpus']} ({info['train_bytes']} train / {info['val_bytes']} "
        "held-out bytes)")
    log(f"{size} ranks x {args.batch} x {args.ctx} tokens per step, {args.steps} steps, "
        f"d={args.d} layers={args.layers}")
    for name in names:
        comm = cc.Communicator.from_mpi(world.Dup(), timeout=600)
        res = train_one(torch, world, comm, name, args, train, val)
        res.update(config=vars(args), text=info, ranks=size)
        res["method"] = name + args.tag
        if rank == 0:
            with open(os.path.join(args.out, f"{name}{args.tag}.json"), "w") as fh:
                json.dump(res, fh, indent=1)
        comm.close()
    return 0


def train_one(torch, world, comm, name, args, train, val):
    rank, size = world.rank, world.size
    torch.manual_seed(args.seed)
    model = build_model(torch, args.d, args.layers, args.heads, args.ctx)
    method = make_method(name, torch, model, comm, args)
    data_rng = np.random.default_rng([args.seed, rank])
    val_rng = np.random.default_rng([args.seed, 99])
    per_rank = args.eval_seqs // size
    val_batches = [batch(torch, val, val_rng, args.eval_seqs, args.ctx)]
    vx, vy = val_batches[0]
    vx, vy = vx[rank * per_rank:(rank + 1) * per_rank], vy[rank * per_rank:(rank + 1) * per_rank]

    def held_out() -> float:
        with torch.no_grad():
            loss = model(vx, vy).item()
        return world.allreduce(loss) / size

    curve, comm_bytes, train_time = [], 0, 0.0
    window = []
    for step in range(args.steps):
        if step % args.eval_every == 0:
            curve.append({"step": step, "val": held_out(),
                          "train": float(np.mean(window)) if window else None})
            window = []
            if world.rank == 0:
                print(f"[{name}] step {step:4d} val {curve[-1]['val']:.4f} "
                      f"bytes/step {comm_bytes / max(step, 1):.0f} {train_time:.0f}s", flush=True)
        t0 = time.perf_counter()
        x, y = batch(torch, train, data_rng, args.batch, args.ctx)
        lr = lr_at(step, args.steps, args.lr)
        before = comm.bytes_sent
        loss = method.forward_backward(model, x, y, step)
        method.step(model, lr, step)
        comm_bytes += comm.bytes_sent - before
        train_time += time.perf_counter() - t0
        window.append(world.allreduce(loss) / size)
    final = held_out()
    curve.append({"step": args.steps, "val": final, "train": float(np.mean(window))})
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    digests = world.allgather(h.hexdigest())
    all_bytes = world.allgather(comm_bytes)
    res = {"method": name, "final_val": final, "curve": curve,
           "bytes_per_step": comm_bytes / args.steps,
           "bytes_per_step_max_rank": max(all_bytes) / args.steps,
           "train_seconds": world.allreduce(train_time, op=__import__("mpi4py").MPI.MAX),
           "identical_params": len(set(digests)) == 1}
    res.update(method.report())
    if world.rank == 0:
        print(f"[{name}] final held-out loss {final:.4f}, {res['bytes_per_step']:.0f} B/step, "
              f"{res['train_seconds']:.0f}s, identical params: {res['identical_params']}",
              flush=True)
    return res


if __name__ == "__main__":
    sys.exit(main())
