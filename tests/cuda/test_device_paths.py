"""Device paths that the GPU tests do not reach, run on the CPU emulation of the CUDA runtime
(cuda/emu; scripts/sanitize.sh builds it) as well as on a GPU: a device call whose output
overlaps its input (FSDP2's all-gather into a buffer whose own chunk is the input, ZeRO's
reduce-scatter into this rank's slice of the input; the Communicator takes a private copy
of the input on the caller's stream, DeviceBackend.copy_input), synchronous and
asynchronous; the hierarchical all-reduce on device buffers; and the device transports'
own slice (in MiB, CCOMPRESS_DEVICE_SLICE_MB) with its errors. Every result is compared bit
for bit with the host collectives' and across ranks."""
import ctypes

import numpy as np
import pytest

import ccompress as cc
from helpers.common import gaussian_parts, same_bits, same_bits_or_nan
from helpers.cuda_helpers import DeviceArray, _DL_DTYPES, _DLManagedTensor, _capsule_new, cuda_or_reason
from ccompress._internal.arrays import dtype_name

CUDA, WHY = cuda_or_reason()
pytestmark = pytest.mark.skipif(CUDA is None, reason=str(WHY))


class DeviceSlice:
    """Elements [lo, hi) of a DeviceArray as a CUDA array of its own (DLPack at an offset):
    the input that shares memory with an output, as FSDP2's all-gather input does."""

    def __init__(self, base, lo, hi):
        self.base, self.lo, self.hi = base, lo, hi
        self.shape, self.dtype = (hi - lo,), base.dtype
        self._exported = []

    def new_empty(self, shape):
        return DeviceArray(shape, self.dtype)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        shape = (ctypes.c_int64 * 1)(self.hi - self.lo)
        m = _DLManagedTensor()
        t = m.dl_tensor
        t.data = self.base.buf.ptr + self.lo * self.dtype.itemsize
        t.ndim, t.byte_offset = 1, 0
        t.device.device_type, t.device.device_id = 2, 0
        t.dtype.code, t.dtype.bits = _DL_DTYPES[dtype_name(self.dtype)]
        t.dtype.lanes = 1
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        self._exported.append((m, shape))
        return _capsule_new(ctypes.addressof(m), b"dltensor", None)


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("codec", ["none", "fp8_e4m3:g64"])
def test_allgather_into_a_buffer_whose_chunk_is_the_input(rng, codec, async_op):
    """FSDP2's in-place all-gather on CUDA: each rank's input is its own chunk of the output."""
    ranks, n = 3, 1031
    parts = gaussian_parts(rng, ranks, n, "bfloat16")
    want = cc.run_inproc(ranks, lambda c: c.allgather(parts[c.rank], codec=codec))

    def fn(c):
        start = np.zeros((ranks, n), parts.dtype)
        start[c.rank] = parts[c.rank]  # x, where it belongs in the output
        out = DeviceArray.of(start.reshape(-1))
        x = DeviceSlice(out, c.rank * n, (c.rank + 1) * n)
        got = c.allgather(x, codec=codec, out=out, async_op=async_op)
        got = got.wait() if async_op else got
        assert got is out
        return out.numpy()

    got = cc.run_cuda_loopback(ranks, fn)
    assert same_bits(got)
    assert same_bits_or_nan([got[0], np.asarray(want[0]).reshape(-1)])
    if codec == "none":
        assert same_bits([got[0], parts.reshape(-1)])


@pytest.mark.parametrize("async_op", [False, True])
def test_reduce_scatter_into_this_ranks_slice_of_the_input(rng, async_op):
    """ZeRO's reduce-scatter on CUDA: the output is this rank's chunk of the input."""
    ranks, n, codec = 4, 2003, "hint8:g32"
    parts = gaussian_parts(rng, ranks, n)
    want = cc.run_inproc(ranks, lambda c: c.reduce_scatter(parts[c.rank], codec=codec))
    ref = parts.astype(np.float64).sum(axis=0)

    def fn(c):
        x = DeviceArray.of(parts[c.rank])
        lo, hi = cc.chunk_range(n, ranks, c.rank)
        out = DeviceSlice(x, lo, hi)
        got = c.reduce_scatter(x, codec=codec, out=out, async_op=async_op)
        if async_op:
            got.wait()
        return x.numpy()[lo:hi]

    got = cc.run_cuda_loopback(ranks, fn)
    for r in range(ranks):
        assert same_bits_or_nan([got[r], want[r]]), f"rank {r} differs from the host collective"
        lo, hi = cc.chunk_range(n, ranks, r)
        err = np.linalg.norm(got[r] - ref[lo:hi]) / np.linalg.norm(ref[lo:hi])
        assert err < 0.02, err  # hint8 once: well under 2% relative L2 on Gaussian data


@pytest.mark.parametrize("inter", ["two_shot", "ring"])
def test_hierarchical_allreduce_on_device_buffers(rng, inter):
    """algo="hier" on a device communicator: 2 nodes of 2 virtual ranks."""
    ranks, n, codec = 4, 3001, "fp8_e4m3:g64"
    parts = gaussian_parts(rng, ranks, n)
    kw = dict(codec=codec, algo="hier", inter_algo=inter)
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], **kw), ranks_per_node=2)
    got = cc.run_cuda_loopback(ranks, lambda c: c.allreduce(DeviceArray.of(parts[c.rank]), **kw)
                               .numpy(), ranks_per_node=2)
    assert same_bits(got)
    assert same_bits_or_nan([got[0], want[0]])
    ref = parts.astype(np.float64).sum(axis=0)
    assert np.linalg.norm(got[0] - ref) / np.linalg.norm(ref) < 0.05  # fp8 at most 3 times


def test_device_transports_choose_their_slice_in_mib(monkeypatch):
    """The loopback transport slices by bytes (16 MiB of input whatever the dtype), not by the
    host transports' 65536 elements; CCOMPRESS_DEVICE_SLICE_MB overrides it, and a bad value
    is an error naming the variable."""
    monkeypatch.delenv("CCOMPRESS_DEVICE_SLICE_MB", raising=False)
    rank = CUDA.loopback_group(2, 0)[0]
    assert rank.default_slice_bytes == 16 << 20
    assert rank.default_slice_for("float32") == 4 << 20
    assert rank.default_slice_for("bfloat16") == 8 << 20
    comm = cc.Communicator.cuda_loopback(2)[0]
    assert comm.slice_elems == 4 << 20
    monkeypatch.setenv("CCOMPRESS_DEVICE_SLICE_MB", "0.5")
    assert rank.default_slice_for("bfloat16") == 1 << 18
    for bad in ("0", "-1", "four", "nan"):
        monkeypatch.setenv("CCOMPRESS_DEVICE_SLICE_MB", bad)
        with pytest.raises(cc.InvalidArgument, match="CCOMPRESS_DEVICE_SLICE_MB"):
            rank.default_slice_for("float32")


def test_a_call_without_a_slice_runs_at_the_transports_slice(rng, monkeypatch):
    """Slices by the transport's own choice give the bits of the same slice passed
    explicitly (and of the host collective at that slice)."""
    ranks, n, codec = 3, 6007, "nvfp4"
    parts = gaussian_parts(rng, ranks, n)
    monkeypatch.setenv("CCOMPRESS_DEVICE_SLICE_MB", str(1024 * 4 / 2**20))  # 1024 fp32
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec=codec, algo="ring"),
                         slice_elems=1024)
    got = cc.run_cuda_loopback(ranks, lambda c: c.allreduce(DeviceArray.of(parts[c.rank]),
                                                            codec=codec, algo="ring").numpy())
    assert same_bits(got) and same_bits_or_nan([got[0], want[0]])
