"""Single-core throughput of every codec's CPU kernels, next to memcpy in the same run.

    .venv/bin/python -m perf.bench.codec_throughput [-n 16M] [--codec SPEC ...] [--json out.json]

For each codec: encode (float32 in -> wire) and decode-accumulate (wire -> float32 += ) in
elements per second and in GB/s of bytes read plus written, and that bandwidth as a share of
a plain memcpy (read + write) of the same float32 buffer, timed in the same process; then
the plain decode (wire -> float32 output: the all-gather's last step) in elements per
second. Medians of several repetitions; one thread (the collectives run one per rank).

--clock thread times each call by this thread's CPU time (time.thread_time) instead of the
wall clock: on a machine shared with other jobs, time spent waiting for a core is then left
out (cache and memory-bandwidth contention is not), so runs under load stay comparable.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import ccompress as cc
from ccompress import _core

DEFAULT_CODECS = ["none", "bf16", "fp8_e4m3:g128", "fp8_e5m2:g128", "taco:g128", "hint8",
                  "hint8:g32:s16", "nvfp4", "hnvfp4:g16", "hint4", "fp8_e4m3:g128:sr", "hint8:sr",
                  "mxfp8", "mxfp8_e5m2", "mxfp4"]


CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def timed(fn, reps: int, clock=time.perf_counter) -> float:
    fn()  # warm-up: page faults, lookup tables
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", default="16M", help="elements (K/M suffix), default 16M")
    ap.add_argument("--codec", action="append", help="codec spec (repeatable)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall clock (default) or this thread's CPU time")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    clock = CLOCKS[args.clock]
    n = int(float(args.n.rstrip("KMkm")) * {"K": 1 << 10, "M": 1 << 20}.get(args.n[-1].upper(), 1))
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    acc = np.zeros(n, np.float32)
    copy = np.empty_like(x)
    memcpy_s = timed(lambda: np.copyto(copy, x), args.reps, clock)
    memcpy_gbs = 2 * x.nbytes / memcpy_s / 1e9
    print(f"# codec CPU throughput, one thread, n={n} float32, {os.cpu_count()} cpus, "
          f"ccompress {cc.__version__}, {args.clock} clock")
    print(f"# memcpy (read+write): {memcpy_gbs:.2f} GB/s")
    cols = f"{'codec':>20} {'bits/el':>7} {'enc Gel/s':>9} {'enc GB/s':>8} {'%memcpy':>7} " \
           f"{'dec+acc Gel/s':>13} {'dec GB/s':>8} {'%memcpy':>7} {'decode Gel/s':>12}"
    print(cols)
    rows = []
    for spec in args.codec or DEFAULT_CODECS:
        try:
            codec = cc.Codec.parse(spec)
        except cc.CCompressError as e:
            print(f"{spec:>20}  skipped: {str(e).split(';')[0]}", file=sys.stderr)
            continue
        c = codec._c.bind("float32")
        wire = np.empty(c.wire_bytes(n), np.uint8)
        enc = timed(lambda: _core.encode(c, x.ctypes.data, "float32", n, 1.0, wire.ctypes.data),
                    args.reps, clock)
        dec = timed(lambda: _core.decode_accumulate(c, wire.ctypes.data, n, acc.ctypes.data,
                                                    False), args.reps, clock)
        out = timed(lambda: _core.decode(c, wire.ctypes.data, n, copy.ctypes.data, "float32"),
                    args.reps, clock)
        bits = 8 * wire.size / n
        enc_gbs = (x.nbytes + wire.size) / enc / 1e9
        dec_gbs = (wire.size + 2 * acc.nbytes) / dec / 1e9
        row = {"codec": codec.name, "bits_per_element": bits, "encode_elems_per_s": n / enc,
               "encode_gbs": enc_gbs, "decode_acc_elems_per_s": n / dec, "decode_acc_gbs": dec_gbs,
               "decode_elems_per_s": n / out, "memcpy_gbs": memcpy_gbs}
        rows.append(row)
        print(f"{codec.name:>20} {bits:7.3f} {n / enc / 1e9:9.3f} {enc_gbs:8.2f} "
              f"{100 * enc_gbs / memcpy_gbs:6.1f}% {n / dec / 1e9:13.3f} {dec_gbs:8.2f} "
              f"{100 * dec_gbs / memcpy_gbs:6.1f}% {n / out / 1e9:12.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
