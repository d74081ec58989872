#!/usr/bin/env python3
"""JAX data-parallel training over emulated nodes: examples/jax_train.py's step with each way
of averaging the gradients, side by side with JAX's own cross-process psum.

    sudo .venv/bin/python -m perf.bench.jax_train_e2e [--nodes 4] [--rates 1,10,none] \\
        [--rows psum,hint8,fp8,nvfp4,hint4,mxfp4] [--steps 40] [--seeds 0,1,2] [--repeat 2]
    .venv/bin/python -m perf.bench.jax_train_e2e --loopback [--rows ...,mpi4jax] \\
        [--lrs 1e-3,3e-3,1e-2] [-- --d-model 64 --layers 2 ...]

With links (root): every rank is a network namespace of perf/bench/emulated_net.py, joined
by veth pairs rate-limited with tbf at each ``--rates`` value (Gbit/s; ``none``: the veths'
own speed), jax.distributed's coordinator at rank 0's address, and ccompress's TCP transport
and JAX's gloo collectives on each namespace's eth0 (the host name resolves to it there:
:func:`hosts_files`). ``--loopback`` runs every rank on this
host's loopback instead (no root; one rate, unlimited). ``mpi4jax`` (its exact ``allreduce``
under mpiexec; ``pip install mpi4jax``) is a row in both: with links, hydra starts a rank in
each namespace and MPICH talks TCP over its eth0.

The model (:data:`BENCH_MODEL`, options after ``--`` override it) is the byte-level GPT of
the torch rows (perf/bench/train_e2e.py's lm: 7.2M parameters, 2 sequences of 32 bytes per
rank per step): a gradient-heavy step, whose exact all-reduce (43 MB a rank sends per step)
takes about 345 ms at 1 Gbit/s against about 180 ms of compute on two cores, so that the
link, not the cores, dominates psum's step there.

``--lrs`` tunes the exact row: ``psum`` runs at each peak rate (every seed), the rate with
the best mean held-out loss is kept, and every other row runs at that rate (the loss study
of perf/results/jax.md).

Rows: ``psum`` (exact: JAX's ``lax.pmean`` over a mesh of every process's CPU device, a
program of its own between the gradient and the update), ``exact`` (ccompress, codec none),
ccompress codecs (``hint8``, ``fp8`` = fp8_e4m3:g128, ``nvfp4``, ``hint4``, ``mxfp4``, or a
spec; two_shot with error feedback carried in the jitted step), ``mpi4jax``. Each row runs
once per seed and round (``--repeat``: the rounds interleave the rows, so that a drift of the
machine reaches every row alike); the table gives the median over a row's runs of rank 0's
median step time after the warm-up, each run's, its speedup over psum at the same rate, the
loss of the last 10 steps and the held-out loss (means over seeds, with their standard
errors), each against psum's, and whether the replicas ended bit-identical.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ROWS = "psum,hint8,fp8,nvfp4,hint4,mxfp4"
# examples/jax_train.py's options for the step-time rows (the module docstring says why).
BENCH_MODEL = ["--d-model", "256", "--layers", "9", "--heads", "4", "--ctx", "32",
               "--batch", "2"]


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rates", default="1,10,none")
    p.add_argument("--rows", default=DEFAULT_ROWS)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seeds", default="0")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of every row at each rate, interleaved (psum, hint8, ..., "
                        "psum, hint8, ...); a row's step time is the median over its runs")
    p.add_argument("--lrs", default="",
                   help="peak learning rates to tune psum over (comma separated); every "
                        "other row runs at the best one (default: the example's)")
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
            tag: str = "", lr: Optional[float] = None) -> Dict[str, Any]:
    """One training run of ``row`` (at peak rate ``lr``, else the example's): every rank's
    process, rank 0's result."""
    name = f"{tag}-{row}-{seed}" + ("" if lr is None else f"-lr{lr:g}")
    result = out / f"{name}.json"
    result.unlink(missing_ok=True)
    extra = BENCH_MODEL + [a for a in args.train_args if a != "--"]
    if lr is not None:
        extra += ["--lr", repr(lr)]
    train = ["-m", "examples.jax_train", "--reduce", row, "--steps", str(args.steps),
             "--warmup", str(args.warmup), "--seed", str(seed), "--json", str(result), *extra]
    env = dict(os.environ, JAX_PLATFORMS="cpu", CCOMPRESS_JAX_WORLD=str(args.nodes))
    if row == "mpi4jax" and net is None:
        cmds = [[str(Path(sys.executable).parent / "mpiexec"), "-n", str(args.nodes),
                 sys.executable, *train]]
    elif row == "mpi4jax":  # hydra starts a rank in each namespace, MPICH over its eth0
        from perf.bench.emulated_net import mpiexec_in

        mpiexec, mpi_env = mpiexec_in(net)
        env.update(mpi_env)
        cmds = [mpiexec + [sys.executable, *train]]
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
    (out / f"{name}.log").write_text("\n".join(logs))
    if any(p.returncode for p in procs) or not result.exists():
        raise RuntimeError(f"row {row} (seed {seed}) failed: see {out}/{name}.log\n"
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


def sem(values: List[float]) -> float:
    """The standard error of the mean of ``values`` (0 for one value)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5


def summary(label: str, row: str, runs: List[Dict[str, Any]], lr: Optional[float],
            seeds: int) -> Dict:
    """One row's figures over its runs: the median step time over every run; the losses over
    the first ``seeds`` runs (the first round: later rounds repeat the same seeds)."""
    train = [x["train_loss_last10"] for x in runs[:seeds]]
    val = [x["val_loss"] for x in runs[:seeds]]
    return {"rate": label, "row": row, "lr": lr,
            "step_s": statistics.median(x["step_s"] for x in runs),
            "step_s_runs": [x["step_s"] for x in runs],
            "loss": sum(train) / len(train), "loss_sem": sem(train),
            "val": sum(val) / len(val), "val_sem": sem(val),
            "identical": all(x["replicas_identical"] for x in runs), "runs": runs}


def table(rows: List[Dict[str, Any]]) -> List[str]:
    """One line per (rate, row): step time and speedup against psum at that rate; the loss
    of the last 10 steps and the held-out loss (mean +- standard error over seeds), each
    against psum's (the tuned one where --lrs tuned it)."""
    lines = [f"{'rate':>9} {'row':>8} {'lr':>7} {'ms/step':>8} {'vs psum':>8} "
             f"{'runs (ms)':>20} {'loss':>16} {'vs psum':>8} {'held-out':>16} {'vs psum':>8} "
             "identical"]
    for rate in dict.fromkeys(r["rate"] for r in rows):
        at = [r for r in rows if r["rate"] == rate]
        base = next((r for r in at if r["row"] == "psum" and r.get("tuned", True)), None)
        for r in at:
            speed = f"{base['step_s'] / r['step_s']:.2f}x" if base else "-"
            loss = f"{100 * (r['loss'] / base['loss'] - 1):+.3f}%" if base else "-"
            val = f"{100 * (r['val'] / base['val'] - 1):+.3f}%" if base else "-"
            lr = "-" if r.get("lr") is None else f"{r['lr']:g}"
            each = "/".join(f"{1e3 * x:.0f}" for x in r.get("step_s_runs", [r["step_s"]]))
            lines.append(f"{rate:>9} {r['row']:>8} {lr:>7} {1e3 * r['step_s']:8.1f} {speed:>8} "
                         f"{each:>20} "
                         f"{r['loss']:8.5f}+-{r['loss_sem']:.5f} {loss:>8} "
                         f"{r['val']:8.5f}+-{r['val_sem']:.5f} {val:>8} {r['identical']}")
    return lines


def main(argv=None) -> int:
    args = parse(argv)
    for name in ("jax", "optax"):  # what every rank's examples/jax_train.py imports
        if importlib.util.find_spec(name) is None:
            raise SystemExit(f"perf/bench/jax_train_e2e.py trains examples/jax_train.py, which "
                             f"needs {name}: pip install -e '.[jax]' (jax and optax), or bash "
                             "scripts/setup.sh")
    rows_wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    lrs = [float(x) for x in args.lrs.split(",") if x.strip()]
    if lrs and "psum" not in rows_wanted:
        raise SystemExit("--lrs tunes the psum row: name it in --rows")
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

    def record(r: Dict[str, Any], t0: float) -> None:
        results.append(r)
        lr = "" if r["lr"] is None else f" lr {r['lr']:g}"
        print(f"[jax-e2e] {r['rate']} {r['row']}{lr}: {1e3 * r['step_s']:.1f} ms/step, loss "
              f"{r['loss']:.5f}, held-out {r['val']:.5f} ({time.time() - t0:.0f} s)", flush=True)
        (out / "jax_e2e.json").write_text(json.dumps({"args": vars(args), "rows": results},
                                                     indent=1))

    try:
        for rate in rates:
            label = "loopback" if net is None else f"{rate or 'none'}G"
            if net is not None:
                if rate:
                    net.limit(rate, *tbf_setting(TBF, rate))
                else:
                    net.unlimit()
            lr: Optional[float] = None
            if lrs:  # tune psum: the best mean held-out loss over the seeds
                tried = []
                for x in lrs:
                    t0 = time.time()
                    r = summary(label, "psum", [run_row("psum", s, args, out, net, label, x)
                                                for s in seeds], x, len(seeds))
                    r["tuned"] = False
                    record(r, t0)
                    tried.append(r)
                best = min(tried, key=lambda r: r["val"])
                best["tuned"] = True
                lr = best["lr"]
            runs: Dict[str, List[Dict[str, Any]]] = {}
            t0 = time.time()
            for k in range(args.repeat):  # rounds, interleaved: each row beside the others
                tag = label if k == 0 else f"{label}-round{k}"
                for row in rows_wanted:
                    if lrs and row == "psum":
                        continue
                    runs.setdefault(row, []).extend(run_row(row, s, args, out, net, tag, lr)
                                                    for s in seeds)
                    if args.repeat > 1:
                        print(f"[jax-e2e] {label} {row} round {k + 1}/{args.repeat}: "
                              f"{1e3 * runs[row][-1]['step_s']:.1f} ms/step "
                              f"({time.time() - t0:.0f} s)", flush=True)
            for row, row_runs in runs.items():
                record(summary(label, row, row_runs, lr, len(seeds)), t0)
    finally:
        if net is not None:
            net.destroy()
    print("\n".join(table(results)))
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
