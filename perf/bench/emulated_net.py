"""Emulated bandwidth-limited networks: one MPI rank per network namespace.

    sudo .venv/bin/python -m perf.bench.emulated_net [--ranks 4] [--ranks-per-node 1] \
        [--rates 0.5,1,2.5] [--overlap] [--tbf 128k/5] [-- ccompress-perf options]

Creates N namespaces joined by veth pairs into a bridge, each veth rate-limited with `tbf` on
both ends (a full-duplex NIC per node), runs `ccompress-perf allreduce` under MPICH's hydra
with one rank per namespace over TCP, reads the veth byte counters to prove the traffic
crossed the links, counts the packets the shapers dropped (TCP backs off after each), and
prints the speedup of every codec over `MPI_Allreduce` measured in the
same run; with --overlap, also how much of the CPU time (measured on unlimited links first)
the executor hides behind the transfers at each rate. Always removes what it created, and
only ever addresses its own namespaces.
Needs root, iproute2 (ip, tc) and the .venv from scripts/setup.sh.

The shaper (:data:`TBF`): tbf with a 128 KiB bucket and a 5 ms queue. The kernel runs tbf's
watchdog on high-resolution timers, so the bucket need not cover a 250 Hz tick (the earlier
``2 * rate/250``, 1 MB at 1 Gbit/s and 10 MB at 10 Gbit/s, more than a compressed 64 MiB
call moves per rank); it must only hold one 64 KiB GSO segment (a 64 KiB bucket makes tbf
split them, and the link ran at 3.5-30% of its cap). perf/bench/shaper_check.py measured TCP over
these links (idle 2-core VM, 2026-12-01; the run is in the git history of perf/RESULTS.md,
the runs made with this shaper in perf/RESULTS.md#emulated-collectives-flat-and-hier): at
1 Gbit/s, 128k/5 carried 95-98% of the cap for 4 MiB and 256 MiB messages, three flows
into one namespace and all four namespaces sending to each other, never more; the old
bucket let a 4 MiB message through at 123% of the cap (108-117% at 10 Gbit/s), and a 100 ms
queue (12.5 MB at 1 Gbit/s) cost 256 MiB transfers 11%. At 10 Gbit/s no setting reaches the
cap on that host: the CPU, not the shaper, sets the pace there (one flow 4.5-5 Gbit/s, all
four namespaces at once 1-1.5 Gbit/s each), so rows at 10 Gbit/s on a 2-core host are CPU
comparisons; --overlap shows it (MPI_Allreduce's t_cpu above its t_wire).
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

from ccompress.tools.perf import parse_size

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
TAG = f"cc{os.getpid() % 10000}"


def free_subnet() -> str:
    """A /24 under 10.213 that no interface of this host uses yet, so that two runs at the
    same time (each with its own bridge) never share addresses; only ever used between the
    namespaces created here."""
    used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                          text=True).stdout
    for k in range(250):
        third = (os.getpid() + k) % 250 + 1
        if f" 10.213.{third}." not in used:
            return f"10.213.{third}"
    raise RuntimeError("every 10.213.x.0/24 is in use on this host; remove stale "
                       "emulated_net bridges (ip link show type bridge)")


def sh(*cmd: str, check: bool = True) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r.stdout


class Network:
    """N namespaces `<tag>n<i>`, each with `eth0` (<subnet>.<i+1>, :func:`free_subnet`) on a
    veth pair whose other end `<tag>v<i>` sits in bridge `<tag>br` (<subnet>.254, so hydra's
    proxies reach mpiexec)."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self.ns = [f"{TAG}n{i}" for i in range(ranks)]
        self.veth = [f"{TAG}v{i}" for i in range(ranks)]
        self.bridge = f"{TAG}br"
        self.created: List[List[str]] = []  # undo commands, run in reverse
        atexit.register(self.destroy)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: sys.exit(130))

    def create(self) -> None:
        self.subnet = subnet = free_subnet()
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.created.append(["ip", "link", "del", self.bridge])
        sh("ip", "addr", "add", f"{subnet}.254/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i, (ns, veth) in enumerate(zip(self.ns, self.veth)):
            sh("ip", "netns", "add", ns)
            self.created.append(["ip", "netns", "del", ns])
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.created.append(["ip", "link", "del", veth])
            sh("ip", "link", "set", veth, "master", self.bridge)
            sh("ip", "link", "set", veth, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.address(i)}/24", "dev",
               "eth0")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def address(self, i: int) -> str:
        """The IPv4 address of namespace i's eth0 (after :meth:`create`)."""
        return f"{self.subnet}.{i + 1}"

    def devices(self):
        """(command prefix, device) of both ends of every veth."""
        for ns, veth in zip(self.ns, self.veth):
            yield [], veth
            yield ["ip", "netns", "exec", ns], "eth0"

    def limit(self, gbit: float, burst: int, latency_ms: float) -> None:
        """tbf at `gbit` on both ends of every veth: a bucket of `burst` bytes (what passes at
        veth speed after an idle spell) and a queue of `latency_ms` at the rate."""
        for prefix, dev in self.devices():
            sh(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
               "rate", f"{gbit}gbit", "burst", str(burst), "latency", f"{latency_ms}ms")

    def unlimit(self) -> None:
        """Back to the veths' own speed (no root qdisc of ours)."""
        for prefix, dev in self.devices():
            sh(*prefix, "tc", "qdisc", "del", "dev", dev, "root", check=False)

    def counters(self) -> Dict[str, int]:
        total = {"tx": 0, "rx": 0}
        for veth in self.veth:
            base = Path("/sys/class/net") / veth / "statistics"
            total["tx"] += int((base / "tx_bytes").read_text())
            total["rx"] += int((base / "rx_bytes").read_text())
        return total

    def drops(self) -> int:
        """Packets the qdiscs on both ends of every veth dropped so far (a full tbf queue):
        each drop makes TCP back off."""
        total = 0
        for prefix, dev in self.devices():
            stats = sh(*prefix, "tc", "-s", "qdisc", "show", "dev", dev)
            total += sum(int(n) for n in re.findall(r"dropped (\d+)", stats))
        return total

    def destroy(self) -> None:
        while self.created:
            subprocess.run(self.created.pop(), capture_output=True)


def old_burst_bytes(gbit: float) -> int:
    """The bucket of the earlier runs: twice rate/HZ for HZ = 250, at least 256 KiB (10 MB at
    10 Gbit/s, more than a 64 MiB call moves per rank in some rows)."""
    return max(256 * 1024, int(gbit * 1e9 / 8 / 250) * 2)


# The tbf setting the runs use, BURST/LATENCY_MS (validated by perf/bench/shaper_check.py; see the
# module docstring).
TBF = "128k/5"


def tbf_setting(text: str, gbit: float) -> Tuple[int, float]:
    """``BURST/LATENCY_MS`` (``128k/5``: a 128 KiB bucket, a queue of 5 ms at the rate) or
    ``old`` (:func:`old_burst_bytes`, 100 ms) -> (burst bytes, latency ms)."""
    if text == "old":
        return old_burst_bytes(gbit), 100.0
    try:
        burst, latency = text.split("/")
        return parse_size(burst), float(latency)
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f"bad tbf setting {text!r}; use BURST/LATENCY_MS, e.g. 128k/5, or old") from None


def checked_tbf(text: str) -> str:
    """argparse type of --tbf: the text, once :func:`tbf_setting` accepts it."""
    tbf_setting(text, 1.0)
    return text


# A rank whose traffic per call is W bytes gets the first `burst` of them through at veth
# speed, so its time is too short by up to burst / W. Rows below this many bursts (10%) are
# marked as not link-limited.
BURST_MULTIPLE = 10


def in_burst(wire_bytes: int, burst: int) -> bool:
    return wire_bytes < BURST_MULTIPLE * burst


def mpiexec_in(net: Network, ranks_per_node: int = 1) -> Tuple[List[str], Dict[str, str]]:
    """The start of an mpiexec (hydra) command line that runs ``ranks_per_node`` consecutive
    ranks in each of ``net``'s namespaces (add the program), and the variables to set in its
    environment: MPICH's TCP netmod on each namespace's eth0, so that the traffic between
    nodes crosses the shaped veths."""
    env = dict(MPICH_CH4_NETMOD="ofi", FI_PROVIDER="tcp", FI_TCP_IFACE="eth0",
               PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}")
    if ranks_per_node == 1:
        # MPICH would otherwise use shared memory between the namespaces (docs/measuring.md);
        # with several ranks per node it should, inside each one (their host names differ).
        env["MPIR_CVAR_NOLOCAL"] = "1"
    hosts = ",".join(f"{ns}:{ranks_per_node}" for ns in net.ns)
    return [str(VENV_BIN / "mpiexec"), "-launcher", "ssh", "-launcher-exec",
            str(ROOT / "perf" / "bench" / "netns_exec.sh"), "-iface", net.bridge, "-hosts",
            hosts, "-n", str(net.ranks * ranks_per_node), "-genvall"], env


def run_perf(net: Network, perf_args: List[str], json_path: str,
             ranks_per_node: int = 1) -> subprocess.CompletedProcess:
    """ccompress-perf under hydra, ``ranks_per_node`` consecutive ranks in each namespace;
    when it fails, prints the end of its output and exits with its code."""
    mpiexec, variables = mpiexec_in(net, ranks_per_node)
    env = dict(os.environ, **variables)
    cmd = mpiexec + [str(VENV_BIN / "ccompress-perf"), "allreduce", "--json", json_path] \
        + perf_args
    print("+", " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True)
    if proc.returncode:
        print(proc.stdout[-4000:], proc.stderr[-4000:], file=sys.stderr)
        sys.exit(proc.returncode)
    return proc


def paired_speedup(row: dict, base: dict) -> float:
    """The median over iterations of the baseline's time over the row's in the same round
    (ccompress-perf --interleave times the rows of a size in turn, so iteration i of each
    ran within one stretch of time): the speedup with the host's drift divided out."""
    return statistics.median(b / t for b, t in zip(base["times_us"], row["times_us"]))


def speedup_table(rows: List[dict], gbit: float, burst: int,
                  interleaved: bool = False) -> List[str]:
    """One line per compressed row; '*' marks a row where this rank's or the baseline's
    traffic per call is under BURST_MULTIPLE bursts (the cap was partly not enforced).
    speedup: the baseline's median time over the row's; paired (interleaved runs only, else
    '-'): paired_speedup. cpu: a rank's CPU time in the call (ccompress-perf's cpu_us), ours
    and MPI's; relerr and #wrong are '-' in a run without checks (-c 0)."""
    base = {r["size"]: r for r in rows if r["codec"] == "MPI_Allreduce"}
    out = []
    for r in rows:
        b = base.get(r["size"])
        if r["codec"] == "MPI_Allreduce" or b is None:
            continue
        r["in_burst"] = in_burst(r["wire_bytes"], burst) or in_burst(b["wire_bytes"], burst)
        paired = f"{'-':>8}"
        if interleaved:
            r["paired_speedup"] = paired_speedup(r, b)
            paired = f"{r['paired_speedup']:7.2f}x"
        out.append(f"{gbit:6.2f} {r['size']:>11} {r['codec']:>16} {r['algo']:>9} "
                   f"{b['time_us'] / 1e3:10.1f} {r['time_us'] / 1e3:10.1f} "
                   f"{b['time_us'] / r['time_us']:7.2f}x{'*' if r['in_burst'] else ' '} {paired} "
                   f"{r['ratio']:6.2f} {'-' if r['relerr'] is None else format(r['relerr'], '.2e'):>9} "
                   f"{'-' if r['wrong'] is None else r['wrong']:>6} "
                   f"{r['cpu_us'] / 1e3:8.1f} {b['cpu_us'] / 1e3:8.1f}")
    return out


def overlap_table(free: List[dict], limited: List[dict], gbit: float) -> List[str]:
    """How much the executor overlaps CPU work with transfers, per row (the MPI_Allreduce
    baseline's too: where its t_cpu exceeds t_wire, the rate does not set its pace): t_cpu is
    the row's time on unlimited links (codec, copies, TCP), t_wire its bytes per rank at the
    link rate (full duplex: wire_bytes * 8 / rate), t the measured time at that rate.
    Serial work would take t_cpu + t_wire, perfect overlap max(t_cpu, t_wire); ``hidden`` is
    the share of the shorter of the two that disappears behind the other,
    (t_cpu + t_wire - t) / min(t_cpu, t_wire), clipped to [0, 1]."""
    cpu = {(r["size"], r["codec"], r["algo"]): r["time_us"] / 1e6 for r in free}
    out = []
    for r in limited:
        key = (r["size"], r["codec"], r["algo"])
        if key not in cpu:
            continue
        t, t_cpu = r["time_us"] / 1e6, cpu[key]
        t_wire = r["wire_bytes"] * 8 / (gbit * 1e9)
        hidden = min(1.0, max(0.0, (t_cpu + t_wire - t) / min(t_cpu, t_wire)))
        out.append(f"{gbit:6.2f} {r['size']:>11} {r['codec']:>16} {r['algo']:>9} "
                   f"{t_cpu * 1e3:10.1f} {t_wire * 1e3:10.1f} {t * 1e3:10.1f} "
                   f"{(t_cpu + t_wire) * 1e3:10.1f} {max(t_cpu, t_wire) * 1e3:10.1f} "
                   f"{100 * hidden:6.0f}%")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4, help="emulated nodes (network namespaces)")
    ap.add_argument("--ranks-per-node", type=int, default=1,
                    help="MPI ranks in each namespace: shared memory inside it, the "
                         "rate-limited link to the others")
    ap.add_argument("--rates", default="0.5,1,2.5",
                    help="Gbit/s per link, comma separated ('none': with --overlap, only the "
                         "unlimited links)")
    ap.add_argument("--tbf", default=TBF, type=checked_tbf,
                    help=f"the shaper, BURST/LATENCY_MS or 'old' (default {TBF})")
    ap.add_argument("--json", help="write every row, with rate and link counters, here")
    ap.add_argument("--overlap", action="store_true",
                    help="also run on unlimited links first and print, per rate, how much "
                         "of the CPU time the executor hides behind the transfers")
    ap.add_argument("perf_args", nargs=argparse.REMAINDER,
                    help="after --: ccompress-perf options (default: 1M..64M, none, bf16, "
                         "fp8_e4m3:g128, two_shot)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("emulated_net.py needs root (network namespaces and tc)", file=sys.stderr)
        return 2
    perf_args = [a for a in args.perf_args if a != "--"] or [
        "-b", "1M", "-e", "64M", "-f", "4", "-n", "3", "-w", "1",
        "--codec", "none", "--codec", "bf16", "--codec", "fp8_e4m3:g128", "--algo", "two_shot"]
    net = Network(args.ranks)
    net.create()
    header = (f"{'Gbit/s':>6} {'size':>11} {'codec':>16} {'algo':>9} {'MPI(ms)':>10} "
              f"{'ours(ms)':>10} {'speedup':>8} {'paired':>8} {'ratio':>6} {'relerr':>9} {'#wrong':>6} "
              f"{'cpu(ms)':>8} {'MPIcpu':>8}")
    lines, all_rows, overlap, free = [header], [], [], None
    with tempfile.TemporaryDirectory() as tmp:
        if args.overlap:
            jpath = os.path.join(tmp, "free.json")
            proc = run_perf(net, perf_args, jpath, args.ranks_per_node)
            # before any limit(): the veths run at their own speed
            print("# unlimited links (the CPU's time):\n" + proc.stdout, flush=True)
            free_run = json.load(open(jpath))
            free = free_run["rows"]
            for r in free:
                r["rate_gbit"] = None
            # rate_gbit None: the unlimited links (calibration data, never validation rows)
            all_rows.append({"rate_gbit": None, "ranks": free_run["ranks"], "nodes": net.ranks,
                             "ranks_per_node": args.ranks_per_node, "rows": free})
            overlap.append(f"{'Gbit/s':>6} {'size':>11} {'codec':>16} {'algo':>9} "
                           f"{'t_cpu(ms)':>10} {'t_wire(ms)':>10} {'t(ms)':>10} "
                           f"{'serial':>10} {'overlap':>10} {'hidden':>7}")
        rates = [] if args.rates == "none" else [float(r) for r in args.rates.split(",")]
        for gbit in rates:
            burst, latency_ms = tbf_setting(args.tbf, gbit)
            net.limit(gbit, burst, latency_ms)
            lines.append(f"# {gbit} Gbit/s: tbf burst {burst} bytes, latency {latency_ms} ms, "
                         "on both ends of every veth")
            at = len(lines) - 1
            before, drops = net.counters(), net.drops()
            start = time.monotonic()
            jpath = os.path.join(tmp, f"rate{gbit}.json")
            proc = run_perf(net, perf_args, jpath, args.ranks_per_node)
            after, drops = net.counters(), net.drops() - drops
            run = json.load(open(jpath))
            rows = run["rows"]
            # A frame between two namespaces leaves one veth and enters another: the host-side
            # counters see it twice. The run sent, per row and call, wire(B) from every rank.
            moved = (after["tx"] - before["tx"] + after["rx"] - before["rx"]) / 2
            calls = run["iters"] + run["warmup"] + (1 if "-c" not in perf_args else 0)
            reported = sum(r["wire_bytes"] for r in rows) * run["ranks"] * calls
            print(proc.stdout, flush=True)
            print(f"# {gbit} Gbit/s: the links carried {moved / 1e6:.1f} MB for the "
                  f"{reported / 1e6:.1f} MB of payload the run reports ({moved / reported:.3f}x: "
                  f"TCP/IP headers, barriers, result checks"
                  f"{'; traffic inside a node stays off the links' if args.ranks_per_node > 1 else ''}"
                  f") in {time.monotonic() - start:.0f} s; the shapers dropped {drops} packets",
                  flush=True)
            lines[at] += f"; they dropped {drops} packets"
            lines += speedup_table(rows, gbit, burst, bool(run.get("interleave")))
            if free is not None and args.ranks_per_node == 1:
                overlap += overlap_table(free, rows, gbit)
            for r in rows:
                r["rate_gbit"] = gbit
            all_rows.append({"rate_gbit": gbit, "ranks": run["ranks"], "nodes": net.ranks,
                             "ranks_per_node": args.ranks_per_node, "link_bytes": moved,
                             "reported_bytes": reported, "burst_bytes": burst,
                             "latency_ms": latency_ms, "tbf_drops": drops, "rows": rows})
    lines.append(f"# * a rank moved less than {BURST_MULTIPLE}x the tbf burst per call (its own "
                 "or the baseline's): up to burst/wire of its traffic passed at veth speed, so "
                 "the speedup is not a link-limited figure")
    print("\n".join(lines))
    if overlap and args.ranks_per_node > 1:
        # wire(B) is a rank's bytes to every peer, its own node's (shared memory) included,
        # while a node's link carries the inter-node bytes of all its ranks: no t_wire from it.
        print(f"\n# CPU time hidden behind transfers: not computed for nodes of "
              f"{args.ranks_per_node} ranks (wire(B) counts the bytes that stay inside a node)")
    elif overlap:
        print("\n# CPU time hidden behind transfers (--overlap; see overlap_table):\n"
              + "\n".join(overlap))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
