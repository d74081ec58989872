"""PyTorch stays optional: ``import ccompress`` never imports it, everything but
ccompress.torch works without it, and ccompress.torch says how to get it."""
import os
import subprocess
import sys

import pytest

WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # any "import torch" now fails as if torch were absent
import numpy as np
import ccompress as cc
outs = cc.simulate.allreduce([np.full(300, r + 1.0, np.float32) for r in range(3)], codec="hint8")
assert all(np.array_equal(o, outs[0]) for o in outs)
assert np.allclose(outs[0], 6.0, rtol=1e-2), outs[0][:4]
try:
    cc.Communicator.from_torch()
except ImportError as e:
    assert "pip install torch" in str(e), e
else:
    raise AssertionError("Communicator.from_torch ran without torch")
try:
    import ccompress.torch
except ImportError as e:
    assert "pip install torch" in str(e), e
else:
    raise AssertionError("ccompress.torch imported without torch")
print("fine without torch")
"""


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))


def test_ccompress_works_without_torch():
    proc = _run(WITHOUT_TORCH)
    assert proc.returncode == 0 and "fine without torch" in proc.stdout, proc.stderr[-3000:]


def test_import_does_not_load_torch():
    proc = _run("import sys, ccompress; print('torch' in sys.modules)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "False"


def test_ci_has_torch():
    """CI sets CCOMPRESS_REQUIRE_TORCH=1: there the PyTorch tests must run, not skip."""
    if os.environ.get("CCOMPRESS_REQUIRE_TORCH") != "1":
        pytest.skip("CCOMPRESS_REQUIRE_TORCH is not set (only CI requires torch)")
    import torch  # noqa: F401
