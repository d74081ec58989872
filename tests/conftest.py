import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def gaussian_parts(rng, nranks, n, dtype="float32"):
    """Per-rank Gaussian inputs with a different scale per rank (stresses the scales)."""
    from ccompress._arrays import numpy_dtype

    scale = np.exp(rng.standard_normal((nranks, 1)))
    return (rng.standard_normal((nranks, n)) * scale).astype(numpy_dtype(dtype))


def same_bits(arrays):
    """Whether all arrays hold exactly the same bytes."""
    first = np.ascontiguousarray(arrays[0]).view(np.uint8)
    return all(np.array_equal(np.ascontiguousarray(a).view(np.uint8), first) for a in arrays)


def rel_l2(y, ref):
    y = np.asarray(y, dtype=np.float64)
    return float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-300))



def run_on_threads(ranks, fn):
    """fn(ranks[r], r) on one thread per rank, results in rank order (first error re-raised)."""
    from ccompress.communicator import on_threads

    return on_threads(ranks, fn)
