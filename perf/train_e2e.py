#!/usr/bin/env python3
"""End-to-end training over emulated nodes: the training step a user gets, not the collective.

    sudo .venv/bin/python perf/train_e2e.py [--nodes 4] [--ranks-per-node 1] \\
        [--rates 1,10,none] [--rows gloo,hint8,fp8,nvfp4,...] [--steps 40] [--out build/e2e]

Every node is a network namespace of perf/emulated_net.py (veth pairs into a bridge, tbf on
both ends of every veth); each runs ``torchrun --nnodes N --node_rank i`` with its ranks, so
the ranks of a node share a host and the nodes talk over the shaped links only
(GLOO_SOCKET_IFNAME and ccompress's TCP transport on the namespace's eth0). For each link rate
the rows run one after the other in the same network, exact gloo first, and each row reports:

- the median step time after ``--warmup`` steps (the slowest rank's, a barrier before each
  step) and its speedup over the gloo row of the same rate;
- ``comm``: the share of the step spent on communication, 1 - compute / step, where compute is
  the ``compute`` row's step: the same model and launch with DDP's ``no_sync`` (nothing sent);
  that is also the ideal step with communication fully hidden behind backward;
- bytes per step and node: what crossed the node's veth (both directions over 2, all traffic);
- the mean training loss of the last 10 steps against the gloo row's (same seed and data);
- whether the replicas are bit-identical at the end.

The model (``--model lm``) is examples/tinylm.py's byte-level GPT (``--d-model 256 --layers 9``:
7.2M parameters) trained from scratch on the repository's own text with AdamW, 2 sequences of
32 bytes per rank per step: a gradient-heavy step, as on a cluster whose compute is fast next
to its links. The emulation models that: link rate and queueing on every node's NIC. It does
not model a GPU's compute (the two cores run every rank's forward and backward, and the
codec), switch contention, or latency beyond the shaper's queue.

Rows (``--rows``, comma separated; ``--list-rows`` prints them): ``gloo`` (DDP, exact),
``compute`` (DDP with no_sync: no communication), the ccompress backend with a codec
(``hint8``, ``fp8``, ``nvfp4``, ...; error feedback on, ``CCOMPRESS_*`` set as a user would),
``hier-*`` (``CCOMPRESS_ALGO=hier``: needs ``--ranks-per-node`` > 1), ``fsdp-*`` (FSDP2 on
gloo or the backend), ``hook-*`` (DDP on gloo with ccompress's DDP comm hook), ``gift``
(the hook with GIFT) and ``tsr`` (TSR-Adam). Writes ``<out>/e2e.json``, ``<out>/e2e.md`` and
``<out>/e2e.png`` (step time against link rate). Needs root, iproute2 and the .venv of
scripts/setup.sh. Removes the namespaces and qdiscs it made, and only addresses those.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent

# name -> (mode, backend, environment, worker options)
_EF = {"CCOMPRESS_ERROR_FEEDBACK": "1"}
ROWS: Dict[str, tuple] = {
    "gloo": ("ddp", "gloo", {}, []),
    "compute": ("compute", "gloo", {}, []),
    "hint8": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "hint8", **_EF}, []),
    "fp8": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "fp8_e4m3:g128", **_EF}, []),
    "nvfp4": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "nvfp4:sr", **_EF}, []),
    "hnvfp4": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "hnvfp4:g16", **_EF}, []),
    "hint4": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "hint4:g16", **_EF}, []),
    "auto": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "auto", **_EF}, []),
    "none": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "none"}, []),
    "bf16": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "bf16"}, []),
    "hier-hint8": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "hint8", "CCOMPRESS_ALGO": "hier",
                                        **_EF}, []),
    "hier-fp8": ("ddp", "ccompress", {"CCOMPRESS_CODEC": "fp8_e4m3:g128",
                                      "CCOMPRESS_ALGO": "hier", **_EF}, []),
    "fsdp-gloo": ("fsdp", "gloo", {}, []),
    "fsdp-hint8": ("fsdp", "ccompress", {"CCOMPRESS_CODEC": "hint8", **_EF}, []),
    "fsdp-hint8-ag": ("fsdp", "ccompress", {"CCOMPRESS_CODEC": "hint8", **_EF,
                                            "CCOMPRESS_ALLGATHER_CODEC": "fp8_e4m3:g128"}, []),
    "hook-hint8": ("hook", "gloo", {}, ["--codec", "hint8"]),
    "gift": ("hook", "gloo", {}, ["--codec", "nvfp4:sr", "--gift", "32"]),
    "tsr": ("tsr", "gloo", {}, ["--tsr-rank", "32"]),
}
DEFAULT_ROWS = "gloo,compute,hint8,fp8,nvfp4,auto,fsdp-gloo,fsdp-hint8,hook-hint8"


# ------------------------------------------------------------------ the worker (one rank)
def worker(argv: List[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("ddp", "compute", "fsdp", "hook", "tsr"), required=True)
    ap.add_argument("--backend", choices=("gloo", "ccompress"), default="gloo")
    ap.add_argument("--codec", default="none")
    ap.add_argument("--gift", type=int, default=0)
    ap.add_argument("--tsr-rank", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seq", type=int, default=2, help="sequences per rank per step")
    ap.add_argument("--ctx", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=9)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)

    import hashlib

    import numpy as np
    import torch
    import torch.distributed as dist

    import ccompress.torch as cct

    sys.path.insert(0, str(ROOT / "examples"))
    import tinylm

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    side = dist.new_group(backend="gloo")  # barriers and results: never a measured group
    rank, size = dist.get_rank(), dist.get_world_size()
    text = corpus()
    split = int(len(text) * 0.9)
    train = text[:split]
    torch.manual_seed(args.seed)
    model = tinylm.build_model(torch, args.d_model, args.layers, args.heads, args.ctx)
    nparams = sum(p.numel() for p in model.parameters())
    hook = None
    if args.mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for blk in model.h:
            fully_shard(blk)
        net = fully_shard(model)
    elif args.mode == "tsr":
        net = model
    else:
        net = torch.nn.parallel.DistributedDataParallel(model)
        if args.mode == "hook":
            gift = cct.GIFT(model, rank=args.gift) if args.gift else None
            hook = cct.ddp_comm_hook(codec=args.codec, gift=gift, algo="two_shot")
            net.register_comm_hook(state=None, hook=hook)
    if args.mode == "tsr":  # over the world group's communicator; weight decay on matrices
        from ccompress.tsr import TSR

        tsr = TSR(rank=args.tsr_rank, refresh_every=25, codec="fp8_e4m3:g128",
                  error_feedback=True)
        opt = cct.TSRAdam(model.named_parameters(), None, tsr, lr=args.lr,
                          weight_decay={n: 0.1 if p.dim() == 2 else 0.0
                                        for n, p in model.named_parameters()})
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.1)
    pg = cct.compressed_group() if args.backend == "ccompress" else None
    rng = np.random.default_rng([args.seed, rank])

    def sent() -> int:
        if hook is not None:
            return hook.comm.bytes_sent
        if args.mode == "tsr":
            return opt.comm.bytes_sent
        return pg.bytes_sent if pg is not None else 0

    times, losses = [], []
    for step in range(args.steps):
        x, y = tinylm.batch(torch, train, rng, args.seq, args.ctx)
        dist.barrier(group=side)
        t0 = time.perf_counter()
        if args.mode == "compute":
            with net.no_sync():
                loss = net(x, y)
                loss.backward()
        else:
            loss = net(x, y)
            loss.backward()
        if args.mode == "tsr":
            opt.step()
        else:
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
        if step == args.warmup - 1:
            sent0 = sent()
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in net.parameters()]
    h = hashlib.sha256()
    for p in full:
        h.update(p.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    got: List[Any] = [None] * size
    dist.all_gather_object(got, (times, losses, h.hexdigest()), group=side)
    if rank == 0:
        steps = [max(t[i] for t, _, _ in got) for i in range(args.steps)][args.warmup:]
        loss = float(np.mean([np.mean(ls[-10:]) for _, ls, _ in got]))
        Path(args.json).write_text(json.dumps({
            "step_s": statistics.median(steps), "steps_s": steps, "loss": loss,
            "replicas_identical": len({d for _, _, d in got}) == 1, "parameters": nparams,
            "ccompress_bytes_per_step": (sent() - sent0) / (args.steps - args.warmup),
            "ranks": size,
            "codec": codec_of(pg, args)}))
    dist.destroy_process_group()


def codec_of(pg, args) -> str:
    """The codec of the row's gradient collective; for ``auto``, what it chose."""
    if pg is None:
        return args.codec
    kind = "reduce_scatter" if args.mode == "fsdp" else "all_reduce"
    codec = getattr(pg.options, kind)
    return f"auto: {pg._auto.get(kind, '?')}" if codec == "auto" else codec


def corpus():
    """The training text: the repository's own documentation and Python sources (shipped
    with it, so nothing is downloaded), as bytes."""
    import numpy as np

    files = sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("ccompress/**/*.py"),
                    *ROOT.glob("examples/*.py")])
    return np.frombuffer(b"\n".join(f.read_bytes() for f in files), dtype=np.uint8)


# ------------------------------------------------------------------ the driver
def run_row(net, name: str, args, rate: Optional[float], out: Path) -> Dict[str, Any]:
    mode, backend, env, extra = ROWS[name]
    k, n = args.ranks_per_node, args.nodes
    port = 29400 + int(time.time()) % 500
    result = out / f"{name}-{rate or 'none'}.json"
    result.unlink(missing_ok=True)
    before = net.counters()
    procs = []
    for i, ns in enumerate(net.ns):
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run",
               f"--nnodes={n}", f"--node_rank={i}", f"--nproc_per_node={k}",
               f"--master_addr={net.address(0)}", f"--master_port={port}",
               "--monitor-interval=1", str(Path(__file__).resolve()), "worker",
               "--mode", mode, "--backend", backend, "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--seed", str(args.seed), "--json", str(result),
               *extra]
        e = dict(os.environ, GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1", **env)
        for var in [v for v in e if v.startswith("CCOMPRESS_") and v not in env]:
            del e[var]  # only the row's own settings
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=args.row_timeout)[0] for p in procs]
    after = net.counters()
    if any(p.returncode for p in procs) or not result.exists():
        (out / f"{name}-{rate or 'none'}.log").write_text("\n".join(logs))
        raise RuntimeError(f"row {name} at {rate} Gbit/s failed: see "
                           f"{out}/{name}-{rate or 'none'}.log\n" + logs[0][-3000:])
    r = json.loads(result.read_text())
    wire = (after["tx"] - before["tx"] + after["rx"] - before["rx"]) / 2
    r.update(row=name, rate=rate, mode=mode, backend=backend, env=env,
             wire_bytes_per_step_node=wire / n / args.steps)
    return r


def table(rows: List[Dict[str, Any]]) -> List[str]:
    lines = ["| link | row | codec | step (ms) | vs gloo | comm | MB/step/node | loss | vs gloo "
             "| replicas identical |", "|---|---|---|---|---|---|---|---|---|---|"]
    compute = next((r["step_s"] for r in rows if r["row"] == "compute"), None)
    for rate in dict.fromkeys(r["rate"] for r in rows):
        at = [r for r in rows if r["rate"] == rate]
        base = next((r for r in at if r["row"] == ("gloo")), None)
        fbase = next((r for r in at if r["row"] == "fsdp-gloo"), base)
        for r in at:
            b = fbase if r["mode"] == "fsdp" else base
            speed = f"{b['step_s'] / r['step_s']:.2f}x" if b else "-"
            comm = f"{max(0.0, 1 - compute / r['step_s']):.0%}" if compute else "-"
            dl = f"{100 * (r['loss'] / b['loss'] - 1):+.2f}%" if b and r["row"] != "compute" else "-"
            lines.append(
                f"| {rate or 'unlimited'}{' Gbit/s' if rate else ''} | {r['row']} | "
                f"{r['codec']} | {1e3 * r['step_s']:.0f} | {speed} | {comm} | "
                f"{r['wire_bytes_per_step_node'] / 1e6:.1f} | {r['loss']:.4f} | {dl} | "
                f"{'-' if r['row'] == 'compute' else 'yes' if r['replicas_identical'] else 'NO'} |")
    return lines


def plot(rows: List[Dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [r for r in dict.fromkeys(x["rate"] for x in rows)]
    xs = {rate: (rate if rate else 100.0) for rate in rates}  # unlimited drawn at 100
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in dict.fromkeys(r["row"] for r in rows):
        pts = sorted((xs[r["rate"]], 1e3 * r["step_s"]) for r in rows if r["row"] == name)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xticks([xs[r] for r in rates], [f"{r:g}" if r else "unlimited" for r in rates])
    ax.set_xlabel("link rate per node (Gbit/s)")
    ax.set_ylabel("median step time (ms)")
    ax.set_title("DDP / FSDP2 training step over emulated nodes")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--rates", default="1,10,none",
                    help="link rates in Gbit/s, 'none' for unshaped links (1,10,none)")
    ap.add_argument("--rows", default=DEFAULT_ROWS, help=f"comma separated ({DEFAULT_ROWS})")
    ap.add_argument("--list-rows", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--row-timeout", type=float, default=900)
    ap.add_argument("--out", default=str(ROOT / "build" / "e2e"))
    args = ap.parse_args(argv)
    if args.list_rows:
        for name, (mode, backend, env, extra) in ROWS.items():
            print(f"{name:14s} {mode:8s} {backend:10s} {env} {' '.join(extra)}")
        return 0
    names = [n.strip() for n in args.rows.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        ap.error(f"unknown rows {unknown}; --list-rows lists them")
    if any(n.startswith("hier") for n in names) and args.ranks_per_node < 2:
        ap.error("hier rows need --ranks-per-node 2 or more (ranks of a node share a host)")
    rates = [None if r.strip() in ("none", "0") else float(r) for r in args.rates.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "perf"))
    from emulated_net import TBF, Network, tbf_setting

    net = Network(args.nodes)
    net.create()
    rows: List[Dict[str, Any]] = []
    try:
        for rate in rates:
            if rate:
                burst, latency_ms = tbf_setting(TBF, rate)
                net.limit(rate, burst, latency_ms)
            else:
                net.unlimit()
            for name in names:
                if name == "compute" and rate != rates[0]:
                    continue  # no communication: the same at every rate
                t0 = time.time()
                r = run_row(net, name, args, rate, out)
                rows.append(r)
                print(f"[e2e] {rate or 'unlimited'} Gbit/s {name}: {1e3 * r['step_s']:.0f} ms/step, "
                      f"loss {r['loss']:.4f}, {r['wire_bytes_per_step_node'] / 1e6:.1f} MB/step/node "
                      f"({time.time() - t0:.0f} s)", flush=True)
                (out / "e2e.json").write_text(json.dumps(
                    {"args": vars(args), "tbf": TBF, "rows": rows}, indent=1))
    finally:
        net.destroy()
    lines = table(rows)
    head = (f"# {args.nodes} nodes x {args.ranks_per_node} ranks, {args.steps} steps "
            f"({args.warmup} warm-up), seed {args.seed}, {rows[0]['parameters'] / 1e6:.2f}M "
            f"parameters, tbf {TBF}")
    (out / "e2e.md").write_text("\n".join([head, *lines]) + "\n")
    print("\n".join([head, *lines]))
    plot(rows, out / "e2e.png")
    print(f"[e2e] wrote {out}/e2e.json, e2e.md, e2e.png")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2:])
    else:
        sys.exit(main())
