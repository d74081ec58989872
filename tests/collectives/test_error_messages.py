"""Errors a person can read: no C++ expression text and no source paths in messages (those
come only with CCOMPRESS_DEBUG=1, relative to the repository), and a misspelt codec spec
gets the closest valid specs in at most two lines."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import ccompress as cc
from ccompress import _core

# Marks of internals: a source file, an absolute path, a "[expr at file:line]" suffix.
LEAK = re.compile(r"\.(cc|cu|cuh|h)\b|/\w+/|\[.* at .*:\d+\]|==|&&|\|\|")


def message(fn, exc=cc.CCompressError) -> str:
    with pytest.raises(exc) as info:
        fn()
    return str(info.value)


def assert_readable(msg: str, max_lines: int = 2) -> None:
    assert not LEAK.search(msg), msg
    assert len(msg.splitlines()) <= max_lines, msg
    assert len(msg) < 600, msg


@pytest.mark.parametrize("spec, suggestion", [
    ("fp8", "fp8_e4m3:g128"),
    ("FP8_E4M3", "fp8_e4m3:g128"),
    ("fp8_e4m4", "fp8_e4m3:g128"),
    ("bf61", "bf16"),
    ("hint", "hint8"),
    ("hnvfp", "hnvfp4"),
    ("tacoo:g64", "taco:g128"),
    ("autoo8", "auto8"),
    ("auto", "auto4"),
])
def test_misspelt_codec_suggests_the_closest_specs(spec, suggestion):
    for parse in (cc.Codec.parse, _core.Codec.parse):
        msg = message(lambda: parse(spec), cc.InvalidArgument)
        assert_readable(msg)
        first, second = msg.splitlines()
        assert f"'{spec}'" in first and "did you mean" in first and suggestion in first, msg
        assert second.startswith("valid codec specs:") and "auto8, auto4" in second, msg


@pytest.mark.parametrize("spec", ["", "fp32", "zzz", "fp8_e4m3:g15", "fp8_e4m3:g", "bf16:g128",
                                  "none:sr", "fp8_e4m3:g128:x", "fp8_e4m3:g128:g64",
                                  "hint8:g7", "taco:h16", "nvfp4:g32", "hint4:s32"])
def test_bad_spec_messages_are_short_and_name_the_spec(spec):
    msg = message(lambda: _core.Codec.parse(spec), cc.InvalidArgument)
    assert_readable(msg)
    assert f"'{spec}'" in msg.splitlines()[0], msg


def test_per_call_codecs_are_explained_in_cpp_too():
    msg = message(lambda: _core.Codec.parse("auto8"), cc.InvalidArgument)
    assert_readable(msg, max_lines=1)
    assert "chosen per call" in msg and "allreduce" in msg


def test_ring_with_error_feedback_names_the_fix_not_the_source():
    def body(comm):
        return message(lambda: comm.allreduce(np.ones(100, np.float32), codec="fp8_e4m3:g128",
                                              algo="ring", error_feedback=cc.ErrorFeedback()),
                       cc.Unsupported)
    for msg in cc.run_inproc(2, body):
        assert_readable(msg, max_lines=1)
        assert msg.endswith("use algo='two_shot' or 'auto'"), msg


def test_debug_setting_adds_the_check_site_relative_to_the_repository():
    code = ("import ccompress as cc\n"
            "try:\n    cc.Codec.parse('fp9')\n"
            "except cc.InvalidArgument as e:\n    print(str(e).splitlines()[-1])\n")
    env = dict(os.environ, CCOMPRESS_DEBUG="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    last = out.stdout.strip()
    m = re.search(r"\[(.+) at (\S+):(\d+)\]$", last)
    assert m, out.stdout + out.stderr
    assert m.group(2) == "cuda/src/codecs/codec.cc" or m.group(2).startswith("cuda/src/codecs/"), last


@pytest.mark.parametrize("debug", ["0", "1"])
def test_cuda_errors_name_the_call_site_in_debug_mode_only(debug):
    try:
        from ccompress import _cuda
    except ImportError:
        pytest.skip("no CUDA module in this build")
    if not getattr(_cuda, "emulated", False) and _cuda.device_count() == 0:
        pytest.skip("no GPU")
    # A host pointer given to a kernel: the emulator (or the GPU) fails the launch.
    code = ("import numpy as np, ccompress as cc\n"
            "from ccompress import _cuda\n"
            "b = _cuda.Backend(0); x = np.ones(64, np.float32); y = np.zeros(64, np.float32)\n"
            "try:\n"
            "    b.finalize(x.__array_interface__['data'][0], 64, 2.0,"
            " y.__array_interface__['data'][0], 'float32'); b.synchronize()\n"
            "except cc.CudaError as e:\n"
            "    print(e)\n")
    env = dict(os.environ, CCOMPRESS_DEBUG=debug)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    msg = out.stdout.strip()
    assert msg, out.stderr
    if debug == "0":
        assert_readable(msg, max_lines=1)
    else:
        # the launching line in the kernel file, not the checker's own line
        m = re.search(r"\[(.+) at (\S+):(\d+)\]$", msg)
        assert m and m.group(2).startswith("cuda/src/kernels/elementwise_kernels.cu"), msg
