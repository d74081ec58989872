"""What many test modules share: inputs, bit-equality, errors, the library's encode and decode
of one buffer, ranks on threads."""
import numpy as np


def gaussian_parts(rng, nranks, n, dtype="float32"):
    """Per-rank Gaussian inputs with a different scale per rank (stresses the scales)."""
    from ccompress._internal.arrays import numpy_dtype

    scale = np.exp(rng.standard_normal((nranks, 1)))
    return (rng.standard_normal((nranks, n)) * scale).astype(numpy_dtype(dtype))


def same_bits(arrays):
    """Whether all arrays hold exactly the same bytes."""
    first = np.ascontiguousarray(arrays[0]).view(np.uint8)
    return all(np.array_equal(np.ascontiguousarray(a).view(np.uint8), first) for a in arrays)


def rel_l2(y, ref):
    y = np.asarray(y, dtype=np.float64)
    return float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-300))



def lib_encode(codec, x, seed=0, step=0, rank=0, index=0):
    """The library's encoding of the contiguous array x (float32, float16 or bfloat16) under
    ``codec`` (a spec or a _core.Codec), with the stochastic-rounding context (seed, step,
    rank, index). The buffer starts as garbage (0xAB) that the encoder must overwrite."""
    from ccompress import _core
    from ccompress._internal.arrays import dtype_name

    c = _core.Codec.parse(codec) if isinstance(codec, str) else codec
    wire = np.full(c.wire_bytes(x.size), 0xAB, np.uint8)
    _core.encode(c, x.ctypes.data, dtype_name(x.dtype), x.size, 1.0, wire.ctypes.data, seed,
                 step, rank, index)
    return wire


def lib_decode(codec, wire, n):
    """The library's decoding of n elements from ``wire`` to float32."""
    from ccompress import _core

    c = _core.Codec.parse(codec) if isinstance(codec, str) else codec
    out = np.empty(n, np.float32)
    _core.decode(c, wire.ctypes.data, n, out.ctypes.data, "float32")
    return out


def run_on_threads(ranks, fn):
    """fn(ranks[r], r) on one thread per rank, results in rank order (first error re-raised)."""
    from ccompress.communicator import on_threads

    return on_threads(ranks, fn)
