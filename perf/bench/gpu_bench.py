"""GPU kernel and loopback-pipeline timings for perf/gpu_check.sh.

Kernels: every codec family's encode, decode (to the table's dtype), decode-accumulate into
fp32 and fused ring hop (decode-reduce-encode), plus load-accumulate, finalize, the NaN/Inf
count and the error-feedback residual (read v and decoded, write the residual), on a 256 MiB
input of each dtype asked for (bfloat16 and float32 by default), timed with CUDA events,
against the device-to-device copy bandwidth measured in the same run.
Bandwidth = (bytes read + bytes written) / time.

Pipeline: a 64 MiB allreduce (bfloat16) on N virtual ranks of the GPU (loopback), for every
codec of the kernel table and the two_shot and ring schedules:
  - pipelined_ms: at the loopback transport's own slice (Transport.default_slice_bytes);
  - one_slice_ms: with one slice per chunk;
  - (table only) at NCCL's 4 MiB slice, which the loopback's 16 MiB slice exceeds at this
    size: what a slice's launches and events cost when the slices cannot overlap;
  - alone_ms: the kernels and copies the collective runs, each timed alone at the sizes the
    schedule gives them, summed over the ranks (on one GPU the ranks share the memory
    system, so this is what the run would take with no overlap and no per-launch cost).
The goals on this transport: pipelined within 10% of one slice per chunk, and within 1.2x of
alone.

All-to-all: the mixture-of-experts dispatch (examples/moelm.py) on the same N virtual ranks,
bfloat16 rows of 1024 elements in equal pieces, at 8 MiB a rank (a dispatch at scale) and at
256 KiB (what a call costs beyond its bytes), for none (exact: the engine's uncompressed path,
the reference of the ratios), fp8_e4m3:g128, mxfp8 and nvfp4:
  - ms: the median over the calls of the slowest rank's time per call, each call timed with
    CUDA events on the caller's stream from an idle stream, after one warm-up call;
  - none / codec: none's ms over the codec's, from the same run (above 1: faster than exact);
  - sent: the bytes one rank sends to its peers (payload and headers, the engine's count);
  - alone_ms: the codec's kernels and copies the call runs, each timed alone at its size and
    summed over the ranks: per rank an encode, a decode and two NaN/Inf counts of every piece
    (its own included) and the copies of the N - 1 pieces' wire bytes it receives.

Writes DIR/table.md and DIR/kernels.json:
  {"device", "driver", "commit", "date", "copy_gbps",
   "kernels": [{"codec", "kernel", "dtype", "gbps"}],
   "pipeline": [{"codec", "algo", "mib", "pipelined_ms", "one_slice_ms", "alone_ms"}],
   "alltoall": [{"codec", "mib", "ranks", "ms", "alone_ms"}]}
which perf/model/gpu_projection.py reads (commit it as perf/gpu/kernels.json).

Usage: python -m perf.bench.gpu_bench [--mib 256] [--dtypes bfloat16,float32] [--ranks 4]
       [--pipe-mib 64] [--pipe-codecs all] [--a2a-mib 8,0.25] [--a2a-iters 20] [--out DIR]

Under the CPU emulation of the CUDA runtime (cuda/emu) the script runs too, at any size, so
that its code is checked before a GPU session spends time on it; the tables then say so, its
JSON names the device "EMULATED", and the times mean nothing.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

import ccompress as cc
from ccompress import _core, _cuda
from ccompress._internal.arrays import numpy_dtype
from ccompress._internal.device import DeviceBuffer

# Every family: casts, fp8, taco, hint8, the 4-bit families and MX.
CODECS = ["none", "bf16", "fp16", "fp8_e4m3:g128", "fp8_e5m2:g128", "fp8_e4m3:g128:sr",
          "taco:g128", "hint8", "hint8:g32:h256:s32", "nvfp4", "hnvfp4", "hint4",
          "mxfp8", "mxfp8_e5m2", "mxfp4"]
# A hop of these is two passes (the run amax of the two-level scale, then quantize), each
# reading the wire and x.
TWO_PASS_HOP = ("nvfp4", "hnvfp4", "hint4")
ALGOS = ("two_shot", "ring")
# The all-to-all table's codecs: "none" first (the reference of the ratios).
A2A_CODECS = ["none", "fp8_e4m3:g128", "mxfp8", "nvfp4"]
A2A_ROW = 1024  # elements of one bfloat16 row of the all-to-all (pieces are whole rows)
NCCL_SLICE_BYTES = 4 << 20  # the NCCL transport's own slice (cuda/src/transport/device_slice.h)
ROOT = Path(__file__).resolve().parents[2]


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


def bound(codec: str, dtype: str):
    """The codec object the backend's kernels take ("none" is bound to the dtype it carries)."""
    c = cc.Codec.parse(codec)._c
    return c.bind(dtype) if codec == "none" else c


class Kernels:
    """One rank's backend and buffers of n elements of `dtype`, to time each kernel alone."""

    def __init__(self, n: int, dtype: str):
        self.k = _cuda.Backend(0)
        self.s = self.k.stream
        self.n, self.dtype = n, dtype
        item = numpy_dtype(dtype).itemsize
        rng = np.random.default_rng(0)
        host = rng.standard_normal(n, dtype=np.float32).astype(numpy_dtype(dtype))
        self.x, self.out, self.y = (DeviceBuffer(n * item) for _ in range(3))
        for b in (self.x, self.y):
            _cuda.copy(b.ptr, host.__array_interface__["data"][0], n * item)
        self.acc = DeviceBuffer(n * 4)
        self.k.load_accumulate(self.x.ptr, dtype, n, self.acc.ptr, True)
        self.count = DeviceBuffer.of(np.zeros(1, np.int64))
        self.wires: Dict[str, Tuple[DeviceBuffer, DeviceBuffer]] = {}

    def wire(self, codec: str):
        if codec not in self.wires:
            wb = bound(codec, self.dtype).wire_bytes(self.n)
            self.wires[codec] = (DeviceBuffer(wb), DeviceBuffer(wb))
            w = self.wires[codec][0]
            self.k.encode(bound(codec, self.dtype), self.x.ptr, self.dtype, self.n, 1.0, w.ptr)
        return self.wires[codec]

    def time(self, codec: str, kernel: str, iters: int, m: Optional[int] = None) -> float:
        """Milliseconds of one `kernel` of `codec` on the first m elements (default all)."""
        k, d, m = self.k, self.dtype, self.n if m is None else m
        if kernel == "copy":  # m bytes, device to device
            return timed(self.s, lambda: _cuda.copy_async(self.out.ptr, self.x.ptr, m, self.s), iters)
        if codec == "-":
            fns = {
                "load_accumulate": lambda: k.load_accumulate(self.x.ptr, d, m, self.acc.ptr, True),
                "finalize": lambda: k.finalize(self.acc.ptr, m, 1.0, self.out.ptr, d),
                "count_nonfinite": lambda: k.count_nonfinite(self.x.ptr, d, m, self.count.ptr),
                "feedback_residual": lambda: k.feedback_residual(
                    self.acc.ptr, self.decoded.ptr, m, self.residual.ptr, self.count.ptr),
            }
            return timed(self.s, fns[kernel], iters)
        c = bound(codec, d)
        w, w2 = self.wire(codec)
        fns = {
            "encode": lambda: k.encode(c, self.x.ptr, d, m, 1.0, w2.ptr),
            "encode_acc": lambda: k.encode(c, self.acc.ptr, "float32", m, 1.0, w2.ptr),
            "decode": lambda: k.decode(c, w.ptr, m, self.out.ptr, d),
            "decode_accumulate": lambda: k.decode_accumulate(c, w.ptr, m, self.acc.ptr, True),
            "decode_reduce_encode": lambda: k.decode_reduce_encode(c, w.ptr, self.y.ptr, d, m, 1.0,
                                                                   w2.ptr),
        }
        return timed(self.s, fns[kernel], iters)

    def state_buffers(self):
        """The error-feedback residual's inputs (the kernel table times it)."""
        self.decoded, self.residual = DeviceBuffer(self.n * 4), DeviceBuffer(self.n * 4)
        self.k.load_accumulate(self.y.ptr, self.dtype, self.n, self.decoded.ptr, True)


def kernel_rows(mib: float, dtype: str, iters: int) -> Tuple[List[dict], float]:
    """The kernel table of one dtype: rows {codec, kernel, dtype, ms, gbps}, and the copy
    bandwidth measured on the same buffers (GB/s, read + written)."""
    item = numpy_dtype(dtype).itemsize
    n = int(mib * (1 << 20)) // item
    t = Kernels(n, dtype)
    t.state_buffers()
    copy_ms = t.time("-", "copy", iters, n * item)
    copy_gbps = 2 * n * item / copy_ms / 1e6
    rows = []

    def row(codec, kernel, nbytes):
        ms = t.time(codec, kernel, iters)
        rows.append({"codec": codec, "kernel": kernel, "dtype": dtype, "ms": ms,
                     "gbps": nbytes / ms / 1e6})

    row("-", "load_accumulate", n * (item + 4))
    row("-", "finalize", n * (4 + item))
    row("-", "count_nonfinite", n * item)
    row("-", "feedback_residual", 3 * n * 4)
    for codec in CODECS:
        wb = bound(codec, dtype).wire_bytes(n)
        row(codec, "encode", n * item + wb)
        row(codec, "decode", wb + n * item)
        row(codec, "decode_accumulate", wb + n * 4)
        reads = 2 if codec.split(":")[0] in TWO_PASS_HOP else 1
        row(codec, "decode_reduce_encode", reads * (wb + n * item) + wb)
    return rows, copy_gbps


class Loopback:
    """N virtual ranks of the GPU with input and output buffers of n elements each."""

    def __init__(self, ranks: int, n: int, dtype: str):
        self.ranks, self.n, self.dtype = ranks, n, dtype
        item = numpy_dtype(dtype).itemsize
        self.group = _cuda.loopback_group(ranks, 0)
        rng = np.random.default_rng(1)
        self.bufs = []
        for _ in range(ranks):
            host = rng.standard_normal(n, dtype=np.float32).astype(numpy_dtype(dtype))
            self.bufs.append((DeviceBuffer.of(host), DeviceBuffer(n * item)))
        self.callers = [_cuda.Backend(0) for _ in range(ranks)]  # their streams are the callers'

    def slice_elems(self) -> int:
        """The elements of one slice at the transport's own choice."""
        return int(self.group[0].default_slice_for(self.dtype))

    def run(self, codec: str, algo: str, slice_elems: int, iters: int) -> Tuple[float, dict]:
        """(the slowest rank's mean ms per allreduce, rank 0's stats); slice_elems 0: the
        transport's own slice."""
        spec = _core.CallSpec("allreduce", algo=algo, op="sum", slice_elems=slice_elems,
                              timeout=120.0)
        times, stats = self._on_ranks(spec, codec, iters, per_call=False)
        return max(t[0] for t in times), stats

    def alltoall(self, codec: str, iters: int) -> Tuple[float, dict]:
        """(the median over iters calls of the slowest rank's ms per all-to-all of equal
        pieces, rank 0's stats), each call timed alone with CUDA events."""
        spec = _core.CallSpec("alltoall", timeout=120.0)
        times, stats = self._on_ranks(spec, codec, iters, per_call=True, out_n=self.n)
        return float(np.median(np.max(times, axis=0))), stats

    def _on_ranks(self, spec, codec: str, iters: int, per_call: bool,
                  **kw) -> Tuple[List[List[float]], dict]:
        """Runs `spec` on every rank's thread, one warm-up call then iters timed ones:
        (per rank, the ms of each call (per_call: CUDA events on the caller's stream around
        each call, which starts from an idle stream with all ranks at a barrier) or [the mean
        ms] (not per_call: host time around all of them), rank 0's stats of the last call)."""
        barrier = threading.Barrier(self.ranks)
        times: List[List[float]] = [[] for _ in range(self.ranks)]
        stats, errors = [None] * self.ranks, []

        def body(r):
            try:
                dr, (x, y), caller = self.group[r], self.bufs[r], self.callers[r]
                call = lambda: dr.run(spec, x.ptr, y.ptr, self.n, self.dtype, codec,  # noqa: E731
                                      stream=caller.stream, **kw)
                call()
                caller.synchronize()
                barrier.wait()
                if per_call:
                    start, stop = _cuda.TimingEvent(0), _cuda.TimingEvent(0)
                    for _ in range(iters):
                        barrier.wait()
                        start.record(caller.stream)
                        stats[r] = call()
                        stop.record(caller.stream)
                        stop.synchronize()
                        times[r].append(stop.elapsed_ms(start))
                    return
                t0 = time.perf_counter()
                for _ in range(iters):
                    stats[r] = call()
                caller.synchronize()
                barrier.wait()
                times[r] = [(time.perf_counter() - t0) / iters * 1e3]
            except BaseException as e:  # noqa: BLE001 - re-raised below, on the main thread
                errors.append(e)
                barrier.abort()

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.ranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return times, stats[0]


def alone_ms(t: Kernels, codec: str, algo: str, ranks: int, iters: int,
             n: Optional[int] = None) -> float:
    """The kernels and copies of one allreduce (or, algo "alltoall", one all-to-all of equal
    pieces) of n elements per rank (default t.n) under `algo`, each timed alone at the size
    the schedule gives it (a chunk or piece, m = n / ranks), summed over all ranks. Per rank:
      two_shot: encode every chunk (ranks x encode(m)), sum the ranks' contributions to its own
        chunk (ranks x decode_accumulate(m)), encode the sum (encode of fp32, m), decode every
        chunk of the result (ranks x decode(m));
      ring: encode its chunk, ranks - 1 fused hops, decode every chunk (ranks x decode(m));
      alltoall: encode every piece, decode every piece it receives, count the NaN/Inf of each
        piece in and out (ranks x (encode(m) + decode(m) + 2 count_nonfinite(m))), and copy
        the wire bytes of the ranks - 1 pieces from its peers;
    allreduce: plus the NaN/Inf counts of input and output (2 x count_nonfinite(n)) and the
    copies of the wire bytes it receives (2 (ranks - 1) chunks' encodings)."""
    n = t.n if n is None else n
    m = n // ranks
    wire = bound(codec, t.dtype).wire_bytes(m)

    def k(name, size=m):
        return t.time(codec, name, iters, size)

    if algo == "alltoall":
        count = t.time("-", "count_nonfinite", iters, m)
        own = ranks * (k("encode") + k("decode") + 2 * count)
        return ranks * (own + (ranks - 1) * t.time("-", "copy", iters, wire))
    if algo == "two_shot":
        own = ranks * k("encode") + ranks * k("decode_accumulate") + k("encode_acc")
    else:
        own = k("encode") + (ranks - 1) * k("decode_reduce_encode")
    own += ranks * k("decode") + 2 * t.time("-", "count_nonfinite", iters, n)
    own += 2 * (ranks - 1) * t.time("-", "copy", iters, wire)
    return ranks * own


def device_info() -> Tuple[str, str]:
    if getattr(_cuda, "emulated", False):
        return "EMULATED (cuda/emu on the CPU)", "-"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        name, driver = (s.strip() for s in out.stdout.splitlines()[0].split(","))
        return name, driver
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        return "unknown (nvidia-smi unavailable)", "unknown"


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "-uno"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=256, help="kernel input size (MiB)")
    ap.add_argument("--dtypes", default="bfloat16,float32", help="kernel tables' dtypes")
    ap.add_argument("--ranks", type=int, default=4, help="virtual ranks of the pipeline runs")
    ap.add_argument("--pipe-mib", type=float, default=64, help="allreduce size per rank (MiB)")
    ap.add_argument("--pipe-dtype", default="bfloat16")
    ap.add_argument("--pipe-codecs", default="all",
                    help="comma-separated codecs of the pipeline table (default: every codec)")
    ap.add_argument("--a2a-mib", default="8,0.25",
                    help="comma-separated all-to-all sizes per rank (MiB of bfloat16)")
    ap.add_argument("--a2a-iters", type=int, default=20,
                    help="all-to-all calls timed per row (the median is reported)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--out", default="build/gpu_check")
    a = ap.parse_args(argv)
    a.dtypes = a.dtypes.split(",")
    a.pipe_codecs = CODECS if a.pipe_codecs == "all" else a.pipe_codecs.split(",")
    for c in a.pipe_codecs:
        cc.Codec.parse(c)  # a typo fails here, before any timing
    try:
        a.a2a_mib = [float(v) for v in a.a2a_mib.split(",")]
    except ValueError:
        ap.error(f"--a2a-mib takes comma-separated sizes in MiB, got {a.a2a_mib!r}")
    if not a.a2a_mib or min(a.a2a_mib) <= 0 or a.a2a_iters < 1:
        ap.error("--a2a-mib sizes must be positive and --a2a-iters at least 1")
    return a


def alltoall_rows(ranks: int, sizes: List[float], iters: int,
                  kernel_iters: int) -> Tuple[List[dict], List[str]]:
    """The all-to-all table: (rows {codec, mib, ranks, ms, alone_ms}, its Markdown lines),
    iters calls per row, each kernel of alone_ms timed over kernel_iters runs. Each size is
    rounded down to whole rows in equal pieces (at least one row a piece); a row's mib is the
    size run."""
    dtype, item = "bfloat16", 2
    ns = [max(1, int(mib * (1 << 20)) // item // (ranks * A2A_ROW)) * ranks * A2A_ROW
          for mib in sizes]
    alone = Kernels(max(ns), dtype)
    lines = [f"## All-to-all: equal pieces of {dtype} rows ({A2A_ROW} elements) on {ranks} "
             "virtual ranks of one GPU", "",
             "ms: median over the calls of the slowest rank's time per call (CUDA events); "
             "none / codec: none's ms over the codec's; sent: bytes a rank sends to its peers.",
             "", "| codec | MiB per rank | ms | none / codec | sent MiB | alone ms | ms / alone |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    rows = []
    for n in ns:
        group, mib = Loopback(ranks, n, dtype), n * item / 2**20
        for codec in A2A_CODECS:
            ms, stats = group.alltoall(codec, iters)
            sum_ms = alone_ms(alone, codec, "alltoall", ranks, kernel_iters, n)
            sent = stats["payload_bytes"] + stats["header_bytes"]
            none_ms = ms if codec == "none" else none_ms  # A2A_CODECS starts with none
            rows.append({"codec": codec, "mib": mib, "ranks": ranks, "ms": ms,
                         "alone_ms": sum_ms})
            lines.append(f"| {codec} | {mib:g} | {ms:.3f} | {none_ms / ms:.2f} | "
                         f"{sent / 2**20:.3f} | {sum_ms:.3f} | {ms / sum_ms:.2f} |")
    return rows, lines


def main(argv=None):
    a = parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device, driver = device_info()
    lines = []
    if getattr(_cuda, "emulated", False):
        lines += ["**EMULATED on the CPU (cuda/emu): a check of this script; the times say "
                  "nothing about a GPU.**", ""]
    kernels, copies = [], []
    for dtype in a.dtypes:
        rows, copy_gbps = kernel_rows(a.mib, dtype, a.iters)
        copies.append(copy_gbps)
        kernels += rows
        lines += [f"## Kernels: {a.mib:g} MiB of {dtype}, copy bandwidth {copy_gbps:.0f} GB/s "
                  "(read+write)", "", "| codec | kernel | ms | GB/s | % of copy |",
                  "|---|---|---:|---:|---:|"]
        lines += [f"| {r['codec']} | {r['kernel']} | {r['ms']:.3f} | {r['gbps']:.0f} | "
                  f"{100 * r['gbps'] / copy_gbps:.0f}% |" for r in rows]
        lines.append("")
    copy_gbps = max(copies)
    item = numpy_dtype(a.pipe_dtype).itemsize
    n = int(a.pipe_mib * (1 << 20)) // item // a.ranks * a.ranks  # chunks of equal size
    group = Loopback(a.ranks, n, a.pipe_dtype)
    slice_elems = group.slice_elems()
    alone = Kernels(n, a.pipe_dtype)
    lines += [f"## Loopback pipeline: allreduce of {a.pipe_mib:g} MiB {a.pipe_dtype} on {a.ranks} "
              f"virtual ranks of one GPU (slice: {slice_elems} elements, "
              f"{slice_elems * item / 2**20:g} MiB)", "",
              "| codec | algo | pipelined ms | one slice per chunk ms | at 4 MiB slices ms | "
              "alone ms | pipelined / one slice | pipelined / alone |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    pipeline = []
    for codec in a.pipe_codecs:
        for algo in ALGOS:
            pipe, _ = group.run(codec, algo, 0, a.iters)
            whole, _ = group.run(codec, algo, n // a.ranks, max(2, a.iters // 2))
            small, _ = group.run(codec, algo, NCCL_SLICE_BYTES // item, max(2, a.iters // 2))
            sum_ms = alone_ms(alone, codec, algo, a.ranks, a.iters)
            pipeline.append({"codec": codec, "algo": algo, "mib": a.pipe_mib,
                             "pipelined_ms": pipe, "one_slice_ms": whole, "alone_ms": sum_ms})
            lines.append(f"| {codec} | {algo} | {pipe:.2f} | {whole:.2f} | {small:.2f} | "
                         f"{sum_ms:.2f} | {pipe / whole:.2f} | {pipe / sum_ms:.2f} |")
    a2a, a2a_lines = alltoall_rows(a.ranks, a.a2a_mib, a.a2a_iters, a.iters)
    lines += [""] + a2a_lines
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    doc = {"device": device, "driver": driver, "commit": commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "copy_gbps": copy_gbps,
           "kernels": [{k: r[k] for k in ("codec", "kernel", "dtype", "gbps")} for r in kernels],
           "pipeline": pipeline, "alltoall": a2a}
    (out / "kernels.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
