#!/usr/bin/env python3
"""Data-parallel training of a small byte-level transformer LM in JAX (optax AdamW), its
gradients averaged across processes by ccompress.jax inside the jitted step, or by JAX's own
cross-process psum, or by mpi4jax.

    python -m examples.jax_train --nproc 4 --reduce hint8        # starts 4 local processes
    mpiexec -n 4 python -m examples.jax_train --reduce fp8        # or under mpiexec
    python -m examples.jax_train --nproc 4 --reduce psum          # exact: JAX's psum (gloo)

``--reduce``: ``psum`` (JAX's cross-process ``lax.pmean`` over a mesh of every process's CPU
device, through its gloo CPU collectives; a program of its own between the gradient and the
update programs), ``mpi4jax`` (its exact ``allreduce``, under mpiexec), ``exact``
(ccompress, codec none), or a ccompress codec: ``hint8``, ``fp8`` (fp8_e4m3:g128),
``nvfp4``, ``hint4``, ``mxfp4``, or any spec. ccompress rows use ``algo="two_shot"`` with
error feedback carried in the train state (``--no-ef`` without). The text and model are
examples/tinylm.py's; every rank draws its own batches. At the end rank 0 prints the mean
loss of the last 10 steps, the held-out loss and whether the replicas are bit-identical.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, Tuple

import numpy as np

from examples import tinylm

SHORT = {"exact": "none", "fp8": "fp8_e4m3:g128"}


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=0,
                   help="start this many local processes under jax.distributed (0: this "
                        "process is a rank already: mpiexec, or --rank/--port given)")
    p.add_argument("--reduce", default="hint8")
    p.add_argument("--no-ef", action="store_true", help="no error feedback")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus", default="")
    p.add_argument("--json", default="", help="write rank 0's result here")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the step time")
    p.add_argument("--coordinator", default="127.0.0.1",
                   help="the address of rank 0 (jax.distributed's coordinator)")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def launch(args: argparse.Namespace, argv) -> int:
    """Starts args.nproc copies of this script under jax.distributed on 127.0.0.1 and waits
    for them; the exit code is the worst rank's."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu", CCOMPRESS_JAX_WORLD=str(args.nproc))
    procs = [subprocess.Popen([sys.executable, "-m", "examples.jax_train", *argv,
                               "--rank", str(r), "--port", str(port)], env=env)
             for r in range(args.nproc)]
    return max(p.wait() for p in procs)


# ---------------------------------------------------------------- model
def init_params(key: Any, args: argparse.Namespace) -> Dict[str, Any]:
    import jax
    import jax.numpy as jnp

    d, L = args.d_model, args.layers
    keys = iter(jax.random.split(key, 4 + 4 * L))
    normal = lambda shape, scale: scale * jax.random.normal(next(keys), shape, jnp.float32)  # noqa
    params = {"embed": normal((256, d), 0.02), "pos": normal((args.ctx, d), 0.02),
              "ln_f": jnp.ones((d,)), "layers": []}
    for _ in range(L):
        params["layers"].append({
            "ln1": jnp.ones((d,)), "qkv": normal((d, 3 * d), d ** -0.5),
            "proj": normal((d, d), (2 * L * d) ** -0.5), "ln2": jnp.ones((d,)),
            "up": normal((d, 4 * d), d ** -0.5), "down": normal((4 * d, d), (8 * L * d) ** -0.5)})
    return params


def loss_fn(params: Dict[str, Any], x: Any, y: Any, heads: int) -> Any:
    import jax
    import jax.numpy as jnp

    def norm(h, g):
        return g * (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + 1e-5)

    T = x.shape[1]
    h = params["embed"][x] + params["pos"][:T]
    mask = jnp.tril(jnp.ones((T, T), bool))
    for layer in params["layers"]:
        q, k, v = jnp.split(norm(h, layer["ln1"]) @ layer["qkv"], 3, axis=-1)
        split = lambda t: t.reshape(t.shape[0], T, heads, -1).transpose(0, 2, 1, 3)  # noqa
        q, k, v = split(q), split(k), split(v)
        att = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]), -1e9)
        o = (jax.nn.softmax(att, -1) @ v).transpose(0, 2, 1, 3).reshape(h.shape)
        h = h + o @ layer["proj"]
        h = h + jax.nn.gelu(norm(h, layer["ln2"]) @ layer["up"]) @ layer["down"]
    logits = norm(h, params["ln_f"]) @ params["embed"].T
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], -1))


def windows(data: np.ndarray, rng: np.random.Generator, b: int, t: int) -> Tuple[Any, Any]:
    starts = rng.integers(0, data.size - t - 1, size=b)
    w = np.stack([data[s:s + t + 1] for s in starts]).astype(np.int32)
    return w[:, :-1], w[:, 1:]


# ---------------------------------------------------------------- training
def require(name: str) -> Any:
    """Imports ``name`` (jax, optax), or exits naming the command that installs it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise SystemExit(f"examples/jax_train.py needs {name} ({e}): pip install -e '.[jax]' "
                         "(jax and optax), or bash scripts/setup.sh") from None


def make_step(args: argparse.Namespace, size: int) -> Tuple[Any, Any, Any, Any]:
    """The initial state and the training step of ``args.reduce``.

    Returns
    -------
    (params, opt_state, ef, step)
        ``step(params, opt_state, ef, x, y)`` returns the next ``(params, opt_state, ef)``
        and the loss of ``params`` (before this step's update) on this rank's batch; ``ef``
        is the error-feedback state (None without it). The update applies the gradients'
        average across processes, as ``args.reduce`` computes it.
    """
    jax, optax = require("jax"), require("optax")
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    import ccompress.jax as ccj

    params = init_params(jax.random.PRNGKey(args.seed), args)  # the same on every rank
    flat0, unravel = ravel_pytree(params)
    lrs = jnp.asarray([tinylm.lr_at(i, args.steps, args.lr) for i in range(args.steps + 1)])
    opt = optax.adamw(lambda s: lrs[s], b1=0.9, b2=0.95, weight_decay=0.1)
    opt_state = opt.init(params)
    exact_jax = args.reduce in ("psum", "mpi4jax")
    codec = None if exact_jax else SHORT.get(args.reduce, args.reduce)
    use_ef = not (args.no_ef or exact_jax or codec == "none")
    ef = ccj.FeedbackState.zeros(flat0.shape) if use_ef else None
    grad_fn = jax.value_and_grad(lambda p, x, y: loss_fn(p, x, y, args.heads))

    def update(params, opt_state, flat_grad):
        updates, opt_state = opt.update(unravel(flat_grad), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    if exact_jax:
        reduce = _exact_reduce(args.reduce, jax, size)

        @jax.jit
        def local(params, x, y):
            loss, g = grad_fn(params, x, y)
            return loss, ravel_pytree(g)[0]

        step_update = jax.jit(update)

        def step(params, opt_state, ef, x, y):
            loss, g = local(params, x, y)
            params, opt_state = step_update(params, opt_state, reduce(g))
            return params, opt_state, ef, loss
    else:
        @jax.jit
        def step(params, opt_state, ef, x, y):
            loss, g = grad_fn(params, x, y)
            flat = ravel_pytree(g)[0]
            if ef is None:
                flat = ccj.allreduce(flat, codec=codec, algo="two_shot", op="avg")
            else:
                flat, ef = ccj.allreduce(flat, codec=codec, algo="two_shot", op="avg",
                                         error_feedback=ef)
            params, opt_state = update(params, opt_state, flat)
            return params, opt_state, ef, loss
    return params, opt_state, ef, step


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    if args.nproc and args.rank < 0:
        return launch(args, argv)
    jax = require("jax")
    require("optax")
    jax.config.update("jax_platforms", "cpu")
    if args.reduce == "psum":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if args.rank >= 0:
        jax.distributed.initialize(f"{args.coordinator}:{args.port}",
                                   int(os.environ["CCOMPRESS_JAX_WORLD"]), args.rank)
    from jax.flatten_util import ravel_pytree

    import ccompress.jax as ccj

    comm = ccj.default_communicator()  # also checks the replicas at the end
    rank, size = comm.rank, comm.size
    train, val, info = tinylm.load_text(*tinylm.find_corpus(args.corpus))
    params, opt_state, ef, step = make_step(args, size)
    flat0 = ravel_pytree(params)[0]
    codec = None if args.reduce in ("psum", "mpi4jax") else SHORT.get(args.reduce, args.reduce)
    use_ef = ef is not None
    rng = np.random.default_rng(args.seed * 1000 + rank)
    losses, times, t0 = [], [], time.perf_counter()
    for s in range(args.steps):
        x, y = windows(train, rng, args.batch, args.ctx)
        t = time.perf_counter()
        params, opt_state, ef, loss = step(params, opt_state, ef, x, y)
        losses.append(float(loss))  # waits for the step
        times.append(time.perf_counter() - t)
        if rank == 0 and (s % 50 == 0 or s == args.steps - 1):
            print(f"step {s:4d}  loss {losses[-1]:.6f}", flush=True)
    seconds = time.perf_counter() - t0
    vx, vy = windows(val, np.random.default_rng(99), 32, args.ctx)
    val_loss = float(jax.jit(lambda p: loss_fn(p, vx, vy, args.heads))(params))
    digest = hashlib.sha256(np.asarray(ravel_pytree(params)[0]).tobytes()).digest()
    digests = comm.allgather(np.frombuffer(digest, np.float32).copy())
    identical = bool(all(np.array_equal(d.view(np.uint8), digests[0].view(np.uint8))
                         for d in digests))
    result = {"reduce": args.reduce, "codec": codec, "error_feedback": use_ef,
              "ranks": size, "steps": args.steps, "params": int(flat0.size),
              "train_loss_last10": float(np.mean(losses[-10:])), "val_loss": val_loss,
              "replicas_identical": identical, "seconds": round(seconds, 1),
              "step_s": float(np.median(times[args.warmup:] or times)),
              "corpus": info["corpus"]}
    if rank == 0:
        print(json.dumps(result), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f)
    ccj.shutdown()
    return 0 if identical else 1


def _exact_reduce(kind: str, jax: Any, size: int):
    """The exact mean of a flat gradient across processes: JAX's psum (a program over a mesh
    of every process's device) or mpi4jax's allreduce."""
    import jax.numpy as jnp

    if kind == "mpi4jax":
        import mpi4jax
        from mpi4py import MPI

        return jax.jit(lambda g: mpi4jax.allreduce(g, op=MPI.SUM, comm=MPI.COMM_WORLD) / size)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("dp",))
    sharding = NamedSharding(mesh, P("dp"))
    mean = jax.jit(jax.shard_map(lambda v: jax.lax.pmean(v, "dp"), mesh=mesh, in_specs=P("dp"),
                                 out_specs=P("dp")))

    def reduce(g):
        glob = jax.make_array_from_process_local_data(sharding, g[None], (size,) + g.shape)
        return mean(glob).addressable_data(0)[0]

    return reduce


if __name__ == "__main__":
    sys.exit(main())
