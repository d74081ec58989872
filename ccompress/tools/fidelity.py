"""ccompress-fidelity: the error of every codec and schedule on your own tensors.

    ccompress-fidelity build/tensors/*.npz --summary
    ccompress-fidelity grads.safetensors --codec hint8:g32 --ranks 2,4,8 --json out.json

Inputs: .npy, .npz and .safetensors files. An array named ``parts`` (the .npz/.safetensors
key) is a stack of per-rank inputs whose leading dimension is the rank count (``--layout
stacked`` reads every array so, ``--layout single`` none); any other array is one tensor,
measured as a one-rank round trip. A .npz with a ``parts`` array is read for that array only.
float64 is read as float32; a 2-byte void dtype (how ``numpy.save`` stores ml_dtypes.bfloat16)
as bfloat16; other dtypes are an error (skipped, with a note, in a file of several arrays).

Each (codec, algo, rank count) row runs the library's own all-reduce on in-process ranks
(``ccompress.run_inproc``) and compares rank 0's result with the exact sum in fp64 (every
rank's result must be bit-identical to rank 0's). A stack of R parts is measured at k <= R
ranks by summing contiguous groups of parts in fp64 (``numpy.array_split``), so the exact
result is the same for every k; k = 1 is one round trip of the summed tensor.

Columns: ``bits`` = 8 * Codec.wire_bytes(n) / n, the encoded size per element (payload and
scales); ``B/elem`` = bytes each rank sent in this all-reduce (payload, scales and headers as
counted by the transport, ``last_stats``; mean over ranks) per element of the tensor, for
comparison 2(k-1)/k * 4 for float32 uncompressed over ring or two_shot, 0 at one rank;
``relerr`` = ||y - ref|| / ||ref||;
``cosine`` between y and ref; ``maxabs`` = max |y - ref|; ``snr`` = 10 log10(||ref||^2 /
||y - ref||^2) dB. Exit status: 0, 1 when a run failed or ranks disagreed, 2 for bad
arguments or files.

Optimizer-aware columns (``--metric adam,update``; definitions in
:mod:`ccompress.adam_fidelity`): ``adam`` = the error against each coordinate's Adam scale
``1 / (sqrt(v̂) + eps)``, ``update`` and ``updcos`` = the relative error and cosine of Adam's
update computed from the compressed gradients against the exact ones. Those rows measure a
sequence: ``--sequence`` reads the files as consecutive steps of the same arrays (matched by
array name), each step all-reduced with ``op="avg"`` against the fp64 mean of its parts,
with ``--error-feedback`` carried by every rank over the steps, Adam started from
``--adam-state`` (``exp_avg_sq``, ``exp_avg``, ``step``; ``KEY.exp_avg_sq`` ... for an array
``KEY`` of a file of several) or zeros; without ``--sequence`` each file is a sequence of one
step. Their relerr, cosine, adam, update and updcos are means over the steps, maxabs the
maximum, snr from the summed squared errors; ``per_step`` in the JSON has every step.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

import ccompress as cc
from .._internal import arrays as _arrays
from .. import adam_fidelity
from .. import autocodec

DEFAULT_CODECS = ("none", "bf16", "fp8_e4m3:g128", "fp8_e5m2:g128")
ALGOS = ("ring", "two_shot", "tree", "one_shot")
COLUMNS = [("tensor", 26), ("ranks", 5), ("codec", 20), ("algo", 8), ("bits", 6), ("B/elem", 6),
           ("relerr", 9), ("cosine", 10), ("maxabs", 9), ("snr(dB)", 7)]
OPT_COLUMNS = [("adam", 9), ("update", 9), ("updcos", 10)]  # with --metric adam / update
METRICS = ("l2", "adam", "update")


class FidelityError(Exception):
    """A bad argument or input file: reported as one line, exit status 2."""


@dataclass
class Tensor:
    """One measured tensor: ``parts`` has the rank count as its leading dimension."""

    file: str
    name: str
    parts: np.ndarray
    stacked: bool
    notes: List[str] = field(default_factory=list)
    shape: Tuple[int, ...] = ()  # one part's shape (parts are stored flat)
    key: str = ""  # the array's name in its file ("" for .npy): matches steps of a sequence

    @property
    def group(self) -> str:
        """Kind of tensor, from the file name's prefix (``tp_...`` -> tp), for the summary."""
        stem = os.path.basename(self.name)
        return stem.split("_", 1)[0] if "_" in stem else "all"


# ---------------------------------------------------------------- reading
def _is_bf16_void(dt: np.dtype) -> bool:
    """NumPy saves ml_dtypes.bfloat16 arrays as 2-byte void ('<V2'): read those as bfloat16."""
    return dt.kind == "V" and dt.itemsize == 2 and dt.fields is None


def _float_array(a: Any, where: str) -> np.ndarray:
    a = np.asarray(a)
    if _is_bf16_void(a.dtype):
        return a.view(_arrays.numpy_dtype("bfloat16"))
    name = _arrays.dtype_name(a.dtype)
    if name in _arrays.SUPPORTED:
        return a
    if a.dtype == np.float64:
        return a.astype(np.float32)
    raise FidelityError(f"{where} has dtype {a.dtype}; ccompress-fidelity measures float32, "
                        "bfloat16, float16 (or float64, read as float32) tensors")


def _read_safetensors(path: str) -> Dict[str, np.ndarray]:
    try:
        from safetensors import safe_open
    except ImportError:
        raise FidelityError(f"{path}: reading .safetensors needs the safetensors package: pip "
                            "install 'ccompress[fidelity]' (or pip install safetensors)") from None
    out: Dict[str, np.ndarray] = {}
    try:
        with safe_open(path, framework="numpy") as f:
            for k in f.keys():
                try:
                    out[k] = f.get_tensor(k)
                except (TypeError, ValueError):  # bfloat16: NumPy has none; go through torch
                    out[k] = _safetensors_via_torch(path, k)
    except FidelityError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise FidelityError(f"{path}: not a readable .safetensors file ({e})") from None
    return out


def _safetensors_via_torch(path: str, key: str) -> np.ndarray:
    try:
        import torch
        from safetensors import safe_open
    except ImportError:
        raise FidelityError(f"{path}: tensor {key!r} is bfloat16, which NumPy reads only "
                            "through torch: pip install torch") from None
    with safe_open(path, framework="pt") as f:
        t = f.get_tensor(key)
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_arrays.numpy_dtype("bfloat16"))
    return t.numpy()


def read_arrays(path: str, only_parts: bool = False) -> Dict[str, np.ndarray]:
    """Every array of a .npy (key ""), .npz or .safetensors file; with ``only_parts`` just
    the ``parts`` array where the file has one."""
    if not os.path.exists(path):
        raise FidelityError(f"{path}: no such file")
    ext = os.path.splitext(path)[1].lower()
    magic = {".npy": b"\x93NUMPY", ".npz": b"PK"}.get(ext)
    if magic is not None:
        with open(path, "rb") as fh:
            if fh.read(len(magic)) != magic:
                raise FidelityError(f"{path}: not a {ext} file (it does not start like one)")
    try:
        if ext == ".npy":
            arrays = {"": np.load(path, allow_pickle=False)}
        elif ext == ".npz":
            with np.load(path, allow_pickle=False) as z:
                keys = ["parts"] if only_parts and "parts" in z.files else list(z.files)
                arrays = {k: z[k] for k in keys}
        elif ext == ".safetensors":
            arrays = _read_safetensors(path)
            if only_parts and "parts" in arrays:
                arrays = {"parts": arrays["parts"]}
        else:
            raise FidelityError(f"{path}: unsupported file type {ext or '(none)'!r}; "
                                "give .npy, .npz or .safetensors files")
    except FidelityError:
        raise
    except Exception as e:  # noqa: BLE001 - NumPy raises many kinds for a corrupt file
        raise FidelityError(f"{path}: cannot read it as {ext} ({type(e).__name__}: {e})") from None
    return arrays


def load(path: str, layout: str = "auto") -> List[Tensor]:
    """The tensors of one file (see the module doc for how stacks are recognised)."""
    stem = os.path.splitext(os.path.basename(path))[0]
    arrays = read_arrays(path, only_parts=True)
    if not arrays:
        raise FidelityError(f"{path}: holds no arrays")
    out: List[Tensor] = []
    skipped = []
    for key, a in arrays.items():
        where = f"{path}" + (f" array {key!r}" if key else "")
        stacked = layout == "stacked" or (layout == "auto" and key == "parts")
        a = np.asarray(a)
        is_float = (_arrays.dtype_name(a.dtype) in _arrays.SUPPORTED or a.dtype == np.float64
                    or _is_bf16_void(a.dtype))
        if len(arrays) > 1 and (not is_float or a.size == 0 or a.ndim == 0):
            skipped.append(key)  # step counters and the like in a checkpoint
            continue
        a = _float_array(a, where)
        if a.size == 0:
            raise FidelityError(f"{where} is empty")
        if stacked and a.ndim < 2:
            raise FidelityError(f"{where} has shape {a.shape}; a stack of per-rank parts needs "
                                "shape (ranks, ...) with at least 2 dimensions")
        parts = np.ascontiguousarray(a.reshape(a.shape[0], -1) if stacked else a.reshape(1, -1))
        name = stem if key in ("", "parts") else f"{stem}:{key}"
        t = Tensor(path, name, parts, stacked, shape=tuple(a.shape[1:] if stacked else a.shape),
                   key=key)
        if skipped:
            t.notes.append(f"skipped non-float or empty arrays {skipped}")
        out.append(t)
    if not out:
        raise FidelityError(f"{path}: no float arrays in it (found {skipped})")
    return out


def merge(parts: np.ndarray, k: int) -> np.ndarray:
    """k per-rank inputs from R >= k parts: contiguous groups summed in fp64."""
    if k == parts.shape[0]:
        return parts
    groups = np.array_split(np.arange(parts.shape[0]), k)
    return np.stack([parts[g].astype(np.float64).sum(axis=0) for g in groups]).astype(parts.dtype)


# ---------------------------------------------------------------- measuring
def metrics(y: np.ndarray, ref: np.ndarray) -> Dict[str, float]:
    """relerr, cosine, maxabs and SNR of y against the fp64 reference (both flat)."""
    y = y.astype(np.float64).ravel()
    err = y - ref
    e2, r2, y2 = float(err @ err), float(ref @ ref), float(y @ y)
    if r2 > 0:
        relerr = math.sqrt(e2 / r2)
    else:
        relerr = 0.0 if e2 == 0 else math.inf
    cosine = float(y @ ref) / math.sqrt(y2 * r2) if y2 > 0 and r2 > 0 else \
        (1.0 if y2 == r2 == 0 else 0.0)
    snr = math.inf if e2 == 0 else (10 * math.log10(r2 / e2) if r2 > 0 else -math.inf)
    return {"relerr": relerr, "cosine": cosine, "maxabs": float(np.max(np.abs(err))),
            "snr_db": snr}


def _run(steps: List[np.ndarray], shape, codec: Union[cc.Codec, str], algo: str, op: str,
         error_feedback: bool = False, make_codec=None):
    """All-reduces each step's per-rank inputs (rows of ``steps[i]``) in turn on in-process
    ranks, each rank keeping its own error feedback (and ``make_codec()``'s stateful codec)
    across the steps: per step (rank 0's result, every rank's last_stats, whether all ranks
    hold the same bits)."""
    k = steps[0].shape[0]

    def body(comm: cc.Communicator):
        ef = cc.ErrorFeedback() if error_feedback else None
        c = make_codec() if make_codec is not None else codec
        out = []
        for parts in steps:
            y = comm.allreduce(parts[comm.rank].reshape(shape), codec=c, algo=algo, op=op,
                               error_feedback=ef)
            out.append((y.reshape(-1), dict(comm.last_stats)))
        return out

    res = cc.run_inproc(k, body)
    per_step = []
    for i in range(len(steps)):
        y0 = res[0][i][0]
        same = all(np.array_equal(y0.view(np.uint8), r[i][0].view(np.uint8)) for r in res[1:])
        per_step.append((y0, [r[i][1] for r in res], same))
    return per_step


def _row(t: Tensor, k: int, n: int, codec: Any, algo: str, stats: List[Dict[str, Any]],
         identical: bool) -> Dict[str, Any]:
    """A result row's fields besides the errors; ``stats``: every rank's last_stats."""
    dtype = _arrays.dtype_name(t.parts.dtype)
    st = stats[0]
    chosen = cc.Codec.parse(st["codec"])  # the codec itself, or auto's choice
    sent = [x["payload_bytes"] + x["header_bytes"] for x in stats]
    return {"file": t.file, "tensor": t.name, "group": t.group, "ranks": k, "count": n,
            "dtype": dtype, "codec": codec if isinstance(codec, str) else codec.name,
            "algo": algo, "chosen": f"{chosen.name}/{st.get('layout', 'rows')}",
            "resolved_algo": st["algo"], "quantizations": st["quantizations"],
            "bits": 8.0 * chosen.wire_bytes(n, dtype) / n,
            "payload_bytes": [x["payload_bytes"] for x in stats],
            "header_bytes": [x["header_bytes"] for x in stats],
            "sent_bytes_per_elem": statistics.fmean(sent) / n,
            "ranks_identical": identical}


def _shape(t: Tensor, n: int) -> Tuple[int, ...]:
    return t.shape if t.shape and int(np.prod(t.shape)) == n else (n,)


def measure(t: Tensor, k: int, codec: Union[cc.Codec, str], algo: str) -> Dict[str, Any]:
    """One all-reduce of ``t`` over k in-process ranks: a result row. ``codec`` is a Codec
    or "auto8" / "auto4", whose per-call choice is reported in the row."""
    parts = merge(t.parts, k)
    ref = parts.astype(np.float64).sum(axis=0)
    n = parts.shape[1]
    ((y0, stats, identical),) = _run([parts], _shape(t, n), codec, algo, "sum")
    row = _row(t, k, n, codec, algo, stats, identical)
    row.update(metrics(y0, ref))
    return row


@dataclass
class AdamSetup:
    """What the optimizer-aware metrics need (:mod:`ccompress.adam_fidelity`): Adam's
    constants, the arrays of an optimizer-state file (``--adam-state``) and whether each rank
    keeps error feedback over a sequence."""

    betas: Tuple[float, float] = adam_fidelity.BETAS
    eps: float = adam_fidelity.EPS
    state: Dict[str, np.ndarray] = field(default_factory=dict)
    state_file: str = ""
    error_feedback: bool = False

    def state_of(self, key: str, n: int):
        """(exp_avg, exp_avg_sq, step) of tensor ``key`` (arrays ``exp_avg``, ``exp_avg_sq``,
        ``step`` for a file's only tensor, else ``KEY.exp_avg`` ...); Nones and 0 with no
        state file."""
        if not self.state:
            return None, None, 0
        pre = "" if key in ("", "parts") else key + "."
        if pre + "exp_avg_sq" not in self.state:
            raise FidelityError(f"{self.state_file}: no array {pre + 'exp_avg_sq'!r} (the "
                                f"second moment of tensor {key or 'parts'!r})")
        v = self.state[pre + "exp_avg_sq"].astype(np.float64).reshape(-1)
        m = self.state.get(pre + "exp_avg")
        step = self.state.get(pre + "step", self.state.get("step"))
        if v.size != n or (m is not None and m.size != n):
            raise FidelityError(f"{self.state_file}: the state of {key or 'parts'!r} has "
                                f"{v.size} elements, the tensor {n}")
        if step is None or int(np.asarray(step).reshape(-1)[0]) < 1:
            raise FidelityError(f"{self.state_file}: needs a 'step' array (optimizer steps "
                                "taken, >= 1) for the bias correction of its moments")
        return (None if m is None else m.astype(np.float64).reshape(-1), v,
                int(np.asarray(step).reshape(-1)[0]))


def measure_sequence(seq: List[Tensor], k: int, codec: Union[cc.Codec, str], algo: str,
                     setup: AdamSetup) -> Dict[str, Any]:
    """The steps of ``seq`` (one tensor over consecutive training steps) all-reduced in turn
    with ``op="avg"`` over k in-process ranks (error feedback carried when ``setup`` says),
    against the fp64 mean of the parts, with Adam run beside it
    (:class:`~ccompress.adam_fidelity.AdamPair`): a row whose relerr, cosine, adam, update
    and updcos are means over the steps, maxabs the max, snr from the pooled errors. An
    ``auto8:adam`` / ``auto4:adam`` codec keeps one AutoCodec per rank over the steps,
    started from the state's second moment when there is one."""
    t = seq[0]
    for x in seq[1:]:
        if x.parts.shape != t.parts.shape:
            raise FidelityError(f"sequence of {t.key or t.name!r}: {x.file} holds shape "
                                f"{x.parts.shape}, {t.file} {t.parts.shape}")
    steps = [merge(x.parts, k) for x in seq]
    n = steps[0].shape[1]
    m0, v0, s0 = setup.state_of(t.key, n)
    auto = autocodec.parse(codec)
    make = None
    if auto and auto[1] == "adam":
        def make():
            return autocodec.AutoCodec(auto[0], "adam", beta2=setup.betas[1], eps=setup.eps,
                                       exp_avg_sq=v0, step=s0)
    per = _run(steps, _shape(t, n), codec, algo, "avg", setup.error_feedback, make)
    pair = adam_fidelity.AdamPair(n, setup.betas, setup.eps, m0, v0, s0)
    per_step = []
    for parts, (y, _, _) in zip(steps, per):
        ref = parts.astype(np.float64).sum(axis=0) / k
        e = metrics(y, ref)
        d = y.astype(np.float64) - ref
        e.update(pair.step(ref, y), e2=float(d @ d), r2=float(ref @ ref))
        per_step.append(e)
    row = _row(t, k, n, codec, algo, per[-1][1], all(same for _, _, same in per))
    row["chosen"] = ",".join(dict.fromkeys(
        f"{cc.Codec.parse(st[0]['codec']).name}/{st[0].get('layout', 'rows')}"
        for _, st, _ in per))
    e2, r2 = sum(p["e2"] for p in per_step), sum(p["r2"] for p in per_step)
    row.update(tensor=t.name if len(seq) == 1 else f"{t.name}..{seq[-1].name}",
               steps=len(seq), per_step=per_step, maxabs=max(p["maxabs"] for p in per_step),
               snr_db=math.inf if e2 == 0 else (10 * math.log10(r2 / e2) if r2 else -math.inf),
               **{m: statistics.fmean(p[m] for p in per_step)
                  for m in ("relerr", "cosine", "adam", "update", "update_cos")})
    return row


def _fmt(v: float, spec: str) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return format(v, spec)


def fmt_row(r: Dict[str, Any]) -> str:
    """One printed line of a result row."""
    vals = [r["tensor"], r["ranks"], r["codec"], r["algo"], _fmt(r["bits"], ".2f"),
            _fmt(r["sent_bytes_per_elem"], ".3f"), _fmt(r["relerr"], ".3e"),
            _fmt(r["cosine"], ".7f"), _fmt(r["maxabs"], ".2e"), _fmt(r["snr_db"], ".1f")]
    if "adam" in r:
        vals += [_fmt(r["adam"], ".3e"), _fmt(r["update"], ".3e"), _fmt(r["update_cos"], ".7f")]
    return _line(vals)


def _line(vals: Sequence[Any]) -> str:
    return "  " + " ".join(str(v).ljust(w) if i in (0, 2, 3) else str(v).rjust(w)
                           for i, (v, (_, w)) in enumerate(zip(vals, COLUMNS + OPT_COLUMNS)))


ANY_ALGO = "any"  # the algo of a row at one rank, where every schedule computes the same


def summarize(rows: List[Dict[str, Any]], algo: str, ranks: int) -> Dict[str, Any]:
    """Per codec, medians over the tensors at one algo and rank count (by file group too)."""
    sel = [r for r in rows if r["algo"] in (algo, ANY_ALGO) and r["ranks"] == ranks
           and "error" not in r]
    groups = sorted({r["group"] for r in sel})
    codecs = list(dict.fromkeys(r["codec"] for r in sel))
    table = []
    for c in codecs:
        rs = [r for r in sel if r["codec"] == c]
        entry = {"codec": c, "tensors": len(rs),
                 "bits": statistics.median(r["bits"] for r in rs),
                 "sent_bytes_per_elem": statistics.median(r["sent_bytes_per_elem"] for r in rs),
                 "relerr_median": statistics.median(r["relerr"] for r in rs),
                 "relerr_max": max(r["relerr"] for r in rs),
                 "cosine_median": statistics.median(r["cosine"] for r in rs),
                 "snr_db_median": statistics.median(r["snr_db"] for r in rs)}
        if all("adam" in r for r in rs):
            entry.update({f"{m}_median": statistics.median(r[m] for r in rs)
                          for m in ("adam", "update", "update_cos")})
        if len(groups) > 1:
            entry["relerr_median_by_group"] = {
                g: statistics.median(r["relerr"] for r in rs if r["group"] == g)
                for g in groups if any(r["group"] == g for r in rs)}
        table.append(entry)
    return {"algo": algo, "ranks": ranks, "groups": groups if len(groups) > 1 else [],
            "codecs": table}


def print_summary(s: Dict[str, Any], nfiles: int) -> None:
    groups = s["groups"]
    print(f"\n# summary: {s['algo']} at {s['ranks']} ranks, medians over {nfiles} tensors"
          + (f" (and over each group: {', '.join(groups)})" if groups else ""))
    head = (f"{'codec':20s} {'bits':>6} {'B/elem':>6} {'relerr':>9} "
            + " ".join(f"{'relerr ' + g:>10}" for g in groups)
            + f" {'max relerr':>10} {'cosine':>10} {'snr(dB)':>7}")
    opt = bool(s["codecs"]) and all("adam_median" in e for e in s["codecs"])
    if opt:
        head += f" {'adam':>9} {'update':>9} {'updcos':>10}"
    print("# " + head)
    for e in s["codecs"]:
        by = e.get("relerr_median_by_group", {})
        print("  " + f"{e['codec']:20s} {e['bits']:6.2f} {e['sent_bytes_per_elem']:6.3f} "
              f"{_fmt(e['relerr_median'], '9.3e')} "
              + " ".join(f"{_fmt(by[g], '10.3e') if g in by else '-':>10}" for g in groups)
              + f" {_fmt(e['relerr_max'], '10.3e')} {_fmt(e['cosine_median'], '10.7f')}"
              f" {_fmt(e['snr_db_median'], '7.1f')}"
              + (f" {_fmt(e['adam_median'], '9.3e')} {_fmt(e['update_median'], '9.3e')}"
                 f" {_fmt(e['update_cos_median'], '10.7f')}" if opt else ""))


def plot(rows: List[Dict[str, Any]], ranks: int, path: str, label_algo: str) -> None:
    """Median relerr over the tensors against bits per element, a point per codec and algo."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # "none" is lossless: its ~1e-8 (fp32 sums) would squash the axis of the lossy codecs
    sel = [r for r in rows if r["ranks"] == ranks and "error" not in r and r["codec"] != "none"]
    if not sel:
        raise FidelityError(f"--plot: no lossy codec measured at {ranks} ranks")
    fig, ax = plt.subplots(figsize=(8, 5.5))
    markers = {"ring": "o", "two_shot": "s", "tree": "^", "one_shot": "D"}
    for algo in dict.fromkeys(r["algo"] for r in sel):
        xs, ys, names = [], [], []
        for c in dict.fromkeys(r["codec"] for r in sel):
            rs = [r for r in sel if r["algo"] == algo and r["codec"] == c]
            med = statistics.median(r["relerr"] for r in rs) if rs else 0.0
            if rs and med > 0 and math.isfinite(med):
                xs.append(statistics.median(r["bits"] for r in rs))
                ys.append(med)
                names.append(c)
        ax.scatter(xs, ys, marker=markers.get(algo, "x"), label=algo, s=40, alpha=0.8)
        if algo == label_algo:  # labels of codecs of the same size stacked, not overprinted
            seen: Dict[float, int] = {}
            for x, y, nm in sorted(zip(xs, ys, names), key=lambda p: (p[0], -p[1])):
                j = seen.get(round(x, 1), 0)
                seen[round(x, 1)] = j + 1
                ax.annotate(nm, (x, y), textcoords="offset points", xytext=(6, 2 - 9 * j),
                            fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("bits per element on the wire (payload + scales)")
    ax.set_ylabel("relative L2 error vs fp64 all-reduce (median over tensors)")
    ax.set_title(f"ccompress-fidelity: {len({r['tensor'] for r in sel})} tensors, {ranks} ranks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="algo")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- command line
def _ranks(text: str) -> List[int]:
    try:
        ks = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rank list {text!r}; use e.g. 2,4") from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"bad rank list {text!r}; rank counts must be >= 1")
    return sorted(set(ks))


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ccompress-fidelity",
                                description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                epilog="Formats, layouts and columns: python -m pydoc "
                                       "ccompress.tools.fidelity")
    p.add_argument("files", nargs="+", metavar="FILE", help=".npy, .npz or .safetensors")
    p.add_argument("--codec", action="append", default=[], metavar="SPEC",
                   help=f"codec spec to measure besides the defaults ({', '.join(DEFAULT_CODECS)})"
                        "; repeatable")
    p.add_argument("--no-default-codecs", action="store_true",
                   help="measure only the --codec specs")
    p.add_argument("--algo", action="append", choices=ALGOS,
                   help=f"schedule, repeatable (default: {' '.join(ALGOS)})")
    p.add_argument("--ranks", type=_ranks, metavar="K,K",
                   help="rank counts (default: 1 and each stack's size)")
    p.add_argument("--layout", choices=("auto", "single", "stacked"), default="auto",
                   help="auto: arrays named 'parts' are per-rank stacks, others single tensors")
    p.add_argument("--json", metavar="PATH", help="write every row (and the summary) to PATH")
    p.add_argument("--plot", metavar="PNG", help="relerr vs bits per element (needs matplotlib)")
    p.add_argument("--summary", action="store_true",
                   help="print per codec the median relerr over the tensors")
    p.add_argument("--summary-algo", action="append", choices=ALGOS,
                   help="schedule of the summary, repeatable (default two_shot)")
    p.add_argument("--summary-ranks", type=int, default=4, metavar="K",
                   help="rank count of the summary and the plot (default 4, else the largest)")
    p.add_argument("--metric", action="append", type=_metrics, metavar="M[,M]",
                   help="l2 (the columns above, always shown), adam (the error against each "
                        "coordinate's Adam scale 1/(sqrt(v)+eps)), update (the error of Adam's "
                        "update with moments carried); repeatable (see ccompress.adam_fidelity)")
    p.add_argument("--sequence", action="store_true",
                   help="the FILEs are consecutive training steps of the same arrays, in order:"
                        " each array is measured as one sequence, Adam's state carried")
    p.add_argument("--adam-state", metavar="FILE",
                   help="optimizer state before the first step: exp_avg_sq, exp_avg, step "
                        "(KEY.exp_avg_sq ... per array KEY of several); default zeros")
    p.add_argument("--betas", type=_betas, default=adam_fidelity.BETAS, metavar="B1,B2",
                   help="Adam's betas (default 0.9,0.999)")
    p.add_argument("--eps", type=float, default=adam_fidelity.EPS, help="Adam's eps (1e-8)")
    p.add_argument("--error-feedback", action="store_true",
                   help="each rank keeps ccompress.ErrorFeedback over a sequence (two_shot, "
                        "one_shot)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return p.parse_args(argv)


def _metrics(text: str) -> List[str]:
    ms = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in ms if m not in METRICS]
    if bad or not ms:
        raise argparse.ArgumentTypeError(f"bad metric {text!r}; use {', '.join(METRICS)}")
    return ms


def _betas(text: str) -> Tuple[float, float]:
    try:
        b = tuple(float(v) for v in text.split(","))
    except ValueError:
        b = ()
    if len(b) != 2 or not all(0 <= v < 1 for v in b):
        raise argparse.ArgumentTypeError(f"bad betas {text!r}; use e.g. 0.9,0.95")
    return b  # type: ignore[return-value]


def _units(tensors: List[Tensor], sequence: bool) -> List[List[Tensor]]:
    """What is measured: each tensor alone, or (--sequence) each array over the files."""
    if not sequence:
        return [[t] for t in tensors]
    by_key: Dict[str, List[Tensor]] = {}
    for t in tensors:
        by_key.setdefault(t.key, []).append(t)
    if len({len(v) for v in by_key.values()}) != 1:
        raise FidelityError("--sequence: every file must hold the same arrays (one step each); "
                            + ", ".join(f"{k or 'parts'!r} in {len(v)}" for k, v in by_key.items()))
    return list(by_key.values())


def run(args: argparse.Namespace) -> int:
    specs = ([] if args.no_default_codecs else list(DEFAULT_CODECS)) + args.codec
    if not specs:
        raise FidelityError("no codecs: give --codec SPEC or drop --no-default-codecs")
    codecs: Dict[str, Union[cc.Codec, str]] = {}
    for s in specs:
        if autocodec.is_auto(s):
            codecs.setdefault(s, s)
            continue
        try:
            c = cc.Codec.parse(s)
        except cc.CCompressError as e:
            raise FidelityError(f"codec {s!r}: {e}") from None
        codecs.setdefault(c.name, c)
    algos = list(dict.fromkeys(args.algo or ALGOS))
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (checked before hours of work, used in plot())
        except ImportError:
            raise FidelityError("--plot needs matplotlib: pip install 'ccompress[fidelity]' "
                                "(or pip install matplotlib)") from None
    tensors = [t for f in args.files for t in load(f, args.layout)]
    metric_set = {m for ms in (args.metric or [["l2"]]) for m in ms}
    optimizer = bool(metric_set & {"adam", "update"}) or args.sequence or args.error_feedback
    setup = AdamSetup(tuple(args.betas), args.eps, error_feedback=args.error_feedback)
    if args.adam_state:
        setup.state, setup.state_file = read_arrays(args.adam_state), args.adam_state
    units = _units(tensors, args.sequence)

    def say(msg: str) -> None:
        if not args.quiet:
            print(f"[fidelity] {msg}", file=sys.stderr, flush=True)

    for t in tensors:
        for note in t.notes:
            say(f"{t.file}: {note}")
    print(f"# ccompress-fidelity {' '.join(shlex.quote(a) for a in args.argv)}")
    print(f"# ccompress {cc.__version__}  {datetime.datetime.now().isoformat(timespec='seconds')}"
          f"  ref: fp64 sum of the parts; y: rank 0's result (all ranks bit-identical);"
          f" bits: encoded bits per element; B/elem: bytes each rank sent per element")
    print("#" + _line([name for name, _ in COLUMNS + (OPT_COLUMNS if optimizer else [])])[1:])
    rows: List[Dict[str, Any]] = []
    failed = 0
    t0 = time.time()
    for i, unit in enumerate(units):
        t = unit[0]
        R = t.parts.shape[0]
        ks = [k for k in (args.ranks or sorted({1, R})) if k <= R]
        if args.ranks and len(ks) < len(args.ranks):
            say(f"{t.name}: {R} part(s): skipping rank counts above {R} "
                f"({', '.join(str(k) for k in args.ranks if k > R)})")
        # At one rank every schedule is the codec's round trip: one run, algo "any".
        runs = sum(len(codecs) * (1 if k == 1 else len(algos)) for k in ks)
        steps = f"{len(unit)} steps of " if len(unit) > 1 else ""
        say(f"({i + 1}/{len(units)}) {t.name}: {steps}{R} x {t.parts.shape[1]} "
            f"{_arrays.dtype_name(t.parts.dtype)}, ranks {','.join(map(str, ks))}: {runs} runs"
            f" [{time.time() - t0:.0f} s]")
        for k in ks:
            for cname, c in codecs.items():
                for algo in (algos[:1] if k == 1 else algos):
                    try:
                        row = measure_sequence(unit, k, c, algo, setup) if optimizer else \
                            measure(t, k, c, algo)
                        if k == 1:
                            row["algo"] = ANY_ALGO
                    except cc.CCompressError as e:
                        failed += 1
                        msg = f"{type(e).__name__}: {e}"
                        print(f"ccompress-fidelity: {t.name} ranks {k} {cname} {algo}: {msg}",
                              file=sys.stderr)
                        rows.append({"file": t.file, "tensor": t.name, "group": t.group,
                                     "ranks": k, "codec": cname, "algo": algo, "error": msg})
                        continue
                    if not row["ranks_identical"]:
                        failed += 1
                        print(f"ccompress-fidelity: {t.name} ranks {k} {cname} {algo}: ranks "
                              "hold different results (a library bug: please report it)",
                              file=sys.stderr)
                    rows.append(row)
                    print(fmt_row(row), flush=True)
    if not rows:
        raise FidelityError(f"nothing to measure: no tensor has the {args.ranks} parts that "
                            "--ranks asks for (a single tensor is measured at 1 rank only)")
    say(f"{len(rows)} runs in {time.time() - t0:.0f} s")
    good = [r for r in rows if "error" not in r]
    at = args.summary_ranks
    if good and not any(r["ranks"] == at for r in good):
        at = max(r["ranks"] for r in good)
        if args.summary or args.plot:
            say(f"no tensor has {args.summary_ranks} ranks: summary and plot at {at} ranks")
    summary_algos = list(dict.fromkeys(args.summary_algo or ["two_shot"]))
    summaries = [summarize(rows, a, at) for a in summary_algos] if args.summary else []
    left_out = sorted({r["tensor"] for r in good} - {r["tensor"] for r in good
                                                     if r["ranks"] == at})
    if args.summary and left_out:
        say(f"the summary at {at} ranks leaves out {len(left_out)} tensor(s) measured at "
            f"fewer ranks only (single tensors are measured at 1 rank; --summary-ranks 1 "
            f"summarises them): {', '.join(left_out)}")
        for summary in summaries:
            summary["left_out"] = left_out
    for a, summary in zip(summary_algos, summaries):
        if a not in algos:
            say(f"--summary-algo {a} was not run (--algo): its summary is empty")
        print_summary(summary, len({r['tensor'] for r in good if r['ranks'] == at}))
        if summary.get("left_out"):
            print(f"# not in this summary (measured at fewer than {at} ranks): "
                  f"{', '.join(summary['left_out'])}")
    if args.json:
        clean = json.loads(json.dumps(rows), parse_constant=lambda c: None)
        with open(args.json, "w") as f:
            json.dump({"tool": "ccompress-fidelity", "version": cc.__version__,
                       "command": ["ccompress-fidelity"] + args.argv,
                       "date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "codecs": list(codecs), "algos": algos,
                       "files": [{"file": t.file, "tensor": t.name, "ranks": t.parts.shape[0],
                                  "count": t.parts.shape[1],
                                  "dtype": _arrays.dtype_name(t.parts.dtype)} for t in tensors],
                       "rows": clean,
                       "summary": json.loads(json.dumps(summaries),
                                             parse_constant=lambda c: None)},
                      f, indent=1)
    if args.plot:
        plot(rows, at, args.plot,
             summary_algos[0] if summary_algos[0] in algos else algos[0])
        say(f"wrote {args.plot}")
    return 1 if failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except FidelityError as e:
        print(f"ccompress-fidelity: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
