"""Which arrays a collective accepts as input and as output, checked before any data moves:
outputs that may not be written (read-only NumPy, DLPack's read-only flag, JAX arrays) are
refused with InvalidArgument, and a Fortran-order array is named as such."""
import numpy as np
import pytest

import ccompress as cc


def one_rank():
    return cc.Communicator.inproc(1)[0]


class DLPackOnly:
    """A stand-in DLPack producer: exports the wrapped NumPy array through DLPack only
    (no __array_interface__), so ccompress reads it the way it reads any other library."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class FakeJaxArray(DLPackOnly):
    """Stands in for a JAX array: its type lives in a jax module, and its DLPack export (like
    JAX's own) does not flag the memory read-only, though JAX never expects it to change."""


FakeJaxArray.__module__ = "jax._src.array"


def test_readonly_numpy_out_is_refused_and_untouched():
    ro = np.full(16, 3, np.float32)
    ro.setflags(write=False)
    with pytest.raises(cc.InvalidArgument, match="out is read-only"):
        one_rank().allreduce(np.ones(16, np.float32), out=ro)
    assert np.all(ro == 3)


def test_dlpack_readonly_flag_out_is_refused_and_untouched():
    base = np.full(16, 3, np.float32)
    base.setflags(write=False)  # exported with DLPack's read-only flag (versioned capsule)
    comm = one_rank()
    for call in (lambda o: comm.allreduce(np.ones(16, np.float32), out=o),
                 lambda o: comm.reduce_scatter(np.ones(16, np.float32), out=o),
                 lambda o: comm.allgather(np.ones(16, np.float32), out=o)):
        with pytest.raises(cc.InvalidArgument, match="out is read-only"):
            call(DLPackOnly(base))
    assert np.all(base == 3)


def test_dlpack_readonly_input_is_read():
    base = np.arange(16, dtype=np.float32)
    base.setflags(write=False)
    y = one_rank().allreduce(DLPackOnly(base))
    np.testing.assert_array_equal(np.asarray(y), base)


def test_dlpack_writable_out_is_written():
    out = np.zeros(16, np.float32)
    one_rank().allreduce(np.arange(16, dtype=np.float32), out=DLPackOnly(out))
    np.testing.assert_array_equal(out, np.arange(16, dtype=np.float32))


def test_jax_like_out_is_refused_and_untouched():
    buf = np.full(16, 3, np.float32)  # writable memory: only the type says "immutable"
    with pytest.raises(cc.InvalidArgument, match="JAX array, which is immutable"):
        one_rank().allreduce(np.ones(16, np.float32), out=FakeJaxArray(buf))
    assert np.all(buf == 3)


def test_real_jax_out_is_refused():
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones(16, dtype=jnp.float32)
    before = np.asarray(x).copy()
    with pytest.raises(cc.InvalidArgument, match="immutable"):
        one_rank().allreduce(np.full(16, 2, np.float32), out=x)
    np.testing.assert_array_equal(np.asarray(x), before)
    y = one_rank().allreduce(x)  # as an input a JAX array is fine
    np.testing.assert_array_equal(np.asarray(y), before)


@pytest.mark.parametrize("wrap", [lambda a: a, DLPackOnly], ids=["numpy", "dlpack"])
def test_fortran_order_is_named(wrap):
    f = np.asfortranarray(np.zeros((8, 6), np.float32))
    with pytest.raises(cc.InvalidArgument, match="Fortran"):
        one_rank().allreduce(wrap(f))
    with pytest.raises(cc.InvalidArgument, match="Fortran"):
        one_rank().allreduce(np.zeros((8, 6), np.float32), out=wrap(f))


@pytest.mark.parametrize("wrap", [lambda a: a, DLPackOnly], ids=["numpy", "dlpack"])
def test_strided_is_not_contiguous_not_fortran(wrap):
    x = np.zeros((8, 8), np.float32)[:, ::2]
    with pytest.raises(cc.InvalidArgument, match="not contiguous") as e:
        one_rank().allreduce(wrap(x))
    assert "Fortran" not in str(e.value)
