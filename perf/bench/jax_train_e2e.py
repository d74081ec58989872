#!/usr/bin/env python3
"""JAX data-parallel training over emulated nodes: examples/jax_train.py's step with each way
of averaging the gradients, side by side with JAX's own cross-process psum.

    sudo .venv/bin/python -m perf.bench.jax_train_e2e [--nodes 4] [--rates 1,10,none] \\
        [--rows psum,hint8,fp8,nvfp4,hint4,mxfp4] [--steps 40] [--seeds 0,1,2]
    .venv/bin/python -m perf.bench.jax_train_e2e --loopback [--rows ...,mpi4jax]

With links (root): every rank is a network namespace of perf/bench/emulated_net.py, joined
by veth pairs rate-limited with tbf at each ``--rates`` value (Gbit/s; ``none``: the veths'
own speed), jax.distributed's coordinator at rank 0's address, and ccompress's TCP transport
and JAX's gloo collectives on each namespace's eth0 (the host name resolves to it there:
:func:`hosts_files`). ``--loopback`` runs every rank on this
host's loopback instead (no root; one rate, unlimited), where ``mpi4jax`` (its exact
``allreduce`` under mpiexec; ``pip install mpi4jax``) is a row too.

Rows: ``psum`` (exact: JAX's ``lax.pmean`` over a mesh of every process's CPU device, a
program of its own between the gradient and the update), ``exact`` (ccompress, codec none),
ccompress codecs (``hint8``, ``fp8`` = fp8_e4m3:g128, ``nvfp4``, ``hint4``, ``mxfp4``, or a
spec; two_shot with error feedback carried in the jitted step), ``mpi4jax``. Each row runs
once per seed; the table gives rank 0's median step time after the warm-up and its speedup
over psum at the same rate, the loss of the last 10 steps (mean over seeds) against psum's,
the held-out loss, and whether the replicas ended bit-identical.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ROWS = "psum,hint8,fp8,nvfp4,hint4,mxfp4"


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rates", default="1,10,none")
    p.add_argument("--rows", default=DEFAULT_ROWS)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seeds", default="0")
    p.add_argument("--loopback", action="store_true",
                   help="every rank on this host's loopback (no root, no link limit)")
    p.add_argument("--out", default="build/jax_e2e")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("train_args", nargs=argparse.REMAINDER,
                   help="after --: more examples/jax_train.py options (--d-model, ...)")
    return p.parse_args(argv)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_row(row: str, seed: int, args: argparse.Namespace, out: Path, net: Any = None,
            tag: str = "") -> Dict[str, Any]:
    """One training run of ``row``: every rank's process, rank 0's result."""
    result = out / f"{tag}-{row}-{seed}.json"
    result.unlink(missing_ok=True)
    extra = [a for a in args.train_args if a != "--"]
    train = ["-m", "examples.jax_train", "--reduce", row, "--steps", str(args.steps),
             "--warmup", str(args.warmup), "--seed", str(seed), "--json", str(result), *extra]
    env = dict(os.environ, JAX_PLATFORMS="cpu", CCOMPRESS_JAX_WORLD=str(args.nodes))
    if row == "mpi4jax":
        if net is not None:
            raise SystemExit("the mpi4jax row runs with --loopback only (mpiexec on this host)")
        cmds = [[str(Path(sys.executable).parent / "mpiexec"), "-n", str(args.nodes),
                 sys.executable, *train]]
    else:
        port = str(_port())
        coordinator = "127.0.0.1" if net is None else net.address(0)
        prefix = (lambda i: []) if net is None else \
            (lambda i: ["ip", "netns", "exec", net.ns[i]])
        if net is not None:
            env["GLOO_SOCKET_IFNAME"] = "eth0"
        cmds = [prefix(i) + [sys.executable, *train, "--rank", str(i), "--port", port,
                             "--coordinator", coordinator] for i in range(args.nodes)]
    procs = [subprocess.Popen(c, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for c in cmds]
    logs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    (out / f"{tag}-{row}-{seed}.log").write_text("\n".join(logs))
    if any(p.returncode for p in procs) or not result.exists():
        raise RuntimeError(f"row {row} (seed {seed}) failed: see {out}/{tag}-{row}-{seed}.log\n"
                           + logs[0][-3000:])
    return json.loads(result.read_text())


def hosts_files(net: Any) -> None:
    """/etc/netns/<ns>/hosts, which ``ip netns exec`` mounts over /etc/hosts: this host's
    name resolves to the namespace's own address there, so that JAX's gloo collectives
    (which listen on the address of the host name) use the shaped eth0, not loopback.
    Removed with the namespaces."""
    name = socket.gethostname()
    for i, ns in enumerate(net.ns):
        folder = Path("/etc/netns") / ns
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text(f"127.0.0.1 localhost\n{net.address(i)} {name}\n")
        net.created.append(["rm", "-rf", str(folder)])


def table(rows: List[Dict[str, Any]]) -> List[str]:
    """One line per (rate, row): step time, speedup and loss against psum at that rate."""
    lines = [f"{'rate':>9} {'row':>8} {'ms/step':>8} {'vs psum':>8} {'loss':>7} "
             f"{'vs psum':>8} {'val':>7} identical"]
    for rate in dict.fromkeys(r["rate"] for r in rows):
        at = [r for r in rows if r["rate"] == rate]
        base = next((r for r in at if r["row"] == "psum"), None)
        for r in at:
            speed = f"{base['step_s'] / r['step_s']:.2f}x" if base else "-"
            loss = f"{100 * (r['loss'] / base['loss'] - 1):+.2f}%" if base else "-"
            lines.append(f"{rate:>9} {r['row']:>8} {1e3 * r['step_s']:8.1f} {speed:>8} "
                         f"{r['loss']:7.4f} {loss:>8} {r['val']:7.4f} {r['identical']}")
    return lines


def main(argv=None) -> int:
    args = parse(argv)
    rows_wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    rates: List[Optional[float]] = [None] if args.loopback else \
        [None if r.strip() in ("none", "0") else float(r) for r in args.rates.split(",")]
    net = None
    if not args.loopback:
        from perf.bench.emulated_net import TBF, Network, tbf_setting

        net = Network(args.nodes)
        net.create()
        hosts_files(net)
    results: List[Dict[str, Any]] = []
    try:
        for rate in rates:
            label = "loopback" if net is None else f"{rate or 'none'}G"
            if net is not None:
                if rate:
                    net.limit(rate, *tbf_setting(TBF, rate))
                else:
                    net.unlimit()
            for row in rows_wanted:
                t0 = time.time()
                runs = [run_row(row, s, args, out, net, label) for s in seeds]
                r = {"rate": label, "row": row,
                     "step_s": sum(x["step_s"] for x in runs) / len(runs),
                     "loss": sum(x["train_loss_last10"] for x in runs) / len(runs),
                     "val": sum(x["val_loss"] for x in runs) / len(runs),
                     "identical": all(x["replicas_identical"] for x in runs), "runs": runs}
                results.append(r)
                print(f"[jax-e2e] {label} {row}: {1e3 * r['step_s']:.1f} ms/step, loss "
                      f"{r['loss']:.4f} ({time.time() - t0:.0f} s)", flush=True)
                (out / "jax_e2e.json").write_text(json.dumps(
                    {"args": vars(args), "rows": results}, indent=1))
    finally:
        if net is not None:
            net.destroy()
    print("\n".join(table(results)))
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
