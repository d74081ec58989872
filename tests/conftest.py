import sys
from pathlib import Path

import numpy as np
import pytest

# The hooks and fixture of the multi-process tests in tests/mpi (see there).
from helpers.reference import mpi_session
from helpers.reference.mpi_session import (  # noqa: F401
    pytest_ignore_collect, pytest_runtest_makereport, pytest_sessionfinish, world)

TESTS = Path(__file__).resolve().parent
# Markers by folder (pyproject.toml registers them): pytest -m torch, -m "not slow", ...
FOLDER_MARKERS = {"mpi": ("mpi",), "pytorch": ("torch",), "cuda": ("cuda_emulated",),
                  "jax": ("jax",)}
# Modules outside those folders, or with more to say: the ones that launch jobs of processes
# (mpiexec, torchrun) are "slow".
MODULE_MARKERS = {
    "test_mpi.py": ("mpi", "slow"), "test_mpi_faults.py": ("mpi", "slow"),
    "test_soak.py": ("mpi", "slow"), "test_torch_ddp_mpi.py": ("torch",),
    "test_torchrun.py": ("slow",), "test_torch_backend.py": ("slow",),
    "test_jax_multiprocess.py": ("mpi", "slow"),
    "test_jax_cuda.py": ("cuda_emulated",),
}


def pytest_collection_modifyitems(config, items):
    mpi_session.pytest_collection_modifyitems(config, items)
    for item in items:
        path = Path(str(item.fspath)).resolve()
        names = list(MODULE_MARKERS.get(path.name, ()))
        if TESTS in path.parents:
            folder = path.relative_to(TESTS).parts[0]
            names += FOLDER_MARKERS.get(folder, ())
        for name in dict.fromkeys(names):
            item.add_marker(getattr(pytest.mark, name))


@pytest.fixture(autouse=True)
def no_cuda_emulator_errors():
    """Under the CPU emulation of the CUDA runtime (cuda/emu), a test fails when the emulator
    reported an error during it (a stray pointer, a divergent barrier...), even one that no
    call returned."""
    cuda = sys.modules.get("ccompress._cuda")
    if cuda is None or not getattr(cuda, "emulated", False):
        yield
        return
    before = cuda.emulator_errors()
    yield
    assert cuda.emulator_errors() == before, "the CUDA emulator reported errors (stderr)"


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
