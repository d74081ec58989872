"""GPU kernel and loopback-pipeline timings for perf/gpu_check.sh.

Kernels: every codec's encode, decode (to the input dtype), decode-accumulate into fp32 and
fused ring hop (decode-reduce-encode), plus load-accumulate, finalize, the NaN/Inf count and
the error-feedback residual (read v and decoded, write the residual), each on a 256 MiB
input (bfloat16 by default) timed with CUDA events, against the device-to-device copy
bandwidth measured in the same run. Bandwidth = (bytes read + bytes written) / time.

Pipeline: allreduce on N virtual ranks of the GPU (loopback), pipelined (default slice) and
with one slice per chunk, and the share of codec time hidden:
    hidden = (P * t_codec + P * t_copy - t_pipe) / (P * t_codec)
with t_codec the kernel time of one rank's steps (from the kernel table) and t_copy its
received bytes at the copy bandwidth: on one GPU all ranks share the memory system, so the
sum is what a run with no overlap at all would take.

Usage: python -m perf.bench.gpu_bench [--mib 256] [--dtype bfloat16] [--ranks 4] [--out DIR]

Under the CPU emulation of the CUDA runtime (cuda/emu) the script runs too, at any size, so
that its code is checked before a GPU session spends time on it; the tables then say so and
their times mean nothing.
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import numpy as np

import ccompress as cc
from ccompress import _core, _cuda
from ccompress._internal.arrays import numpy_dtype
from ccompress._internal.device import DeviceBuffer

CODECS = ["none", "bf16", "fp16", "fp8_e4m3:g128", "fp8_e5m2:g128", "fp8_e4m3:g128:sr",
          "taco:g128", "hint8", "hint8:g32:h256:s32", "nvfp4", "hnvfp4", "hint4"]
FOUR_BIT = ("nvfp4", "hnvfp4", "hint4")


def timed(stream, fn, iters):
    """Mean milliseconds of fn() on `stream` over iters runs after one warm-up."""
    fn()
    start, stop = _cuda.TimingEvent(0), _cuda.TimingEvent(0)
    start.record(stream)
    for _ in range(iters):
        fn()
    stop.record(stream)
    stop.synchronize()
    return stop.elapsed_ms(start) / iters


def kernel_table(mib, dtype, iters):
    k = _cuda.Backend(0)
    s = k.stream
    item = numpy_dtype(dtype).itemsize
    n = int(mib * (1 << 20)) // item
    rng = np.random.default_rng(0)
    host = (rng.standard_normal(n, dtype=np.float32)).astype(numpy_dtype(dtype))
    x, out, y = DeviceBuffer(n * item), DeviceBuffer(n * item), DeviceBuffer(n * item)
    _cuda.copy(x.ptr, host.__array_interface__["data"][0], n * item)
    _cuda.copy(y.ptr, host.__array_interface__["data"][0], n * item)
    acc = DeviceBuffer(n * 4)
    copy_ms = timed(s, lambda: _cuda.copy_async(out.ptr, x.ptr, n * item, s), iters)
    copy_gbs = 2 * n * item / copy_ms / 1e6
    rows = [{"codec": "-", "kernel": "d2d copy", "ms": copy_ms, "gbs": copy_gbs, "pct": 100.0}]

    def row(codec, kernel, nbytes, fn):
        ms = timed(s, fn, iters)
        gbs = nbytes / ms / 1e6
        rows.append({"codec": codec, "kernel": kernel, "ms": ms, "gbs": gbs, "pct": 100 * gbs / copy_gbs})

    row("-", "load_accumulate", n * (item + 4), lambda: k.load_accumulate(x.ptr, dtype, n, acc.ptr, True))
    row("-", "finalize", n * (4 + item), lambda: k.finalize(acc.ptr, n, 1.0, out.ptr, dtype))
    count = DeviceBuffer.of(np.zeros(1, np.int64))
    row("-", "count_nonfinite", n * item, lambda: k.count_nonfinite(x.ptr, dtype, n, count.ptr))
    decoded, residual = DeviceBuffer(n * 4), DeviceBuffer(n * 4)
    k.load_accumulate(y.ptr, dtype, n, decoded.ptr, True)
    row("-", "feedback_residual", 3 * n * 4,
        lambda: k.feedback_residual(acc.ptr, decoded.ptr, n, residual.ptr, count.ptr))
    for codec in CODECS:
        c = cc.Codec.parse(codec)._c.bind(dtype) if codec == "none" else cc.Codec.parse(codec)._c
        wb = c.wire_bytes(n)
        w, w2 = DeviceBuffer(wb), DeviceBuffer(wb)
        row(codec, "encode", n * item + wb, lambda: k.encode(c, x.ptr, dtype, n, 1.0, w.ptr))
        row(codec, "decode", wb + n * item, lambda: k.decode(c, w.ptr, n, out.ptr, dtype))
        row(codec, "decode_accumulate", wb + n * 4,
            lambda: k.decode_accumulate(c, w.ptr, n, acc.ptr, True))
        # A 4-bit hop is two passes (the run amax, then quantize), each reading wire and x.
        reads = 2 if codec.split(":")[0] in FOUR_BIT else 1
        row(codec, "decode_reduce_encode", reads * (wb + n * item) + wb,
            lambda: k.decode_reduce_encode(c, w.ptr, y.ptr, dtype, n, 1.0, w2.ptr))
    return rows, copy_gbs


def pipeline_row(codec, algo, ranks, mib, dtype, slice_elems, iters):
    item = numpy_dtype(dtype).itemsize
    n = int(mib * (1 << 20)) // item
    group = _cuda.loopback_group(ranks, 0)
    bufs = [(DeviceBuffer(n * item), DeviceBuffer(n * item)) for _ in range(ranks)]
    barrier = threading.Barrier(ranks)
    times = [0.0] * ranks
    stats = [None] * ranks

    def body(r):
        dr, (x, y) = group[r], bufs[r]
        caller = _cuda.Backend(0)  # its stream is the caller's: synchronize() waits for results
        spec = _core.CallSpec("allreduce", algo=algo, op="sum", slice_elems=slice_elems,
                              timeout=120.0)
        call = lambda: dr.run(spec, x.ptr, y.ptr, n, dtype, codec, stream=caller.stream)  # noqa: E731
        call()
        caller.synchronize()
        barrier.wait()
        t0 = time.perf_counter()
        for _ in range(iters):
            stats[r] = call()
        caller.synchronize()
        barrier.wait()
        times[r] = (time.perf_counter() - t0) / iters * 1e3

    threads = [threading.Thread(target=body, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(times), stats[0]


def codec_ms_per_rank(rows, codec, algo, ranks, mib_total):
    """Kernel time one rank spends in `algo` on its share, from the kernel table (rows at
    the table's size, scaled linearly by elements)."""
    t = {(r["codec"], r["kernel"]): r["ms"] for r in rows}
    enc, dec, acc, dre = (t[(codec, k)] for k in ("encode", "decode", "decode_accumulate",
                                                  "decode_reduce_encode"))
    f = mib_total  # fraction of the table's size
    count = 2 * t[("-", "count_nonfinite")]  # NaN/Inf counts of the input and the output
    if algo == "two_shot":  # encode all, P decode-acc of a chunk, encode chunk, decode all
        return f * (enc + acc + enc / ranks + dec + count)
    # ring: encode chunk, P-1 fused hops of a chunk, decode all
    return f * (enc / ranks + (ranks - 1) * dre / ranks + dec + count)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=256, help="kernel input size (MiB)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--ranks", type=int, default=4, help="virtual ranks of the pipeline runs")
    ap.add_argument("--pipe-mib", type=float, default=64, help="allreduce size per rank (MiB)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--out", default="build/gpu_check")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, copy_gbs = kernel_table(a.mib, a.dtype, a.iters)
    lines = []
    if getattr(_cuda, "emulated", False):
        lines += ["**EMULATED on the CPU (cuda/emu): a check of this script; the times say "
                  "nothing about a GPU.**", ""]
    lines += [f"## Kernels: {a.mib:g} MiB of {a.dtype}, copy bandwidth {copy_gbs:.0f} GB/s "
              "(read+write)", "", "| codec | kernel | ms | GB/s | % of copy |",
              "|---|---|---:|---:|---:|"]
    lines += [f"| {r['codec']} | {r['kernel']} | {r['ms']:.3f} | {r['gbs']:.0f} | {r['pct']:.0f}% |"
              for r in rows]
    lines += ["", f"## Loopback pipeline: allreduce of {a.pipe_mib:g} MiB {a.dtype} on {a.ranks} "
              "virtual ranks of one GPU", "",
              "| codec | algo | pipelined ms | one slice per chunk ms | codec ms/rank | copy ms/rank | hidden |",
              "|---|---|---:|---:|---:|---:|---:|"]
    item = numpy_dtype(a.dtype).itemsize
    for codec in ("fp8_e4m3:g128", "hint8", "nvfp4"):
        for algo in ("two_shot", "ring"):
            pipe, st = pipeline_row(codec, algo, a.ranks, a.pipe_mib, a.dtype, 0, a.iters)
            n = int(a.pipe_mib * (1 << 20)) // item
            whole, _ = pipeline_row(codec, algo, a.ranks, a.pipe_mib, a.dtype,
                                    -(-n // a.ranks), max(2, a.iters // 2))
            t_codec = codec_ms_per_rank(rows, codec, algo, a.ranks, a.pipe_mib / a.mib)
            t_copy = 2 * st["payload_bytes"] / copy_gbs / 1e6
            hidden = (a.ranks * (t_codec + t_copy) - pipe) / (a.ranks * t_codec)
            lines.append(f"| {codec} | {algo} | {pipe:.2f} | {whole:.2f} | {t_codec:.2f} | "
                         f"{t_copy:.2f} | {100 * hidden:.0f}% |")
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    (out / "kernels.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
