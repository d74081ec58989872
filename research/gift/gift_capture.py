#!/usr/bin/env python3
"""Captures the real gradients and input second moments of every Linear layer of the tiny
GPT (examples/tinylm.py) during a data-parallel training run emulated in one process, for
the offline GIFT study (research/gift/gift_study.py):

    nice -n 5 .venv/bin/python -m research.gift.gift_capture          # -> build/gift_study/capture.npz

The run is the ``exact`` method of research/train_compare/train_compare.py with 4 ranks: the same seed,
initialisation, per-rank data streams (``default_rng([seed, rank])``, ``--batch`` sequences
each), learning-rate schedule and AdamW, gradients averaged in float64 instead of an
all-reduce. Saved: each rank's weight gradient at the gradient steps (``g{step}:{layer}:{r}``),
the rank-averaged x^T x / tokens at the moment steps (``a{step}:{layer}``) and the output
side's delta^T delta / tokens (``s{step}:{layer}``, delta: the loss gradient of the layer's
output, the other K-FAC factor), and, for
gradient-side statistics, the averaged gradient's G^T G of the previous step and its EMAs
over all previous steps (``r{beta}_{step}:{layer}``; no extra traffic in a real run).
"""
from __future__ import annotations

import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples.tinylm import batch, build_model, find_corpus, load_text, lr_at  # noqa: E402

GRAD_STEPS = (0, 49, 50, 150, 199, 299)
LAGS = (0, 1, 10, 50)  # statistics from the same step and from this many steps before
BETAS = (0.0, 0.9, 0.99)  # EMA weights of the old G^T G (0: the previous step's alone)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default="")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "gift_study", "capture.npz"))
    return ap.parse_args(argv)


def moment_steps(steps: int):
    """Every collection of GIFT's default schedule (multiples of 50) and each gradient step
    minus each lag."""
    want = set(range(0, steps, 50))
    want |= {s - lag for s in GRAD_STEPS for lag in LAGS if 0 <= s - lag < steps}
    return want


def main(argv=None) -> int:
    args = parse(argv)
    import torch
    torch.set_num_threads(1)
    train, _, info = load_text(*find_corpus(args.corpus))
    torch.manual_seed(args.seed)
    model = build_model(torch, args.d, args.layers, args.heads, args.ctx)
    linears = {f"{n}.weight": m for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear)}
    named = list(model.named_parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    rngs = [np.random.default_rng([args.seed, r]) for r in range(args.ranks)]
    want_a = moment_steps(args.steps)
    ema = {b: {} for b in BETAS}
    out = {}
    for step in range(args.steps):
        inputs, deltas = {}, {}
        hooks = [m.register_forward_hook(
            lambda mod, inp, o, k=k: inputs.setdefault(k, []).append(inp[0].detach()))
            for k, m in linears.items()] if step in want_a else []
        hooks += [m.register_full_backward_hook(
            lambda mod, gin, gout, k=k: deltas.setdefault(k, []).append(gout[0].detach()))
            for k, m in linears.items()] if step in want_a else []
        total = {n: 0.0 for n, _ in named}
        for r in range(args.ranks):
            x, y = batch(torch, train, rngs[r], args.batch, args.ctx)
            model.zero_grad(set_to_none=True)
            model(x, y).backward()
            for n, p in named:
                g = p.grad.detach().numpy().astype(np.float64)
                total[n] = total[n] + g / args.ranks
                if step in GRAD_STEPS and n in linears:
                    out[f"g{step}:{n}:{r}"] = g.astype(np.float32)
        for h in hooks:
            h.remove()
        for tag, saved in (("a", inputs), ("s", deltas)):
            for k, acts in saved.items():
                mats = [a.reshape(-1, a.shape[-1]).double().numpy() for a in acts]
                out[f"{tag}{step}:{k}"] = np.mean([m.T @ m / m.shape[0] for m in mats], axis=0)
        for k in linears:
            if step + 1 in GRAD_STEPS:  # statistics of the steps before the next capture
                for b in BETAS:
                    out[f"r{b}_{step + 1}:{k}"] = ema[b][k].copy() if k in ema[b] else \
                        total[k].T @ total[k]
            rr = total[k].T @ total[k]
            for b in BETAS:
                ema[b][k] = rr if k not in ema[b] else b * ema[b][k] + (1 - b) * rr
        for n, p in named:
            p.grad = torch.from_numpy(total[n].astype(np.float32))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr)
        opt.step()
        if step % 50 == 0:
            with torch.no_grad():
                print(f"step {step}: loss {model(x, y).item():.4f}", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    np.savez(args.out, **out)
    print(f"{len(out)} arrays -> {args.out} ({info['corpus']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
