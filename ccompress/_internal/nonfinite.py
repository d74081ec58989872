"""``nonfinite="raise"``: a wrapper around a collective's body that raises NonFiniteError on
every rank alike when the output holds NaN/Inf (the output is written first)."""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from .errors import InvalidArgument, NonFiniteError

MODES = ("propagate", "raise")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidArgument(f"nonfinite={mode!r}; use 'propagate' or 'raise'")
    return mode


def raising(body: Callable[[], dict], call: Any, comm: Any) -> Callable[[], dict]:
    """``body`` (which runs ``call`` and returns its stats), then the check. The counts come
    with the stats (the executor counts each slice while it is in cache). all-reduce and
    all-gather outputs are equal on all ranks, so their counts are too; reduce-scatter chunks
    and all-to-all outputs differ, so there the ranks add their counts with one exact
    one-element all-reduce first, keeping ``last_stats`` those of the caller's collective."""

    def run() -> dict:
        stats = body()
        n_out, first_out = comm._backend.count_out(call, stats)
        anywhere = n_out
        if call.kind in ("reduce_scatter", "alltoall"):
            anywhere = float(comm._exact_sum(np.array([min(n_out, 1)], np.float32),
                                             "one_shot")[0])
            comm.last_stats = stats
        if anywhere:
            n_in = stats.get("nonfinite_in")
            at = "" if first_out is None else f", first at index {first_out}"
            where = f"{n_out} here{at}" if n_out else "none in this rank's output"
            raise NonFiniteError(
                f"{call.kind} produced non-finite (NaN/Inf) outputs ({where}); this rank's "
                f"input held {n_in}. nonfinite='raise' is set (the output was written); pass "
                "nonfinite='propagate' to keep NaN/Inf in the result instead")
        return stats

    return run


def mode_of(default: str, override: Optional[str]) -> str:
    return default if override is None else check_mode(override)
