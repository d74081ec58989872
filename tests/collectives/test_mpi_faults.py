"""A rank that dies (SIGKILL) or stops (SIGSTOP) in the middle of a collective under
mpiexec: the others raise CollectiveTimeout or MpiError within the timeout, the
communicator refuses further calls, and the processes exit (tests/helpers/mpi_faults.py).

A stopped rank leaves MPI none the wiser, so the survivors' errors are ccompress's own, and
always checked. When a rank dies, MPICH (5.0, without its fault-tolerance build) often ends
the whole job as soon as a survivor's progress engine meets the dead peer, before the
survivor can report; the test then checks that the job ended within the bound (no hang) and
checks every report a survivor did write."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.reference.mpiexec import mpi_unusable, mpiexec, script_env

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
NRANKS, VICTIM, TIMEOUT = 3, 1, 2.0
# Upper bound on a survivor's wait: the timeout plus the call it was in when the victim
# stopped and scheduling noise on a loaded 2-core machine; a hang fails it.
SLACK = 20.0


def _stop_ranks(folder: Path, ranks) -> None:
    """SIGKILL to the ranks (of this test's job) that recorded their pid in folder."""
    for r in ranks:
        f = folder / f"pid{r}"
        if f.exists():
            try:
                os.kill(int(f.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


@pytest.mark.skipif(mpi_unusable() is not None, reason=f"MPI unavailable: {mpi_unusable()}")
@pytest.mark.parametrize("mode", ["kill", "stop"])
def test_survivors_fail_cleanly(mode, tmp_path):
    env = script_env()
    cmd = [mpiexec(), "-disable-auto-cleanup", "-n", str(NRANKS), sys.executable,
           str(HELPERS / "mpi_faults.py"), mode, str(tmp_path), str(TIMEOUT)]
    # Not in a session of its own: hydra then takes one rank's death for the whole job's.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=HELPERS)
    survivors = [r for r in range(NRANKS) if r != VICTIM]
    files = [tmp_path / f"rank{r}.txt" for r in survivors]
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and not all(f.exists() for f in files):
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        _stop_ranks(tmp_path, [VICTIM])  # a stopped victim never exits by itself
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:  # something hung: end every rank this test started
            _stop_ranks(tmp_path, range(NRANKS))
            proc.kill()
            out = proc.communicate()[0]
    ended = time.time()
    missing = [str(f) for f in files if not f.exists()]
    if missing and mode == "kill" and (tmp_path / "struck").exists():
        # MPICH ended the job (hydra reports the dead rank, or its proxy fails writing to it):
        # it must have done so promptly, not after a hang.
        waited = ended - float((tmp_path / "struck").read_text())
        assert waited < TIMEOUT + SLACK, (waited, out[-4000:])
        print(f"kill: MPICH ended the job {waited:.2f} s after the kill; "
              f"{len(files) - len(missing)} survivor(s) reported first")
    else:
        assert not missing, f"survivors did not report: {missing}\n{out[-4000:]}"
    for r, f in zip(survivors, files):
        if not f.exists():
            continue
        cls, elapsed, after, msg = f.read_text().rstrip("\n").split("\t", 3)
        assert cls in ("CollectiveTimeout", "MpiError"), (r, cls, msg)
        assert float(elapsed) < TIMEOUT + SLACK, (r, elapsed, msg)
        assert after == "unusable", (r, after)
        assert f"rank {r}" in msg, msg
        print(f"{mode}: rank {r} raised {cls} after {float(elapsed):.2f} s: {msg[:120]}")
