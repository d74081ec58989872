"""The NCCL transport (cuda/src/transport/nccl_transport.cu) and the ordered executor, run on
the CPU emulator with its in-process stand-in for libnccl (cuda/emu/fake_nccl.cc).

The stand-in is exported by the emulated _cuda module itself and loaded through the ordinary
path: NCCL_ROOT names a folder whose lib/libnccl.so.2 links to that module (test only; the
real _cuda has no such symbols, and the emulated one refuses a real libnccl). Ranks are
threads of this process, each with its own NCCL communicator made from one unique id.
Skips unless the loaded ccompress._cuda is the emulated one (scripts/sanitize.sh builds it).
"""
import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ccompress as cc
from ccompress._internal.ranks import on_threads
from helpers.common import gaussian_parts, same_bits
from helpers.cuda_helpers import DeviceArray, DeviceBuffer, cuda_or_reason, device_run

CUDA, WHY = cuda_or_reason()
pytestmark = pytest.mark.skipif(CUDA is None or not getattr(CUDA, "emulated", False),
                                reason="the loaded ccompress._cuda is not the CPU emulator "
                                       "(scripts/sanitize.sh builds it)")

ALGOS = ["ring", "two_shot", "tree", "one_shot"]
FAMILIES = ["none", "bf16", "fp8_e4m3:g64", "taco:g32", "hint8:g32", "nvfp4", "hint4"]
NCCL_INVALID_USAGE = 5


@pytest.fixture(scope="module", autouse=True)
def emulated_nccl(tmp_path_factory):
    """NCCL_ROOT with lib/libnccl.so.2 -> the emulated _cuda module, and one emulated device
    per rank (as NCCL wants: each rank's legacy stream is its own), for this module."""
    root = tmp_path_factory.mktemp("nccl_root")
    (root / "lib").mkdir()
    (root / "lib" / "libnccl.so.2").symlink_to(CUDA.__file__)
    old = os.environ.get("NCCL_ROOT")
    os.environ["NCCL_ROOT"] = str(root)
    devices = hooks().ccompress_emu_set_devices(4)
    yield str(root)
    hooks().ccompress_emu_set_devices(devices)
    if old is None:
        del os.environ["NCCL_ROOT"]
    else:
        os.environ["NCCL_ROOT"] = old


class DeviceArrayOn(DeviceArray):
    """tests/cuda_helpers.DeviceArray on a given emulated device (each rank has its own)."""

    def __init__(self, shape, dtype, device=0):
        self.shape, self.dtype, self.device = tuple(shape), np.dtype(dtype), int(device)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.buf = DeviceBuffer(self.size * self.dtype.itemsize, self.device)
        self._exported = []

    @classmethod
    def of(cls, a, device=0):
        a = np.ascontiguousarray(a)
        out = cls(a.shape, a.dtype, device)
        out.buf.upload(a)
        return out

    def new_empty(self, shape):
        return DeviceArrayOn(shape, self.dtype, self.device)

    def __dlpack_device__(self):
        return (2, self.device)

    def __dlpack__(self, stream=None):
        capsule = super().__dlpack__(stream)
        self._exported[-1][0].dl_tensor.device.device_id = self.device
        return capsule


def on(c, a):
    """``a`` (NumPy) copied to rank ``c``'s device."""
    return DeviceArrayOn.of(a, c.device)


def hooks():
    """The stand-in's test hooks (and the emulator's), by ctypes on the emulated module."""
    lib = ctypes.CDLL(CUDA.__file__)
    lib.ccompress_fake_nccl_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.ccompress_emu_stream_operations.argtypes = [ctypes.c_void_p]
    lib.ccompress_emu_stream_operations.restype = ctypes.c_uint64
    lib.ccompress_emu_set_devices.argtypes = [ctypes.c_int]
    return lib


def nccl_run(size, fn, **kwargs):
    """fn(communicator) on one thread per rank, each with its own NCCL communicator of one
    unique id (Communicator.from_nccl); the results in rank order."""
    uid = cc.nccl_unique_id()

    def body(_, r):
        c = cc.Communicator.from_nccl(unique_id=uid, rank=r, size=size, device=r, **kwargs)
        try:
            return fn(c)
        finally:
            c.close()

    return on_threads(list(range(size)), body)


def test_nccl_root_finds_the_emulated_library():
    from ccompress._internal.nccl import find_nccl

    found = find_nccl()
    assert found["version"] == "2.99.0" and found["path"].endswith("libnccl.so.2")
    assert len(cc.nccl_unique_id()) == 128


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("codec", FAMILIES)
def test_nccl_allreduce_is_bit_identical_to_the_host_collective(rng, ranks, algo, codec):
    n = 3001
    parts = gaussian_parts(rng, ranks, n)
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec=codec, algo=algo))
    got = nccl_run(ranks, lambda c: c.allreduce(on(c, parts[c.rank]), codec=codec,
                                                algo=algo).numpy())
    assert same_bits(got + [want[0]])


@pytest.mark.parametrize("codec", ["fp8_e4m3:g64", "hint8:g32", "nvfp4"])
def test_nccl_reduce_scatter_and_allgather_match_the_host(rng, codec):
    ranks, n = 3, 2049
    parts = gaussian_parts(rng, ranks, n)

    def host(c):
        return c.reduce_scatter(parts[c.rank], codec=codec), c.allgather(parts[c.rank], codec=codec)

    def device(c):
        x = on(c, parts[c.rank])
        return c.reduce_scatter(x, codec=codec).numpy(), c.allgather(x, codec=codec).numpy()

    want, got = cc.run_inproc(ranks, host), nccl_run(ranks, device)
    for r in range(ranks):
        assert same_bits([got[r][0], want[r][0]]) and same_bits([got[r][1], want[r][1]])
    assert same_bits([g[1] for g in got])


@pytest.mark.parametrize("codec", ["none", "fp8_e4m3:g64", "nvfp4", "hint8:g32", "mxfp4"])
def test_nccl_alltoall_uneven_splits_match_the_senders_encoding(codec):
    """ncclSend/ncclRecv of each piece: bit for bit the sender's encode + decode of it."""
    from helpers.alltoall_checks import check_received, inputs, split_table

    table = split_table(np.random.default_rng(4), 3, 300)
    xs = inputs(2, table)

    def device(c):
        r = c.rank
        return c.all_to_all(on(c, xs[r]), codec=codec, in_splits=table[r],
                            out_splits=table[:, r]).numpy()

    for r, y in enumerate(nccl_run(3, device, slice_elems=128)):
        check_received(y, xs, table, codec, r)


def test_nccl_alltoall_split_mismatch_raises_on_every_rank_and_the_group_goes_on():
    def fn(c):
        ins = [2, 3] if c.rank == 0 else [2, 2]
        try:
            c.all_to_all(on(c, np.ones(sum(ins), np.float32)), in_splits=ins, out_splits=[2, 2])
        except cc.MismatchError as e:
            raised = str(e)
        y = c.all_to_all(on(c, np.full(2, c.rank, np.float32))).numpy()
        return raised, y

    for raised, y in nccl_run(2, fn):
        assert "rank 0 sends 3 elements to rank 1" in raised
        np.testing.assert_array_equal(y, [0, 1])


def test_nccl_bfloat16_and_async_calls_match_the_host(rng):
    import ml_dtypes

    ranks, n = 2, 4097
    parts = gaussian_parts(rng, ranks, n).astype(ml_dtypes.bfloat16)
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec="fp8_e4m3:g64"))

    def fn(c):
        works = [c.allreduce(on(c, parts[c.rank]), codec="fp8_e4m3:g64", async_op=True)
                 for _ in range(3)]
        return [w.wait().numpy() for w in works]

    got = nccl_run(ranks, fn)
    assert same_bits([y for ys in got for y in ys] + [want[0]])


def test_nccl_respects_the_callers_stream(rng):
    """Input written on the caller's stream just before the call, output copied on it just
    after, no synchronisation in between: the NCCL path must order itself with it (the
    emulator's streams run only what something waits for)."""
    ranks, n = 3, 20011
    parts = gaussian_parts(rng, ranks, n)
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec="hint8:g32",
                                                        algo="two_shot"))

    def fn(c):
        caller = CUDA.Backend(c.device)
        acc = DeviceBuffer.of(parts[c.rank], c.device)
        x, y, z = (DeviceBuffer(parts[c.rank].nbytes, c.device) for _ in range(3))
        for _ in range(3):
            caller.finalize(acc.ptr, n, 1.0, z.ptr, "float32")
        caller.finalize(acc.ptr, n, 1.0, x.ptr, "float32")  # x written on the caller's stream
        device_run(c._t, "allreduce", x.ptr, y.ptr, n, "float32", "hint8:g32", algo="two_shot",
                   op="sum", timeout=30.0, stream=caller.stream)
        CUDA.copy_async(z.ptr, y.ptr, parts[c.rank].nbytes, caller.stream)
        caller.synchronize()
        return z.download(parts[c.rank])

    got = nccl_run(ranks, fn)
    assert same_bits(got + [want[0]])


def test_nccl_rank_mismatch_raises_on_every_rank_and_the_group_goes_on(rng):
    ranks, n = 3, 1000
    parts = gaussian_parts(rng, ranks, n)

    def fn(c):
        x = on(c, parts[c.rank])
        with pytest.raises(cc.MismatchError, match="ranks called different collectives"):
            c.allreduce(x, codec="hint8:g32" if c.rank == 1 else "fp8_e4m3:g64")
        return c.allreduce(x, codec="fp8_e4m3:g64").numpy()  # still in step

    got = nccl_run(ranks, fn, timeout=20)
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec="fp8_e4m3:g64"))
    assert same_bits(got + [want[0]])


def test_nccl_silent_peer_times_out_and_aborts():
    """Rank 2 never posts: ranks 0 and 1 raise CollectiveTimeout within their timeout, their
    communicators are aborted (every later call raises NcclError), nothing hangs."""
    ranks, n = 3, 5000
    silent_done = threading.Event()

    def fn(c):
        if c.rank == 2:
            silent_done.wait(30)
            return None
        x = on(c, np.ones(n, np.float32))
        t0 = time.monotonic()
        with pytest.raises(cc.CollectiveTimeout, match="did not complete within"):
            c.allreduce(x, codec="fp8_e4m3:g64")
        took = time.monotonic() - t0
        with pytest.raises(cc.NcclError, match="aborted"):
            device_run(c._t, "allreduce", x.buf.ptr, x.buf.ptr, n, "float32", "none", algo="ring",
                       op="sum", timeout=0.5)
        return took

    try:
        got = nccl_run(ranks, fn, timeout=0.5)
    finally:
        silent_done.set()
    assert all(0.4 < t < 10 for t in got[:2]), got


def test_nccl_async_error_aborts_and_every_rank_raises():
    """An asynchronous NCCL error (ncclCommGetAsyncError) on rank 1 aborts its communicator;
    its peers, no longer answered, time out: every rank raises."""
    ranks, n = 2, 3000
    set_error = hooks().ccompress_fake_nccl_set_async_error
    ready = threading.Barrier(ranks)

    def fn(c):
        ready.wait()
        if c.rank == 1:
            assert set_error(1, NCCL_INVALID_USAGE) >= 1
        ready.wait()
        x = on(c, np.ones(n, np.float32))
        with pytest.raises((cc.NcclError, cc.CollectiveTimeout)) as e:
            c.allreduce(x, codec="none")
        return type(e.value).__name__, str(e.value)

    got = nccl_run(ranks, fn, timeout=1.0)
    assert got[1][0] == "NcclError" and "invalid usage" in got[1][1], got


def test_nccl_barrier_and_plain_allreduce(rng):
    ranks, n = 3, 777
    parts = gaussian_parts(rng, ranks, n)
    want = parts[0].copy()
    for p in parts[1:]:
        want += p  # fp32, rank order

    def fn(c):
        c.barrier()
        x, y = DeviceBuffer.of(parts[c.rank], c.device), DeviceBuffer(parts[c.rank].nbytes, c.device)
        c._t.nccl_allreduce(x.ptr, y.ptr, n, 0)
        return y.download(parts[c.rank])

    got = nccl_run(ranks, fn)
    assert same_bits(got + [want])


# ---- the four defects noted before (each test failed before its fix) ----

def test_nccl_failed_posting_aborts_the_communicator():
    """An ncclSend that fails part-way through posting leaves this rank's messages out of
    step with its peers': the communicator must refuse further calls (NcclError at once),
    not go on to match a peer's messages wrongly or wait out a timeout."""
    ranks, n = 2, 4000
    fail = hooks().ccompress_fake_nccl_fail
    # Rank 0's second ncclSend: the first is the call check's host message, the second the
    # first payload transfer.
    fail(b"ncclSend", 0, 1, 3)

    def fn(c):
        x = DeviceBuffer.of(np.ones(n, np.float32), c.device)
        args = ("allreduce", x.ptr, x.ptr, n, "float32", "fp8_e4m3:g64")
        with pytest.raises((cc.NcclError, cc.CollectiveTimeout)) as first:
            device_run(c._t, *args, algo="ring", op="sum", timeout=0.5)
        if c.rank != 0:
            return type(first.value).__name__
        assert "ncclSend failed" in str(first.value)
        t0 = time.monotonic()
        with pytest.raises(cc.NcclError, match="aborted"):  # at once, not after the timeout
            device_run(c._t, *args, algo="ring", op="sum", timeout=5.0)
        assert time.monotonic() - t0 < 2.5
        return "NcclError"

    assert nccl_run(ranks, fn, timeout=0.5) == ["NcclError", "CollectiveTimeout"]


def run_check(name, devices=1):
    """One of the emulated module's C++ checks (cuda/emu/transport_checks.cu), in a child."""
    code = ("import ctypes; from ccompress import _cuda\n"
            "f = ctypes.CDLL(_cuda.__file__).ccompress_emu_check\n"
            "f.restype = ctypes.c_char_p\n"
            f"print(f(b'{name}').decode())\n")
    env = dict(os.environ, CCOMPRESS_EMU_DEVICES=str(devices))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[cuda emulator] ERROR" not in out.stderr, out.stderr[-3000:]
    return out.stdout.strip()


def test_nccl_cancel_of_a_started_host_group_aborts_the_communicator():
    assert run_check("cancel_abandons_a_started_host_group") == "ok"


def test_copy_sync_runs_on_the_device_of_its_memory():
    assert run_check("copy_sync_runs_on_the_device_of_its_memory", devices=2) == "ok"


def test_nccl_async_call_orders_the_callers_stream_at_wait(rng):
    """An asynchronous call orders the caller's stream after its result when the caller
    asks for the result (Work.wait), not when the worker thread finishes: the worker puts
    nothing on the caller's stream (it may be capturing a graph, or running work meant to
    overlap), and wait() makes it wait for the result."""
    ranks, n = 2, 3000
    parts = gaussian_parts(rng, ranks, n)
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec="fp8_e4m3:g64"))
    operations = hooks().ccompress_emu_stream_operations

    def fn(c):
        caller = CUDA.Backend(c.device)
        x = on(c, parts[c.rank])
        before = operations(caller.stream)
        work = c.allreduce(x, codec="fp8_e4m3:g64", async_op=True, stream=caller.stream)
        deadline = time.monotonic() + 30
        while not work.is_completed() and time.monotonic() < deadline:
            time.sleep(0.001)
        finished = operations(caller.stream)
        y = work.wait()
        waited = operations(caller.stream)
        z = DeviceBuffer(parts[c.rank].nbytes, c.device)
        CUDA.copy_async(z.ptr, y.buf.ptr, parts[c.rank].nbytes, caller.stream)
        caller.synchronize()
        return finished - before, waited - finished, z.download(parts[c.rank])

    got = nccl_run(ranks, fn)
    # The call records one event on the caller's stream; wait() adds the one wait.
    assert [g[:2] for g in got] == [(1, 1)] * ranks
    assert same_bits([g[2] for g in got] + [want[0]])
