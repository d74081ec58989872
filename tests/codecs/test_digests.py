"""Pins the exact bits of every codec family: a SHA-256 digest of encode bytes, decode
outputs and collective results for each codec spec x collective (ring, two_shot, tree,
one_shot all-reduce, reduce_scatter, allgather) x dtype x rank count (1..4), on fixed seeded
inputs of awkward sizes. The digests in tests/data/digests.json were taken from the code
before the codecs were reorganised; a refactoring must leave every one of them unchanged.

Regenerate (only for an intended format change, and say so in the commit):
    CCOMPRESS_WRITE_DIGESTS=1 python -m pytest -q tests/codecs/test_digests.py
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import threading

import numpy as np
import pytest

import ccompress as cc
from ccompress._internal import arrays as _arrays

DATA = pathlib.Path(__file__).parents[1] / "data" / "digests.json"

# Every family and each option kind Codec.parse accepts (groups, rotations, scale bits,
# random signs, stochastic rounding).
SPECS = [
    "none", "bf16", "bf16:sr", "fp16", "fp16:sr",
    "fp8_e4m3:g128", "fp8_e4m3:g32", "fp8_e4m3:g128:sr", "fp8_e5m2:g128", "fp8_e5m2:g64:sr",
    "taco:g128", "taco:g32:sr", "taco_e5m2:g128",
    "hint8", "hint8:g32", "hint8:g16:h64:s32", "hint8:s16:rs", "hint8:sr",
    "hint4", "hint4:s16", "hint4:g32:h16:rs", "hint4:sr",
    "nvfp4", "nvfp4:sr", "hnvfp4", "hnvfp4:sr",
    "mxfp8", "mxfp8_e5m2", "mxfp4",
]
ALGOS = ["ring", "two_shot", "tree", "one_shot"]
COLLECTIVES = ALGOS + ["reduce_scatter", "allgather"]
DTYPES = ["float32", "bfloat16", "float16"]
RANKS = [1, 2, 3, 4]
SIZES = [1, 33, 4097]
STEP = 7  # fixed step, so stochastic rounding draws the same noise on every run


def _input(seed: int, n: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp(rng.uniform(-3, 3, n))
    return x.astype(np.float32).astype(_arrays.numpy_dtype(dtype))


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.view(np.uint8).tobytes())
    return h.hexdigest()


def _codec_digests() -> dict:
    """encode bytes and decode(encode(x)) of each spec, dtype and size."""
    out = {}
    for spec in SPECS:
        c = cc.Codec(spec)
        parts = []
        for dtype in DTYPES:
            for n in SIZES:
                buf = c.encode(_input(n, n, dtype))
                parts += [buf, c.decode(buf, n, dtype)]
        out[f"codec {spec}"] = _digest(parts)
    return out


def _rank_loop(comm: cc.Communicator, results: dict) -> None:
    """Every collective this rank runs, in one fixed order on every rank."""
    for spec in SPECS:
        for coll in COLLECTIVES:
            key = f"{spec} {coll} ranks={comm.size}"
            parts = []
            for dtype in DTYPES:
                for n in SIZES:
                    x = _input(1000 * comm.rank + n, n, dtype)
                    if coll == "reduce_scatter":
                        y = comm.reduce_scatter(x, codec=spec, op="sum", step=STEP)
                    elif coll == "allgather":
                        y = comm.allgather(x, codec=spec, step=STEP)
                    else:
                        y = comm.allreduce(x, codec=spec, algo=coll, op="sum", step=STEP)
                    parts.append(y)
            results[(key, comm.rank)] = parts


def _collective_digests() -> dict:
    out = {}
    for size in RANKS:
        comms = cc.Communicator.inproc(size)
        results: dict = {}
        errors = []

        def body(c):
            try:
                _rank_loop(c, results)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)
            finally:
                c.close()

        threads = [threading.Thread(target=body, args=(c,)) for c in comms]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        keys = sorted({k for k, _ in results})
        for key in keys:
            per_rank = [results[(key, r)] for r in range(size)]
            if " reduce_scatter " not in key:
                # all-reduce and all-gather results are bit-identical on all ranks
                for r in range(1, size):
                    assert _digest(per_rank[r]) == _digest(per_rank[0]), key
            out[key] = _digest([a for p in per_rank for a in p])
    return out


def _all_digests() -> dict:
    d = _codec_digests()
    d.update(_collective_digests())
    return d


def test_digests_unchanged():
    got = _all_digests()
    if os.environ.get("CCOMPRESS_WRITE_DIGESTS") == "1":
        DATA.parent.mkdir(exist_ok=True)
        DATA.write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
        pytest.skip(f"wrote {len(got)} digests to {DATA}")
    want = json.loads(DATA.read_text())
    assert sorted(got) == sorted(want), "the set of pinned cases changed"
    changed = [k for k in sorted(want) if got[k] != want[k]]
    assert not changed, f"{len(changed)} of {len(want)} digests changed, e.g. {changed[:8]}"
