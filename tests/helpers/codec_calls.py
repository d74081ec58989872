"""The codec core's calls (``ccompress._core``) on numpy arrays, as the codec tests make them,
and the decode paths every codec must agree on."""
import ml_dtypes
import numpy as np

from ccompress import _core

DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def ptr(a):
    return a.ctypes.data


def dtype_name(a):
    return {np.dtype(v): k for k, v in DTYPES.items()}[a.dtype]


def encode(codec, x, divisor=1.0):
    wire = np.full(codec.wire_bytes(x.size), 0xAB, dtype=np.uint8)  # garbage in the padding
    _core.encode(codec, ptr(x), dtype_name(x), x.size, divisor, ptr(wire))
    return wire


def decode_f32(codec, wire, n):
    out = np.empty(n, np.float32)
    _core.decode(codec, ptr(wire), n, ptr(out), "float32")
    return out


def check_decode_paths(codec, wire, n, want, rng):
    """decode_accumulate (overwriting and adding) and decode into every dtype give ``want``
    (the decoded float32 values) bit for bit. Returns the accumulator's start values."""
    acc0 = rng.standard_normal(n).astype(np.float32)
    acc = acc0.copy()
    _core.decode_accumulate(codec, ptr(wire), n, ptr(acc), True)
    assert np.array_equal(acc, want)
    acc = acc0.copy()
    _core.decode_accumulate(codec, ptr(wire), n, ptr(acc), False)
    assert np.array_equal(acc, acc0 + want)
    for out_dtype, dt in DTYPES.items():
        out = np.empty(n, dt)
        _core.decode(codec, ptr(wire), n, ptr(out), out_dtype)
        assert np.array_equal(out.view(np.uint8), want.astype(dt).view(np.uint8))
    return acc0
