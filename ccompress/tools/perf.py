"""ccompress-perf: nccl-tests-style sweep of compressed collectives against the engine's own.

    mpiexec -n 4 ccompress-perf allreduce -b 1M -e 64M -f 4 --codec fp8_e4m3:g128 --algo two_shot
    mpiexec -n 4 ccompress-perf alltoall -b 1M -e 16M -f 4 --codec mxfp8   # size: each rank's input
    ccompress-perf allreduce --inproc 4 ...      # ranks as threads of one process, no MPI

Columns and formulas: perf/README.md. Every rank builds every rank's input from the seed
(rank r's part is ``default_rng([seed, r]).standard_normal``), so the fp64 reference needs no
communication. The results of all-reduce and all-gather are checked on rank 0 (the other
ranks must hold bit-identical bytes); reduce-scatter chunks are checked on their own rank, and
so is each rank's all-to-all output (equal splits), whose every piece must also hold the bits
of its sender's own encode + decode of it.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shlex
import socket
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

import ccompress as cc
from .._internal import arrays as _arrays
from .bounds import allreduce_error_bound, hier_error_bound

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "alltoall")
BASELINE = {"allreduce": "MPI_Allreduce", "reduce_scatter": "MPI_Reduce_scatter",
            "allgather": "MPI_Allgather", "alltoall": "MPI_Alltoallv"}
OWN_CHECK = ("reduce_scatter", "alltoall")  # outputs that differ by rank: each checks its own
COLUMNS = [("size", 12), ("count", 11), ("type", 9), ("redop", 5), ("codec", 18), ("algo", 13),
           ("time(us)", 10), ("algbw(GB/s)", 11), ("busbw(GB/s)", 11), ("wire(B)", 11),
           ("ratio", 6), ("relerr", 9), ("maxerr", 9), ("#wrong", 6)]


def parse_size(text: str) -> int:
    """'64K', '1M', '2G' (powers of 1024; a trailing 'B' or 'iB' is allowed) -> bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size {text!r}; use e.g. 4096, 64K, 1M, 2G") from None


def busbw_factor(kind: str, n: int) -> float:
    return (2.0 if kind == "allreduce" else 1.0) * (n - 1) / n


# ---- the group of ranks: MPI processes, or threads of this process ----
class MpiGroup:
    def __init__(self, slices: List[Optional[int]], **kw: Any) -> None:
        from mpi4py import MPI
        self.MPI, self.mpi = MPI, MPI.COMM_WORLD
        self.comms = [cc.Communicator.from_mpi(self.mpi, slice_elems=s, **kw) for s in slices]
        self.comm = self.comms[0]
        self.rank, self.size = self.mpi.Get_rank(), self.mpi.Get_size()
        self.transport = "mpi, " + " ".join(MPI.Get_library_version().split()[:3])

    cpu_clock = staticmethod(time.process_time)  # one process per rank

    def barrier(self) -> None:
        self.mpi.Barrier()

    def reduce(self, a: np.ndarray, op: str) -> np.ndarray:
        out = np.empty_like(a)
        self.mpi.Allreduce(a, out, op=self.MPI.MAX if op == "max" else self.MPI.SUM)
        return out

    def allgather(self, obj: Any) -> List[Any]:
        return self.mpi.allgather(obj)

    def baseline(self, kind: str, x: np.ndarray, out: np.ndarray, op: str) -> Callable[[], None]:
        """The engine's own collective on float32 arrays (MPI has no bfloat16)."""
        m, SUM, n = self.mpi, self.MPI.SUM, self.size
        if kind == "allgather":
            return lambda: m.Allgather(x, out)
        if kind == "alltoall":
            counts = [x.size // n] * n
            displs = [r * (x.size // n) for r in range(n)]
            return lambda: m.Alltoallv([x, (counts, displs)], [out, (counts, displs)])
        if kind == "reduce_scatter":
            counts = [hi - lo for lo, hi in (cc.chunk_range(x.size, n, r) for r in range(n))]
            call = lambda: m.Reduce_scatter(x, out, recvcounts=counts, op=SUM)  # noqa: E731
        else:
            call = lambda: m.Allreduce(x, out, op=SUM)  # noqa: E731
        if op == "avg":
            return lambda: (call(), np.multiply(out, np.float32(1.0 / n), out=out))
        return call


class ThreadGroup:
    """One rank of ``--inproc N``: collectives over the in-process transport; the small
    reductions of this tool through a barrier and shared slots."""

    def __init__(self, comms: List[cc.Communicator], shared: Dict[str, Any]) -> None:
        self.comms, self.comm = comms, comms[0]
        self.rank, self.size = self.comm.rank, self.comm.size
        self.transport = f"inproc ({self.size} threads)"
        self._bar: threading.Barrier = shared["barrier"]
        self._slots: List[Any] = shared["slots"]

    cpu_clock = staticmethod(time.thread_time)  # one thread per rank

    def barrier(self) -> None:
        self._bar.wait()

    def allgather(self, obj: Any) -> List[Any]:
        self._slots[self.rank] = obj
        self._bar.wait()
        out = list(self._slots)
        self._bar.wait()
        return out

    def reduce(self, a: np.ndarray, op: str) -> np.ndarray:
        parts = np.stack(self.allgather(a))
        return parts.max(axis=0) if op == "max" else parts.sum(axis=0)

    def baseline(self, *args: Any) -> None:
        return None  # no MPI engine in this mode


# ---- inputs, reference and checks ----
def make_part(seed: int, rank: int, count: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng([seed, rank])
    return rng.standard_normal(count, dtype=np.float32).astype(_arrays.numpy_dtype(dtype))


def check(kind: str, y: np.ndarray, parts: np.ndarray, codec: str, algo: str, op: str,
          dtype: str, rank: int, hier: Optional[tuple] = None) -> np.ndarray:
    """[sum err^2, sum ref^2, elements outside the bound, max |err|] of this rank's output."""
    n = parts.shape[0]
    if kind == "alltoall":  # equal pieces: rank i's piece for this rank, one quantization each
        pieces = [parts[i].reshape(n, -1)[rank] for i in range(n)]
        ref = np.concatenate(pieces).astype(np.float64)
        bound = np.concatenate([allreduce_error_bound(p[None], codec, "one_shot", "sum", dtype)
                                for p in pieces])
    elif kind == "allgather":
        ref = parts.astype(np.float64)
        bound = np.stack([allreduce_error_bound(parts[r:r + 1], codec, "one_shot", "sum", dtype)
                          for r in range(n)])
    else:
        ref = parts.astype(np.float64).sum(axis=0) / (n if op == "avg" else 1)
        if algo == "hier":  # hier = (ranks per node, inter-node algo, intra-node codec)
            bound = hier_error_bound(parts, codec, hier[1], hier[0], hier[2], op, dtype, kind)
        else:
            bound = allreduce_error_bound(parts, codec, algo, op, dtype)
        if kind == "reduce_scatter":
            lo, hi = cc.chunk_range(ref.size, n, rank)
            ref, bound = ref[lo:hi], bound[lo:hi]
    err = np.abs(y.astype(np.float64).reshape(ref.shape) - ref)
    wrong = int(np.count_nonzero(~(err <= bound)))  # NaN counts as wrong
    return np.array([np.sum(err * err), np.sum(ref * ref), wrong, err.max(initial=0.0)])


def alltoall_bits_wrong(g: Any, x: np.ndarray, y: np.ndarray, codec: str) -> int:
    """Pieces of an all-to-all (equal splits) whose received bits differ from their sender's
    own encode + decode of the piece (Codec.roundtrip), counted over all ranks alike; 0 for
    stochastic rounding, whose noise the sender's collective draws, not the roundtrip."""
    if codec.endswith(":sr"):
        return 0
    c, P = cc.Codec.parse(codec), g.size

    def digest(a: np.ndarray) -> bytes:
        return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).digest()

    sent = [digest(c.roundtrip(p)) for p in x.reshape(P, -1)]
    got = [digest(p) for p in y.reshape(P, -1)]
    table = g.allgather((sent, got))
    return sum(table[i][0][j] != table[j][1][i] for i in range(P) for j in range(P))


def timed(g: Any, fns: List[Callable[[], Any]], warmup: int,
          iters: int) -> List[Tuple[List[float], List[float]]]:
    """For each of ``fns``: per-iteration seconds of the slowest rank (warm-ups first, barrier
    around each), and per iteration the CPU seconds of a rank (g.cpu_clock), averaged over the
    ranks. The iterations take the functions in turn (fns[0], fns[1], ..., then again), so
    that on a host whose speed drifts every function sees the same stretch of time."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    local: List[List[float]] = [[] for _ in fns]
    cpu: List[List[float]] = [[] for _ in fns]
    for _ in range(iters):
        for i, fn in enumerate(fns):
            g.barrier()
            t0, c0 = time.perf_counter(), g.cpu_clock()
            fn()
            local[i].append(time.perf_counter() - t0)
            cpu[i].append(g.cpu_clock() - c0)
    g.barrier()
    return [(list(g.reduce(np.array(t), "max")), list(g.reduce(np.array(c), "sum") / g.size))
            for t, c in zip(local, cpu)]


def fmt_row(values: List[Any]) -> str:
    return " ".join(str(v).rjust(w) for v, (_, w) in zip(values, COLUMNS))


# ---- the sweep ----
def run(args: argparse.Namespace, g: Any) -> int:
    kind, dtype, op, P = args.collective, args.dtype, args.op, g.size
    redop = "-" if kind in ("allgather", "alltoall") else op
    esize = 4 if dtype == "float32" else 2
    codecs = args.codec or ["none", "fp8_e4m3:g128"]
    if kind == "allreduce":
        algos = args.algo or ["auto"]
    elif kind == "alltoall":
        algos = ["pairwise"]
    else:  # their flat schedule, then the hierarchical one where asked
        algos = ["-"] + (["hier"] if args.algo else [])
    for c in codecs:
        cc.Codec.parse(c)  # a bad spec fails here, on every rank, before anything moves
    t_start, main = time.time(), g.rank == 0
    out = sys.stdout

    def say(line: str) -> None:
        if main:
            print(line, file=out, flush=True)

    say(f"# ccompress-perf {kind}: {' '.join(shlex.quote(a) for a in sys.argv)}")
    say(f"# date {datetime.datetime.now().isoformat(timespec='seconds')}  host {socket.gethostname()}"
        f" ({os.cpu_count()} cpus)  ranks {P}  transport {g.transport}  ccompress {cc.__version__}")
    slice_elems = [c.slice_elems for c in g.comms]
    say(f"# slice_elems {', '.join(map(str, slice_elems))}"
        f"{'' if args.slice_elems else ' (the transport default)'}"
        f"{'; a row per codec, algo and slice size (codec/sN)' if len(g.comms) > 1 else ''}")
    say(f"# inputs: rank r holds default_rng([{args.seed}, r]).standard_normal(count) as {dtype}; "
        f"ref = fp64 {op} over ranks; check {'on' if args.check else 'off'}")
    say(f"# time: median over {args.iters} iterations (after {args.warmup} warm-ups) of the "
        f"slowest rank's time{'; the rows of a size interleaved' if args.interleave else ''}; "
        "wire(B) = bytes sent per call by the busiest rank")
    hosts = set(g.allgather(socket.gethostname()))
    if P > 1 and len(hosts) == 1:
        say(f"# note: all {P} ranks run on this one host and move data through shared memory, "
            "which is faster than the codecs, so here compressed rows can be slower than the")
        say("# baseline: read this table for wire bytes (ratio) and accuracy. Over a slower link "
            "the saved bytes become time (the model rows at the end; perf/bench/emulated_net.py).")
    say("#" + fmt_row([name for name, _ in COLUMNS])[1:])
    rows: List[Dict[str, Any]] = []
    sizes, s = [], args.minbytes
    while s <= args.maxbytes:
        sizes.append(s)
        s = max(s + 1, int(s * args.stepfactor))
    for size in sizes:
        count = max(size // esize, 1)
        if kind in ("allgather", "alltoall"):
            count = max(count // P, 1) * P
        S = count * esize
        nloc = count // P if kind == "allgather" else count
        if main and time.time() - t_start > 5:
            print(f"# [{time.time() - t_start:7.1f} s] {kind} {S} bytes ...", file=sys.stderr,
                  flush=True)
        x = make_part(args.seed, g.rank, nloc, dtype)
        need_parts = args.check and (main or kind in OWN_CHECK)
        parts = np.stack([x if r == g.rank else make_part(args.seed, r, nloc, dtype)
                          for r in range(P)]) if need_parts else None
        lo, hi = cc.chunk_range(count, P, g.rank)
        shape = {"allreduce": (count,), "reduce_scatter": (hi - lo,), "allgather": (P, nloc),
                 "alltoall": (count,)}[kind]
        ring_bytes = S * busbw_factor(kind, P)

        pending: List[Tuple[Dict[str, Any], Callable[[], Any]]] = []  # rows to time

        def measure(codec: str, algo: str, fn: Callable[[], Any], y: np.ndarray, wire: int,
                    check_codec: str, check_algo: str, check_dtype: str, typ: str) -> None:
            """Checks one row's result, then times it (--interleave: later, with the size's
            other rows)."""
            stats = np.zeros(4)
            wrong_identity = 0
            if args.check:
                fn()
                if parts is not None:
                    stats = check(kind, y, parts, check_codec, check_algo, op, check_dtype, g.rank,
                                  (g.comm.ranks_per_node, args.inter_algo, args.intra_codec))
                if kind == "alltoall":  # every piece: the bits its sender encoded
                    src = x if typ == dtype else x.astype(np.float32)
                    wrong_identity = alltoall_bits_wrong(g, src, y, check_codec)
                elif kind != "reduce_scatter":  # every rank must hold the same bytes
                    digests = g.allgather(hashlib.blake2b(y.tobytes(), digest_size=16).digest())
                    wrong_identity = sum(d != digests[0] for d in digests)
            tot = g.reduce(stats[:3].copy(), "sum")
            mx = g.reduce(np.array([stats[3], wire]), "max")
            relerr = float(np.sqrt(tot[0] / tot[1])) if tot[1] > 0 else float(np.sqrt(tot[0]))
            wrong = int(tot[2]) + wrong_identity
            wire_max = int(mx[1])
            row = {"size": S, "count": count, "type": typ, "redop": redop, "codec": codec,
                   "algo": algo, "wire_bytes": wire_max,
                   "ratio": ring_bytes / wire_max if wire_max else None,
                   "relerr": relerr if args.check else None,
                   "maxerr": float(mx[0]) if args.check else None,
                   "wrong": wrong if args.check else None,
                   "wrong_identity": wrong_identity if args.check else None}
            rows.append(row)
            pending.append((row, fn))
            if not args.interleave:
                finish()

        def finish() -> None:
            """Times the pending rows (in turn) and prints them."""
            for (row, _), (times, cpu) in zip(pending, timed(g, [fn for _, fn in pending],
                                                             args.warmup, args.iters)):
                t = statistics.median(times)
                row.update(time_us=t * 1e6, algbw_GBps=S / t / 1e9,
                           busbw_GBps=S / t / 1e9 * busbw_factor(kind, P),
                           times_us=[v * 1e6 for v in times], cpu_us=statistics.median(cpu) * 1e6)
                show(row)
            pending.clear()

        def show(row: Dict[str, Any]) -> None:
            na, checked = "N/A", args.check
            say(fmt_row([row["size"], row["count"], row["type"], redop, row["codec"], row["algo"],
                         f"{row['time_us']:.1f}", f"{row['algbw_GBps']:.3f}",
                         f"{row['busbw_GBps']:.3f}", row["wire_bytes"],
                         f"{row['ratio']:.2f}" if row["ratio"] else na,
                         f"{row['relerr']:.2e}" if checked else na,
                         f"{row['maxerr']:.2e}" if checked else na,
                         row["wrong"] if checked else na]))

        # The engine's own collective first, on float32: MPI has no bfloat16, so 16-bit inputs
        # are widened and it moves twice the bytes (its wire and ratio say so).
        xb = x.astype(np.float32)
        yb = np.empty(shape, dtype=np.float32)
        base = g.baseline(kind, xb, yb, op)
        if base is not None:
            measure(BASELINE[kind], "-", base, yb, int(ring_bytes) * 4 // esize, "none",
                    "ring" if kind == "allreduce" else "reduce_scatter", "float32", "float32")

        def measure_codec(comm: cc.Communicator, label: str, codec: str, algo: str) -> None:
            """The row of one codec, algo and communicator (hence slice size)."""
            y = np.empty(shape, dtype=x.dtype)
            hier = algo == "hier"  # the level options go with algo="hier" only
            if kind == "allreduce":
                kw = dict(intra_codec=args.intra_codec, inter_algo=args.inter_algo) if hier else {}
                fn = lambda: comm.allreduce(x, codec=codec, algo=algo, op=op, out=y, **kw)  # noqa: E731
            elif kind == "reduce_scatter":
                kw = dict(algo="hier", intra_codec=args.intra_codec) if hier else {}
                fn = lambda: comm.reduce_scatter(x, codec=codec, op=op, out=y, **kw)  # noqa: E731
            elif kind == "alltoall":
                fn = lambda: comm.all_to_all(x, y, codec=codec)  # noqa: E731
            else:
                kw = dict(algo="hier") if hier else {}
                fn = lambda: comm.allgather(x, codec=codec, out=y, **kw)  # noqa: E731
            fn()  # resolves auto and fills last_stats
            st = comm.last_stats
            resolved = st["algo"] if kind == "allreduce" or algo == "hier" else kind
            shown = st["algo"] if algo != "auto" else "auto:" + st["algo"]
            if kind == "alltoall":
                shown = algo
            measure(label, shown if kind in ("allreduce", "alltoall") else st["algo"], fn, y,
                    st["payload_bytes"] + st["header_bytes"], codec, resolved, dtype, dtype)
            rows[-1]["algo_requested"] = algo
            rows[-1]["slice_elems"] = comm.slice_elems

        for codec in codecs:
            for algo in algos:
                for comm in g.comms:
                    label = codec if len(g.comms) == 1 else f"{codec}/s{comm.slice_elems}"
                    measure_codec(comm, label, codec, algo)
        finish()  # --interleave: this size's rows, timed in turn
        parts = None  # free before the next size
    nwrong = sum(r["wrong"] or 0 for r in rows)
    model_rows: List[Dict[str, Any]] = []
    if main and kind == "allreduce" and args.link_gbps and rows:
        model_rows = model_table(rows, args.link_gbps, P, esize, say,
                                 g.comm.ranks_per_node or 1)
    say(f"# {len(rows)} rows, {nwrong} wrong, {time.time() - t_start:.1f} s")
    if main and args.json:
        with open(args.json, "w") as f:
            json.dump({"command": sys.argv, "collective": kind, "ranks": P,
                       "transport": g.transport, "host": socket.gethostname(),
                       "cpus": os.cpu_count(), "version": cc.__version__,
                       "date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "dtype": dtype, "op": op, "iters": args.iters, "warmup": args.warmup,
                       "interleave": args.interleave,
                       "seed": args.seed, "slice_elems": slice_elems, "rows": rows, "model_rows": model_rows}, f, indent=1)
    return 1 if args.check and nwrong else 0


def model_table(rows: List[Dict[str, Any]], rates: List[float], P: int, esize: int,
                say: Callable[[str], None], ranks_per_node: int = 1) -> List[Dict[str, Any]]:
    """Prints (and returns) the cost model's time of the largest measured size over links of
    each rate in ``rates`` (Gbit/s), for every measured codec and algorithm next to the
    model's MPI_Allreduce, with codec rates measured here: the system of the model's
    validation (perfmodel.emulated_system: MPI over TCP, nodes of ``ranks_per_node`` ranks,
    the host transport's CPU), and the error the model had there at the validated rate
    nearest each one (perfmodel.validation_error). Model, not measurement."""
    from . import perfmodel as pm

    S = max(r["size"] for r in rows)
    count = S // esize
    cores = os.cpu_count() or 1
    # All ranks in one node (one host): no link between them to model, so each rank is
    # modelled as a node of its own, which is what the rates ask about.
    g = ranks_per_node if 1 < ranks_per_node < P and P % ranks_per_node == 0 else 1
    own = " (this run's ranks share one host: modelled one per node)" \
        if ranks_per_node >= P > 1 else ""
    say(f"# MODEL, not measured: {P} ranks in nodes of {g}{own}, each node's full-duplex link at "
        f"each rate (alpha {pm.EMULATED_ALPHA * 1e6:.0f} us), MPI over TCP (the host "
        f"transport's CPU: perfmodel.EMULATED_HOST), the ranks sharing {cores} cores, codec "
        "rates measured now on one thread; model err: the model's median (max) |error| "
        f"against the emulated runs at that rate ({pm.VALIDATION_SOURCE})")
    say(f"# model   Gbit/s {'size':>11} {'codec':>18} {'algo':>13} {'time(us)':>11} "
        f"{'vs MPI':>7} {'model err':>13}")
    costs: Dict[str, Any] = {}

    def cost(spec: str) -> Any:
        if spec not in costs:
            costs[spec] = pm.measure_codec_cost(spec, min(count, 1 << 22))
        return costs[spec]

    reduce_rate = cost("none").decode  # MPI's own reduction: a float32 add pass
    out: List[Dict[str, Any]] = []
    for rate in rates:
        system = pm.emulated_system(P, rate, cores, g, reduce_rate=reduce_rate)
        base = pm.baseline_time(system, count, esize)
        err = pm.validation_error(rate)
        worst = pm.validation_error(rate, worst=True)
        err_s = f"{100 * err:.0f}% ({100 * worst:.0f}%)" if err is not None else "untested"
        say(f"# model {rate:8g} {S:>11} {BASELINE['allreduce']:>18} {'-':>13} "
            f"{base * 1e6:11.1f} {'1.00x':>7} {err_s:>13}")
        for r in rows:
            if r["size"] != S or r["codec"] == BASELINE["allreduce"]:
                continue
            algo = r["algo"].split(":")[-1]
            if algo == "hier" and g == 1:
                continue  # no nodes to model
            c = cost(r["codec"])
            t = pm.hier_time(system, count, esize, c, intra=cost("none")) if algo == "hier" \
                else pm.collective_time(system, count, esize, c, algo)
            out.append({"gbit": rate, "size": S, "codec": r["codec"], "algo": algo,
                        "model_time_us": t * 1e6, "model_baseline_us": base * 1e6,
                        "model_error": err, "model_error_max": worst})
            say(f"# model {rate:8g} {S:>11} {r['codec']:>18} {algo:>13} {t * 1e6:11.1f} "
                f"{base / t:6.2f}x {err_s:>13}")
    return out


def parse_link_rates(text: str) -> List[float]:
    """'1,10,100' -> [1.0, 10.0, 100.0] Gbit/s; '' or 'none' -> no model rows."""
    if text.strip().lower() in ("", "none", "0"):
        return []
    try:
        rates = [float(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rates {text!r}; use e.g. 1,10,100") from None
    if any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError(f"link rates must be positive, got {text!r}")
    return rates


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds "(default: X)" to an option's help where the help does not state its default
    itself and there is one to state (not None, not a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ccompress-perf", description=__doc__.split("\n\n")[0],
                                epilog="Sizes take K/M/G suffixes (powers of 1024). Columns and "
                                       "formulas: perf/README.md",
                                formatter_class=_DefaultsFormatter)
    p.add_argument("collective", choices=COLLECTIVES, help="the collective to sweep")
    p.add_argument("-b", "--minbytes", type=parse_size, default="1M",
                   help="smallest message, bytes of input per rank")
    p.add_argument("-e", "--maxbytes", type=parse_size, default="64M",
                   help="largest message, bytes of input per rank")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0,
                   help="multiply the size by this factor per step")
    p.add_argument("-n", "--iters", type=int, default=5, help="timed iterations per row")
    p.add_argument("-w", "--warmup", type=int, default=2, help="untimed warm-up iterations per row")
    p.add_argument("-c", "--check", type=int, default=1,
                   help="1: check results against the fp64 reference and across ranks; 0: off")
    p.add_argument("-d", "--dtype", default="float32", choices=_arrays.SUPPORTED,
                   help="element type of the inputs")
    p.add_argument("-o", "--op", default="sum", choices=cc.OPS, help="reduction")
    p.add_argument("--codec", action="append",
                   help="codec spec, repeatable (default: none and fp8_e4m3:g128)")
    p.add_argument("--algo", action="append", choices=cc.ALGOS,
                   help="all-reduce schedule, repeatable (default: auto); reduce_scatter and "
                        "allgather take hier only, measured after their flat schedule")
    p.add_argument("--inter-algo", default="two_shot", choices=cc.ALGOS[1:-1],
                   help="--algo hier: the flat schedule between nodes")
    p.add_argument("--intra-codec", default="none",
                   help="--algo hier: the codec inside a node (none: exact)")
    p.add_argument("--ranks-per-node", type=int, metavar="G",
                   help="consecutive ranks per node for --algo hier (default: found from MPI's "
                        "shared-memory groups; with --inproc, 1)")
    p.add_argument("--slice-elems", type=int, action="append", metavar="N",
                   help="elements per pipelined slice (default: the transport's, 262144 over "
                        "MPI and 65536 in-process); repeatable: every codec row is measured "
                        "at each, one after the other, labelled codec/sN")
    p.add_argument("--interleave", action="store_true",
                   help="time the rows of a size in turn (an iteration of each, then the next), "
                        "not one after the other: on a host whose speed drifts (a shared VM) "
                        "every row then sees the same stretch of time; rows print per size")
    p.add_argument("--seed", type=int, default=1234, help="seed of every rank's input")
    p.add_argument("--json", metavar="PATH", help="write every row to PATH")
    p.add_argument("--inproc", type=int, metavar="N",
                   help="run N ranks as threads of this process instead of under MPI "
                        "(--inproc 1 measures a single rank)")
    p.add_argument("--link-gbps", type=parse_link_rates, default="1,10,100", metavar="RATES",
                   help="all-reduce only: after the measured rows, print the cost model's time "
                        "of the largest size over links of these rates (Gbit/s, comma "
                        "separated; 'none' for no model rows), marked MODEL")
    a = p.parse_args(argv)
    if a.minbytes <= 0 or a.maxbytes < a.minbytes or a.stepfactor <= 1 or a.iters < 1 \
            or a.warmup < 0:
        p.error("need 0 < -b <= -e, -f > 1, -n >= 1, -w >= 0")
    if a.collective == "alltoall" and a.algo:
        p.error("alltoall has one schedule (pairwise exchange); --algo does not apply")
    if a.collective != "allreduce" and set(a.algo or []) - {"hier"}:
        p.error(f"{a.collective} has one flat schedule; --algo takes only hier there")
    if a.slice_elems is not None and min(a.slice_elems) < 1:
        p.error("--slice-elems needs N >= 1")
    if a.inproc is not None and a.inproc < 1:
        p.error("--inproc needs N >= 1")
    return a


def comm_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The Communicator options the command line sets, but the slice size (see slices)."""
    return {} if args.ranks_per_node is None else {"ranks_per_node": args.ranks_per_node}


def slices(args: argparse.Namespace) -> List[Optional[int]]:
    """The slice size of each communicator a run measures with (None: the transport's)."""
    return args.slice_elems or [None]


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        if args.inproc:
            shared = {"barrier": threading.Barrier(args.inproc), "slots": [None] * args.inproc}
            first, *more = slices(args)
            others = [cc.Communicator.inproc(args.inproc, slice_elems=s, **comm_options(args))
                      for s in more]  # one in-process group per further slice size

            def body(comm: cc.Communicator) -> int:
                try:
                    return run(args, ThreadGroup([comm] + [o[comm.rank] for o in others], shared))
                except BaseException:
                    shared["barrier"].abort()
                    raise

            return cc.run_inproc(args.inproc, body, slice_elems=first, **comm_options(args))[0]
        group = MpiGroup(slices(args), **comm_options(args))
        if group.size == 1:
            print("ccompress-perf: ERROR: this is a 1-rank MPI world, so there is nothing to "
                  "communicate. Launch it under MPI (mpiexec -n 4 ccompress-perf ...), or pass "
                  "--inproc N for N ranks as threads of this process (--inproc 1 measures one "
                  "rank on purpose).", file=sys.stderr)
            return 2
        return run(args, group)
    except cc.CCompressError as e:
        print(f"ccompress-perf: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
