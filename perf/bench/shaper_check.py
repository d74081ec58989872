"""Does the emulated link hold its cap? TCP transfers between the namespaces of emulated_net.

    sudo .venv/bin/python -m perf.bench.shaper_check [--rates 1,10] [--setting BURST/LATENCY ...]

Creates the namespaces, veths and bridge of `emulated_net.py` (4 of them), and for every rate
and every tbf setting (burst bytes / latency ms, e.g. ``128k/5``; ``old`` is the earlier
``max(256 KiB, 2 * rate/250)`` burst with 100 ms) moves data over persistent TCP connections,
the way MPI's ranks do: one sender to one receiver, a short (4 MiB) and a long (256 MiB)
message; three senders into one receiver at once (64 MiB each: the flows queue at the
receiver's veth); and all four namespaces sending 32 MiB to each of the others at once
(``4x3``: every link busy both ways, as in an all-reduce, where the host's CPU, not the
shaper, may set the pace). Rates are per receiving namespace. Before every message the link
idles 50 ms, so the bucket is full: a burst that lets a message through at veth speed shows
up as a rate above the cap (a message that overruns its time slot makes the next one start
at once: a bucket less full, never a fuller one). Prints, per setting, the median and the
highest achieved rate over the repetitions, also as a share of the cap; the right setting is
close to, and never above, 100%, for short and long messages alike. Measures the unlimited
veths first (the headroom of this host). Always removes what it created.
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
from typing import List, Optional, Tuple

from perf.bench import emulated_net as en  # noqa: E402

PORT = 5201
GAP_S = 0.05

# Run inside a namespace with `python3 -c`: answers each length-prefixed message with one byte.
RECEIVER = r"""
import socket, struct, sys, threading
def serve(c):
    buf = bytearray(1 << 22)
    view = memoryview(buf)
    while True:
        hdr = c.recv(8, socket.MSG_WAITALL)
        if len(hdr) < 8:
            return
        left = struct.unpack('!Q', hdr)[0]
        while left:
            got = c.recv_into(view[:min(left, len(buf))])
            if not got:
                return
            left -= got
        c.sendall(b'a')
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', int(sys.argv[1])))
s.listen(8)
print('ready', flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# Sends `reps` messages of `size` bytes, the k-th starting at wall time start + k * period,
# and prints [t_send, t_acked] per message as JSON.
SENDER = r"""
import json, socket, struct, sys, time
host, port, size, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
start, period = float(sys.argv[5]), float(sys.argv[6])
s = socket.create_connection((host, port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
payload = memoryview(bytearray(size))
out = []
for k in range(reps):
    wait = start + k * period - time.time()
    if wait > 0:
        time.sleep(wait)
    t0 = time.time()
    s.sendall(struct.pack('!Q', size))
    s.sendall(payload)
    s.recv(1, socket.MSG_WAITALL)
    out.append([t0, time.time()])
print(json.dumps(out))
"""


def transfer(net: en.Network, pairs: List[Tuple[int, int]], size: int, reps: int,
             gbit: Optional[float]) -> List[float]:
    """Achieved Gbit/s into each receiving namespace, per repetition after one warm-up
    message: every (sender, receiver) pair moves `size` bytes at once; the bytes over first
    send to last acknowledgement, divided by the number of receivers."""
    receivers = len({r for _, r in pairs})
    expected = len(pairs) * size * 8 / receivers / ((gbit or 20) * 1e9)
    period = GAP_S + 1.5 * expected + 0.02
    start = time.time() + 0.5
    procs = [subprocess.Popen(["ip", "netns", "exec", net.ns[i], sys.executable, "-c", SENDER,
                               net.address(j), str(PORT), str(size), str(reps + 1),
                               str(start), str(period)], stdout=subprocess.PIPE, text=True)
             for i, j in pairs]
    times = []
    for p in procs:
        out, _ = p.communicate(timeout=60 + 4 * (reps + 1) * period)
        if p.returncode:
            raise RuntimeError(f"sender failed with {p.returncode}")
        times.append(json.loads(out))
    rates = []
    for k in range(1, reps + 1):
        t0 = min(t[k][0] for t in times)
        t1 = max(t[k][1] for t in times)
        rates.append(len(pairs) * size * 8 / receivers / (t1 - t0) / 1e9)
    return rates


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="1,10", help="Gbit/s, comma separated")
    ap.add_argument("--setting", action="append",
                    help="tbf BURST/LATENCY_MS, or 'old' (default: old, 1m/100, 128k/100, "
                         "128k/5, 64k/5)")
    ap.add_argument("--reps", type=int, default=3, help="timed messages per case")
    ap.add_argument("--json", help="write every case here")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("shaper_check.py needs root (network namespaces and tc)", file=sys.stderr)
        return 2
    settings = args.setting or ["old", "1m/100", "128k/100", "128k/5", "64k/5"]
    net = en.Network(4)
    net.create()
    servers = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", RECEIVER,
                                 str(PORT)], stdout=subprocess.PIPE, text=True) for ns in net.ns]
    try:
        for server in servers:
            server.stdout.readline()
        all_to_all = [(i, j) for i in range(4) for j in range(4) if i != j]
        cases = [("1->1", [(1, 0)], 4 << 20), ("1->1", [(1, 0)], 256 << 20),
                 ("3->1", [(1, 0), (2, 0), (3, 0)], 64 << 20), ("4x3", all_to_all, 32 << 20)]
        rows = []
        print(f"{'Gbit/s':>6} {'setting':>9} {'burst':>9} {'lat(ms)':>7} {'flows':>5} "
              f"{'MiB':>5} {'median':>8} {'max':>8} {'median%':>8} {'max%':>6}", flush=True)
        plan: List[Tuple[Optional[float], str]] = [(None, "none")]
        plan += [(float(g), s) for g in args.rates.split(",") for s in settings]
        for gbit, text in plan:
            if gbit is None:
                net.unlimit()
                label, burst, latency = "none", 0, 0.0
            else:
                label = text
                burst, latency = en.tbf_setting(text, gbit)
                net.limit(gbit, burst, latency)
            for flows, pairs, size in cases:
                r = transfer(net, pairs, size, args.reps, gbit)
                row = {"rate_gbit": gbit, "setting": label, "burst_bytes": burst,
                       "latency_ms": latency, "flows": flows, "size": size, "gbit": r}
                rows.append(row)
                med, top = statistics.median(r), max(r)
                shares = (f"{100 * med / gbit:7.1f}% {100 * top / gbit:5.1f}%" if gbit
                          else f"{'-':>8} {'-':>6}")
                print(f"{gbit or 0:6.2f} {label:>9} {burst:>9} {latency:7.1f} {flows:>5} "
                      f"{size >> 20:>5} {med:8.2f} {top:8.2f} {shares}", flush=True)
    finally:
        for server in servers:
            server.kill()
            server.wait()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
