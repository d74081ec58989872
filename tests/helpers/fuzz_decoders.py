"""A seeded, structure-aware fuzzer for every decode path that reads bytes from a peer.

Per codec family it feeds three kinds of input, all derived from one seed:
  1. framed messages (Codec.encode_message of random data) with mutations: bit flips, bytes
     set to boundary values, header fields rewritten, truncation and extension, scale
     regions overwritten with NaN / Inf / huge / subnormal fp32, fp16, bf16 or E4M3 patterns;
     decode_message must return exactly the header's count of values or raise MessageError /
     InvalidArgument (any other exception is a finding);
  2. random payloads of exactly wire_bytes(n) bytes through Codec.decode and the collective's
     own pointer-level decoders (decode_accumulate, decode_reduce_encode), which the executor
     runs on a received payload once its header has passed: they must stay in bounds whatever
     the bytes (checked by ASan + UBSan under scripts/sanitize.sh, and here by guard bytes
     around every buffer);
  3. payloads of the wrong length, and absurd element counts, which must raise a typed error.
A crash or a sanitizer report stops the process; other findings raise FuzzFinding with the
seed and iteration that reproduce them.

    python tests/helpers/fuzz_decoders.py --seconds 60            # every family, time-bounded
    python tests/helpers/fuzz_decoders.py --spec hint8:g32:s8 --iterations 20000 --seed 7
"""
from __future__ import annotations

import argparse
import time
from typing import Callable, List

import numpy as np

import ccompress as cc
from ccompress import _core

# One or more specs per codec family, covering each scale format.
FAMILY_SPECS = {
    "raw": ["none", "bf16", "fp16"],
    "fp8": ["fp8_e4m3:g128", "fp8_e5m2:g16", "fp8_e4m3:g1024"],
    "taco": ["taco:g128", "taco_e5m2:g32"],
    "hint8": ["hint8", "hint8:g32:h128:s16", "hint8:g8:h16:s32:rs", "hint8:g128:h1024:s8"],
    "nvfp4": ["nvfp4", "hnvfp4:g16:h64:rs"],
    "hint4": ["hint4", "hint4:g32:h64:s16:rs"],
    "mxfp8": ["mxfp8", "mxfp8_e5m2"],
    "mxfp4": ["mxfp4"],
}
DTYPES = ["float32", "bfloat16", "float16"]
HB = _core.MESSAGE_HEADER_BYTES
GUARD = 64  # bytes of a known pattern around each output buffer
# fp32 / 16-bit / 8-bit patterns that stress scale arithmetic.
F32_SPECIAL = np.array([np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, 1.2e-38, 0.0, -0.0,
                        1e30, 7.0, -1.0], np.float32).view(np.uint8)
U16_SPECIAL = np.array([0x7FFF, 0x7F80, 0xFF80, 0x7C00, 0xFC00, 0x0001, 0x8000, 0x7BFF, 0xFFFF],
                       np.uint16).view(np.uint8)
U8_SPECIAL = np.array([0x00, 0x01, 0x7F, 0x80, 0xFF, 0x7E, 0xFE, 0x08, 0x88, 0x77], np.uint8)


class FuzzFinding(AssertionError):
    """An input made a decoder misbehave (wrong size, untyped error, guard bytes changed)."""


def _random_input(rng, n: int, dtype: str) -> np.ndarray:
    from ccompress._internal.arrays import numpy_dtype

    kind = rng.integers(4)
    if kind == 0:
        x = rng.standard_normal(n)
    elif kind == 1:  # wide dynamic range
        x = rng.standard_normal(n) * np.exp(rng.uniform(-40, 40, n))
    elif kind == 2:  # sprinkled non-finite values
        x = rng.standard_normal(n)
        x[rng.random(n) < 0.05] = rng.choice([np.nan, np.inf, -np.inf])
    else:
        x = np.zeros(n)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float32).astype(numpy_dtype(dtype))


def _mutate(rng, msg: np.ndarray, payload_off: int) -> np.ndarray:
    m = msg.copy()
    for _ in range(int(rng.integers(1, 5))):
        op = rng.integers(7)
        if op == 0 and m.size:  # flip bits
            i = rng.integers(m.size)
            m[i] ^= np.uint8(1 << rng.integers(8))
        elif op == 1 and m.size:  # boundary byte
            m[rng.integers(m.size)] = rng.choice(U8_SPECIAL)
        elif op == 2 and m.size >= 2:  # boundary 16-bit value
            i = rng.integers(m.size - 1)
            j = 2 * rng.integers(U16_SPECIAL.size // 2)
            m[i:i + 2] = U16_SPECIAL[j:j + 2]
        elif op == 3 and m.size >= 4:  # special fp32, biased to the tail where scales live
            lo = max(payload_off, m.size - 4 * max(1, (m.size - payload_off) // 8))
            i = rng.integers(min(lo, m.size - 4), m.size - 3)
            j = 4 * rng.integers(F32_SPECIAL.size // 4)
            m[i:i + 4] = F32_SPECIAL[j:j + 4]
        elif op == 4:  # truncate or extend
            k = int(rng.integers(0, 9))
            m = m[:max(0, m.size - k)] if rng.random() < 0.5 else np.concatenate(
                [m, rng.integers(0, 256, k, dtype=np.uint8)])
        elif op == 5 and m.size >= HB:  # rewrite a header field with a random value
            i = int(rng.choice([0, 2, 3, 4, 8, 12]))
            m[i] = rng.integers(256)
        elif op == 6 and m.size > payload_off:  # random run over the payload
            i = rng.integers(payload_off, m.size)
            k = min(int(rng.integers(1, 64)), m.size - i)
            m[i:i + k] = rng.integers(0, 256, k, dtype=np.uint8)
    return m


def _guarded(nbytes: int, rng) -> tuple:
    pattern = rng.integers(0, 256, GUARD, dtype=np.uint8)
    buf = np.empty(nbytes + 2 * GUARD, np.uint8)
    buf[:GUARD] = pattern
    buf[GUARD + nbytes:] = pattern
    return buf, pattern


def _check_guard(buf: np.ndarray, pattern: np.ndarray, nbytes: int, what: str) -> None:
    if not (np.array_equal(buf[:GUARD], pattern) and np.array_equal(buf[GUARD + nbytes:], pattern)):
        raise FuzzFinding(f"{what} wrote outside its {nbytes}-byte output")


def _framed(rng, codec: cc.Codec, dtype: str) -> None:
    n = int(rng.choice([0, 1, 15, 16, 17, 100, 1000, int(rng.integers(1, 5000))]))
    msg = codec.encode_message(_random_input(rng, n, dtype), call=int(rng.integers(1 << 32)))
    m = _mutate(rng, msg, HB)
    try:
        y = codec.decode_message(m, None, dtype)
    except (cc.MessageError, cc.InvalidArgument):
        return
    count = _core.parse_message_header(m[:HB].tobytes())["count"]
    if y.size != count:
        raise FuzzFinding(f"decode_message returned {y.size} values for a header of {count}")


def _raw_payload(rng, codec: cc.Codec, dtype: str) -> None:
    from ccompress._internal.arrays import numpy_dtype

    n = int(rng.integers(0, 3000))
    c = codec._c.bind(dtype)
    wb = c.wire_bytes(n)
    payload = rng.integers(0, 256, wb, dtype=np.uint8)
    # Codec.decode into a guarded output.
    es = np.dtype(numpy_dtype(dtype)).itemsize
    out, pat = _guarded(n * es, rng)
    _core.decode(c, payload.ctypes.data, n, out.ctypes.data + GUARD, dtype)
    _check_guard(out, pat, n * es, f"decode({codec.name}, n={n})")
    # The collective's decoders on a received payload.
    acc, pat = _guarded(4 * n, rng)
    _core.decode_accumulate(c, payload.ctypes.data, n, acc.ctypes.data + GUARD, bool(rng.integers(2)))
    _check_guard(acc, pat, 4 * n, f"decode_accumulate({codec.name}, n={n})")
    x = _random_input(rng, n, dtype)
    dst, pat = _guarded(wb, rng)
    _core.decode_reduce_encode(c, payload.ctypes.data, x.ctypes.data, dtype, n, 1.0,
                               dst.ctypes.data + GUARD)
    _check_guard(dst, pat, wb, f"decode_reduce_encode({codec.name}, n={n})")
    # Python entry: wrong lengths and absurd counts are refused with a typed error.
    for bad_len in (wb - 1, wb + 1):
        if bad_len < 0:
            continue
        try:
            codec.decode(payload[:bad_len] if bad_len < wb else np.append(payload, 0), n, dtype)
        except cc.InvalidArgument:
            continue
        raise FuzzFinding(f"decode({codec.name}) accepted {bad_len} bytes for n={n}")
    for bad_n in (-1, 1 << 62, int(rng.integers(1 << 40, 1 << 62))):
        try:
            codec.decode(payload, bad_n, dtype)
        except cc.InvalidArgument:
            continue
        raise FuzzFinding(f"decode({codec.name}) accepted n={bad_n}")


TARGETS: List[Callable] = [_framed, _framed, _raw_payload]


def fuzz(specs: List[str], iterations: int, seed: int = 0, seconds: float = 0.0) -> int:
    """Runs `iterations` inputs per spec (or until `seconds` per spec when > 0); returns the
    number of inputs run. Raises FuzzFinding with the reproducing seed on a finding."""
    total = 0
    for si, spec in enumerate(specs):
        codec = cc.Codec.parse(spec)
        start = time.monotonic()
        it = 0
        while (it < iterations) if seconds <= 0 else (time.monotonic() - start < seconds):
            rng = np.random.default_rng([seed, si, it])
            dtype = DTYPES[int(rng.integers(len(DTYPES)))]
            target = TARGETS[int(rng.integers(len(TARGETS)))]
            try:
                with np.errstate(all="ignore"):
                    target(rng, codec, dtype)
            except FuzzFinding as e:
                raise FuzzFinding(f"{spec} seed={seed} iteration={it}: {e}") from None
            except (cc.MessageError, cc.InvalidArgument):
                pass
            except Exception as e:  # noqa: BLE001 - any other error is a finding
                raise FuzzFinding(f"{spec} seed={seed} iteration={it}: untyped "
                                  f"{type(e).__name__}: {e}") from e
            it += 1
        total += it
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", action="append", help="codec spec (repeatable; default: all)")
    ap.add_argument("--iterations", type=int, default=2000, help="inputs per spec")
    ap.add_argument("--seconds", type=float, default=0.0, help="time per spec instead")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    specs = a.spec or [s for v in FAMILY_SPECS.values() for s in v]
    t0 = time.monotonic()
    n = fuzz(specs, a.iterations, a.seed, a.seconds)
    print(f"fuzzed {n} inputs over {len(specs)} codecs in {time.monotonic() - t0:.1f} s: "
          "no finding")


if __name__ == "__main__":
    main()
