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
    """fn(ranks[r], r) on one thread per rank; the results in rank order. The first error
    (lowest rank) is re-raised once every thread has finished."""
    import threading

    out, errors = [None] * len(ranks), [None] * len(ranks)

    def body(r):
        try:
            out[r] = fn(ranks[r], r)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(len(ranks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return out
