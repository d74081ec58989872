"""The CPU emulation of the CUDA runtime (cuda/emu), which scripts/sanitize.sh builds so that
the GPU tests run without a GPU: its primitives give CUDA's results, and the mistakes it is
there to catch (an exited lane in a warp primitive, a barrier against a warp primitive, a
host pointer passed to a kernel, a copy past an allocation, streams left unordered) are
caught. Skips unless the loaded ccompress._cuda is the emulated one."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ccompress as cc
from helpers.common import gaussian_parts, run_on_threads, same_bits
from helpers.cuda_helpers import DeviceArray, DeviceBuffer, cuda_or_reason, device_run

CUDA, WHY = cuda_or_reason()
pytestmark = pytest.mark.skipif(CUDA is None or not getattr(CUDA, "emulated", False),
                                reason="the loaded ccompress._cuda is not the CPU emulator "
                                       "(scripts/sanitize.sh builds it)")


def test_emulator_selftest():
    # In a child process: the checks report emulator errors on purpose.
    code = "import json; from ccompress import _cuda; print(json.dumps(_cuda.emulator_selftest()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)
    assert set(results) == {
        "fresh_memory_is_0xff", "block_barrier_sum", "warp_primitives",
        "exited_lane_in_mask_is_an_error", "barrier_against_warp_op_is_an_error",
        "host_pointer_argument_is_an_error", "copy_past_an_allocation_is_an_error",
        "errors_counted", "unordered_streams_see_old_data", "event_orders_streams",
        "device_shape_and_occupancy"}
    assert all(results.values()), {k: v for k, v in results.items() if not v}
    assert out.stderr.count("[cuda emulator] ERROR") == 4


def test_host_pointer_to_a_kernel_raises():
    code = ("import numpy as np, ccompress as cc\n"
            "from ccompress import _cuda\n"
            "b = _cuda.Backend(0); x = np.ones(64, np.float32); y = np.zeros(64, np.float32)\n"
            "try:\n"
            "    b.finalize(x.__array_interface__['data'][0], 64, 2.0, y.__array_interface__['data'][0], 'float32')\n"
            "except cc.CudaError as e:\n"
            "    print('CudaError', _cuda.emulator_errors())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "CudaError 1", out.stdout + out.stderr
    assert "is not device memory" in out.stderr


def test_fresh_device_memory_reads_as_nan():
    b = DeviceBuffer(64)
    got = b.download(np.zeros(16, np.float32))
    assert np.isnan(got).all()


def test_backend_writes_are_lazy_until_synchronized():
    """Work on a stream runs when something waits for it: a copy on another stream that does
    not wait for it reads the old bytes."""
    writer, reader = CUDA.Backend(0), CUDA.Backend(0)
    n = 256
    src = DeviceBuffer.of(np.full(n, 3.0, np.float32))
    dst, out = DeviceBuffer(4 * n), DeviceBuffer(4 * n)
    dst.upload(np.zeros(n, np.float32))
    writer.finalize(src.ptr, n, 1.0, dst.ptr, "float32")  # dst <- 3 on the writer's stream
    CUDA.copy_async(out.ptr, dst.ptr, 4 * n, reader.stream)  # not ordered after it
    reader.synchronize()
    assert (out.download(np.empty(n, np.float32)) == 0).all()
    writer.synchronize()
    CUDA.copy_async(out.ptr, dst.ptr, 4 * n, reader.stream)
    reader.synchronize()
    assert (out.download(np.empty(n, np.float32)) == 3).all()


def test_async_collective_waits_only_for_work_issued_before_the_call(rng):
    """An asynchronous device collective starts after the caller's work issued before the
    call, not after what the caller issues later (the worker thread starts it later: the
    communicator records an event at the call). The emulator's lazy streams make that
    visible: work issued after the call (here it overwrites x, which on a GPU would race
    with the collective) has not run when the collective reads x."""
    ranks, n = 2, 4099
    parts = gaussian_parts(rng, ranks, n)
    want = cc.run_inproc(ranks, lambda c: c.allreduce(parts[c.rank], codec="fp8_e4m3:g64"))

    def fn(c):
        caller = CUDA.Backend(0)
        x = DeviceArray.of(parts[c.rank])
        zeros = DeviceArray.of(np.zeros(n, np.float32))
        busy = DeviceArray.of(np.ones(64 * n, np.float32))
        # The worker starts x's call after this one. (Its result is kept: a cudaFree would
        # wait for all the device's work, the caller's later work included.)
        first = c.allreduce(busy, codec="hint8", async_op=True)
        work = c.allreduce(x, codec="fp8_e4m3:g64", async_op=True, stream=caller.stream)
        caller.finalize(zeros.buf.ptr, n, 2.0, x.buf.ptr, "float32")  # x <- 0, after the call
        result = work.wait().numpy()
        first.wait()
        return result

    got = cc.run_cuda_loopback(ranks, fn)
    assert same_bits(got + [want[0]])


def test_gpu_bench_script_runs(tmp_path):
    """perf/bench/gpu_bench.py (the timing half of perf/gpu_check.sh) runs to the end: its code is
    checked here before a GPU session spends device time on it (every kernel of every codec
    family, MX included, in both dtypes; the pipeline rows of two codecs, whose code is the
    same for all; the all-to-all rows of every codec of its table at two sizes), and
    perf/model/gpu_projection.py reads the kernels.json it writes. The times mean nothing."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "perf" / "bench" / "gpu_bench.py"),
                          "--mib", "0.02", "--pipe-mib", "0.02", "--iters", "1", "--ranks", "2",
                          "--pipe-codecs", "fp8_e4m3:g128,mxfp4", "--a2a-mib", "0.02,0.005",
                          "--a2a-iters", "2", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    table = (tmp_path / "table.md").read_text()
    assert table.startswith("**EMULATED on the CPU")
    doc = json.loads((tmp_path / "kernels.json").read_text())
    assert set(doc) == {"device", "driver", "commit", "date", "copy_gbps", "kernels", "pipeline",
                        "alltoall"}
    assert doc["device"].startswith("EMULATED") and doc["copy_gbps"] > 0
    assert all(set(r) == {"codec", "kernel", "dtype", "gbps"} and r["gbps"] > 0
               for r in doc["kernels"])
    kernels = {(r["codec"], r["kernel"], r["dtype"]) for r in doc["kernels"]}
    assert len(kernels) == len(doc["kernels"]) == 2 * (4 + 15 * 4)
    assert {c for c, _, _ in kernels} >= {"mxfp8", "mxfp8_e5m2", "mxfp4", "nvfp4", "hint8"}
    assert [(r["codec"], r["algo"]) for r in doc["pipeline"]] == [
        ("fp8_e4m3:g128", "two_shot"), ("fp8_e4m3:g128", "ring"), ("mxfp4", "two_shot"),
        ("mxfp4", "ring")]
    assert all(set(r) == {"codec", "algo", "mib", "pipelined_ms", "one_slice_ms", "alone_ms"}
               and min(r["pipelined_ms"], r["one_slice_ms"], r["alone_ms"]) > 0
               for r in doc["pipeline"])
    # 0.02 MiB: 5 rows of 1024 bfloat16 a piece on 2 ranks; 0.005: below one row, so one.
    codecs = ["none", "fp8_e4m3:g128", "mxfp8", "nvfp4"]
    assert [(r["codec"], r["mib"], r["ranks"]) for r in doc["alltoall"]] == [
        (c, mib, 2) for mib in (10 * 2048 / 2**20, 2 * 2048 / 2**20) for c in codecs]
    assert all(set(r) == {"codec", "mib", "ranks", "ms", "alone_ms"}
               and min(r["ms"], r["alone_ms"]) > 0 for r in doc["alltoall"])
    assert table.split("## All-to-all")[1].count("| nvfp4 | ") == 2
    proj = subprocess.run([sys.executable, str(root / "perf" / "model" / "gpu_projection.py"),
                           "--kernels", str(tmp_path / "kernels.json")], capture_output=True,
                          text=True, timeout=300)
    assert proj.returncode == 0, proj.stderr[-3000:]
    assert "measured rates" in proj.stderr and " measured" in proj.stdout


def test_warm_collectives_allocate_nothing_and_never_synchronize_the_device(rng):
    """Once a rank has run a collective, running it again makes no cudaMalloc and no cudaFree
    (which would also wait for the whole device) and no cudaDeviceSynchronize: the scratch
    is a per-rank pool, and the host waits for its own comm stream only."""
    ranks, n = 3, 20011
    parts = gaussian_parts(rng, ranks, n)
    bufs = [(DeviceBuffer.of(p), DeviceBuffer(p.nbytes)) for p in parts]
    group = CUDA.loopback_group(ranks, 0)

    def calls(dr, r):
        x, y = bufs[r]
        for codec, algo in (("fp8_e4m3:g64", "ring"), ("hint4", "two_shot"), ("taco:g64", "tree"),
                            ("nvfp4:sr", "one_shot")):
            device_run(dr, "allreduce", x.ptr, y.ptr, n, "float32", codec, algo=algo, op="sum",
                       slice_elems=2048)
        device_run(dr, "reduce_scatter", x.ptr, y.ptr, n, "float32", "hint8", op="sum",
                   slice_elems=2048)

    keys = ("malloc", "free", "device_synchronize")
    start = CUDA.emulator_counts()
    run_on_threads(group, calls)  # warm-up: the first calls do allocate (the pools)
    before = CUDA.emulator_counts()
    assert before["malloc"] > start["malloc"]
    run_on_threads(group, calls)
    after = CUDA.emulator_counts()
    assert {k: after[k] for k in keys} == {k: before[k] for k in keys}
    assert after["launches"] > before["launches"]  # (the counters do count)
