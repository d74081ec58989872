"""CUDA backend: kernels bit-identical to the CPU backend for every codec family and dtype,
the whole pipeline on N virtual ranks of one GPU (loopback) bit-identical to the host
collectives, stream ordering, CuPy / PyTorch inputs; and, without a GPU, the clear errors
that replace them. GPU tests skip with the reason when no device is visible."""

import numpy as np
import pytest

import ccompress as cc
from ccompress import _core
from ccompress._internal.arrays import numpy_dtype
from helpers.common import gaussian_parts, rel_l2, run_on_threads, same_bits, same_bits_or_nan
from helpers.cuda_helpers import (DeviceBuffer, cuda_or_reason, device_run, framework_cases, host_ptr,
                          to_device, to_host)

CUDA, WHY = cuda_or_reason()
gpu = pytest.mark.skipif(CUDA is None, reason=str(WHY))

DTYPES = ["float32", "bfloat16", "float16"]
# Every codec family, with and without stochastic rounding and the scale-width variants.
CODECS = ["none", "bf16", "fp16", "bf16:sr", "fp8_e4m3:g32", "fp8_e5m2:g128", "fp8_e4m3:g64:sr",
          "taco:g32", "taco_e5m2:g128", "taco:g64:sr", "hint8", "hint8:g32:h256:s32",
          "hint8:g16:h64:s16:rs", "hint8:sr", "nvfp4", "hnvfp4:h64", "nvfp4:sr", "hint4",
          "hint4:g32:h64:s16", "hint4:sr", "mxfp8", "mxfp8_e5m2", "mxfp4",
          # the kernels' other paths: fp8 groups of several warp steps and of no power of two,
          # hint8 runs of 32 elements a lane with groups inside a lane, rotations of 16 and 32
          # (16 and 8 blocks a warp, groups inside a lane and across 4), s8 scale words at every
          # alignment (4 groups and the E byte a block of 64); 4-bit rotations across
          # lanes with random signs and inside a lane, a group of the whole warp; taco groups
          # of several 128-element chunks a warp
          "fp8_e5m2:g1024:sr", "fp8_e4m3:g48", "hint8:g8:h1024", "hint8:g8:h16",
          "hint8:g32:h32:rs:sr", "hint8:g16:h64", "hnvfp4:h32:rs",
          "hint4:g256:h2:s16:sr", "taco:g512"]
SIZES = [1, 33, 4097, 70001]  # tails of every kind, and more than one 65536-element piece


# ---- without a GPU: what replaces the device path ----

@pytest.mark.skipif(CUDA is not None, reason="a GPU is present: the device path itself is tested")
def test_no_device_is_unsupported_with_reason():
    try:
        from ccompress import _cuda
    except ImportError:
        pytest.skip("no CUDA module in this build")
    with pytest.raises(cc.Unsupported, match="no CUDA device"):
        cc.Communicator.cuda_loopback(2)
    with pytest.raises(cc.Unsupported, match="no CUDA device"):
        _cuda.Backend(0)
    info = cc.build_info()
    assert info["transports"]["cuda_loopback"] is False and info["nccl"]["available"] is False
    assert info["nccl"]["reason"]


def test_missing_libnccl_is_unsupported(monkeypatch):
    try:
        from ccompress import _cuda
    except ImportError:
        pytest.skip("no CUDA module in this build")
    with pytest.raises(cc.Unsupported, match="cannot load"):
        _cuda.nccl_load("/nonexistent/libnccl.so.2")
    import ccompress._internal.nccl as nccl_mod

    monkeypatch.setattr(nccl_mod, "find_nccl", lambda: {"path": None, "reason": "libnccl not found (test)"})
    with pytest.raises(cc.Unsupported, match="libnccl not found"):
        cc.Communicator.from_nccl(unique_id=b"\0" * 128, rank=0, size=1)
    with pytest.raises(cc.Unsupported, match="libnccl not found"):
        cc.nccl_unique_id()


def test_stream_handles():
    from ccompress._internal.device import cuda_stream_handle

    class CupyLike:
        ptr = 1234

    class TorchLike:
        cuda_stream = 5678

    assert cuda_stream_handle(42) == 42
    assert cuda_stream_handle(CupyLike()) == 1234
    assert cuda_stream_handle(TorchLike()) == 5678
    assert cuda_stream_handle(None, np.zeros(3)) == 0
    with pytest.raises(cc.InvalidArgument, match="not a CUDA stream"):
        cuda_stream_handle("default")


def test_host_communicator_rejects_device_arrays_and_streams():
    class FakeCuda:
        def __dlpack_device__(self):
            return (2, 0)

    comm = cc.Communicator.inproc(1)[0]
    with pytest.raises(cc.InvalidArgument, match="cuda:0"):
        comm.allreduce(FakeCuda())
    with pytest.raises(cc.Unsupported, match="stream="):
        comm.allreduce(np.zeros(4, np.float32), stream=0)


# ---- kernels against the CPU backend ----

def cpu_encode(codec, x, divisor=1.0, ctx=(0, 0, 0, 0)):
    c = cc.Codec.parse(codec)._c.bind(x.dtype.name if x.dtype != numpy_dtype("bfloat16") else "bfloat16")
    wire = np.zeros(c.wire_bytes(x.size), np.uint8)
    _core.encode(c, host_ptr(x), dtype_of(x), x.size, divisor, host_ptr(wire), *ctx)
    return c, wire


def dtype_of(x):
    return "bfloat16" if x.dtype == numpy_dtype("bfloat16") else x.dtype.name


@pytest.fixture(scope="module")
def backend():
    if CUDA is None:
        pytest.skip(str(WHY))
    return CUDA.Backend(0)


@gpu
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_encode_decode_bit_identical_to_cpu(backend, rng, codec, dtype):
    for n in SIZES:
        x = gaussian_parts(rng, 1, n, dtype)[0]
        x[n // 2] *= 1e4  # an outlier inside a group
        for divisor, ctx in ((1.0, (0, 0, 0, 0)), (3.0, (7, 5, 2, 12345))):
            c, want = cpu_encode(codec, x, divisor, ctx)
            src, dst = DeviceBuffer.of(x), DeviceBuffer(want.size)
            backend.encode(c, src.ptr, dtype, n, divisor, dst.ptr, *ctx)
            backend.synchronize()
            got = dst.bytes(want.size)
            assert np.array_equal(got, want), f"{codec} {dtype} n={n}: wire bytes differ"
            # decode to every dtype, and decode-accumulate (assign, then add)
            for out_dtype in DTYPES:
                ref = np.empty(n, numpy_dtype(out_dtype))
                _core.decode(c, host_ptr(want), n, host_ptr(ref), out_dtype)
                out = DeviceBuffer(ref.nbytes)
                backend.decode(c, dst.ptr, n, out.ptr, out_dtype)
                backend.synchronize()
                assert same_bits_or_nan([out.download(ref), ref]), f"{codec} decode to {out_dtype}"
            acc_ref = np.linspace(-1, 1, n).astype(np.float32)
            acc = DeviceBuffer.of(acc_ref)
            _core.decode_accumulate(c, host_ptr(want), n, host_ptr(acc_ref), False)
            backend.decode_accumulate(c, dst.ptr, n, acc.ptr, False)
            backend.synchronize()
            assert same_bits_or_nan([acc.download(acc_ref), acc_ref]), f"{codec} decode_accumulate"


@gpu
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_reduce_encode_bit_identical_to_cpu(backend, rng, codec, dtype):
    for n in (5, 4099, 70001):
        a, x = gaussian_parts(rng, 2, n, dtype)
        c, wire = cpu_encode(codec, a)
        want = np.zeros_like(wire)
        ctx = (3, 1, 1, 64)
        _core.decode_reduce_encode(c, host_ptr(wire), host_ptr(x), dtype, n, 2.0, host_ptr(want), *ctx)
        src, xd, dst = DeviceBuffer.of(wire), DeviceBuffer.of(x), DeviceBuffer(wire.size)
        backend.decode_reduce_encode(c, src.ptr, xd.ptr, dtype, n, 2.0, dst.ptr, *ctx)
        backend.synchronize()
        assert np.array_equal(dst.bytes(wire.size), want), f"{codec} {dtype} n={n}"
        # in place: src and dst the same buffer
        backend.decode_reduce_encode(c, src.ptr, xd.ptr, dtype, n, 2.0, src.ptr, *ctx)
        backend.synchronize()
        assert np.array_equal(src.bytes(wire.size), want), f"{codec} {dtype} n={n} in place"


@gpu
@pytest.mark.parametrize("codec", ["fp8_e4m3:g17", "fp8_e5m2:g100:sr", "fp8_e4m3:g1001"])
def test_fp8_groups_of_no_power_of_two_bit_identical_to_cpu(backend, rng, codec):
    """fp8 groups of no power of two: a warp's item is 8 / gcd(G, 8) groups (8, 2 and 8
    here), so lanes' runs of 8 cross group boundaries, an item reaches past the run's end,
    and groups of 1001 take several warp steps. Encode, decode and the hop (in place too),
    from fp32 and bf16, an outlier and an Inf in a group."""
    ctx = (7, 5, 2, 12345)
    for dtype in ("float32", "bfloat16"):
        for n in (3, 8 * 17 + 5, 5000):
            a, x = gaussian_parts(rng, 2, n, dtype)
            a[n // 3] *= 1e4
            a[min(7, n - 1)] = np.inf
            c, want, dst = encode_decode_like_cpu(backend, codec, a, ctx, divisor=3.0,
                                                  what=f"{codec} {dtype} n={n}")
            hop = np.zeros_like(want)
            _core.decode_reduce_encode(c, host_ptr(want), host_ptr(x), dtype, n, 2.0,
                                       host_ptr(hop), *ctx)
            xd = DeviceBuffer.of(x)
            backend.decode_reduce_encode(c, dst.ptr, xd.ptr, dtype, n, 2.0, dst.ptr, *ctx)
            backend.synchronize()
            assert np.array_equal(dst.bytes(want.size), hop), f"{codec} {dtype} n={n} hop"


def extreme_values(rng, n, non_finite):
    """n float32 values whose 32-element blocks span 1e-44 to 1e37 (scales that clamp or
    underflow, fp32 subnormals), a block of zeros at 64, and ``non_finite`` ({index: NaN or
    Inf}) set."""
    x = rng.standard_normal(n) * np.repeat(10.0 ** rng.uniform(-44, 37, n // 32 + 1), 32)[:n]
    x[64:96] = 0.0
    x[list(non_finite)] = list(non_finite.values())
    return np.clip(x, -3.4e38, 3.4e38).astype(np.float32)


def encode_decode_like_cpu(backend, codec, x, ctx, divisor=1.0, what=""):
    """Encodes ``x`` (float32, or any dtype the codec takes) divided by ``divisor`` on the
    device and on the CPU with the context ``ctx``, asserts the same wire bytes, then decodes
    the device's wire to float32 and asserts the CPU's values (``what`` labels a failure).
    Returns (codec, the CPU's wire, the device buffer holding the device's wire)."""
    n, dtype = x.size, dtype_of(x)
    c, want = cpu_encode(codec, x, divisor, ctx)
    src, dst = DeviceBuffer.of(x), DeviceBuffer(want.size)
    backend.encode(c, src.ptr, dtype, n, divisor, dst.ptr, *ctx)
    backend.synchronize()
    assert np.array_equal(dst.bytes(want.size), want), f"{what}: wire bytes"
    ref = np.empty(n, np.float32)
    _core.decode(c, host_ptr(want), n, host_ptr(ref), "float32")
    out = DeviceBuffer(ref.nbytes)
    backend.decode(c, dst.ptr, n, out.ptr, "float32")
    backend.synchronize()
    assert same_bits_or_nan([out.download(ref), ref]), f"{what}: decode"
    return c, want, dst


@gpu
@pytest.mark.parametrize("codec", ["mxfp8", "mxfp8_e5m2", "mxfp4"])
def test_mx_scale_extremes_and_non_finite_bit_identical_to_cpu(backend, rng, codec):
    """The E8M0 scale's clamped and largest codes, all-zero blocks, fp32 subnormals and
    NaN / Inf: the MX kernels give the CPU's bytes and values."""
    x = extreme_values(rng, 32 * 40 + 7, {5: np.nan, 99: np.inf, 100: -np.inf, 700: np.nan})
    encode_decode_like_cpu(backend, codec, x, (0, 0, 0, 0))


@gpu
@pytest.mark.parametrize("codec", ["nvfp4", "hnvfp4:h256:rs", "hint4:g32:h64:s16:sr"])
def test_fourbit_extremes_and_non_finite_bit_identical_to_cpu(backend, rng, codec):
    """Groups of zeros, groups far below the run's largest (scales that underflow), fp32
    subnormals and NaN / Inf, over two pieces with a short tail: the 4-bit kernels give the
    CPU's bytes and values, plain and as the in-place ring hop."""
    n = 65536 + 32 * 40 + 7
    x = extreme_values(rng, n, {5: np.nan, 99: np.inf, 100: -np.inf, 700: np.nan,
                                65536 + 3: np.inf})
    c, want, dst = encode_decode_like_cpu(backend, codec, x, (7, 5, 2, 12345))
    y = np.flip(x).copy()
    hop = np.zeros_like(want)
    _core.decode_reduce_encode(c, host_ptr(want), host_ptr(y), "float32", n, 2.0, host_ptr(hop),
                               3, 1, 1, 64)
    yd = DeviceBuffer.of(y)
    backend.decode_reduce_encode(c, dst.ptr, yd.ptr, "float32", n, 2.0, dst.ptr, 3, 1, 1, 64)
    backend.synchronize()
    assert np.array_equal(dst.bytes(want.size), hop)


@gpu
@pytest.mark.parametrize("codec", ["hint8", "hint8:g32:h256:s32:sr", "hint8:g8:h1024:s16:rs"])
def test_hint8_division_extremes_bit_identical_to_cpu(backend, rng, codec):
    """The hint8 kernels divide without the IEEE division's call (kernels/exact_div.cuh):
    inputs from fp32 subnormals to 1e37 with zeros, NaN and Inf, divided by divisors from a
    subnormal to 7e30 and negative, then by group scales down to FLT_MIN, take both its fast
    and its general path. The CPU's wire bytes, plain and as the in-place ring hop."""
    n = 1024 * 3 + 32 * 5 + 7
    x = extreme_values(rng, n, {5: np.nan, 99: np.inf, 2000: -np.inf})
    y = np.flip(x).copy()
    ctx = (7, 5, 2, 12345)
    for divisor in (3.0, 1e-30, 7e30, 1e-40, -0.75):
        c, want = cpu_encode(codec, x, divisor, ctx)
        src, dst = DeviceBuffer.of(x), DeviceBuffer(want.size)
        backend.encode(c, src.ptr, "float32", n, divisor, dst.ptr, *ctx)
        backend.synchronize()
        assert np.array_equal(dst.bytes(want.size), want), f"{codec} / {divisor}"
        hop = np.zeros_like(want)
        _core.decode_reduce_encode(c, host_ptr(want), host_ptr(y), "float32", n, divisor,
                                   host_ptr(hop), *ctx)
        yd = DeviceBuffer.of(y)
        backend.decode_reduce_encode(c, dst.ptr, yd.ptr, "float32", n, divisor, dst.ptr, *ctx)
        backend.synchronize()
        assert np.array_equal(dst.bytes(want.size), hop), f"{codec} hop / {divisor}"


@gpu
@pytest.mark.parametrize("codec", ["mxfp8", "mxfp4"])
def test_mx_every_scale_offset_bit_identical_to_cpu(backend, rng, codec):
    """The MX encoder writes its E8M0 scales as aligned 32-bit words and the word that codes
    and scales share byte-masked: counts whose scales start at every offset modulo 4, with
    tails of every length, encoded, hopped in place and decoded as on the CPU."""
    for n in (1, 2, 3, 6, 8, 31, 32, 63, 96, 258, 260, 262, 264, 1031, 2053):
        a, x = gaussian_parts(rng, 2, n, "bfloat16")
        c, want = cpu_encode(codec, a)
        src, dst = DeviceBuffer.of(a), DeviceBuffer(want.size)
        backend.encode(c, src.ptr, "bfloat16", n, 1.0, dst.ptr, 0, 0, 0, 0)
        backend.synchronize()
        assert np.array_equal(dst.bytes(want.size), want), f"{codec} n={n}: wire bytes differ"
        hop = np.zeros_like(want)
        _core.decode_reduce_encode(c, host_ptr(want), host_ptr(x), "bfloat16", n, 2.0,
                                   host_ptr(hop), 0, 0, 0, 0)
        xd = DeviceBuffer.of(x)
        backend.decode_reduce_encode(c, dst.ptr, xd.ptr, "bfloat16", n, 2.0, dst.ptr, 0, 0, 0, 0)
        backend.synchronize()
        assert np.array_equal(dst.bytes(want.size), hop), f"{codec} n={n}: hop in place"
        ref = np.empty(n, np.float32)
        _core.decode(c, host_ptr(hop), n, host_ptr(ref), "float32")
        out = DeviceBuffer(ref.nbytes)
        backend.decode(c, dst.ptr, n, out.ptr, "float32")
        backend.synchronize()
        assert same_bits_or_nan([out.download(ref), ref]), f"{codec} n={n}: decode"


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_load_accumulate_and_finalize_bit_identical_to_cpu(backend, rng, dtype):
    for n in (1, 7, 8, 9, 1000, 65543):
        x = gaussian_parts(rng, 1, n, dtype)[0]
        acc_ref = rng.standard_normal(n).astype(np.float32)
        acc = DeviceBuffer.of(acc_ref)
        xd = DeviceBuffer.of(x)
        for assign in (False, True):
            _core.load_accumulate(host_ptr(x), dtype, n, host_ptr(acc_ref), assign)
            backend.load_accumulate(xd.ptr, dtype, n, acc.ptr, assign)
        backend.synchronize()
        assert same_bits_or_nan([acc.download(acc_ref), acc_ref])
        for divisor in (1.0, 3.0):
            ref = np.empty(n, numpy_dtype(dtype))
            _core.finalize(host_ptr(acc_ref), n, divisor, host_ptr(ref), dtype)
            out = DeviceBuffer(ref.nbytes)
            backend.finalize(acc.ptr, n, divisor, out.ptr, dtype)
            backend.synchronize()
            assert same_bits_or_nan([out.download(ref), ref])


@gpu
def test_unaligned_buffers_take_the_scalar_path(backend, rng):
    """16-byte vector accesses only where every pointer allows: offsets of one element."""
    n = 1001
    x = gaussian_parts(rng, 1, n + 1, "bfloat16")[0]
    xd = DeviceBuffer.of(x)
    ref = np.zeros(n + 1, np.float32)
    _core.load_accumulate(host_ptr(x) + 2, "bfloat16", n, host_ptr(ref) + 4, True)
    acc = DeviceBuffer.of(np.zeros(n + 1, np.float32))
    backend.load_accumulate(xd.ptr + 2, "bfloat16", n, acc.ptr + 4, True)
    backend.synchronize()
    assert same_bits_or_nan([acc.download(ref), ref])
    # encoders reading from an odd element, decoders writing to one
    for codec in ("fp8_e4m3:g32", "hint8", "mxfp8", "mxfp4"):
        c, want = cpu_encode(codec, x[1:])
        dst = DeviceBuffer(want.size)
        backend.encode(c, xd.ptr + 2, "bfloat16", n, 1.0, dst.ptr, 0, 0, 0, 0)
        backend.synchronize()
        assert np.array_equal(dst.bytes(want.size), want), codec
        ref = np.zeros(n + 1, np.float32)
        _core.decode(c, host_ptr(want), n, host_ptr(ref) + 4, "float32")
        out = DeviceBuffer.of(np.zeros(n + 1, np.float32))
        backend.decode(c, dst.ptr, n, out.ptr + 4, "float32")
        backend.synchronize()
        assert same_bits_or_nan([out.download(ref), ref]), codec


@gpu
@pytest.mark.parametrize("group", [32, 64, 128, 256, 512])
def test_taco_every_block_shape_bit_identical_to_cpu(backend, rng, group):
    """taco's kernels on every shape of item: whole groups, the tail's blocks of 128 and
    more, the tail's tile of shorter blocks, the blocks of 2 and 1 sharing the last quad
    (n mod 4 = 2, 3), a non-finite group, from an odd element (the scalar loads)."""
    c = cc.Codec.parse(f"taco:g{group}")._c.bind("bfloat16")
    for n in (2, 3, 7, 130, 131, 2 * group + group // 2 + 63, 3 * group - 1):
        x = gaussian_parts(rng, 1, n + 1, "bfloat16")[0]
        x[min(5, n - 1) + 1] = np.inf
        xd = DeviceBuffer.of(x)
        for offset in (0, 1):
            want = np.zeros(c.wire_bytes(n), np.uint8)
            _core.encode(c, host_ptr(x) + 2 * offset, "bfloat16", n, 1.0, host_ptr(want),
                         0, 0, 0, 0)
            dst = DeviceBuffer(want.size)
            backend.encode(c, xd.ptr + 2 * offset, "bfloat16", n, 1.0, dst.ptr, 0, 0, 0, 0)
            backend.synchronize()
            assert np.array_equal(dst.bytes(want.size), want), f"group {group} n={n}"
            ref = np.empty(n, np.float32)
            _core.decode(c, host_ptr(want), n, host_ptr(ref), "float32")
            out = DeviceBuffer(ref.nbytes)
            backend.decode(c, dst.ptr, n, out.ptr, "float32")
            backend.synchronize()
            assert same_bits_or_nan([out.download(ref), ref]), f"group {group} n={n} decode"


# ---- the whole pipeline on virtual ranks of one GPU ----

def loopback_run(ranks, parts, call):
    """call(device_rank, r) on `ranks` virtual ranks of GPU 0, one thread each."""
    return run_on_threads(CUDA.loopback_group(ranks, 0), call)


ALGO_CASES = [(algo, ranks) for algo in ("ring", "two_shot", "tree", "one_shot") for ranks in (2, 3, 4)]


@gpu
@pytest.mark.parametrize("algo,ranks", ALGO_CASES)
@pytest.mark.parametrize("codec", ["none", "bf16", "fp8_e4m3:g32", "taco:g64", "hint8",
                                   "nvfp4", "hint4:sr", "fp8_e5m2:g128:sr", "mxfp8", "mxfp4"])
def test_loopback_allreduce_matches_host(rng, algo, ranks, codec):
    for dtype, n, op in (("float32", 10007, "sum"), ("bfloat16", 3001, "avg"), ("float16", 517, "sum")):
        parts = gaussian_parts(rng, ranks, n, dtype)
        want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec=codec, algo=algo, op=op,
                                                             step=4), slice_elems=1024, seed=9)

        def call(dr, r):
            x = DeviceBuffer.of(parts[r])
            y = DeviceBuffer(parts[r].nbytes)
            stats = device_run(dr, "allreduce", x.ptr, y.ptr, n, dtype, codec, algo=algo, op=op,
                               slice_elems=1024, seed=9, step=4)
            assert stats["algo"] == algo
            return y.download(parts[r])

        got = loopback_run(ranks, parts, call)
        assert same_bits(got), f"{codec} {algo} {ranks} ranks: ranks disagree"
        assert same_bits_or_nan([got[0], want[0]]), f"{codec} {algo} {ranks} ranks {dtype}: differs from CPU"
        if codec == "fp8_e4m3:g32" and op == "sum":  # and against fp64
            ref = parts.astype(np.float64).sum(axis=0)
            assert rel_l2(got[0], ref) < 0.1 * ranks


@gpu
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_loopback_reduce_scatter_allgather_inplace_match_host(rng, ranks):
    n, codec = 9001, "hint8:g32"
    parts = gaussian_parts(rng, ranks, n, "bfloat16")

    def host(c):
        x = parts[c.rank].copy()
        rs = c.reduce_scatter(x, codec=codec)
        ag = c.allgather(x, codec=codec)
        c.allreduce(x, codec=codec, algo="ring", out=x)  # in place
        return rs, ag, x

    want = cc.run_inproc(ranks, host, slice_elems=512)

    def call(dr, r):
        lo, hi = cc.chunk_range(n, ranks, r)
        x = DeviceBuffer.of(parts[r])
        rs = DeviceBuffer((hi - lo) * 2)
        ag = DeviceBuffer(ranks * n * 2)
        device_run(dr, "reduce_scatter", x.ptr, rs.ptr, n, "bfloat16", codec, op="sum",
                   slice_elems=512)
        device_run(dr, "allgather", x.ptr, ag.ptr, n, "bfloat16", codec, slice_elems=512)
        device_run(dr, "allreduce", x.ptr, x.ptr, n, "bfloat16", codec, algo="ring", op="sum",
                   slice_elems=512)
        return (rs.download(want[r][0]), ag.download(want[r][1]), x.download(parts[r]))

    got = loopback_run(ranks, parts, call)
    for r in range(ranks):
        for g, w in zip(got[r], want[r]):
            assert same_bits_or_nan([g, w])


@gpu
def test_loopback_respects_the_callers_stream(rng):
    """Input written on the caller's stream just before the call, output copied on it just
    after, no synchronisation in between: the collective must order itself with it."""
    ranks, n = 3, 200003
    parts = gaussian_parts(rng, ranks, n)
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec="fp8_e4m3:g128",
                                                        algo="two_shot"))

    def call(dr, r):
        caller = CUDA.Backend(0)  # its stream plays the caller's stream
        acc = DeviceBuffer.of(parts[r].astype(np.float32))
        x, y, z = (DeviceBuffer(parts[r].nbytes) for _ in range(3))
        for _ in range(3):  # make the caller's stream busy first
            caller.finalize(acc.ptr, n, 1.0, z.ptr, "float32")
        caller.finalize(acc.ptr, n, 1.0, x.ptr, "float32")  # x written on the caller's stream
        device_run(dr, "allreduce", x.ptr, y.ptr, n, "float32", "fp8_e4m3:g128", algo="two_shot",
                   op="sum", stream=caller.stream)
        CUDA.copy_async(z.ptr, y.ptr, parts[r].nbytes, caller.stream)  # read on the caller's stream
        caller.synchronize()
        return z.download(parts[r])

    got = loopback_run(ranks, parts, call)
    assert same_bits(got) and same_bits_or_nan([got[0], want[0]])


@gpu
def test_loopback_mismatch_raises_on_every_rank(rng):
    bufs = [DeviceBuffer(4096) for _ in range(2)]

    def call(dr, r):
        with pytest.raises(cc.MismatchError):
            device_run(dr, "allreduce", bufs[r].ptr, bufs[r].ptr, 100 + r, "float32", "none",
                       algo="ring", op="sum", timeout=30.0)
        return True

    assert loopback_run(2, None, call) == [True, True]


@gpu
def test_loopback_repeated_calls_reuse_scratch(rng):
    ranks, n = 4, 30011
    parts = gaussian_parts(rng, ranks, n)

    def call(dr, r):
        x, y = DeviceBuffer.of(parts[r]), DeviceBuffer(parts[r].nbytes)
        results = []
        for size in (n, n // 3, n):
            device_run(dr, "allreduce", x.ptr, y.ptr, size, "float32", "taco:g128", algo="ring",
                       op="sum", slice_elems=2048)
            results.append(y.download(parts[r])[:size].copy())
        return results

    got = loopback_run(ranks, parts, call)
    assert same_bits([got[r][0] for r in range(ranks)])
    assert same_bits([got[0][0], got[0][2]])  # the same call again gives the same bits


# ---- CuPy and PyTorch arrays through the Communicator ----

@gpu
@pytest.mark.parametrize("lib", framework_cases())
def test_communicator_on_framework_arrays(rng, lib):
    ranks, n = 3, 5003
    parts = gaussian_parts(rng, ranks, n, "float16")
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec="fp8_e4m3:g64", op="avg"))

    def fn(c):
        assert c.device == 0 and c.transport == "cuda_loopback"
        x = to_device(lib, parts[c.rank])
        y = c.allreduce(x, codec="fp8_e4m3:g64", op="avg")
        assert type(y) is type(x)
        out = to_device(lib, np.zeros_like(parts[c.rank]))
        c.allreduce(x, codec="fp8_e4m3:g64", op="avg", out=out)
        z = c.allreduce(x, codec="fp8_e4m3:g64", op="avg", async_op=True).wait()
        c.allreduce(x, codec="fp8_e4m3:g64", op="avg", out=x)  # in place
        with pytest.raises(cc.InvalidArgument, match="not a CUDA array"):
            c.allreduce(parts[c.rank])
        return [to_host(lib, a) for a in (y, out, z, x)]

    got = cc.run_cuda_loopback(ranks, fn)
    for r in range(ranks):
        for a in got[r]:
            assert same_bits_or_nan([a, want[0]])
