"""The multi-process promises (tests/mpi) under `mpiexec` with real processes: one pytest
session per rank count, each of its tests one promise (`mpiexec -n 4 python -m pytest
tests/mpi` runs the same by hand). This test fails when that session fails, and also when it
ran less than it should: every rank must report the same tests, each passed, and only the
PyTorch ones may skip (when torch is missing)."""
import pytest

from helpers.reference.mpiexec import TESTS, needs_mpi, run_pytest

MPI_TESTS = TESTS / "mpi"
# Rank counts and what runs at each: everything at 4, the collectives at 3 (odd chunks).
RUNS = {4: [MPI_TESTS], 3: [MPI_TESTS / "test_collectives_mpi.py",
                            MPI_TESTS / "test_alltoall_mpi.py"]}
MAY_SKIP = ("test_torch_ddp_mpi.py",)


@needs_mpi
@pytest.mark.parametrize("nranks", sorted(RUNS, reverse=True))
def test_mpi_promises_under_mpiexec(nranks, tmp_path):
    rc, out, reports = run_pytest(nranks, RUNS[nranks], tmp_path)
    assert rc == 0, out[-8000:]
    assert sorted(reports) == list(range(nranks)), (sorted(reports), out[-8000:])
    first = reports[0]
    for r, rep in reports.items():
        assert rep == first, f"rank {r} ran other tests than rank 0:\n{rep}\n{first}"
    assert not first["failed"], first["failed"]
    assert first["passed"], out[-8000:]
    for nodeid, why in first["skipped"].items():
        assert nodeid.split("::")[0].endswith(MAY_SKIP), (nodeid, why)
    print(f"{len(first['passed'])} promises passed on {nranks} ranks; "
          f"skipped: {sorted(first['skipped']) or 'none'}")
