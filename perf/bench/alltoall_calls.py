"""Per-call cost of ``Communicator.all_to_all`` over TCP, as ratios measured in one run: what
an MoE step's small all-to-all calls pay besides their bytes.

    .venv/bin/python -m perf.bench.alltoall_calls [--ranks 4] [--calls 20] [--reps 50] \
        [--rows 4,320] [--row 256] [--codecs none,fp8_e4m3:g128] [--torch] [--json out]

``--ranks`` processes on this machine, each a ccompress communicator over the TCP transport
(loopback), make ``--calls`` back-to-back all-to-alls of float32 rows of ``--row`` elements,
``--rows`` rows per rank in all (320: the MoE rows' dispatch at its defaults, 128 tokens x
top-2 x capacity 1.25), cut unevenly over the ranks (rank r sends ``rows / P`` plus one row to
rank r + 1 and one fewer to rank r - 1), with each codec of ``--codecs``. Beside them, in the
same run, the same ranks make back-to-back all-gathers of one element with codec ``none``:
a call check and one round of one-element messages, the least any collective costs (the
reference row, 1.00). The rows take turns in short blocks of ``--calls`` calls, ``--reps``
times, so a machine shared with other jobs slows all of them alike; each figure is the
median over the repetitions of the slowest rank's microseconds per call, and the ratio
column the median of its ratio to the reference's block of the same repetition.

With ``--torch`` the calls are torch's ``dist.all_to_all_single`` as an MoE layer makes them
(equal splits, as examples/moelm.py's capacity slots): the reference row is a gloo group's,
the others a ``ccompress`` group's per codec of ``--codecs`` (``none``: delegated to its inner
gloo group), so the ratio is what the backend's compressed call costs against gloo's. Beside
them, ``dist.all_reduce`` of one 4-element tensor (a loss or a norm) on the gloo group, its
own reference, and on each ``ccompress`` group, whose all_reduce codec is the same codec: it
delegates every time (``"codec none"``, else ``"small"``), so its ratio is what the backend's
exact path costs against gloo's.

``header B`` is what one call sends from a rank besides its payload (``last_stats``: the call
check and every message's 16-byte header), ``payload B`` the encoded pieces.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import time
from typing import Any, Dict, List, Tuple

import numpy as np


def _splits(rank: int, size: int, rows: int) -> List[int]:
    """Rank ``rank``'s rows for each rank: ``rows // size`` each, one more to the next rank
    and one fewer to the previous one (equal where there are fewer than 2 rows a piece)."""
    base = [rows // size] * size
    base[0] += rows - sum(base)
    if size > 2 and rows // size >= 2:
        base[(rank + 1) % size] += 1
        base[(rank - 1) % size] -= 1
    return base


def _cases(rank: int, size: int, args: Any) -> List[Dict[str, Any]]:
    """The reference and the all-to-all cases of one rank (Communicator calls)."""
    rows_list = [int(r) for r in args["rows"]]
    row = int(args["row"])
    cases: List[Dict[str, Any]] = [{"name": "allgather 1 elem (reference)", "kind": "ref",
                                    "x": np.zeros(1, np.float32)}]
    for rows in rows_list:
        ins = _splits(rank, size, rows)
        outs = [_splits(j, size, rows)[rank] for j in range(size)]
        x = np.random.default_rng(rank).standard_normal((rows, row)).astype(np.float32)
        y = np.empty((sum(outs), row), np.float32)
        for codec in args["codecs"]:
            cases.append({"name": f"all_to_all {rows}x{row} {codec}", "kind": "a2a", "x": x,
                          "y": y, "ins": ins, "outs": outs, "codec": codec})
    return cases


def _torch_cases(rank: int, size: int, args: Any, port: int) -> Tuple[Any, List[Dict[str, Any]]]:
    """torch's all_to_all_single on a gloo group (the reference) and on a ccompress group per
    codec, equal splits; the default group is gloo over a store on ``port``."""
    import torch
    import torch.distributed as dist

    import ccompress.torch as cct

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    row = int(args["row"])
    gloo = dist.new_group(backend="gloo")
    cases: List[Dict[str, Any]] = []
    for rows in [int(r) for r in args["rows"]]:
        rows -= rows % size
        x = torch.randn(rows, row, generator=torch.Generator().manual_seed(rank))
        groups = [("gloo", gloo)] + [
            (f"ccompress {c}", dist.new_group(backend="ccompress", pg_options=cct.BackendOptions(
                all_to_all=c, all_reduce=c)))
            for c in args["codecs"]]
        for label, g in groups:
            cases.append({"name": f"all_to_all_single {rows}x{row} {label}", "kind": "torch",
                          "x": x, "y": torch.empty_like(x), "group": g})
    ref = cases.pop(next(i for i, c in enumerate(cases) if c["group"] is gloo))
    cases = [ref] + cases
    small, first = torch.zeros(4), len(cases)  # below min_numel: every group delegates it
    for label, g in groups:  # gloo's first: the reference of these rows
        cases.append({"name": f"all_reduce 4 {label}", "kind": "torch_ar", "x": small,
                      "group": g, "ref": first})
    return dist, cases


def _worker(rank: int, size: int, args: Any, addrs: Any, out: Any) -> None:
    import ccompress as cc
    from ccompress import _core

    if args["torch"]:
        dist, cases = _torch_cases(rank, size, args, args["port"])
        barrier, comm = dist.barrier, None
    else:
        t = _core.TcpTransport(rank, size, "127.0.0.1")
        addrs.put((rank, t.address))
        t.connect(args["addresses"].get(), 60.0)
        comm = cc.Communicator(t, timeout=120)
        cases, barrier = _cases(rank, size, args), comm.barrier

    def once(case: Dict[str, Any]) -> Dict[str, int]:
        if case["kind"] == "ref":
            comm.allgather(case["x"])
        elif case["kind"] == "a2a":
            comm.all_to_all(case["x"], case["y"], codec=case["codec"], in_splits=case["ins"],
                            out_splits=case["outs"])
        elif case["kind"] == "torch":
            dist.all_to_all_single(case["y"], case["x"], group=case["group"])
            return {}
        else:
            dist.all_reduce(case["x"], group=case["group"])
            return {}
        return comm.last_stats

    calls = int(args["calls"])
    times: List[List[float]] = [[] for _ in cases]
    stats: List[Dict[str, int]] = [{} for _ in cases]
    for i, case in enumerate(cases):  # warm up
        for _ in range(5):
            stats[i] = once(case)
    for _ in range(int(args["reps"])):
        for i, case in enumerate(cases):
            barrier()
            start = time.perf_counter()
            for _ in range(calls):
                once(case)
            times[i].append((time.perf_counter() - start) / calls * 1e6)
    out.put((rank, [(c["name"], c.get("ref", 0)) for c in cases], times,
             [{k: int(s.get(k, 0)) for k in ("header_bytes", "payload_bytes")} for s in stats]))
    if comm is not None:
        comm.close()
    else:
        dist.destroy_process_group()


def main(argv: Any = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rows", default="4,320")
    ap.add_argument("--row", type=int, default=256)
    ap.add_argument("--codecs", default="none,fp8_e4m3:g128")
    ap.add_argument("--torch", action="store_true",
                    help="torch's all_to_all_single: gloo against the ccompress backend")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    ctx = mp.get_context("spawn")
    addrs, results = ctx.Queue(), ctx.Queue()
    tables = [ctx.Queue() for _ in range(a.ranks)]
    with socket.socket() as sock:  # a free port for torch's store
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    for r in range(a.ranks):
        args = {"rows": a.rows.split(","), "row": a.row, "calls": a.calls, "reps": a.reps,
                "codecs": a.codecs.split(","), "addresses": tables[r], "torch": a.torch,
                "port": port}
        p = ctx.Process(target=_worker, args=(r, a.ranks, args, addrs, results))
        p.start()
        procs.append(p)
    if not a.torch:
        got = dict(addrs.get(timeout=120) for _ in range(a.ranks))
        for q in tables:
            q.put([got[r] for r in range(a.ranks)])
    per_rank = [results.get(timeout=3600) for _ in range(a.ranks)]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a rank exited with {p.exitcode}")
    per_rank.sort()
    names, refs = zip(*per_rank[0][1])
    reps = len(per_rank[0][2][0])
    # The slowest rank's time in each repetition, then the median over repetitions; a row's
    # ratio is to its reference's block (the first row; a torch all_reduce: gloo's).
    slowest = [[max(pr[2][i][k] for pr in per_rank) for k in range(reps)]
               for i in range(len(names))]
    ratios = [[slowest[i][k] / slowest[refs[i]][k] for k in range(reps)]
              for i in range(len(names))]
    rows = []
    print(f"{'call':<44} {'us/call':>9} {'vs ref':>7} {'header B':>9} {'payload B':>10}")
    for i, name in enumerate(names):
        st = max((pr[3][i] for pr in per_rank), key=lambda s: s["header_bytes"])
        row = {"call": name, "us_per_call": statistics.median(slowest[i]),
               "vs_reference": statistics.median(ratios[i]), **st}
        rows.append(row)
        print(f"{name:<44} {row['us_per_call']:9.0f} {row['vs_reference']:7.2f} "
              f"{st['header_bytes']:9d} {st['payload_bytes']:10d}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ranks": a.ranks, "calls": a.calls, "reps": a.reps, "torch": a.torch,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
