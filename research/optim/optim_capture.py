#!/usr/bin/env python3
"""Captures sequences of real data-parallel gradients of the tiny GPT (examples/tinylm.py)
with AdamW's state at the start of each sequence, for the optimizer-aware metrics of
ccompress-fidelity (``--metric adam,update --sequence --adam-state``):

    nice -n 5 .venv/bin/python -m research.optim.optim_capture    # -> build/optim_capture/seed0/
    .venv/bin/ccompress-fidelity build/optim_capture/seed0/w100/step*.npz --sequence \\
        --adam-state build/optim_capture/seed0/w100/state.npz --betas 0.9,0.95 \\
        --metric l2,adam,update --ranks 4 --algo two_shot --error-feedback

The run is the ``exact`` method of research/train_compare/train_compare.py with 4 ranks: the same seed,
initialisation, per-rank data streams (``default_rng([seed, rank])``), schedule and AdamW
(betas 0.9/0.95, no weight decay), the gradients averaged in float64 instead of an
all-reduce; its options (``--seed``, ``--d``, ``--ctx``, ...) are train_compare's. Like train_compare's codec methods, every parameter's gradient goes into one flat
vector (named_parameters order). Written per window starting at step S (``--windows``):
``w{S}/step{T}.npz`` for T = S .. S+L-1, each with ``parts`` (ranks, n): every rank's own
flat gradient, float32; and ``w{S}/state.npz``: AdamW's ``exp_avg``, ``exp_avg_sq`` (flat,
float32, before step S) and ``step`` (optimizer steps taken before S).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples.tinylm import batch, build_model, find_corpus, load_text, lr_at  # noqa: E402
from research.train_compare.train_compare import parse as train_compare_parse  # noqa: E402
from perf.common.train_methods import BETAS  # noqa: E402



def parse(argv=None):
    """This script's options, and research/train_compare/train_compare.py's for the run (model, data, seed,
    steps, learning rate, batch, ranks: every other option goes to its parser)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="and every option of research/train_compare/train_compare.py")
    ap.add_argument("--windows", default="20,100,250", help="first step of each sequence")
    ap.add_argument("--length", type=int, default=6, help="steps per sequence")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--capture-out", default="", help="default build/optim_capture/seed{seed}")
    own, rest = ap.parse_known_args(argv)
    run = train_compare_parse(rest)
    for k, v in vars(own).items():
        setattr(run, k, v)
    return run


def flat_state(opt, params, key):
    return np.concatenate([opt.state[p][key].detach().numpy().reshape(-1)
                           if p in opt.state else np.zeros(p.numel(), np.float32)
                           for p in params]).astype(np.float32)


def main(argv=None) -> int:
    args = parse(argv)
    import torch
    torch.set_num_threads(1)
    out_dir = args.capture_out or os.path.join(ROOT, "build", "optim_capture",
                                               f"seed{args.seed}")
    starts = sorted({int(s) for s in args.windows.split(",") if s.strip()})
    last = max(starts) + args.length
    if last > args.steps:
        raise SystemExit(f"window {max(starts)}+{args.length} runs past --steps {args.steps}")
    train, _, info = load_text(*find_corpus(args.corpus))
    torch.manual_seed(args.seed)
    model = build_model(torch, args.d, args.layers, args.heads, args.ctx)
    named = list(model.named_parameters())
    params = [p for _, p in named]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=BETAS, weight_decay=0.0)
    rngs = [np.random.default_rng([args.seed, r]) for r in range(args.ranks)]
    window = {t: s for s in starts for t in range(s, s + args.length)}
    for step in range(last):
        if step in starts:
            d = os.path.join(out_dir, f"w{step}")
            os.makedirs(d, exist_ok=True)
            np.savez(os.path.join(d, "state.npz"), exp_avg=flat_state(opt, params, "exp_avg"),
                     exp_avg_sq=flat_state(opt, params, "exp_avg_sq"), step=np.int64(step))
        parts, losses = [], []
        for r in range(args.ranks):
            x, y = batch(torch, train, rngs[r], args.batch, args.ctx)
            model.zero_grad(set_to_none=True)
            loss = model(x, y)
            loss.backward()
            losses.append(loss.item())
            parts.append(np.concatenate([p.grad.detach().numpy().reshape(-1) for p in params]))
        parts = np.stack(parts).astype(np.float32)
        if step in window:
            np.savez(os.path.join(out_dir, f"w{window[step]}", f"step{step:04d}.npz"),
                     parts=parts)
        avg = parts.astype(np.float64).mean(axis=0)
        at = 0
        for p in params:
            p.grad = torch.from_numpy(avg[at:at + p.numel()].reshape(p.shape).astype(np.float32))
            at += p.numel()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr)
        opt.step()
        if step % 50 == 0:
            print(f"step {step}: mean train loss {np.mean(losses):.4f}", flush=True)
    meta = {"config": vars(args), "text": info, "params": [[n, list(p.shape)] for n, p in named],
            "count": int(sum(p.numel() for p in params))}
    with open(os.path.join(out_dir, "capture.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    print(f"{len(starts)} windows x {args.length} steps, {meta['count']} parameters -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
