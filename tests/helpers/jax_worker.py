"""One rank of the ccompress.jax tests (tests/jax/test_jax_multiprocess.py launches it).

    python jax_worker.py dist RANK SIZE PORT OUT_DIR   # jax.distributed on 127.0.0.1:PORT
    mpiexec -n SIZE python jax_worker.py mpi OUT_DIR   # comm=None resolves to MPI's world

Runs every check on this rank and writes what the test compares into OUT_DIR: rank<r>.npz
(inputs, results of ccompress.jax and of Communicator's NumPy path, gradients, error-feedback
states) and rank<r>.json (error types raised, registry counts). The test reads them in one
process: ranks must agree bit for bit, gradients must match a one-process program.
"""
import gc
import json
import os
import sys
import traceback

import numpy as np

MODE = sys.argv[1]
if MODE == "dist":
    RANK, SIZE, PORT, OUT = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
else:
    OUT = sys.argv[2]

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
if MODE == "dist":
    jax.distributed.initialize(f"127.0.0.1:{PORT}", SIZE, RANK)

import jax.numpy as jnp  # noqa: E402

import ccompress as cc  # noqa: E402
import ccompress.jax as ccj  # noqa: E402

CODECS = ("none", "bf16", "fp8_e4m3:g128", "hint8", "nvfp4")
N = 1000  # not a multiple of any scale group: partial groups and uneven chunks


def main():
    comm = ccj.default_communicator()
    rank, size = comm.rank, comm.size
    arrays, facts = {}, {"rank": rank, "size": size, "transport": comm.transport}
    rng = np.random.default_rng(100 + rank)
    x = (rng.standard_normal(N) * np.exp(rng.standard_normal())).astype(np.float32)
    arrays["x"] = x

    # Forward: ccompress.jax inside jit, and Communicator's NumPy path, for each codec.
    for codec in CODECS:
        for algo in ("ring", "two_shot"):
            f = jax.jit(lambda v, c=codec, a=algo: ccj.allreduce(v, codec=c, algo=a, op="avg"))
            arrays[f"ar/{codec}/{algo}/jax"] = np.asarray(f(jnp.asarray(x)))
            arrays[f"ar/{codec}/{algo}/np"] = comm.allreduce(x, codec=codec, algo=algo, op="avg")
    rows = x[: (N // (2 * size)) * 2 * size].reshape(size * 2, -1)
    arrays["rs/x"] = rows
    arrays["rs/jax"] = np.asarray(jax.jit(
        lambda v: ccj.reduce_scatter(v, codec="fp8_e4m3:g128"))(jnp.asarray(rows)))
    arrays["rs/np"] = comm.reduce_scatter(rows, codec="fp8_e4m3:g128")
    arrays["ag/jax"] = np.asarray(jax.jit(
        lambda v: ccj.all_gather(v, codec="hint8"))(jnp.asarray(x[:100])))
    arrays["ag/np"] = comm.allgather(x[:100], codec="hint8")
    arrays["ag/tiled"] = np.asarray(ccj.all_gather(jnp.asarray(rows), tiled=True))  # eager
    arrays["ar/bf16in/jax"] = np.asarray(jax.jit(lambda v: ccj.allreduce(v, codec="fp8_e4m3:g128"))(
        jnp.asarray(x, jnp.bfloat16))).astype(np.float32)
    # Two independent collectives in one program: the ordered effect keeps program order
    # (else the call check would see another count first on some rank).
    a, b = jax.jit(lambda u, v: (ccj.allreduce(u), ccj.allreduce(v)))(jnp.asarray(x[:300]),
                                                                     jnp.asarray(x[300:]))
    arrays["two/a"], arrays["two/b"] = np.asarray(a), np.asarray(b)
    text = jax.jit(lambda v: ccj.allreduce(v, codec="hint8")).lower(jnp.asarray(x)).as_text()
    facts["lowered_side_effect"] = ("ccompress_allreduce" in text
                                    and "has_side_effect = true" in text)

    # Gradients (custom transposes), exact codec; per-rank losses weighted by c = rank + 1.
    c = float(rank + 1)
    xj = jnp.asarray(x)
    arrays["grad/ar"] = np.asarray(jax.jit(jax.grad(
        lambda v: jnp.sum(jnp.sin(ccj.allreduce(v)))))(xj))
    arrays["grad/ar_avg"] = np.asarray(jax.jit(jax.grad(
        lambda v: jnp.sum(jnp.sin(ccj.allreduce(v, op="avg")))))(xj))
    arrays["grad/rs"] = np.asarray(jax.jit(jax.grad(
        lambda v: c * jnp.sum(ccj.reduce_scatter(v) ** 2)))(jnp.asarray(rows)))
    arrays["grad/ag"] = np.asarray(jax.jit(jax.grad(
        lambda v: c * jnp.sum(jnp.sin(ccj.all_gather(v)) * jnp.arange(size)[:, None])))(
        jnp.asarray(x[:100])))
    # A transpose with its own codec: all-gather's reduce-scatter in bf16.
    # A linear loss, so that the cotangent (c * w) has the same bits in both programs.
    w = ((np.arange(size * 100) % 7 - 3) * 0.37).astype(np.float32).reshape(size, 100)
    arrays["grad/ag_bf16"] = np.asarray(jax.jit(jax.grad(
        lambda v: jnp.sum(ccj.all_gather(v, transpose_codec="bf16") * (c * w))))(
        jnp.asarray(x[:100])))
    arrays["grad/ag_bf16_np"] = comm.reduce_scatter((np.float32(c) * w).reshape(-1),
                                                    codec="bf16")

    # Error feedback: the state is a pytree carried through a jitted step, the same bits as
    # Communicator's ErrorFeedback; a saved state resumes bit for bit.
    @jax.jit
    def step(v, state):
        return ccj.allreduce(v, codec="fp8_e4m3:g128", algo="two_shot", op="avg",
                             error_feedback=state)

    state, ef = ccj.FeedbackState.zeros(N), cc.ErrorFeedback()
    for k in range(3):
        xk = (x * (1.0 + 0.5 * k)).astype(np.float32)
        yk, state = step(jnp.asarray(xk), state)
        arrays[f"ef/{k}/jax"] = np.asarray(yk)
        arrays[f"ef/{k}/np"] = comm.allreduce(xk, codec="fp8_e4m3:g128", algo="two_shot",
                                              op="avg", error_feedback=ef)
    arrays["ef/worker/jax"], arrays["ef/server/jax"] = (np.asarray(s) for s in state)
    arrays["ef/worker/np"], arrays["ef/server/np"] = ef.worker_residual, ef.server_residual
    saved = {k: np.asarray(v) for k, v in state._asdict().items()}
    restored = ccj.FeedbackState(**{k: jnp.asarray(v) for k, v in saved.items()})
    y1, _ = step(jnp.asarray(x), state)
    y2, _ = step(jnp.asarray(x), restored)
    arrays["ef/resume"] = np.stack([np.asarray(y1), np.asarray(y2)])

    if MODE == "dist":
        example_steps(arrays)

    # Bad input: a typed error on every rank, and the communicator still usable after.
    errors = {}

    def expect(name, fn):
        try:
            with ccj.typed_errors():
                jax.block_until_ready(fn())
            errors[name] = None
        except cc.CCompressError as e:
            errors[name] = [type(e).__name__, str(e)[:400]]

    n_bad = N + rank  # shapes differ between ranks
    expect("shape", lambda: jax.jit(lambda v: ccj.allreduce(v, codec="hint8"))(jnp.ones(n_bad)))
    codec = "fp8_e4m3:g128" if rank == 0 else "bf16"
    expect("codec", lambda: jax.jit(lambda v: ccj.allreduce(v, codec=codec))(jnp.ones(N)))
    bad = jnp.ones(N, jnp.int32 if rank == 0 else jnp.float32)  # rank 0 only
    expect("dtype_one", lambda: jax.jit(lambda v: ccj.allreduce(v, codec="hint8"))(bad))
    spec = "fp8_nonsense" if rank == 0 else "hint8"  # an unknown codec on rank 0 only
    expect("codec_name", lambda: jax.jit(lambda v: ccj.allreduce(v, codec=spec))(jnp.ones(N)))
    expect("dtype_all", lambda: jax.jit(lambda v: ccj.allreduce(v))(jnp.ones(N, jnp.int32)))
    arrays["after_errors"] = np.asarray(jax.jit(lambda v: ccj.allreduce(v))(xj))

    # A retrace or recompile registers nothing new and keeps no buffers.
    facts["registered_before"] = ccj.registered()
    gc.collect()
    live_before = len(jax.live_arrays())
    for k in range(6):
        g = jax.jit(lambda v: ccj.allreduce(v * 2.0, codec="hint8"))  # a new function: a trace
        g(jnp.ones(10 + k)).block_until_ready()
        del g
    gc.collect()
    facts["registered_after"] = ccj.registered()
    facts["live_arrays_added"] = len(jax.live_arrays()) - live_before

    # A compiled program whose communicator was closed fails with a readable error.
    other = (ccj.from_jax_distributed() if MODE == "dist"
             else cc.Communicator.from_mpi(_mpi_world().Dup()))
    h = jax.jit(lambda v: ccj.allreduce(v, comm=other))
    arrays["other"] = np.asarray(h(xj))
    facts["registered_with_other"] = ccj.registered()
    other.close()
    facts["registered_after_close"] = ccj.registered()
    expect("closed", lambda: h(xj))
    facts["errors"] = errors

    np.savez(os.path.join(OUT, f"rank{rank}.npz"), **arrays)
    with open(os.path.join(OUT, f"rank{rank}.json"), "w") as fh:
        json.dump(facts, fh)
    ccj.shutdown()


def example_steps(arrays):
    """Two steps of examples/jax_train.py's training step, exact (ccompress, codec none) and
    hint4, from the same parameters on the same batches: the losses it reports and the
    parameters after each step."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))))
    from jax.flatten_util import ravel_pytree

    from examples import jax_train

    tiny = ["--d-model", "16", "--layers", "1", "--heads", "2", "--ctx", "8", "--batch", "2",
            "--steps", "4", "--lr", "1e-2"]
    rng = np.random.default_rng(7 + jax.process_index())
    batches = [rng.integers(0, 256, size=(2, 9)).astype(np.int32) for _ in range(2)]
    for row in ("exact", "hint4"):
        params, opt, ef, step = jax_train.make_step(jax_train.parse(tiny + ["--reduce", row]),
                                                    jax.process_count())
        losses, flats = [], [np.asarray(ravel_pytree(params)[0])]
        for b in batches:
            params, opt, ef, loss = step(params, opt, ef, b[:, :-1], b[:, 1:])
            losses.append(np.float32(loss))
            flats.append(np.asarray(ravel_pytree(params)[0]))
        arrays[f"example/{row}/loss"] = np.asarray(losses, np.float32)
        arrays[f"example/{row}/params"] = np.stack(flats)


def _mpi_world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
