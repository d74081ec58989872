"""Ranks as threads of this process: one thread per rank, results in rank order."""
from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional


def run_ranks(comms: List[Any], fn: Callable[[Any], Any]) -> List[Any]:
    def body(comm: Any, r: int) -> Any:
        try:
            return fn(comm)
        finally:
            comm.close()

    return on_threads(comms, body)


def on_threads(ranks: List[Any], fn: Callable[[Any, int], Any]) -> List[Any]:
    """``fn(ranks[r], r)`` on one thread per rank; the results in rank order. If any rank
    raises, the first error (lowest rank) is re-raised after all ranks have finished."""
    size = len(ranks)
    results: List[Any] = [None] * size
    errors: List[Optional[BaseException]] = [None] * size

    def body(r: int) -> None:
        try:
            results[r] = fn(ranks[r], r)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), name=f"ccompress-inproc-{r}")
               for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results

