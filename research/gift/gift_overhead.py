#!/usr/bin/env python3
"""Step-time and memory overhead of ccompress.torch.GIFT in the DDP hook, on the byte-level
GPT of examples/tinylm.py in one process (DDP over a 1-rank gloo group, so the hook runs
its codec and GIFT's transforms but sends nothing): two replicas, one with the plain
nvfp4 hook and one with the GIFT hook, stepped alternately (so a change of machine load
hits both alike); prints the median step time of each, their ratio on refresh and other
steps, and GIFT's host memory against the model's parameters.

    .venv/bin/python -m research.gift.gift_overhead --steps 100 --refresh 50
"""
from __future__ import annotations

import argparse
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples import tinylm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--refresh", type=int, default=50)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--sketch", type=int, default=32)
    ap.add_argument("--codec", default="nvfp4")
    ap.add_argument("--batch", type=int, default=4, help="sequences per step (one rank's)")
    ap.add_argument("--ctx", type=int, default=64)
    args = ap.parse_args()
    import socket

    import torch
    import torch.distributed as dist

    import ccompress.torch as cct

    torch.set_num_threads(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    train, _, _ = tinylm.load_text(*tinylm.find_corpus(""))
    nets, gift = [], None
    for with_gift in (False, True):
        torch.manual_seed(0)
        model = tinylm.build_model(torch, 128, 2, 4, args.ctx)
        net = torch.nn.parallel.DistributedDataParallel(model)
        if with_gift:
            gift = cct.GIFT(model, rank=args.rank, refresh_every=args.refresh,
                            sketch=args.sketch)
        net.register_comm_hook(None, cct.ddp_comm_hook(args.codec, gift=gift))
        nets.append((net, torch.optim.AdamW(net.parameters(), lr=1e-3)))
    rng = np.random.default_rng(0)
    times = [[], []]
    for step in range(args.steps):
        x, y = tinylm.batch(torch, train, rng, args.batch, args.ctx)
        for i, (net, opt) in enumerate(nets):
            t0 = time.perf_counter()
            loss = net(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            times[i].append(time.perf_counter() - t0)
    t = np.array(times)
    refresh = np.arange(args.steps) % args.refresh == 0
    params = sum(p.numel() for p in nets[0][0].parameters())
    med = [float(np.median(t[i][~refresh][1:])) for i in (0, 1)]
    ref = [float(np.median(t[i][refresh])) for i in (0, 1)]
    print(f"codec {args.codec}, GIFT rank {args.rank}, sketch {args.sketch}, refresh every "
          f"{args.refresh}; {args.steps} steps of {args.batch}x{args.ctx} tokens, one process")
    print(f"median step (other steps): plain hook {med[0] * 1e3:.1f} ms, GIFT hook "
          f"{med[1] * 1e3:.1f} ms, ratio {med[1] / med[0]:.2f}x")
    print(f"median refresh step: plain hook {ref[0] * 1e3:.1f} ms, GIFT hook "
          f"{ref[1] * 1e3:.1f} ms, ratio {ref[1] / ref[0]:.2f}x")
    mean = t.mean(axis=1)
    print(f"mean step over all steps: ratio {mean[1] / mean[0]:.2f}x")
    print(f"GIFT host memory: {gift.memory_bytes() / 2**20:.2f} MiB ({gift.memory_bytes()} B) "
          f"for {len(gift.layers)} layers, against {params * 4 / 2**20:.2f} MiB of float32 "
          f"parameters; whitened layers: {sum(gift.treated.values())}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
