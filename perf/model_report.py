"""Validates ccompress.perfmodel against emulated-network measurements, then projects to real
systems.

    .venv/bin/python perf/codec_throughput.py --json build/codec_cpu.json
    sudo .venv/bin/python perf/emulated_net.py --json build/emulated.json
    .venv/bin/python perf/model_report.py --emulated build/emulated.json \
        --throughput build/codec_cpu.json [--plots perf/plots]

The validation models the emulated network as it is: one link per rank at the tbf rate,
alpha 50 us, and the ranks sharing this machine's cores (each rank gets cores/ranks of a
core at the single-thread codec rates measured by codec_throughput.py). The projections use
GPU codec rates derived from the H100 datasheet (marked as assumptions) until a GPU table
is measured.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Dict, List

from ccompress import Codec, perfmodel as pm

EMULATED_ALPHA = 50e-6


def validate(emulated: str, rates: Dict[str, pm.CodecCost]) -> List[float]:
    runs = json.load(open(emulated))
    errors = []
    print("# model validation against perf/emulated_net.py "
          f"(alpha {EMULATED_ALPHA * 1e6:.0f} us, {os.cpu_count()} cores shared by the ranks)")
    print(f"{'Gbit/s':>6} {'size':>10} {'codec':>16} {'algo':>9} {'measured ms':>11} "
          f"{'model ms':>9} {'error':>7}")
    for run in runs:
        ranks = run["ranks"]
        for r in run["rows"]:
            system = pm.System("emulated", ranks, pm.Link(pm.gbit(run["rate_gbit"]), EMULATED_ALPHA),
                               cores_per_rank=(os.cpu_count() or 1) / ranks)
            n = r["count"]
            dbytes = r["size"] // max(n, 1)
            if r["codec"] == "MPI_Allreduce":
                model = pm.baseline_time(system, n, dbytes)
            elif Codec.parse(r["codec"]).name in rates:
                cost = rates[Codec.parse(r["codec"]).name]
                model = pm.collective_time(system, n, dbytes, cost, r["algo"])
            else:
                continue
            measured = r["time_us"] / 1e6
            err = (model - measured) / measured
            errors.append(abs(err))
            print(f"{run['rate_gbit']:6.2f} {r['size']:10d} {r['codec']:>16} {r['algo']:>9} "
                  f"{measured * 1e3:11.2f} {model * 1e3:9.2f} {100 * err:+6.1f}%")
    if errors:
        print(f"# median |error| {100 * statistics.median(errors):.1f}% over {len(errors)} rows")
    return errors


# Message sizes (elements) of the projections: tensor-parallel activations (sequence 4096,
# one micro-batch, bf16) and data-parallel gradient buckets.
WORKLOADS = {
    "TP act 7B (4096x4096)": 4096 * 4096,
    "TP act 70B (4096x8192)": 4096 * 8192,
    "DP bucket 25 MB": 25 * (1 << 20) // 2,
    "DP grads 7B / 64": 7_000_000_000 // 64,
}
GPU_CODECS = [("bf16", "none"), ("fp8_e4m3:g128", "fp8_e4m3:g128"), ("hint8", "hint8"),
              ("nvfp4", "nvfp4")]


def project(plots: str | None) -> None:
    codecs = []
    for label, spec in GPU_CODECS:
        try:
            c = Codec.parse(spec)
        except Exception:  # not registered in this build
            continue
        wire = c.wire_bytes(1 << 20, "bfloat16") / (1 << 20)
        codecs.append(pm.gpu_codec(label, wire))
    print("\n# projections (codec rates: " + codecs[0].source + "; links: vendor line rates)")
    print(f"{'system':>20} {'workload':>24} {'codec':>14} {'algo':>9} {'ms':>9} {'speedup':>8}")
    table = []
    for sname, system in pm.SYSTEMS.items():
        for wname, n in WORKLOADS.items():
            base = pm.baseline_time(system, n, 2)
            for c in codecs:
                t, _, algo = min((pm.collective_time(system, n, 2, c, a), c.name, a)
                                 for a in ("ring", "two_shot", "tree"))
                table.append((sname, wname, c.name, algo, t, base / t))
                print(f"{sname:>20} {wname:>24} {c.name:>14} {algo:>9} {t * 1e3:9.3f} "
                      f"{base / t:7.2f}x")
    if plots:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        os.makedirs(plots, exist_ok=True)
        for wname in WORKLOADS:
            fig, ax = plt.subplots(figsize=(7, 4))
            systems = list(pm.SYSTEMS)
            for i, c in enumerate(codecs):
                ys = [next(r[5] for r in table if r[0] == s and r[1] == wname and r[2] == c.name)
                      for s in systems]
                ax.bar([j + 0.2 * i for j in range(len(systems))], ys, width=0.2, label=c.name)
            ax.set_xticks([j + 0.3 for j in range(len(systems))], systems, fontsize=8)
            ax.axhline(1.0, color="k", lw=0.5)
            ax.set_ylabel("speedup over uncompressed bf16")
            ax.set_title(f"{wname}: modelled all-reduce speedup")
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = os.path.join(plots, wname.split(" (")[0].replace(" ", "_").replace("/", "") + ".png")
            fig.savefig(path, dpi=110)
            plt.close(fig)
            print(f"# wrote {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emulated", help="JSON from perf/emulated_net.py --json")
    ap.add_argument("--throughput", help="JSON from perf/codec_throughput.py --json")
    ap.add_argument("--plots", help="folder for projection plots (needs matplotlib)")
    args = ap.parse_args(argv)
    if args.emulated and args.throughput:
        validate(args.emulated, pm.load_codec_costs(args.throughput))
    project(args.plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
