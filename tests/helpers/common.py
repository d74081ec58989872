"""What many test modules share: inputs, bit-equality, errors, the library's encode and decode
of one buffer, ranks on threads."""
import numpy as np


def gaussian_parts(rng, nranks, n, dtype="float32"):
    """Per-rank Gaussian inputs with a different scale per rank (stresses the scales)."""
    from ccompress._internal.arrays import numpy_dtype

    scale = np.exp(rng.standard_normal((nranks, 1)))
    return (rng.standard_normal((nranks, n)) * scale).astype(numpy_dtype(dtype))


class BitsCompared:
    """The answer of same_bits / same_bits_or_nan: true when the arrays agree; its repr names
    the first elements that differ, with their bits, so that a failing assert says where."""

    def __init__(self, arrays, any_nan_bits):
        first = np.ascontiguousarray(arrays[0])
        self.count, self.differences = 0, []  # (array, element, first's value and bits, its)
        for k, a in enumerate(arrays[1:], 1):
            a = np.ascontiguousarray(a)
            typed = ((a.dtype, a.shape) == (first.dtype, first.shape)
                     and a.dtype.itemsize in (1, 2, 4, 8))
            x, y = (first, a) if typed else (first.view(np.uint8), a.view(np.uint8))  # bytes
            x, y = x.reshape(-1), y.reshape(-1)
            if x.size != y.size:
                self.count += 1
                self.differences.append((k, None, f"{x.size} elements", f"{y.size}"))
                continue
            bits = f"u{x.dtype.itemsize}"
            differ = x.view(bits) != y.view(bits)
            if any_nan_bits:
                differ &= ~(np.isnan(x.astype(np.float32)) & np.isnan(y.astype(np.float32)))
            where = np.flatnonzero(differ)
            self.count += where.size
            self.differences += [(k, int(i), f"{x[i]} 0x{int(x.view(bits)[i]):x}",
                                  f"{y[i]} 0x{int(y.view(bits)[i]):x}") for i in where[:4]]

    def __bool__(self):
        return self.count == 0

    def __repr__(self):
        if self.count == 0:
            return "<same bits>"
        shown = "; ".join(f"array {k} element {i}: {x} vs {y}" for k, i, x, y in self.differences)
        return f"<{self.count} elements differ: {shown}>"


def same_bits(arrays):
    """Whether all arrays hold exactly the same bytes (truthy; a failure's repr says where)."""
    return BitsCompared(arrays, any_nan_bits=False)


def same_bits_or_nan(arrays):
    """Whether all arrays hold the same bits in every element, except that where one holds a
    NaN the others must hold a NaN of any sign and payload: the GPU against the CPU backend,
    since x86 and CUDA arithmetic give NaNs different bits (IEEE 754 leaves them open)."""
    return BitsCompared(arrays, any_nan_bits=True)


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
