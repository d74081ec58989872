"""``CCOMPRESS_TRACE=DIR``: a timeline of the collectives of the ``ccompress`` backend, the
DDP comm hook (host buckets) and TSRAdam (a span per optimizer step), for seeing how they
overlap backward and how long each waits for the slowest rank.

Each process appends to ``DIR/ccompress-trace-rank{RANK}.json`` (its global rank in
torch.distributed, however it was launched: torchrun, mpiexec, one process), a Chrome trace
(Perfetto and chrome://tracing open it) that is valid JSON after every event:

- a compressed call is a complete event (``"ph": "X"``) from the call to the moment its
  result is ready, named ``"<op> <codec>"`` (``+ error feedback`` where it keeps a
  residual), with ``numel``, ``bytes_sent`` (ccompress's, headers included) and
  ``exact_bytes`` (what an exact ring sends) in its ``args``;
- a call run exactly by the inner gloo/NCCL group is an instant event (``"ph": "i"``) named
  ``"<op> exact (<reason>)"``: its end is gloo's or NCCL's and is not observed.

``pid`` is the rank, ``tid`` numbers the process's tracks (a backend group, a hook, a TSRAdam) in
creation order.
Timestamps are microseconds of the host's monotonic clock, so the files of ranks on one host
(emulated nodes included) share a time axis; ranks on different hosts do not.
``python -m ccompress.tools.trace DIR`` summarizes a directory of them.
"""
from __future__ import annotations

import itertools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

from .._internal.errors import InvalidArgument

_GROUPS = itertools.count(1)


class _File:
    """One trace file, written as a JSON array that is closed after every event."""

    def __init__(self, path: Path, pid: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.pid = pid  # the events' pid: the global rank
        self._f = open(path, "w", encoding="utf-8")
        self._lock = threading.Lock()
        self._end: Optional[int] = None  # offset of the closing "\n]\n"
        self.write({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                    "args": {"name": f"rank {pid}"}})

    def write(self, event: Dict[str, Any]) -> None:
        text = json.dumps(event, separators=(",", ":"))
        with self._lock:
            if self._end is None:
                self._f.write("[\n" + text)
            else:
                self._f.seek(self._end)
                self._f.write(",\n" + text)
            self._end = self._f.tell()
            self._f.write("\n]\n")
            self._f.flush()


_FILES: Dict[str, _File] = {}
_FILES_LOCK = threading.Lock()


def _open(directory: str, rank: int) -> _File:
    path = str(Path(directory) / f"ccompress-trace-rank{rank}.json")
    with _FILES_LOCK:
        if path not in _FILES:
            try:
                _FILES[path] = _File(Path(path), rank)
            except OSError as e:
                raise InvalidArgument(f"CCOMPRESS_TRACE={directory!r}: cannot write the "
                                      f"trace file {path} ({e}); CCOMPRESS_TRACE accepts a "
                                      "directory this process can create and write") from e
        return _FILES[path]


def global_rank(default: int) -> int:
    """This process's rank in torch.distributed, ``default`` before it is initialised (the
    world group's backend is made before dist knows its rank)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else default


def now_us() -> float:
    """The trace's clock: microseconds of the monotonic clock."""
    return time.perf_counter_ns() / 1e3


class GroupTrace:
    """The events of one track (a backend group, a DDP hook or a TSRAdam: ``label``), or
    nothing when ``CCOMPRESS_TRACE`` is unset. ``rank`` is the process's global rank (its
    file), ``group_rank`` its rank in the group."""

    def __init__(self, group_rank: int, group_size: int, rank: int,
                 label: str = "ccompress group") -> None:
        directory = os.environ.get("CCOMPRESS_TRACE")
        self._file = _open(directory, rank) if directory else None
        if self._file is None:
            return
        self._pid = self._file.pid
        self._tid = next(_GROUPS)
        self._file.write({"ph": "M", "name": "thread_name", "pid": self._pid, "tid": self._tid,
                          "args": {"name": f"{label} {self._tid} (rank {group_rank} "
                                           f"of {group_size})"}})

    @property
    def on(self) -> bool:
        return self._file is not None

    def call(self, name: str, start_us: float, **args: Any) -> None:
        """A compressed call, from ``start_us`` to now."""
        if self._file is not None:
            self._file.write({"ph": "X", "name": name, "cat": "ccompress", "pid": self._pid,
                              "tid": self._tid, "ts": round(start_us, 1),
                              "dur": round(now_us() - start_us, 1), "args": args})

    def instant(self, name: str, **args: Any) -> None:
        """A call handed to the inner group."""
        if self._file is not None:
            self._file.write({"ph": "i", "s": "t", "name": name, "cat": "ccompress",
                              "pid": self._pid, "tid": self._tid,
                              "ts": round(now_us(), 1), "args": args})
