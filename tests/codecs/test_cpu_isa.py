"""The AVX2 and baseline copies of the host codec loops (cuda/src/cpu/isa_dispatch.h) give the
same bits for every codec family, dtype, schedule, averaging, error feedback and NaN/Inf
count: tests/helpers/isa_digest.py runs once per copy, in its own process because the copy is picked
once per process."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccompress import _core

TESTS = Path(__file__).resolve().parents[1]  # the drivers run as helpers.* from here


def digests(isa: str) -> dict:
    env = dict(os.environ, CCOMPRESS_CPU_ISA=isa)
    out = subprocess.run([sys.executable, "-m", "helpers.isa_digest"], cwd=TESTS, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_avx2_and_baseline_loops_give_the_same_bits():
    if _core.cpu_isa() != "avx2":
        pytest.skip("this CPU has no AVX2 (or CCOMPRESS_CPU_ISA=baseline is set): "
                    "only the baseline copy can run here")
    fast, base = digests("auto"), digests("baseline")
    assert (fast.pop("isa"), base.pop("isa")) == ("avx2", "baseline")
    assert len(fast) > 700 and fast.keys() == base.keys()
    differ = sorted(k for k in fast if fast[k] != base[k])
    assert not differ, f"{len(differ)} outputs differ between the copies, e.g. {differ[:5]}"


def test_bad_isa_setting_is_a_typed_error():
    code = ("import numpy as np, ccompress as cc\n"
            "x = np.ones(8, np.float32)\n"
            "try:\n"
            "    cc.run_inproc(2, lambda c: c.allreduce(x, codec='fp8_e4m3:g128'))\n"
            "except cc.InvalidArgument as e:\n"
            "    print('InvalidArgument', e)\n")
    env = dict(os.environ, CCOMPRESS_CPU_ISA="sse9")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "InvalidArgument" in out.stdout and "CCOMPRESS_CPU_ISA='sse9'" in out.stdout


@pytest.mark.parametrize("isa", ["auto", "baseline"])
def test_encoders_keep_their_pinned_bits_on_every_shape(isa):
    """Both copies of the encoders give, for every group size, scale width, rotation, tail and
    NaN/Inf pattern of tests/helpers/isa_shape_digest.py, the bits pinned from the group-at-a-time
    loops (the baseline copy batches groups; where no AVX2 kernel applies the AVX2 copy runs
    the same batched loops, so only pinned digests can check it)."""
    env = dict(os.environ, CCOMPRESS_CPU_ISA=isa)
    out = subprocess.run([sys.executable, "-m", "helpers.isa_shape_digest"], cwd=TESTS, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    want = json.loads((TESTS / "data" / "isa_shape_digests.json").read_text())
    assert got.keys() == want.keys()
    differ = sorted(k for k in want if got[k] != want[k])
    assert not differ, f"{len(differ)} of {len(want)} outputs changed, e.g. {differ[:5]}"
