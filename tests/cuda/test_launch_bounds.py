"""Launches and events per device collective, counted on the CPU emulation of the CUDA
runtime (cuda/emu, `_cuda.emulator_counts()`): a test that fails when a schedule or the
device pipeline regresses, without a GPU.

Each case runs an all-reduce on 4 virtual ranks of the loopback group twice, at 2 and at 4
slices per chunk, and splits the counts per rank into a cost per slice of the tensor and a
fixed cost per call. Both are bounded per schedule below; from them, a 64 MiB bfloat16
all-reduce at the loopback transport's own slice (16 MiB) must cost at most
MAX_PER_MIB launches and events (cudaEventRecord + cudaStreamWaitEvent) per MiB. At the
host transports' 65536-element slice the same all-reduce cost 64x more of both per MiB, and
each message then also waited on the host for the GPU (the loopback drove the collective by
host polling); docs/architecture.md gives the figures."""
import numpy as np
import pytest

from helpers.common import run_on_threads
from helpers.cuda_helpers import DeviceBuffer, cuda_or_reason, device_run

CUDA, WHY = cuda_or_reason()
pytestmark = pytest.mark.skipif(CUDA is None or not getattr(CUDA, "emulated", False),
                                reason="counts need the CPU emulator's _cuda (scripts/sanitize.sh "
                                       "builds it)")

RANKS, SLICE = 4, 4096  # elements per slice (fp32) of the counted runs
# Per slice of the tensor, per rank, at most (measured: launches two_shot 5.25 with a codec,
# ring 4, tree 5.25, one_shot 7; events (records + waits) 6, 9, 11.25, 12; event creates 2,
# 3, 2.75, 4).
PER_SLICE = {"two_shot": {"launches": 6, "events": 6.5, "event_creates": 2.5},
             "ring": {"launches": 4.5, "events": 9.5, "event_creates": 3.5},
             "tree": {"launches": 6, "events": 12, "event_creates": 3.5},
             "one_shot": {"launches": 8, "events": 12.5, "event_creates": 4.5}}
# Per call, per rank, whatever its size (measured: 0 launches, 10 records, 4 waits, 6 creates:
# the call check's host messages and the caller's stream).
FIXED = {"launches": 1, "events": 16, "event_creates": 8}
# Per MiB of a 64 MiB bfloat16 all-reduce at the loopback transport's slice.
MAX_PER_MIB = {"launches": 0.5, "events": 1.0}

CASES = [("none", "two_shot"), ("fp8_e4m3:g128", "two_shot"), ("fp8_e4m3:g128", "ring"),
         ("fp8_e4m3:g128", "tree"), ("fp8_e4m3:g128", "one_shot"), ("hint8", "ring"),
         ("mxfp4", "two_shot")]


def per_rank_counts(group, codec, algo, n):
    """Runtime calls per rank of one warm all-reduce of n float32 elements."""
    rng = np.random.default_rng(0)
    bufs = [(DeviceBuffer.of(rng.standard_normal(n).astype(np.float32)), DeviceBuffer(4 * n))
            for _ in range(RANKS)]

    def call(dr, r):
        x, y = bufs[r]
        device_run(dr, "allreduce", x.ptr, y.ptr, n, "float32", codec, algo=algo, op="sum",
                   slice_elems=SLICE)

    run_on_threads(group, call)  # warm: pools and events made
    before = CUDA.emulator_counts()
    run_on_threads(group, call)
    after = CUDA.emulator_counts()
    d = {k: (after[k] - before[k]) / RANKS for k in after}
    d["events"] = d["event_records"] + d["stream_waits"]
    return d


@pytest.mark.parametrize("codec,algo", CASES)
def test_launches_and_events_per_collective_are_bounded(codec, algo):
    group = CUDA.loopback_group(RANKS, 0)
    few, many = (per_rank_counts(group, codec, algo, RANKS * SLICE * k) for k in (2, 4))
    slices_few, slices_many = RANKS * 2, RANKS * 4
    keys = ("launches", "events", "event_creates")
    per_slice = {k: (many[k] - few[k]) / (slices_many - slices_few) for k in keys}
    fixed = {k: few[k] - per_slice[k] * slices_few for k in keys}
    for k in keys:
        assert per_slice[k] <= PER_SLICE[algo][k], (k, per_slice, fixed)
        assert fixed[k] <= FIXED[k], (k, per_slice, fixed)
    assert many["malloc"] == many["free"] == many["device_synchronize"] == 0
    # At the loopback transport's own slice: a 64 MiB bfloat16 all-reduce, per MiB.
    slice_bytes = group[0].default_slice_bytes
    slices = -(-(64 << 20) // slice_bytes)
    for k, bound in MAX_PER_MIB.items():
        per_mib = (per_slice[k] * slices + fixed[k]) / 64
        assert per_mib <= bound, (k, per_mib, per_slice, fixed)
