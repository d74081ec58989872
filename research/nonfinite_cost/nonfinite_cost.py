"""What counting NaN/Inf costs a collective: per 64 K-element slice (the default slice),
the time to count it while it is in cache (what the executor does after each input read and
output write) against the time to encode and decode it, for several codecs.

    .venv/bin/python -m research.nonfinite_cost.nonfinite_cost [--reps 200]
"""
import argparse
import time

import numpy as np

import ccompress as cc
from ccompress import _core


def bench(f, reps):
    """Median time of one call (a shared machine: the median resists preemption)."""
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args()
    x = np.random.default_rng(0).standard_normal(_core.DEFAULT_SLICE_ELEMS).astype(np.float32)
    print(f"# {x.size}-element float32 slice, median of {a.reps} calls each; "
          "count = one in-cache pass (a call counts its input and its output once each)")
    print(f"{'codec':16s} {'encode(us)':>10s} {'decode(us)':>10s} {'count(us)':>9s} "
          f"{'2*count/(enc+dec)':>17s}")
    for spec in ("none", "bf16", "fp8_e4m3:g128", "taco:g128", "hint8", "nvfp4", "hint4"):
        c = cc.Codec.parse(spec)._c.bind("float32")
        buf = np.empty(c.wire_bytes(x.size), np.uint8)
        out = np.empty_like(x)
        enc = bench(lambda: _core.encode(c, x.ctypes.data, "float32", x.size, 1.0,
                                         buf.ctypes.data), a.reps)
        dec = bench(lambda: _core.decode(c, buf.ctypes.data, x.size, out.ctypes.data,
                                         "float32"), a.reps)
        count = bench(lambda: _core.count_nonfinite(out.ctypes.data, "float32", x.size), a.reps)
        print(f"{spec:16s} {enc * 1e6:10.1f} {dec * 1e6:10.1f} {count * 1e6:9.1f} "
              f"{2 * count / (enc + dec):16.1%}")


if __name__ == "__main__":
    main()
