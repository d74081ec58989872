"""The pytest hooks of the multi-process promises in tests/mpi (tests/conftest.py takes them
from here, so that the suite has one conftest). Each test in tests/mpi runs on every rank of
an mpiexec job (``mpiexec -n 4 python -m pytest tests/mpi``; tests/collectives/test_mpi.py launches it).
Outside mpiexec the outer suite does not collect that folder, and a direct
``pytest tests/mpi`` skips every test there: on one rank they would prove nothing.

Every rank runs the same tests in the same order. A failure on one rank would leave the
others waiting in their next collective, so it prints its report and aborts the whole job
(non-zero exit). Each rank writes the ids that passed, failed and were skipped to
$CCOMPRESS_MPI_REPORT/rank<r>.json for the launcher to check."""
import json
import os
import sys

import pytest

from pathlib import Path

from helpers.reference.mpiexec import REPORT_ENV, TESTS, under_mpiexec

MPI_TESTS = TESTS / "mpi"
_outcomes = {"passed": [], "failed": [], "skipped": {}}


def is_mpi_test(item) -> bool:
    return MPI_TESTS in Path(str(item.fspath)).resolve().parents


def pytest_ignore_collect(collection_path, config):
    """Outside mpiexec the suite leaves tests/mpi to tests/collectives/test_mpi.py."""
    if not under_mpiexec() and Path(collection_path).resolve() == MPI_TESTS:
        return True
    return None


def pytest_collection_modifyitems(config, items):
    if under_mpiexec():
        return
    skip = pytest.mark.skip(reason="a multi-process test: run under mpiexec -n 4 "
                                   "(tests/collectives/test_mpi.py launches it)")
    for item in items:
        if is_mpi_test(item):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not is_mpi_test(item):
        return
    if report.skipped and report.when in ("setup", "call"):
        _outcomes["skipped"][item.nodeid] = str(report.longrepr[-1]) \
            if isinstance(report.longrepr, tuple) else str(report.longrepr)
    elif report.when == "call" and report.passed:
        _outcomes["passed"].append(item.nodeid)
    if report.failed and under_mpiexec():
        _outcomes["failed"].append(item.nodeid)
        _write_report()
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.rank
        print(f"\n[rank {rank}] FAILED {item.nodeid} ({report.when}):\n{report.longreprtext}",
              file=sys.__stderr__, flush=True)
        MPI.COMM_WORLD.Abort(1)


def _write_report():
    folder = os.environ.get(REPORT_ENV)
    if not folder or not under_mpiexec():
        return
    from mpi4py import MPI

    path = os.path.join(folder, f"rank{MPI.COMM_WORLD.rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(_outcomes, f)
    os.replace(path + ".tmp", path)


def pytest_sessionfinish(session, exitstatus):
    _write_report()
