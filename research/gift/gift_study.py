#!/usr/bin/env python3
"""Offline study of GIFT's one-step error on real gradients (research/gift/gift_capture.py first):

    nice -n 5 .venv/bin/python -m research.gift.gift_study           # tables on stdout

For every captured step and Linear layer, the 4 ranks' gradients go through a 4-rank
all-reduce (the library's two_shot over in-process ranks for library codecs; for the
source's one-scale-per-tensor FP8 E5M2, NumPy with ml_dtypes: each rank's tensor quantized
with scale amax/57344, averaged, the average quantized again), plain or through a whitening
transform, and the relative L2 error against the fp64 mean is compared:
gain = error(plain) / error(transform). Tables: median [min, max] of the gain over layers.

Transforms: ``ours r=R d=D`` (ccompress.gift.Whitening, rank R, damping D relative to
mean(diag A)), ``source r=R`` (the source's factor: rank R + residual diagonal clamped
>= 1e-3, L = chol(A_hat + 1e-3 I)), ``chol d=D`` (Cholesky root of the dense A + D I
instead of our near-symmetric root), statistics from the same step, from earlier steps,
GIFT's default schedule (EMA 0.5 of collections every 50 steps), or the averaged
gradient's own G^T G from previous steps (``grad``, EMA beta) or this step (oracle);
``output-only`` / ``two-sided``: the output-side K-FAC factor S = E[delta delta^T] alone or
with A (ccompress.gift.Kronecker's algebra), dense, low-rank, Nystrom-sketched or stale.
"""
from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import numpy as np  # noqa: E402

import ccompress as cc  # noqa: E402
from ccompress.compressors.gift import Kronecker, Whitening, nystrom  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
P = 4


class Quantizers:
    """The all-reduce of P rank tensors: library codecs over in-process ranks, or the
    source's per-tensor E5M2 in NumPy."""

    def __init__(self):
        self.comms = cc.Communicator.inproc(P)
        self.pool = ThreadPoolExecutor(P)

    def __call__(self, name: str, xs):
        xs = [np.ascontiguousarray(x, np.float32) for x in xs]
        if name == "e5m2_tensor":
            return tensor_e5m2(np.mean([tensor_e5m2(x) for x in xs], axis=0))
        futs = [self.pool.submit(c.allreduce, x, codec=name, algo="two_shot", op="avg")
                for c, x in zip(self.comms, xs)]
        return [f.result() for f in futs][0].astype(np.float64)


def tensor_e5m2(x):
    import ml_dtypes
    x = np.asarray(x, np.float32)
    scale = max(float(np.abs(x).max()), 1e-30) / 57344.0
    return (x / scale).astype(ml_dtypes.float8_e5m2).astype(np.float64) * scale


class Source:
    """The source's factor: rank r + residual diagonal clamped >= 1e-3, chol(A_hat + 1e-3 I)."""

    def __init__(self, a, rank, floor=1e-3, damp=1e-3):
        lam, u = np.linalg.eigh(a)
        lam, u = np.clip(lam[::-1][:rank], 0, None), u[:, ::-1][:, :rank]
        diag = np.maximum(np.diag(a) - (u * u) @ lam, floor)
        self.l = np.linalg.cholesky((u * lam) @ u.T + np.diag(diag + damp))

    def to_wire(self, g):
        return np.linalg.solve(self.l, g.T).T  # G L^-T

    def from_wire(self, h):
        return h @ self.l.T


class Chol(Source):
    """Cholesky root of A + damping * mean(diag A) I (dense)."""

    def __init__(self, a, damping):
        self.l = np.linalg.cholesky(a + damping * np.trace(a) / a.shape[0] * np.eye(len(a)))


class Sym(Source):
    """Symmetric root (A + damping * mean(diag A) I)^1/2 (dense, ZCA whitening)."""

    def __init__(self, a, damping):
        lam, u = np.linalg.eigh(a + damping * np.trace(a) / a.shape[0] * np.eye(len(a)))
        self.l = (u * np.sqrt(np.clip(lam, 0, None))) @ u.T


class OutputOnly:
    """The output-side factor alone: L_S^-1 G and back."""

    def __init__(self, s, rank, damping):
        self.left = Whitening(s, rank, damping)

    def to_wire(self, g):
        return np.ascontiguousarray(self.left.to_wire(g.T).T)

    def from_wire(self, h):
        return np.ascontiguousarray(self.left.from_wire(h.T).T)


def rel_err(q, quant, grads, t=None):
    ref = np.mean([g.astype(np.float64) for g in grads], axis=0)
    if t is None:
        got = q(quant, grads)
    else:
        got = t.from_wire(q(quant, [t.to_wire(g.astype(np.float64)) for g in grads]))
    return np.linalg.norm(got - ref) / np.linalg.norm(ref)


def sketched(a, k, seed=0):
    """The Nystrom approximation GIFT's ``sketch=k`` all-reduces (dense when d <= k + 1)."""
    if a.shape[0] <= k + 1:
        return a
    om = np.random.default_rng(seed).standard_normal((a.shape[0], k))
    return nystrom(a @ om, om, np.diag(a))


def schedule_moment(cap, step, layer, every=50, ema=0.5, tag="a"):
    """GIFT's state at ``step`` with the default schedule: EMA of collections every 50."""
    a = None
    for s in range(0, step + 1, every):
        m = cap[f"{tag}{s}:{layer}"]
        a = m if a is None else ema * a + (1 - ema) * m
    return a


def variants(cap, step, layer, grads, full_grid):
    """(name, transform) pairs for one step and layer."""
    a = cap[f"a{step}:{layer}"]
    d = a.shape[0]
    out = []
    for rank in ((16, 32, 64, d) if full_grid else (32, d)):
        for damp in ((1e-3, 0.01, 0.03, 0.1, 0.3, 1.0) if full_grid else (0.03, 0.1, 0.3)):
            out.append((f"ours r={'full' if rank == d else rank} d={damp}",
                        Whitening(a, rank, damp)))
    if full_grid:
        out += [("source r=32", Source(a, 32)), ("source r=full", Source(a, d))]
        out += [(f"chol d={damp}", Chol(a, damp)) for damp in (0.01, 0.1, 0.3)]
        out += [(f"sym d={damp}", Sym(a, damp)) for damp in (0.01, 0.1, 0.3)]
    for damp in (0.1, 0.3):
        for lag in (1, 10, 50):
            key = f"a{step - lag}:{layer}"
            if key in cap:
                out.append((f"lag {lag} r=32 d={damp}", Whitening(cap[key], 32, damp)))
        out.append((f"schedule r=32 d={damp}",
                    Whitening(schedule_moment(cap, step, layer), 32, damp)))
    s = cap[f"s{step}:{layer}"]
    for ds in (0.1, 0.3, 1.0):
        out.append((f"output-only d={ds}", OutputOnly(s, len(s), ds)))
        out.append((f"two-sided r=full d=0.3 dout={ds}", Kronecker(a, s, d, 0.3, ds)))
    for rank in (32, 64):
        out.append((f"two-sided r={rank} d=0.3 dout=1.0", Kronecker(a, s, rank, 0.3, 1.0)))
        out.append((f"two-sided sketch40 r={rank} d=0.3 dout=1.0",
                    Kronecker(sketched(a, 40), sketched(s, 40), rank, 0.3, 1.0)))
    for lag in (1, 10):
        if f"s{step - lag}:{layer}" in cap:
            out.append((f"two-sided lag {lag} r=full d=0.3 dout=1.0", Kronecker(
                cap[f"a{step - lag}:{layer}"], cap[f"s{step - lag}:{layer}"], d, 0.3, 1.0)))
    for ds in (0.3, 1.0):
        out.append((f"two-sided schedule r=32 d=0.3 dout={ds}",
                    Kronecker(schedule_moment(cap, step, layer), schedule_moment(
                        cap, step, layer, tag="s"), 32, 0.3, ds)))
    mean = np.mean([g.astype(np.float64) for g in grads], axis=0)
    for damp in (0.01, 0.1):
        out.append((f"oracle G^TG r=full d={damp}", Whitening(mean.T @ mean, d, damp)))
        for beta in (0.0, 0.9, 0.99):
            key = f"r{beta}_{step}:{layer}"
            if key in cap:
                out.append((f"grad b={beta} r=full d={damp}", Whitening(cap[key], d, damp)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--capture", default=os.path.join(ROOT, "build", "gift_study", "capture.npz"))
    ap.add_argument("--quantizers", default="fp8_e4m3:g128,fp8_e5m2:g1024,e5m2_tensor")
    ap.add_argument("--steps", default="0,49,50,150,199,299")
    ap.add_argument("--grid-steps", default="0,50,150,299",
                    help="steps with the full rank x damping grid (others: a few settings)")
    args = ap.parse_args(argv)
    cap = dict(np.load(args.capture))
    q = Quantizers()
    layers = sorted({k.split(":")[1] for k in cap if k.startswith("g0:")})
    grid_steps = {int(s) for s in args.grid_steps.split(",")}
    for step in (int(s) for s in args.steps.split(",")):
        rows = {}
        plain = {}
        for layer in layers:
            grads = [cap[f"g{step}:{layer}:{r}"] for r in range(P)]
            vs = variants(cap, step, layer, grads, step in grid_steps)
            for quant in args.quantizers.split(","):
                e0 = rel_err(q, quant, grads)
                plain.setdefault(quant, []).append(e0)
                for name, t in vs:
                    rows.setdefault(name, {}).setdefault(quant, []).append(
                        e0 / rel_err(q, quant, grads, t))
        print(f"\n## step {step}: gain = plain error / transformed error, median [min, max] "
              "over 8 layers")
        quants = args.quantizers.split(",")
        print("| variant | " + " | ".join(quants) + " |")
        print("|---|" + "---|" * len(quants))
        print("| plain error (median) | " + " | ".join(
            f"{np.median(plain[k]):.2e}" for k in quants) + " |")
        for name, per in rows.items():
            print(f"| {name} | " + " | ".join(
                f"{np.median(g):.2f}x [{min(g):.2f}, {max(g):.2f}]"
                for g in (per[k] for k in quants)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
