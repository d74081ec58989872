#!/usr/bin/env python3
"""Realistic tensors for ccompress-fidelity, taken from a small GPT-style language model
trained here on real English text.

    apt-get install -y python3-doc            # the text: the Python documentation (Debian)
    .venv/bin/python -m perf.bench.make_tensors     # ~6-8 minutes on 2 cores; writes build/tensors/
    .venv/bin/ccompress-fidelity build/tensors/*.npz --summary

Text: the reStructuredText sources of the Python documentation that Debian's python3-doc
(python3.X-doc) installs under /usr/share/doc/python3.X/html/_sources (tutorial, library and
language reference, HOWTOs, FAQ, what's new: ~11 MB of English prose with code examples),
with the reST markup stripped. ``--corpus PATH`` (a file or a folder of .txt/.rst files)
trains on other text instead.

Model: byte-level (vocabulary 256) pre-LayerNorm GPT, 4 layers, d_model 256, 8 heads, MLP
4x with GELU, context 256, tied embeddings, AdamW with warm-up and cosine decay.

Writes, with an array ``parts`` of shape (ranks, ...) float32 in each file:
  tp_h{L}_attn_out.npz, tp_h{L}_mlp_down.npz   tensor parallelism, TP=4: the input dimension of
      each row-parallel linear (attention out-projection, MLP down-projection) is cut into 4
      shards (2 heads, or 256 MLP channels each) and shard r's partial output
      X[:, shard r] @ W[:, shard r]^T over 1024 tokens is rank r's part: exactly what the TP
      all-reduce sums (bias excluded: it is added after the all-reduce).
  dp_h{L}_{attn_qkv,attn_out,mlp_up,mlp_down}.npz, dp_tok_emb.npz   data parallelism, DP=4:
      each rank's weight gradient from its own micro-batch of 1024 tokens.
  README.txt   model, text, steps, loss curve, statistics of the tensors.
The final model's tensors go to the output folder; earlier checkpoints (--checkpoints) get
the TP tensors only, in step{N}/ under it. Fixed seeds: a re-run with the same text, torch
version and --threads writes the same files.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Dict, List, Tuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples.tinylm import batch, build_model, find_corpus, load_text, lr_at  # noqa: E402

TP, DP = 4, 4
TOKENS_TP = (4, 256)   # sequences x context of the TP capture batch (1024 tokens)
TOKENS_DP = (4, 256)   # per DP rank


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- capture
def tp_partials(torch, model, idx) -> Dict[str, np.ndarray]:
    """Per-rank partial sums of every row-parallel linear on this batch, TP ranks."""
    inputs: Dict[str, object] = {}
    hooks = []
    for i, blk in enumerate(model.h):
        for name in ("attn_out", "mlp_down"):
            mod = getattr(blk, name)
            key = f"h{i}_{name}"
            hooks.append(mod.register_forward_hook(
                lambda m, inp, out, key=key: inputs.__setitem__(key, (inp[0], out))))
    with torch.no_grad():
        model(idx)
        out = {}
        for i, blk in enumerate(model.h):
            for name in ("attn_out", "mlp_down"):
                key = f"h{i}_{name}"
                x, y = inputs[key]
                w = getattr(blk, name).weight           # (out, in)
                x = x.reshape(-1, x.shape[-1])
                shards = np.array_split(np.arange(w.shape[1]), TP)
                parts = torch.stack([x[:, s] @ w[:, s].T for s in
                                     (torch.from_numpy(s) for s in shards)])
                full = parts.double().sum(0) + getattr(blk, name).bias.double()
                err = (full - y.reshape(full.shape).double()).abs().max().item()
                assert err <= 1e-4 * (1 + y.abs().max().item()), f"{key}: partials off by {err}"
                out[key] = parts.numpy().astype(np.float32)
    for h in hooks:
        h.remove()
    return out


def dp_gradients(torch, model, data: np.ndarray, seed: int) -> Dict[str, np.ndarray]:
    """Each DP rank's gradient of the main weight matrices from its own micro-batch."""
    rng = np.random.default_rng([seed, 2])
    names = ["tok_emb"] + [f"h{i}_{n}" for i in range(len(model.h))
                           for n in ("attn_qkv", "attn_out", "mlp_up", "mlp_down")]
    grads: Dict[str, List[np.ndarray]] = {n: [] for n in names}
    for _ in range(DP):
        x, y = batch(torch, data, rng, *TOKENS_DP)
        model.zero_grad(set_to_none=True)
        model(x, y).backward()
        for n in names:
            p = model.tok_emb.weight if n == "tok_emb" else \
                getattr(model.h[int(n[1:n.index("_")])], n[n.index("_") + 1:]).weight
            grads[n].append(p.grad.detach().numpy().astype(np.float32).copy())
    model.zero_grad(set_to_none=True)
    return {n: np.stack(g) for n, g in grads.items()}


def stats(parts: np.ndarray, channel_axis: bool) -> Dict[str, float]:
    """Shape of the summed tensor's distribution: outlier channels and tails."""
    s = parts.astype(np.float64).sum(0)
    flat = s.ravel()
    sd = flat.std() or 1.0
    out = {"rms": float(np.sqrt(np.mean(flat ** 2))),
           "kurtosis": float(np.mean(((flat - flat.mean()) / sd) ** 4)),
           "amax/rms": float(np.abs(flat).max() / max(np.sqrt(np.mean(flat ** 2)), 1e-30))}
    if channel_axis:
        ch = np.sqrt(np.mean(s.reshape(-1, s.shape[-1]) ** 2, axis=0))
        out["chan max/median rms"] = float(ch.max() / max(np.median(ch), 1e-30))
    return out


def save(folder: str, prefix: str, tensors: Dict[str, np.ndarray]) -> List[str]:
    os.makedirs(folder, exist_ok=True)
    names = []
    for k, v in tensors.items():
        fn = os.path.join(folder, f"{prefix}_{k}.npz")
        np.savez(fn, parts=np.ascontiguousarray(v, dtype=np.float32))
        names.append(fn)
    return names


# ---------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "tensors"))
    ap.add_argument("--corpus", default="", help="train on this text file or folder instead "
                    "of the Python documentation")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--checkpoints", default="100,250",
                    help="earlier steps whose TP tensors are also saved (step{N}/), '' for none")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (results depend on it)")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("make_tensors: needs torch (CPU is enough): pip install torch")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    d, layers, heads, ctx = 256, 4, 8, 256
    checkpoints = sorted({int(s) for s in args.checkpoints.split(",") if s.strip()}
                         & set(range(1, args.steps)))

    files, desc = find_corpus(args.corpus)
    train, val, info = load_text(files, desc)
    log(f"text: {desc}\n      {info['train_bytes']:,} bytes to train on, "
        f"{info['val_bytes']:,} held out (sha256 {info['sha256']})")
    model = build_model(torch, d, layers, heads, ctx)
    nparams = sum(p.numel() for p in model.parameters())
    log(f"model: byte-level GPT, {layers} layers, d_model {d}, {heads} heads, context {ctx}, "
        f"{nparams / 1e6:.2f}M parameters; {args.steps} steps of {args.batch}x{ctx} tokens, "
        f"AdamW lr {args.lr}, {args.threads} threads")
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    warm = max(1, args.steps // 20)

    vrng = np.random.default_rng([args.seed, 1])
    val_batches = [batch(torch, val, vrng, 8, ctx) for _ in range(4)]
    tp_idx, _ = batch(torch, val, np.random.default_rng([args.seed, 3]), *TOKENS_TP)

    def val_loss() -> float:
        model.eval()
        with torch.no_grad():
            v = float(np.mean([model(x, y).item() for x, y in val_batches]))
        model.train()
        return v

    rng = np.random.default_rng([args.seed, 0])
    curve: List[Tuple[int, float, float]] = []
    saved: Dict[str, List[str]] = {}
    tp_stats: Dict[str, Dict[str, float]] = {}
    t0, window = time.time(), []
    log(f"{'step':>5} {'train loss':>10} {'val loss':>9} {'lr':>8} {'elapsed':>8} {'eta':>6}")
    for step in range(args.steps + 1):
        if step in checkpoints or step == args.steps:
            vl = val_loss()
            tr = float(np.mean(window)) if window else float("nan")
            curve.append((step, tr, vl))
            log(f"{step:5d} {tr:10.4f} {vl:9.4f} {lr_at(min(step, args.steps - 1), args.steps, args.lr):8.2e} "
                f"{time.time() - t0:7.0f}s   (checkpoint)")
            model.eval()
            tp = tp_partials(torch, model, tp_idx)
            model.train()
            if step == args.steps:
                tp_stats = {k: stats(v, True) for k, v in tp.items()}
                saved["final"] = save(args.out, "tp", tp)
            else:
                saved[f"step{step}"] = save(os.path.join(args.out, f"step{step:04d}"), "tp", tp)
        if step == args.steps:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr)
        x, y = batch(torch, train, rng, args.batch, ctx)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        window = (window + [loss.item()])[-25:]
        if (step + 1) % 25 == 0 and step + 1 not in checkpoints and step + 1 != args.steps:
            el = time.time() - t0
            log(f"{step + 1:5d} {np.mean(window):10.4f} {'':>9} {lr_at(step, args.steps, args.lr):8.2e} {el:7.0f}s "
                f"{el / (step + 1) * (args.steps - step - 1):5.0f}s")
            curve.append((step + 1, float(np.mean(window)), float("nan")))
    train_time = time.time() - t0

    dp = dp_gradients(torch, model, train, args.seed)
    saved["final"] += save(args.out, "dp", dp)
    dp_stats = {k: stats(v, False) for k, v in dp.items()}
    final_val = curve[-1][2]

    total = sum(os.path.getsize(f) for fs in saved.values() for f in fs)
    py = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT) else "python"
    cmd = " ".join([py, "-m", "perf.bench.make_tensors"] + (sys.argv[1:] if argv is None else argv))
    lines = [
        "Tensors for ccompress-fidelity, written by perf/bench/make_tensors.py",
        f"command: {cmd}",
        f"date: {time.strftime('%Y-%m-%dT%H:%M:%S')}  torch {torch.__version__}  "
        f"threads {args.threads}  seed {args.seed}",
        "",
        f"text: {desc}; reST markup stripped from .rst files; every 25th file held out;",
        f"      {info['train_bytes']:,} training bytes, {info['val_bytes']:,} held-out bytes, "
        f"sha256 {info['sha256']}",
        f"model: byte-level pre-LayerNorm GPT: {layers} layers, d_model {d}, {heads} heads, MLP "
        f"{4 * d} (GELU), context {ctx}, tied embeddings, {nparams / 1e6:.2f}M parameters",
        f"training: {args.steps} steps x {args.batch} x {ctx} tokens, AdamW (lr {args.lr}, "
        f"betas 0.9/0.95, weight decay 0.1, warm-up {warm} steps, cosine to 10%), grad clip 1.0; "
        f"{train_time:.0f} s on {args.threads} threads",
        f"final loss: train {curve[-1][1]:.4f}, held-out {final_val:.4f} nats/byte "
        f"({final_val / math.log(2):.3f} bits/byte); a uniform guess is {math.log(256):.3f}",
        "",
        "loss curve (train: mean of the last 25 steps; held-out: 32 sequences):",
        "  step  train  held-out",
    ]
    lines += [f"  {s:4d}  {tr:.4f}  {'' if math.isnan(v) else f'{v:.4f}'}" for s, tr, v in curve]
    lines += [
        "",
        f"tp_*.npz  parts (4, {TOKENS_TP[0] * TOKENS_TP[1]}, {d}): TP=4 per-rank partial outputs "
        "X[:, shard] @ W[:, shard]^T of each row-parallel",
        "          linear (attention out-projection: 2 heads per shard; MLP down-projection: "
        f"{d} channels per shard)",
        f"          on {TOKENS_TP[0]} held-out sequences of {TOKENS_TP[1]} bytes; bias excluded; "
        "their sum + bias is the layer output",
        "dp_*.npz  parts (4, *weight.shape): DP=4 per-rank weight gradients (mean loss over each "
        "rank's own micro-batch",
        f"          of {TOKENS_DP[0]}x{TOKENS_DP[1]} training bytes) at the final weights",
        f"step*/tp_*.npz  the same TP capture at earlier steps {checkpoints}",
        f"files: {sum(len(v) for v in saved.values())}, {total / 2 ** 20:.1f} MiB",
        "",
        "statistics of the summed (all-reduced) tensor:",
        f"  {'file':22s} {'rms':>9} {'kurtosis':>9} {'amax/rms':>9} {'chan max/median rms':>20}",
    ]
    for k, s in [("tp_" + k, s) for k, s in tp_stats.items()] + \
            [("dp_" + k, s) for k, s in dp_stats.items()]:
        lines.append(f"  {k:22s} {s['rms']:9.3g} {s['kurtosis']:9.1f} "
                     f"{s['amax/rms']:9.1f} {s.get('chan max/median rms', float('nan')):20.1f}")
    with open(os.path.join(args.out, "README.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "manifest.json"), "w") as fh:
        json.dump({"info": info, "curve": curve, "files": saved, "tp_stats": tp_stats,
                   "dp_stats": dp_stats, "steps": args.steps, "seed": args.seed}, fh, indent=1)
    log("\n".join(lines[4:]))
    log(f"wrote {args.out}/ in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
