"""Validates ccompress.perfmodel against emulated-network measurements, then projects to real
systems.

    .venv/bin/python -m perf.bench.codec_throughput --json build/codec_cpu.json
    sudo .venv/bin/python -m perf.bench.emulated_net --json build/emulated.json
    .venv/bin/python -m perf.model.model_report --emulated build/emulated.json \
        --throughput build/codec_cpu.json [--emulated MORE.json ...] [--plots perf/plots]
    .venv/bin/python -m perf.model.model_report --throughput build/codec_cpu.json \
        --calibrate "MPI_Allreduce=246.5,fp8_e4m3:g128=185.7,..." --tcp-cpu build/tcp_cpu.json

The validation models every run as it was (perfmodel.emulated_system): the ranks in nodes of
the run's ``ranks_per_node``, each node's link at the tbf rate, alpha 50 us, shared memory at
--intra-gbs inside a node, the ranks sharing this machine's cores at the single-thread codec
rates of codec_throughput.py (several --throughput files: each rate's median over them;
``none``'s decode-accumulate is MPI's reduction), MPI's slice and the host transport
(perfmodel.EMULATED_HOST). It prints every row's error and the median and max |error|,
separately for the rows inside the tbf burst (``in_burst``: a rank moved under 10 bursts per
call, so part of its traffic passed at veth speed).

--calibrate fits the host transport's CPU per TCP byte, and MPI_Allreduce's CPU per byte of
its node-level reduce and broadcast where the rows include a two-level MPI_Allreduce, on
unlimited-link times: every row of the unlimited-link runs that ``emulated_net.py --overlap``
makes first (flat or on nodes; --calibrate repeatable, one fit over all files' rows), or
"codec=ms" times of 4 ranks on one level, 64 MiB float32, two_shot; least squares in
relative error. The CPU per message comes from perf/bench/tcp_cpu.py --mpi over TCP (--tcp-cpu), the CPU per byte through
shared memory from perf/bench/tcp_cpu.py --mpi inside one host (--shm-cpu), and the shaper's CPU
per TCP byte from
perf/bench/tcp_cpu.py --netns with and without --gbps (--shaper-cpu; only rate-limited links pay
it), or, with --fit-shaper, from the rate-limited rows of the --calibrate runs, together with
the share of the shorter of a call's wire and CPU times that hides behind the longer, for
ccompress's calls and for MPI_Allreduce's apart (then validate on other runs). No
validation row is used.

The projections use GPU codec rates derived from the H100 datasheet (marked as assumptions)
until a GPU table is measured.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
from dataclasses import replace
from typing import Dict, List, Optional

from ccompress import Codec
from ccompress import perfmodel as pm

UNLIMITED_GBIT = 1e6  # "unlimited" links: the veths run at CPU speed, which the model's CPU term is


def load_costs(paths: List[str]) -> Dict[str, pm.CodecCost]:
    """Codec costs from codec_throughput.py JSON files: per codec, the median of each rate
    over the files that have it (rounds of the same measurement)."""
    rounds: Dict[str, List[pm.CodecCost]] = {}
    for path in paths:
        for name, cost in pm.load_codec_costs(path).items():
            rounds.setdefault(name, []).append(cost)

    def median(costs: List[pm.CodecCost], field: str) -> Optional[float]:
        values = [getattr(c, field) for c in costs if getattr(c, field) is not None]
        return statistics.median(values) if values else None

    return {name: replace(c[0], encode=median(c, "encode"), decode=median(c, "decode"),
                          decode_out=median(c, "decode_out")) for name, c in rounds.items()}


def model_row(system: pm.System, codec: str, algo: str, n: int, dbytes: int,
              costs: Dict[str, pm.CodecCost]) -> Optional[float]:
    """The model's seconds for one measured row, None when a codec rate is missing."""
    if codec == "MPI_Allreduce":
        return pm.baseline_time(system, n, dbytes)
    cost = costs.get(Codec.parse(codec).name)
    if cost is None:
        return None
    if algo == "hier":
        return pm.hier_time(system, n, dbytes, cost, intra=costs.get("none"))
    return pm.collective_time(system, n, dbytes, cost, algo)


def base_system(costs: Dict[str, pm.CodecCost], ranks: int, gbit: float, g: int,
                intra_gbs: float, host: pm.HostTransport) -> pm.System:
    """The emulated system of a run (perfmodel.emulated_system) with ``host`` as its
    transport; at UNLIMITED_GBIT the links carry no shaper, so no shaper CPU either."""
    if gbit >= UNLIMITED_GBIT:
        host = replace(host, shaper_per_byte=0.0)
    none = costs.get("none")
    system = pm.emulated_system(ranks, gbit, os.cpu_count() or 1, g, intra_gbs,
                                none.decode if none else 2e9)
    return replace(system, host=host)


@functools.lru_cache(maxsize=None)
def load_runs(path: str) -> list:
    """The runs of ``emulated_net.py --json PATH`` (read once: fits predict many times)."""
    with open(path) as f:
        return json.load(f)


def predict(emulated: List[str], costs: Dict[str, pm.CodecCost], intra_gbs: float,
            host: pm.HostTransport) -> List[dict]:
    """One dict per rate-limited row of the runs that the model covers: file, rate, G,
    codec, algo, measured and model seconds, signed error, in_burst, the samples."""
    out = []
    for path in emulated:
        for run in load_runs(path):
            if run["rate_gbit"] is None:  # the unlimited links: calibration data only
                continue
            g = run.get("ranks_per_node", 1)
            system = base_system(costs, run["ranks"], run["rate_gbit"], g, intra_gbs, host)
            burst = run.get("burst_bytes", 0)
            for r in run["rows"]:
                n, dbytes = r["count"], r["size"] // max(r["count"], 1)
                model = model_row(system, r["codec"], r["algo"], n, dbytes, costs)
                if model is None:
                    continue
                measured = r["time_us"] / 1e6
                flag = r.get("in_burst")
                if flag is None:  # the baseline's own row: the same rule on its own bytes
                    flag = r["wire_bytes"] < 10 * burst
                out.append({"file": os.path.basename(path), "gbit": run["rate_gbit"], "g": g,
                            "codec": r["codec"], "algo": r["algo"], "measured_s": measured,
                            "model_s": model, "error": (model - measured) / measured,
                            "in_burst": bool(flag), "times_us": r.get("times_us") or [r["time_us"]]})
    return out


def validate(emulated: List[str], costs: Dict[str, pm.CodecCost], intra_gbs: float = 4.0,
             host: pm.HostTransport = pm.EMULATED_HOST) -> List[dict]:
    """predict's rows, printed as a table with the median and max |error| of the rows
    outside and inside the tbf burst."""
    print(f"# model validation against perf/bench/emulated_net.py (alpha {pm.EMULATED_ALPHA * 1e6:.0f} "
          f"us, shared memory {intra_gbs:g} GB/s, {os.cpu_count()} cores shared by the ranks, "
          f"host transport: {host.tcp_per_byte * 1e9:.3f} ns/TCP byte, "
          f"{host.per_message * 1e6:.1f} us/message, {host.shm_per_byte * 1e9:.3f} ns/shm byte, "
          f"{host.node_per_byte * 1e9:.3f} ns/byte of MPI's node phases, "
          f"{host.shaper_per_byte * 1e9:.3f} "
          f"ns/shaped TCP byte, {100 * host.overlap:.0f}% overlap, "
          f"{100 * host.baseline_overlap:.0f}% for MPI_Allreduce)")
    print(f"{'file':>18} {'Gbit/s':>6} {'G':>2} {'codec':>14} {'algo':>9} {'measured ms':>11} "
          f"{'model ms':>9} {'error':>7} {'samples ms':>13}")
    out = predict(emulated, costs, intra_gbs, host)
    speedup_errors(out)
    for row in out:
        times = row["times_us"]
        vs = row.get("speedup_error")
        print(f"{row['file']:>18} {row['gbit']:6.2f} {row['g']:2d} {row['codec']:>14} "
              f"{row['algo']:>9} {row['measured_s'] * 1e3:11.1f} {row['model_s'] * 1e3:9.1f} "
              f"{100 * row['error']:+6.1f}%{'*' if row['in_burst'] else ' '} "
              f"{min(times) / 1e3:6.1f}-{max(times) / 1e3:6.1f}"
              f"{'' if vs is None else f'  speedup {100 * vs:+6.1f}%'}")
    summarize(out)
    summarize([dict(r, error=r["speedup_error"]) for r in out if "speedup_error" in r],
              "speedups over MPI_Allreduce, ")
    return out


def speedup_errors(rows: List[dict]) -> None:
    """Sets ``speedup_error`` on every row but MPI_Allreduce's: the model's speedup over the
    MPI_Allreduce row of the same file and rate against the measured one, (model - measured)
    / measured. A ratio within one run: a host that runs faster or slower in one run than in
    another moves both times, so this checks how the model weighs the wire, the codecs and the
    transport's CPU against each other, apart from the host's speed of the day."""
    base = {(r["file"], r["gbit"]): r for r in rows if r["codec"] == "MPI_Allreduce"}
    for r in rows:
        b = base.get((r["file"], r["gbit"]))
        if b is None or r is b:
            continue
        measured = b["measured_s"] / r["measured_s"]
        r["speedup_error"] = (b["model_s"] / r["model_s"] - measured) / measured


def summarize(rows: List[dict], what: str = "") -> None:
    """Median and max |error| of the rows outside and inside the tbf burst, then per rate of
    those outside it and of all (``what``: a prefix naming the error, when not the time's)."""
    def line(label: str, part: List[dict]) -> None:
        if part:
            errs = [abs(r["error"]) for r in part]
            print(f"# {what}{label}: median |error| {100 * statistics.median(errs):.1f}%, max "
                  f"{100 * max(errs):.1f}% over {len(errs)} rows, "
                  f"{sum(e <= 0.2 for e in errs)} within 20%")

    outside = [r for r in rows if not r["in_burst"]]
    line("outside the burst", outside)
    line("inside the burst (*)", [r for r in rows if r["in_burst"]])
    for rate in sorted({r["gbit"] for r in rows}):
        line(f"{rate:g} Gbit/s, outside the burst", [r for r in outside if r["gbit"] == rate])
        line(f"{rate:g} Gbit/s, all rows", [r for r in rows if r["gbit"] == rate])
    if any(r["g"] > 1 for r in rows):
        line("rows on nodes, outside the burst", [r for r in outside if r["g"] > 1])


def unlimited_rows(path: str) -> List[dict]:
    """The calibration rows of ``emulated_net.py --overlap --json PATH``: every row of its
    unlimited-link runs (rate_gbit None), flat or on nodes, with the run's ranks and
    ranks_per_node, each row's median time."""
    rows = [dict(r, ranks=run["ranks"], ranks_per_node=run.get("ranks_per_node", 1))
            for run in json.load(open(path)) if run["rate_gbit"] is None for r in run["rows"]]
    if not rows:
        raise SystemExit(f"{path} has no unlimited-link rows (emulated_net.py --overlap)")
    return rows


def spec_rows(spec: str, ranks: int = 4, n: int = 16 << 20) -> List[dict]:
    """Calibration rows from "codec=ms,...": unlimited-link times of ``ranks`` ranks on one
    level, ``n`` float32, two_shot (MPI_Allreduce for the baseline)."""
    rows = []
    for item in spec.split(","):
        codec, ms = item.split("=")
        rows.append({"codec": codec.strip(), "algo": "-" if codec.strip() == "MPI_Allreduce"
                     else "two_shot", "count": n, "size": 4 * n, "time_us": float(ms) * 1e3,
                     "ranks": ranks, "ranks_per_node": 1})
    return rows


def shaper_cpu(shaped: str, unshaped: str, message: int = 1 << 18) -> float:
    """CPU seconds per byte the shaper adds: perf/bench/tcp_cpu.py --netns --gbps RATE (``shaped``)
    minus perf/bench/tcp_cpu.py --netns (``unshaped``), sender + receiver, medians at ``message``
    bytes (default 256 KiB, about one slice's message)."""
    def per_byte(path: str) -> float:
        d = json.load(open(path))
        return statistics.median(s + r for s, r in d["raw_cpu_s"][str(message)]) / d["bytes"]

    return per_byte(shaped) - per_byte(unshaped)


def calibrate(rows: List[dict], costs: Dict[str, pm.CodecCost], shm: float, per_message: float,
              node: float, shaper: float = 0.0, intra_gbs: float = 4.0) -> pm.HostTransport:
    """The CPU per TCP byte, and MPI_Allreduce's CPU per byte of its node-level phases
    (``node_per_byte``), that best explain the unlimited-link ``rows`` (unlimited_rows,
    spec_rows): least squares in relative error, closed-form, since the model is linear in
    both there where the CPU bounds (t = a + c1 b1 + c2 b2 per row). Only a two-level
    MPI_Allreduce row depends on the second; without one it stays ``node``. Prints each
    row's residual, from the model at the fitted values."""
    base = pm.HostTransport(0.0, per_message, shm, node_per_byte=1e-9, shaper_per_byte=shaper)

    def at(r: dict, host: pm.HostTransport) -> Optional[float]:
        n, dbytes, g = r["count"], r["size"] // max(r["count"], 1), r["ranks_per_node"]
        return model_row(base_system(costs, r["ranks"], UNLIMITED_GBIT, g, intra_gbs, host),
                         r["codec"], r["algo"], n, dbytes, costs)

    fit = []  # (row, measured t, a, b1, b2): model seconds = a + c1 b1 + c2 b2, c1 c2 in ns
    for r in rows:
        f0 = at(r, base)
        if f0 is None:
            raise SystemExit(f"no codec rate for {r['codec']}: add a --throughput file that has it")
        # the model is linear in both above node_per_byte's crossover: the slopes per ns,
        # and a the model's time at 0 and 0
        b1 = at(r, replace(base, tcp_per_byte=1e-9)) - f0
        b2 = at(r, replace(base, node_per_byte=2e-9)) - f0
        fit.append((r, r["time_us"] / 1e6, f0 - b2, b1, b2))
    # normal equations of the relative residuals (a + c1 b1 + c2 b2 - t) / t
    s11 = sum((b1 / t) ** 2 for _, t, _, b1, _ in fit)
    s22 = sum((b2 / t) ** 2 for _, t, _, _, b2 in fit)
    s12 = sum(b1 * b2 / t ** 2 for _, t, _, b1, b2 in fit)
    y1 = sum(b1 * (t - a) / t ** 2 for _, t, a, b1, _ in fit)
    y2 = sum(b2 * (t - a) / t ** 2 for _, t, a, _, b2 in fit)
    if s22 > 0:
        det = s11 * s22 - s12 ** 2
        c1, c2 = (y1 * s22 - y2 * s12) / det, (s11 * y2 - s12 * y1) / det
    else:  # every b2 is 0, so s12 is too: the one-parameter fit
        c1, c2 = y1 / s11, node * 1e9
    host = replace(base, tcp_per_byte=c1 * 1e-9, node_per_byte=c2 * 1e-9,
                   source="calibrated on unlimited links")
    node_how = "fitted" if s22 > 0 else "given: no two-level MPI_Allreduce row to fit it on"
    print(f"# calibration on {len(fit)} unlimited-link rows: {c1:.3f} ns of CPU per TCP "
          f"byte, {c2:.3f} ns per byte of MPI_Allreduce's node-level reduce and broadcast "
          f"({node_how}); {per_message * 1e6:.1f} us per message and {shm * 1e9:.3f} ns per "
          f"shared-memory byte (perf/bench/tcp_cpu.py --mpi), {shaper * 1e9:.3f} ns per TCP byte "
          "through a shaper (perf/bench/tcp_cpu.py --netns --gbps)")
    for r, t, *_ in fit:
        m = at(r, host)
        print(f"#   {r['ranks']} ranks, G {r['ranks_per_node']}, {r['codec']:>14} "
              f"{r['algo']:>9}: measured {t * 1e3:7.1f} ms, model {m * 1e3:7.1f} ms "
              f"({100 * (m - t) / t:+5.1f}%)")
    return host


def fit_shaper(runs: List[str], costs: Dict[str, pm.CodecCost], host: pm.HostTransport,
               intra_gbs: float, top: float = 2e-9, step: float = 0.01e-9,
               overlap_step: float = 0.02) -> pm.HostTransport:
    """``host`` with the shaper's CPU per TCP byte, the executor's overlap (the share of the
    shorter of wire and CPU time hidden behind the longer) and MPI_Allreduce's own share
    (``baseline_overlap``) that best explain the rate-limited rows of ``runs`` outside the
    tbf burst: least squares in relative error over a grid, shaper 0 to ``top``, the shares
    0 to 1 (the model is not linear in any of them there). The codecs' rows depend on the
    overlap only and MPI_Allreduce's on its own share only, so at each shaper value each
    share is the best for its rows. Prints the fit."""
    def sse(rows: List[dict], mpi: bool) -> float:
        """Squared relative errors of MPI_Allreduce's rows (``mpi``) or of the codecs'."""
        return sum(r["error"] ** 2 for r in rows if (r["codec"] == "MPI_Allreduce") == mpi)

    best = None
    shares = [j * overlap_step for j in range(int(round(1 / overlap_step)) + 1)]
    for k in range(int(round(top / step)) + 1):
        rows = {share: [r for r in predict(runs, costs, intra_gbs,
                                           replace(host, shaper_per_byte=k * step,
                                                   overlap=share, baseline_overlap=share))
                        if not r["in_burst"]] for share in shares}
        codec_share = min(shares, key=lambda v: sse(rows[v], False))
        mpi_share = min(shares, key=lambda v: sse(rows[v], True))
        total = sse(rows[codec_share], False) + sse(rows[mpi_share], True)
        if best is None or total < best[0]:
            best = (total, replace(host, shaper_per_byte=k * step, overlap=codec_share,
                                   baseline_overlap=mpi_share), len(rows[codec_share]))
    _, h, count = best
    print(f"# shaper and overlap fitted on {count} rate-limited rows of "
          f"{', '.join(map(os.path.basename, runs))}: {h.shaper_per_byte * 1e9:.3f} ns of CPU "
          f"per TCP byte, {100 * h.overlap:.0f}% of the shorter of wire and CPU time hidden "
          f"({100 * h.baseline_overlap:.0f}% for MPI_Allreduce)")
    return h


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
    ap.add_argument("--emulated", action="append", default=[],
                    help="JSON from perf/bench/emulated_net.py --json (repeatable)")
    ap.add_argument("--throughput", action="append", default=[],
                    help="JSON from perf/bench/codec_throughput.py --json (repeatable: rounds of "
                         "it give each rate's median)")
    ap.add_argument("--intra-gbs", type=float, default=4.0,
                    help="GB/s between the ranks of an emulated node (shared memory)")
    ap.add_argument("--calibrate", metavar="CODEC=MS,...|RUN.json", action="append",
                    help="fit the CPU per TCP byte on these unlimited-link times (4 ranks, "
                         "16M float32, two_shot) or on every unlimited row of an "
                         "emulated_net.py --overlap json, flat or on nodes (repeatable: one "
                         "fit over all), then validate with it (default: "
                         "perfmodel.EMULATED_HOST)")
    ap.add_argument("--tcp-cpu", help="JSON from perf/bench/tcp_cpu.py --mpi --json over TCP: its "
                                      "CPU per message")
    ap.add_argument("--shm-cpu", help="JSON from perf/bench/tcp_cpu.py --mpi --json in one host: its "
                                      "CPU per byte through shared memory")
    ap.add_argument("--shaper-cpu", nargs=2, metavar=("SHAPED", "UNSHAPED"),
                    help="JSONs of perf/bench/tcp_cpu.py --netns --gbps RATE --json and perf/bench/tcp_cpu.py "
                         "--netns --json: the shaper's CPU per byte (default: EMULATED_HOST's)")
    ap.add_argument("--fit-shaper", action="store_true",
                    help="fit the shaper's CPU per TCP byte (instead of --shaper-cpu's "
                         "measurement) and the shares of CPU time hidden behind the wire "
                         "(ccompress's, MPI_Allreduce's) on the rate-limited rows of the "
                         "--calibrate RUN.json files; validate on other runs")
    ap.add_argument("--no-projection", action="store_true", help="validation only")
    ap.add_argument("--plots", help="folder for projection plots (needs matplotlib)")
    args = ap.parse_args(argv)
    costs = load_costs(args.throughput)
    host = pm.EMULATED_HOST
    if args.calibrate:
        per_message = json.load(open(args.tcp_cpu))["per_message_s"] if args.tcp_cpu \
            else host.per_message
        shm = json.load(open(args.shm_cpu))["per_byte_s"] if args.shm_cpu else host.shm_per_byte
        rows = [r for c in args.calibrate
                for r in (unlimited_rows(c) if c.endswith(".json") else spec_rows(c))]
        shaper = shaper_cpu(*args.shaper_cpu) if args.shaper_cpu else host.shaper_per_byte
        host = calibrate(rows, costs, shm, per_message, host.node_per_byte, shaper,
                         args.intra_gbs)
        if args.fit_shaper:
            runs = [c for c in args.calibrate if c.endswith(".json")]
            if not runs:
                raise SystemExit("--fit-shaper fits on the rate-limited rows of --calibrate "
                                 "RUN.json files: give at least one")
            host = fit_shaper(runs, costs, host, args.intra_gbs)
            reused = [e for e in args.emulated if e in runs]
            if reused:
                print(f"# note: {', '.join(reused)} also fitted the shaper: their rows below "
                      "are not held out")
    if args.emulated and costs:
        validate(args.emulated, costs, args.intra_gbs, host)
    if not args.no_projection:
        project(args.plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
