#!/usr/bin/env python3
"""Where a TSR-Adam step's time goes, against AdamW, on the byte-level GPT of
examples/tinylm.py (d 128, 2 layers, context 64, 4 sequences: one rank's share of 16).

    .venv/bin/python -m research.tsr_step_cost.tsr_step_cost compute [--steps 60]
        one process (a 1-rank communicator: no transport): forward + backward, and the
        optimizer step of AdamW and of TSR-Adam (rank 96, fp8 cores, refresh every 25 with
        bf16 sketches, averaged bases), with the step's parts (core projection, refresh,
        Adam, expansion) from cProfile; the two optimizers alternate step by step, so load
        on a shared machine hits both alike.
    .venv/bin/python -m torch.distributed.run --standalone --nproc_per_node 4 \\
        research/tsr_step_cost/tsr_step_cost.py collectives
        one collective of each kind a TSR step makes (the fp8 cores; the exact whole tensors)
        through the world group's ccompress communicator, against gloo's own all-reduce of
        every parameter (what DDP runs), milliseconds per call on rank 0.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples import tinylm  # noqa: E402
from examples import train_common as tc  # noqa: E402
from perf.common.train_methods import make_tsr_adam  # noqa: E402

TSR_ARGS = dict(tsr_rank=96, tsr_every=25, tsr_ef=False, tsr_basis_ema=0.9,
                tsr_codec="fp8_e4m3:g128", tsr_sketch_codec="bf16", tsr_dense_codec="none",
                tsr_scale=9.333, lr=2e-3)
PARTS = {"core projection": ("tsr.py", "<listcomp>"), "refresh": ("tsr.py", "_refresh"),
         "running average": ("tsr.py", "_running_average"), "Adam": ("tsr_adam.py", "_adam"),
         "expansion": ("tsr.py", "expand"), "collectives": ("_flat.py", "allreduce_many")}


def compute(steps: int) -> None:
    import torch

    import ccompress as cc

    torch.set_num_threads(1)
    comm = cc.Communicator.inproc(1)[0]
    rng = np.random.default_rng(0)
    text = rng.integers(0, 256, 1 << 18).astype(np.uint8)
    runs = {}
    for name in ("AdamW", "TSR-Adam"):
        torch.manual_seed(0)
        model = tinylm.build_model(torch, 128, 2, 4, 64)
        if name == "AdamW":
            opt = tc.make_optimizer(torch, model, 2e-3)
        else:
            opt = make_tsr_adam(model, comm, argparse.Namespace(**TSR_ARGS), weight_decay={
                n: 0.1 if p.dim() == 2 else 0.0 for n, p in model.named_parameters()})
        runs[name] = {"model": model, "opt": opt, "fb": 0.0, "step": 0.0}
    prof = cProfile.Profile()
    for i in range(steps + 2):
        for name, r in runs.items():
            x, y = tinylm.batch(torch, text, rng, 4, 64)
            t0 = time.perf_counter()
            loss = r["model"](x, y)
            r["opt"].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(r["model"].parameters(), 1.0)
            t1 = time.perf_counter()
            if name == "TSR-Adam" and i >= 2:
                prof.enable()
            r["opt"].step()
            prof.disable()
            t2 = time.perf_counter()
            if i >= 2:  # the first two: warm-up (the first TSR step refreshes)
                r["fb"] += t1 - t0
                r["step"] += t2 - t1
    print("| optimizer | forward + backward (ms) | optimizer step (ms) | total (ms) |")
    print("|---|---|---|---|")
    for name, r in runs.items():
        fb, st = 1e3 * r["fb"] / steps, 1e3 * r["step"] / steps
        print(f"| {name} | {fb:.1f} | {st:.1f} | {fb + st:.1f} |")
    tot = {n: runs[n]["fb"] + runs[n]["step"] for n in runs}
    print(f"\nTSR-Adam / AdamW, whole step: {tot['TSR-Adam'] / tot['AdamW']:.2f}x\n")
    stats = pstats.Stats(prof).stats
    print("| part of the TSR-Adam step | ms per step |")
    print("|---|---|")
    for part, (fname, func) in PARTS.items():
        cum = sum(v[3] for (f, _, fn), v in stats.items() if f.endswith(fname) and fn == func)
        print(f"| {part} | {1e3 * cum / steps:.1f} |")


def collectives(calls: int) -> None:
    import torch
    import torch.distributed as dist

    from ccompress.torch._common import resolve

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    comm, rank = resolve(None), dist.get_rank()
    rng = np.random.default_rng(rank)
    cores = rng.standard_normal(9 * 96 * 96 + 64 * 64).astype(np.float32)  # the 10 matrices
    dense = rng.standard_normal(3584).astype(np.float32)  # biases and LayerNorms
    every = torch.from_numpy(rng.standard_normal(440_000).astype(np.float32))
    cases = {
        "ccompress, fp8 cores (87K values)":
            lambda: comm.allreduce(cores, codec="fp8_e4m3:g128", algo="two_shot", op="avg"),
        "ccompress, exact whole tensors (3.6K values)":
            lambda: comm.allreduce(dense, algo="two_shot", op="avg"),
        "ccompress, both in one fp8 collective":
            lambda: comm.allreduce(np.concatenate([cores, dense]), codec="fp8_e4m3:g128",
                                   algo="two_shot", op="avg"),
        "gloo all_reduce of every parameter (440K fp32, as DDP)": lambda: dist.all_reduce(every),
    }
    out = {}
    for _ in range(2):  # alternate the cases twice; report the second pass
        for k, f in cases.items():
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            out[k] = 1e3 * (time.perf_counter() - t0) / calls
    if rank == 0:
        print(f"| collective ({comm.size} ranks, {comm.transport}) | ms per call |")
        print("|---|---|")
        for k, v in out.items():
            print(f"| {k} | {v:.1f} |")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("compute", "collectives"))
    ap.add_argument("--steps", type=int, default=60, help="steps of each optimizer (compute)")
    ap.add_argument("--calls", type=int, default=30, help="calls per collective")
    args = ap.parse_args()
    compute(args.steps) if args.what == "compute" else collectives(args.calls)


if __name__ == "__main__":
    main()
