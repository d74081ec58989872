"""Prints digests of the host codec loops' outputs (encode, decode, and all-reduce,
reduce-scatter and all-gather on 3 in-process ranks for every schedule, with averaging, error
feedback and NaN/Inf counts). tests/codecs/test_cpu_isa.py runs it once with the AVX2 copies of the
loops and once with CCOMPRESS_CPU_ISA=baseline: the two must print the same digests."""
import hashlib
import json

import numpy as np

import ccompress as cc
from ccompress import _core
from helpers.fuzz_decoders import DTYPES, FAMILY_SPECS, _random_input

SPECS = [s for specs in FAMILY_SPECS.values() for s in specs] + [
    "fp8_e4m3:g128:sr", "bf16:sr", "taco:g128:sr", "hint8:sr", "nvfp4:sr", "hint4:sr",
    # shapes of the AVX2 block kernels the list above leaves out: two s8 scale vectors per
    # block, the E byte, 32- and 64-element blocks, random signs with :sr
    "hint8:g8:h128", "hint8:g32:h32:s8:rs", "hint8:g64:h64:s16:sr:rs", "taco:g64:sr",
    "taco_e5m2:g128:sr",
    # the 4-bit encoders' rotation in the maxima pass: the block sizes FAMILY_SPECS leaves out
    "hnvfp4:g16", "hnvfp4:g16:h128", "hint4:g16:h32:rs"]
COLLECTIVE_CODECS = ["none", "bf16", "fp8_e4m3:g128", "fp8_e5m2:g16:sr", "taco:g128", "hint8",
                     "nvfp4", "hint4"]
SIZES = [1, 17, 1000, 70_001]


def digest(*arrays) -> str:
    h = hashlib.blake2b(digest_size=12)
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()


def codec_digests(rng) -> dict:
    out = {}
    for spec in SPECS:
        codec = cc.Codec(spec)
        for dtype in DTYPES:
            for n in SIZES:
                x = _random_input(rng, n, dtype)
                enc = codec.encode(x)
                out[f"{spec} {dtype} {n}"] = digest(enc, codec.decode(enc, n, dtype))
    return out


def signed_scale_digests(rng) -> dict:
    """Decodes of 4-bit wires whose E4M3 group-scale bytes have bit 7 (the sign) set: no
    encoder writes them, but a decoder reads any byte, and both copies must agree."""
    out = {}
    for spec in ("nvfp4", "hnvfp4", "hint4"):
        n = 1000
        codec = cc.Codec(spec)
        wire = codec.encode(rng.standard_normal(n).astype(np.float32)).copy()
        first = (n + 1) // 2  # the group scales follow the packed codes
        wire[first:first + (n + 15) // 16] |= 0x80
        out[f"signed scales {spec}"] = digest(codec.decode(wire, n, "float32"))
    return out


# Group scales a decoder may read besides the encoder's: 1, values whose products with the
# largest codes overflow, and ones whose products are fp32 subnormals or underflow to 0. A NaN
# scale is left out: times a NaN code, which of the two NaNs comes out is not pinned (GCC
# orders the operands of the table decode's product differently in the two copies).
EVERY_CODE_SCALES = (None, 1.0, 1e36, -3e-39, 1e-45)


def every_code_digests(rng) -> dict:
    """decode and decode_accumulate (the collective's decoder of a received payload) of fp8
    wires whose codes run through all 256 bytes, shuffled, and through the finite ones in
    order, at group sizes with and without a tail, with the encoder's group scales and with
    EVERY_CODE_SCALES: the decoders take Inf and NaN codes, subnormal codes and -0 apart from
    the table, and every other code by shifts."""
    out = {}
    for spec in ("fp8_e4m3:g128", "fp8_e5m2:g16", "fp8_e4m3:g40", "fp8_e5m2:g40"):
        n = 256 * 5 + 3
        codec = cc.Codec(spec)
        wire = codec.encode(rng.standard_normal(n).astype(np.float32)).copy()
        codes = np.arange(256, dtype=np.uint8)
        special = (codes & 0x7F) == 0x7F if "e4m3" in spec else (codes & 0x7C) == 0x7C
        streams = {"shuffled": rng.permutation(np.resize(codes, n)),
                   "finite": np.resize(codes[~special], n)}
        groups = -(-n // codec.group)
        scales = wire[n + (-n) % 4:].view(np.float32)[:groups]
        for s in EVERY_CODE_SCALES:
            if s is not None:
                scales[:] = s
            for name, stream in streams.items():
                wire[:n] = stream
                key = f"every code {spec} {name} s={s}"
                out[f"{key} decode"] = digest(codec.decode(wire, n, "float32"))
                for assign in (True, False):
                    acc = rng.standard_normal(n).astype(np.float32)
                    _core.decode_accumulate(codec._c.bind("float32"), wire.ctypes.data, n,
                                            acc.ctypes.data, assign)
                    out[f"{key} assign={assign}"] = digest(acc)
    return out


def fourbit_accumulate_digests(rng) -> dict:
    """decode_accumulate of 4-bit wires, with and without rotation blocks of 16 (which the
    AVX2 decoder un-rotates and accumulates in the same pass), random signs, NaN and Inf
    inputs, and run tails shorter than a block."""
    out = {}
    for spec in ("nvfp4", "hnvfp4:g16:rs", "hint4:g16:h16:rs", "hint4:g16:h32"):
        codec = cc.Codec(spec)
        for n in (16, 1000, 4099):
            x = _random_input(rng, n, "float32")
            wire = codec.encode(x)
            for assign in (True, False):
                acc = rng.standard_normal(n).astype(np.float32)
                _core.decode_accumulate(codec._c.bind("float32"), wire.ctypes.data, n,
                                        acc.ctypes.data, assign)
                out[f"4-bit accumulate {spec} {n} assign={assign}"] = digest(acc)
    return out


def s8_threshold_digests(rng) -> dict:
    """hint8's s8 scale codes where they change: blocks of 16 whose one spike, 4a at the
    block's start, rotates to 16 coefficients a, so that the group's base scale
    float32(|a| / 127) lands on each of the 15 mantissas of 2^(-j/16), one ulp either side,
    and the mantissas 0, 1 and 2^23 - 1, at scale exponents from 1 (scales near FLT_MIN,
    whose decodes are subnormal) up to 244. The AVX2 encoder finds these codes in closed form
    from E = 9 on and by search below; the baseline copy searches."""
    log_frac = (2.0 ** (-np.arange(1, 16) / 16)).astype(np.float32).view(np.uint32) & 0x7FFFFF
    mants = sorted({int(m) for t in log_frac for m in (t - 1, t, t + 1)} | {0, 1, 0x7FFFFF})
    exps = list(range(1, 14)) + [60, 126, 127, 200, 243, 244]  # 4a < FLT_MAX up to 244
    want = np.array([(e << 23) | m for e in exps for m in mants], np.uint32).view(np.float32)
    a = (want.astype(np.float64) * 127).astype(np.float32)
    for _ in range(2):  # step a to the float whose base scale is the wanted one, where any is
        got = a / np.float32(127)
        a = np.where(got < want, np.nextafter(a, np.float32(np.inf)),
                     np.where(got > want, np.nextafter(a, np.float32(0)), a))
    x = np.zeros((a.size, 16), np.float32)
    x[:, 0] = 4 * a * np.where(rng.random(a.size) < 0.5, -1, 1).astype(np.float32)
    x = x.reshape(-1)
    codec = cc.Codec("hint8:g16:h16")
    enc = codec.encode(x)
    hit = np.count_nonzero(a / np.float32(127) == want)
    assert hit >= 0.9 * want.size, f"only {hit} of {want.size} base scales on target"
    return {"s8 thresholds": digest(enc, codec.decode(enc, x.size, "float32"))}


def collective_digests(rng) -> dict:
    n = 50_003
    inputs = {dt: [_random_input(rng, n, dt) for _ in range(3)] for dt in ("float32", "bfloat16")}

    def body(comm):
        res = {}
        for dt, parts in inputs.items():
            x = parts[comm.rank]
            for codec in COLLECTIVE_CODECS:
                for algo in cc.ALGOS:
                    if algo in ("auto", "hier"):  # hier's levels are these flat schedules
                        continue
                    for op in ("sum", "avg"):
                        y = comm.allreduce(x, codec=codec, algo=algo, op=op, step=1)
                        st = comm.last_stats
                        res[f"allreduce {dt} {codec} {algo} {op}"] = (
                            digest(y), st["nonfinite_in"], st["nonfinite_out"])
                ef = cc.ErrorFeedback()
                for step in range(2):
                    y = comm.allreduce(x, codec=codec, algo="two_shot", op="avg", step=step,
                                       error_feedback=ef)
                res[f"feedback {dt} {codec}"] = (digest(y, *ef.state_dict().values()),)
                rs = comm.reduce_scatter(x, codec=codec, op="avg")
                ag = comm.allgather(x[: n // 3], codec=codec)
                res[f"scatter/gather {dt} {codec}"] = (digest(rs, ag),)
        return res

    ranks = cc.run_inproc(3, body, slice_elems=4096)
    return {f"rank{r} {k}": v for r, res in enumerate(ranks) for k, v in res.items()}


def main() -> None:
    rng = np.random.default_rng(20261130)
    result = {"isa": _core.cpu_isa(), **codec_digests(rng), **signed_scale_digests(rng),
              **every_code_digests(rng), **fourbit_accumulate_digests(rng),
              **s8_threshold_digests(rng),
              **collective_digests(rng)}
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
