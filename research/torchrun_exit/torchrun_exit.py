#!/usr/bin/env python3
"""How often a torchrun launch aborts at exit, under CPU load.

A C++ thread (gloo's, for one) that needs the interpreter after the script ended aborts the
process with "terminate called without an active exception", after every rank did its
work. This launches a short script ``--launches`` times under torchrun, with ``--hogs``
busy-looping processes competing for the cores, and counts the launches that exited
non-zero and those that printed that message:

    .venv/bin/python -m research.torchrun_exit.torchrun_exit --backend ccompress --launches 20
    .venv/bin/python -m research.torchrun_exit.torchrun_exit --backend gloo --no-destroy --launches 20
    .venv/bin/python -m research.torchrun_exit.torchrun_exit --worker tests/helpers/torch_backend/ops.py --arg fp8_e4m3:g128

The built-in script makes the process group, runs 200 delegated all-reduces (MAX, 1000
floats; with ``--async-op`` issued asynchronously, waiting for the last one only) and calls
``destroy_process_group`` unless ``--no-destroy``. ``--worker`` runs
another script instead (``--arg`` repeatable); ``tests/`` and ``tests/helpers/torch_backend/`` are on
its path, as the test suite puts them.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ABORT = "terminate called without an active exception"


def worker(backend: str, destroy: bool, async_op: bool) -> None:
    """The built-in script, run by each rank."""
    import torch
    import torch.distributed as dist
    import ccompress.torch  # noqa: F401  (registers the backend)

    dist.init_process_group(backend)
    x = torch.ones(1000)
    works = [dist.all_reduce(x, op=dist.ReduceOp.MAX, async_op=async_op) for _ in range(200)]
    if async_op:
        works[-1].wait()  # as a training step waits for its last bucket
    if destroy:
        dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="ccompress", help="ccompress or gloo (ccompress)")
    ap.add_argument("--no-destroy", action="store_true",
                    help="the built-in script exits without destroy_process_group")
    ap.add_argument("--async-op", action="store_true",
                    help="the built-in script issues its all-reduces with async_op=True and "
                         "waits for the last one only")
    ap.add_argument("--worker", help="run this script instead of the built-in one")
    ap.add_argument("--arg", action="append", default=[], help="an argument of --worker")
    ap.add_argument("--launches", type=int, default=20, help="torchrun launches (20)")
    ap.add_argument("--nproc", type=int, default=2, help="ranks per launch (2)")
    ap.add_argument("--hogs", type=int, default=3, help="busy-looping processes (3)")
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._worker:
        worker(a.backend, not a.no_destroy, a.async_op)
        return 0
    if a.worker:
        script = [str(Path(a.worker).resolve()), *a.arg]
        what = " ".join([a.worker, *a.arg])
    else:
        script = [__file__, "--_worker", "--backend", a.backend] + (
            ["--no-destroy"] if a.no_destroy else []) + (["--async-op"] if a.async_op else [])
        what = f"built-in, backend {a.backend}, " + ("async, " if a.async_op else "") + (
            "no destroy_process_group" if a.no_destroy else "destroy_process_group")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "helpers" / "torch_backend"),
                                           str(ROOT / "tests"), str(ROOT)]))
    cwd = Path(script[0]).parent
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(a.hogs)]
    failed = aborted = 0
    t0 = time.time()
    try:
        for i in range(a.launches):
            p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                f"--nproc_per_node={a.nproc}", *script], cwd=cwd, env=env,
                               capture_output=True, text=True, timeout=600)
            hit = ABORT in p.stdout + p.stderr
            failed += p.returncode != 0
            aborted += hit
            print(f"[exit] launch {i + 1}/{a.launches}: rc {p.returncode}"
                  f"{' (aborted at exit)' if hit else ''}", flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    print(f"{what}: {a.nproc} ranks, {a.hogs} CPU hogs on {os.cpu_count()} cores: "
          f"{failed} of {a.launches} launches failed, {aborted} aborted at exit "
          f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
