"""Typed errors, raised before any data moves, and rank mismatches that fail on every rank
instead of hanging."""
import time

import numpy as np
import pytest

import ccompress as cc


def one_rank():
    return cc.Communicator.inproc(1)[0]


class FakeDeviceArray:
    """A DLPack producer that claims to live on cuda:0."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("must not be exported")


def test_error_classes():
    for cls in (cc.InvalidArgument, cc.Unsupported, cc.MismatchError, cc.CollectiveTimeout,
                cc.CudaError, cc.NcclError, cc.MpiError):
        assert issubclass(cls, cc.CCompressError)
    assert issubclass(cc.InvalidArgument, ValueError)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8, np.complex64])
def test_unsupported_dtype(dtype):
    with pytest.raises(cc.InvalidArgument, match="cast first"):
        one_rank().allreduce(np.zeros(8, dtype))


def test_non_contiguous():
    x = np.zeros((8, 8), np.float32)
    with pytest.raises(cc.InvalidArgument, match="not contiguous"):
        one_rank().allreduce(x[:, ::2])


def test_out_checked_before_anything_moves():
    comm = one_rank()
    x = np.ones(16, np.float32)
    ro = np.zeros(16, np.float32)
    ro.setflags(write=False)
    with pytest.raises(cc.InvalidArgument, match="read-only"):
        comm.allreduce(x, out=ro)
    wrong = np.full(15, 7, np.float32)
    with pytest.raises(cc.InvalidArgument, match="15 elements"):
        comm.allreduce(x, out=wrong)
    assert np.all(wrong == 7)
    with pytest.raises(cc.InvalidArgument, match="float16"):
        comm.allreduce(x, out=np.zeros(16, np.float16))
    # An output overlapping the input is computed from a copy of the input (on every rank
    # alike), never refused: tests/test_inplace_collectives.py.


def test_wrong_device():
    with pytest.raises(cc.InvalidArgument, match="cuda:0"):
        one_rank().allreduce(FakeDeviceArray())
    with pytest.raises(cc.InvalidArgument, match="cuda:0"):
        one_rank().allreduce(np.zeros(4, np.float32), out=FakeDeviceArray())


def test_not_an_array():
    with pytest.raises(cc.InvalidArgument, match="pass an array"):
        one_rank().allreduce([1.0, 2.0])


@pytest.mark.parametrize("kwargs,match", [
    ({"codec": "fp8_e4m3:g7"}, "fp8"),
    ({"codec": "zstd"}, "none"),
    ({"algo": "butterfly"}, "two_shot"),
    ({"op": "max"}, "avg"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(cc.InvalidArgument, match=match):
        one_rank().allreduce(np.zeros(4, np.float32), **kwargs)


def test_codec_decode_checks_length():
    codec = cc.Codec.parse("fp8_e4m3:g128")
    buf = codec.encode(np.ones(100, np.float32))
    with pytest.raises(cc.InvalidArgument, match="exactly"):
        codec.decode(buf[:-1], 100)
    with pytest.raises(cc.InvalidArgument):
        codec.wire_bytes(-1)


@pytest.mark.parametrize("field", ["count", "dtype", "codec", "algo", "op"])
def test_rank_mismatch_raises_on_every_rank(field):
    def body(c):
        odd = c.rank == 2
        n = 101 if (field == "count" and odd) else 100
        dtype = np.float16 if (field == "dtype" and odd) else np.float32
        codec = "bf16" if (field == "codec" and odd) else "fp8_e4m3:g128"
        algo = "ring" if (field == "algo" and odd) else "two_shot"
        op = "avg" if (field == "op" and odd) else "sum"
        start = time.monotonic()
        try:
            c.allreduce(np.ones(n, dtype), codec=codec, algo=algo, op=op)
        except cc.MismatchError as e:
            return str(e), time.monotonic() - start
        return None, 0.0

    results = cc.run_inproc(4, body, timeout=20)
    for msg, elapsed in results:
        assert msg is not None and "rank 2 called" in msg, msg
        assert elapsed < 5
    # The group stays usable after a mismatch.
    ok = cc.run_inproc(4, lambda c: c.allreduce(np.ones(10, np.float32)))
    assert all(np.all(y == 4) for y in ok)


def test_mismatched_collective_kind():
    def body(c):
        x = np.ones(12, np.float32)
        try:
            if c.rank == 0:
                c.allgather(x)
            else:
                c.allreduce(x)
        except cc.MismatchError as e:
            return str(e)

    for msg in cc.run_inproc(3, body, timeout=20):
        assert msg is not None and "allgather" in msg and "allreduce" in msg


def test_missing_rank_times_out():
    def body(c):
        if c.rank == 1:
            return "absent"
        start = time.monotonic()
        with pytest.raises(cc.CollectiveTimeout, match="no message"):
            c.allreduce(np.ones(10, np.float32))
        return time.monotonic() - start

    elapsed = cc.run_inproc(3, body, timeout=0.5)
    assert elapsed[1] == "absent"
    assert 0.4 < elapsed[0] < 10 and 0.4 < elapsed[2] < 10


def test_error_types_survive_loading_every_module():
    """Every extension module registers the same mapping; loading one must not coarsen
    another's errors (a later translator takes precedence in pybind11)."""
    import importlib

    for mod in ("ccompress._mpi", "ccompress._cuda"):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    with pytest.raises(cc.InvalidArgument):
        cc.Codec.parse("nope")

    def body(c):
        with pytest.raises(cc.MismatchError):
            c.allreduce(np.ones(3 + c.rank, np.float32))

    cc.run_inproc(2, body)


def test_communicator_unusable_after_a_timeout():
    def body(c):
        if c.rank == 1:
            return None
        with pytest.raises(cc.CollectiveTimeout):
            c.allreduce(np.ones(10, np.float32))
        with pytest.raises(cc.CCompressError, match="unusable"):
            c.allreduce(np.ones(10, np.float32))
        return True

    assert cc.run_inproc(3, body, timeout=0.3) == [True, None, True]
