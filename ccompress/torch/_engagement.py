"""What the ``ccompress`` backend (and the DDP hook) tell a user about their compression: the
``ccompress`` logger's line at the first collective, the per-op counters behind
``compressed_group().stats()``, the warning when a configured codec has not engaged, the
summary ``CCOMPRESS_REPORT=1`` prints at ``destroy_process_group``, and a configuration error
that ends the script as one line per rank (:func:`brief_at_exit`).

Logging: the logger is ``logging.getLogger("ccompress")`` (records from ``ccompress.torch``).
Rank 0 logs at INFO. When nothing configured logging for it (no handler on it or an
ancestor), ccompress adds a stderr handler to that logger, so the line is visible by default
in a plain torchrun script; ``CCOMPRESS_LOG=0`` turns ccompress's own logging off, and any
logging configuration of the application (levels, handlers) applies as usual.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any, Dict, Optional

from ._options import OP_CODECS, env_flag  # noqa: F401 - env_flag: the hook's name for it

LOGGER = logging.getLogger("ccompress.torch")
OPS = tuple(OP_CODECS)
REASONS = ("codec none", "auto", "op", "dtype", "layout", "small", "shape", "device")
# What the plan line adds where a gradient op sends fewer than LOW_BITS bits per element: the
# rate sensitivity measured in perf/results/training.md ("4-bit at a high learning rate").
LOW_BITS = 6.0
LOW_BIT_NOTE = ("4-bit gradients held within 0.11% of tuned exact at peak rates 5e-4 and "
                "1.6e-4; on a model tuned to 4e-3 hint4:g16 held (-0.57%, 6 seeds) and nvfp4 "
                "stayed within the seeds' scatter (+1.0% +- 1.4), but mxfp4 does not hold at a "
                "high rate (+3.7%): use hint4:g16; at 8x the tuned rate every 4-bit codec lost "
                "2.8-4.0%. Check the loss at your learning rate (perf/results/training.md)")
# A configured (not "none") codec that has not compressed one of the first ENGAGE_CHECK_CALLS
# calls of its op gets a warning (once per op), with the reasons counted so far.
ENGAGE_CHECK_CALLS = 20


def logging_enabled() -> bool:
    return env_flag("CCOMPRESS_LOG", True)


def _logger() -> Optional[logging.Logger]:
    """The logger, with a stderr handler added when nothing handles its records; None when
    CCOMPRESS_LOG=0."""
    if not logging_enabled():
        return None
    root = logging.getLogger("ccompress")
    if not LOGGER.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[ccompress] %(message)s"))
        root.addHandler(handler)
        if root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
    return LOGGER


def exact_ring_bytes(kind: str, numel: int, itemsize: int, size: int) -> int:
    """Bytes one rank sends in an exact ring of this collective (``numel``: the input's
    elements): all-reduce 2(P-1)/P, reduce-scatter (P-1)/P of the input, all-gather P-1
    inputs."""
    if size <= 1:
        return 0
    nbytes = numel * itemsize
    if kind == "all_reduce":
        return 2 * (size - 1) * nbytes // size
    if kind == "reduce_scatter":
        return (size - 1) * nbytes // size
    return (size - 1) * nbytes


def exact_alltoall_bytes(numel: int, own: int, itemsize: int) -> int:
    """Bytes one rank sends in an exact all-to-all: its input (``numel`` elements) but the
    piece it keeps for itself (``own`` elements)."""
    return (numel - own) * itemsize


def plan_line(config: Any, given: Any = None) -> str:
    """What each op of a group does, in one line.

    Parameters
    ----------
    config : GroupConfig
        The group's resolved options and parsed codecs (``ccompress.torch._options``).
    given : BackendOptions, optional
        The ``pg_options`` the group was made with.

    Returns
    -------
    str
    """
    options, parts = config.options, []
    for op in OPS:
        codec, var = config.codecs[op], OP_CODECS[op].env
        if codec.spec == "none":
            if given is not None and getattr(given, op) is not None:
                why = "codec none in pg_options"
            elif not os.environ.get(var):
                why = f"{var} is not set"
            else:
                why = f"{var}={os.environ[var]}"
            parts.append(f"{op}: exact ({why})")
        elif codec.candidate is not None:
            parts.append(f"{op}: {codec.spec} (exact or {codec.candidate_label}, timed at its "
                         "first call)")
        else:
            extra = f", algo {options.algo}" if op == "all_reduce" else ""
            ef = ", error feedback" if options.error_feedback and OP_CODECS[op].feedback else ""
            parts.append(f"{op}: {codec.spec}{extra}{ef}")
    low = sorted({c.name for op in ("all_reduce", "reduce_scatter")
                  for c in (config.codecs[op].codec, config.codecs[op].candidate)
                  if c is not None and c.wire_bytes(1 << 16) * 8 < LOW_BITS * (1 << 16)})
    return ("ccompress backend: " + "; ".join(parts) +
            f" (float32/bfloat16/float16 tensors of >= {options.min_numel} elements; "
            "compressed_group().stats() counts what ran)" +
            (f". {', '.join(low)}: {LOW_BIT_NOTE}" if low else ""))


class OpStats:
    """Counters of one group (or hook): per op, calls compressed, calls delegated by
    reason, bytes ccompress sent for the compressed calls and what an exact ring would have
    sent for them, and the exact ring's bytes of the delegated calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: Dict[str, Dict[str, Any]] = {op: self._empty() for op in OPS}
        self._warned: set = set()

    @staticmethod
    def _empty() -> Dict[str, Any]:
        return {"calls": 0, "compressed": 0, "delegated": {r: 0 for r in REASONS},
                "bytes_sent": 0, "exact_bytes": 0, "delegated_exact_bytes": 0}

    def compressed(self, op: str, exact: int) -> None:
        with self._lock:
            s = self.ops[op]
            s["calls"] += 1
            s["compressed"] += 1
            s["exact_bytes"] += exact

    def sent(self, op: str, nbytes: int) -> None:
        with self._lock:
            self.ops[op]["bytes_sent"] += nbytes

    def delegated(self, op: str, reason: str, exact: int) -> None:
        with self._lock:
            s = self.ops[op]
            s["calls"] += 1
            s["delegated"][reason] = s["delegated"].get(reason, 0) + 1
            s["delegated_exact_bytes"] += exact

    def snapshot(self, total: bool = False) -> Dict[str, Dict[str, Any]]:
        """A copy of the counters per op; with ``total``, their sums under ``"total"``."""
        with self._lock:
            ops = {op: dict(s, delegated=dict(s["delegated"])) for op, s in self.ops.items()}
        if total:
            ops["total"] = {k: sum(s[k] for s in ops.values())
                            for k in ("calls", "compressed", "bytes_sent", "exact_bytes",
                                      "delegated_exact_bytes")}
        return ops

    def check_engaged(self, op: str, codec: str, rank: int) -> None:
        """Warns (rank 0, once per op) when ``codec`` is configured for ``op`` but none of
        its first ENGAGE_CHECK_CALLS calls was compressed, unless they were all below
        min_numel while another op of the group compresses (FSDP2's all-reduces of a loss or
        a gradient norm beside its compressed reduce-scatters: the codec engages where the
        tensors are)."""
        s = self.ops[op]
        if (codec == "none" or op in self._warned or s["compressed"] or s["delegated"]["auto"]
                or s["calls"] < ENGAGE_CHECK_CALLS):  # auto said why it sends exact
            return
        if s["delegated"]["small"] == s["calls"] and any(o["compressed"]
                                                         for o in self.ops.values()):
            return
        self._warned.add(op)
        log = _logger() if rank == 0 else None
        if log is not None:
            why = ", ".join(f"{k}: {v}" for k, v in s["delegated"].items() if v)
            log.warning(f"{op} is configured with codec {codec} but none of its first "
                        f"{s['calls']} calls was compressed (delegated exactly: {why}); see "
                        "the backend's conditions in docs (dtype, min_numel, layout, op)")


def summary(stats: Dict[str, Dict[str, Any]], total_sent: int) -> str:
    """A few lines for CCOMPRESS_REPORT=1."""
    lines = ["ccompress report (rank 0):"]
    for op, s in stats.items():
        if not s["calls"]:
            continue
        why = ", ".join(f"{k} {v}" for k, v in s["delegated"].items() if v) or "none"
        saved = ""
        if s["exact_bytes"]:
            exact = "an exact all-to-all" if op == "all_to_all" else "an exact ring"
            saved = (f"; sent {s['bytes_sent']} B where {exact} sends "
                     f"{s['exact_bytes']} B ({s['exact_bytes'] / max(s['bytes_sent'], 1):.2f}x)")
        lines.append(f"  {op}: {s['calls']} calls, {s['compressed']} compressed, delegated "
                     f"exactly: {why}{saved}")
    if len(lines) == 1:
        lines.append("  no " + " / ".join(OPS) + " calls")
    lines.append(f"  ccompress bytes sent in all: {total_sent}")
    return "\n".join(lines)


def log_info(rank: int, message: str) -> None:
    if rank == 0:
        log = _logger()
        if log is not None:
            log.info(message)


def brief_at_exit(error: BaseException, rank: int) -> None:
    """Makes ``error``, raised where a group is made, end the script as one line.

    Where ``error`` reaches the top of the script uncaught, the interpreter prints
    ``[ccompress] rank R: <type>: <message>`` on stderr instead of its traceback, and, under
    torchrun, the same line goes to the rank's error file (``TORCHELASTIC_ERROR_FILE``, unless
    ``torch.distributed.elastic.multiprocessing.errors.record`` wrote one), which torchrun's
    summary at the end of the output shows. Any other exception, or this one caught by the
    script, is untouched.

    Parameters
    ----------
    error : BaseException
        The configuration error about to be raised (its message is one line).
    rank : int
        This process's rank in the group; torchrun's ``RANK`` where it is set.
    """
    line = f"[ccompress] rank {os.environ.get('RANK', rank)}: {type(error).__name__}: {error}"
    previous = sys.excepthook

    def hook(kind: type, value: BaseException, tb: Any) -> None:
        if value is not error:
            previous(kind, value, tb)
            return
        print(line, file=sys.stderr, flush=True)
        path = os.environ.get("TORCHELASTIC_ERROR_FILE")
        if path and not os.path.exists(path):
            try:
                with open(path, "w") as f:
                    json.dump({"message": {"message": line, "extraInfo": {
                        "py_callstack": line, "timestamp": str(int(time.time()))}}}, f)
            except OSError:
                pass  # the line on stderr is there still

    sys.excepthook = hook
