"""``python -m ccompress.tools.trace DIR``: what the ``CCOMPRESS_TRACE`` files of a run say
about each collective (ccompress/torch/_trace.py writes them).

Every rank issues a group's collectives in the same order, so the k-th call of one op, codec
and size in a group is the same collective on every rank. For each such collective the
summary takes, over its calls after ``--skip`` warm-up ones (the last call alone where it
was called no more often), the medians of:

- ``spread``: from the first rank's call to the last rank's (the time the early ranks'
  call waits for the slowest rank to reach it: compute skew, not communication);
- ``after last``: from the last rank's call until the result is ready on every rank (the
  collective's own time, queued behind the group's earlier calls included);
- ``on a rank``: from a rank's call to its result (the mean over ranks).

``spread`` and ``after last`` compare clocks of different ranks: they mean something when
the ranks share a host's monotonic clock (one host, or emulated nodes on one host).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

Key = Tuple[int, str, int]  # (group, event name, numel)


def load(directory: str) -> Dict[int, List[dict]]:
    """The complete events (compressed calls) of every trace file in ``directory``, by rank,
    in time order."""
    files = sorted(Path(directory).glob("ccompress-trace-*.json"))
    if not files:
        raise FileNotFoundError(f"{directory}: no ccompress-trace-*.json files "
                                "(CCOMPRESS_TRACE=DIR writes them)")
    ranks: Dict[int, List[dict]] = defaultdict(list)
    for f in files:
        for ev in json.loads(f.read_text(encoding="utf-8")):
            if ev.get("ph") == "X":
                ranks[ev["pid"]].append(ev)
    for evs in ranks.values():
        evs.sort(key=lambda e: e["ts"])
    return dict(ranks)


def summarize(ranks: Dict[int, List[dict]], skip: int = 5) -> List[dict]:
    """One row per (group, op and codec, numel) seen on every rank, in the order of its
    first call: calls, and the medians of ``spread_ms``, ``after_last_ms``, ``rank_ms`` and
    ``bytes_sent`` (a rank's, the mean over ranks)."""
    calls: Dict[int, Dict[Key, List[dict]]] = {}
    order: Dict[Key, float] = {}
    for rank, evs in ranks.items():
        calls[rank] = defaultdict(list)
        for ev in evs:
            key = (ev["tid"], ev["name"], ev["args"]["numel"])
            calls[rank][key].append(ev)
            order[key] = min(order.get(key, ev["ts"]), ev["ts"])
    rows = []
    for key in sorted(order, key=order.get):
        per_rank = [calls[r].get(key, []) for r in ranks]
        n = min(len(c) for c in per_rank)
        if n == 0:
            continue  # not on every rank (a group over some of the ranks)
        spread, after, own, sent = [], [], [], []
        for k in range(min(skip, n - 1), n):
            evs = [c[k] for c in per_rank]
            starts = [e["ts"] for e in evs]
            ends = [e["ts"] + e["dur"] for e in evs]
            spread.append(max(starts) - min(starts))
            after.append(max(ends) - max(starts))
            own.append(statistics.fmean(e["dur"] for e in evs))
            sent.append(statistics.fmean(e["args"]["bytes_sent"] for e in evs))
        rows.append({"group": key[0], "name": key[1], "numel": key[2], "calls": n,
                     "spread_ms": statistics.median(spread) / 1e3,
                     "after_last_ms": statistics.median(after) / 1e3,
                     "rank_ms": statistics.median(own) / 1e3,
                     "bytes_sent": statistics.median(sent)})
    return rows


def table(rows: List[dict], labels: Optional[Dict[int, str]] = None) -> str:
    """``rows`` of :func:`summarize` as a Markdown table; ``labels`` names the groups."""
    out = ["| group | collective | elements | calls | spread (ms) | after last (ms) | "
           "on a rank (ms) | MB sent/call |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        group = (labels or {}).get(r["group"], str(r["group"]))
        out.append(f"| {group} | {r['name']} | {r['numel']} | {r['calls']} | "
                   f"{r['spread_ms']:.0f} | {r['after_last_ms']:.0f} | {r['rank_ms']:.0f} | "
                   f"{r['bytes_sent'] / 1e6:.2f} |")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccompress.tools.trace",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", help="the CCOMPRESS_TRACE directory of a run")
    ap.add_argument("--skip", type=int, default=5,
                    help="warm-up calls of each collective left out (default 5)")
    args = ap.parse_args(argv)
    if args.skip < 0:
        ap.error(f"--skip {args.skip}: must be >= 0")
    try:
        rows = summarize(load(args.directory), args.skip)
    except FileNotFoundError as e:
        print(f"ccompress trace: {e}", file=sys.stderr)
        return 2
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
