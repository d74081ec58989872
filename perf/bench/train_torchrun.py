#!/usr/bin/env python3
"""The byte-level GPT of examples/tinylm.py trained on real text under torchrun, for the
three ways ccompress reaches an unmodified PyTorch script:

    T=".venv/bin/python -m torch.distributed.run --standalone --nproc_per_node 4"
    $T -m perf.bench.train_torchrun --mode ddp  --backend gloo                       # exact
    $T -m perf.bench.train_torchrun --mode ddp_hook --codec hint8                    # (a) gloo + hook
    CCOMPRESS_CODEC=hint8 CCOMPRESS_ERROR_FEEDBACK=1 $T -m perf.bench.train_torchrun --mode ddp  --backend ccompress   # (b)
    CCOMPRESS_CODEC=hint8 CCOMPRESS_ERROR_FEEDBACK=1 $T -m perf.bench.train_torchrun --mode fsdp --backend ccompress   # (c)
    $T -m perf.bench.train_torchrun --mode fsdp --backend gloo                       # exact FSDP2
    $T -m perf.bench.train_torchrun --mode tsr --tsr-rank 96 ...                     # TSR-Adam
    $T -m perf.bench.train_torchrun --mode ddp_hook --codec nvfp4 --gift 32          # (a) + GIFT
    CCOMPRESS_CODEC=nvfp4 CCOMPRESS_ERROR_FEEDBACK=1 $T -m perf.bench.train_torchrun --mode fsdp --backend ccompress --gift 32   # (c) + GIFT
    $T -m perf.bench.train_torchrun --mode ddp_hook --codec nvfp4 --ef worker        # (a), one residual
    $T -m perf.bench.train_torchrun --mode ddp_hook --codec nvfp4 --small-codec fp8_e4m3:g128 --algo two_shot

(b) and (c) take their codec from the environment, as an unmodified script would. The
options, learning-rate schedule, held-out loss and results file are examples/train_common's
(``--json``); bytes per step are ccompress's own count on rank 0 (0 for gloo); replicas (DDP:
the parameters; FSDP2: the full parameters gathered from the shards) are compared bit for
bit at the end. ``--mode tsr`` trains the bare model (no DDP) with
ccompress.torch.tsr_adam.TSRAdam over the world group's communicator (no MPI), each rank
clipping its own gradient, weight decay 0.1 on matrices as in the AdamW runs.
``.venv/bin/python -m perf.bench.train_torchrun report build/torchrun/*.json`` prints the
table of perf/results/training.md, ``... sweep FILES`` the learning-rate sweep table.
"""
from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread per rank: ranks share the cores
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples import train_common as tc  # noqa: E402
from examples import tinylm  # noqa: E402
from perf.common.train_methods import add_tsr_options, make_tsr_adam, tsr_report  # noqa: E402


class World:
    """What train_common needs of a world (rank, size, allgather of objects), over an exact
    gloo group that the measured collectives never use."""

    def __init__(self, dist, group) -> None:
        self._dist, self._group = dist, group
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def allgather(self, obj):
        out = [None] * self.size
        self._dist.all_gather_object(out, obj, group=self._group)
        return out


def main() -> None:
    ap = tc.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("ddp", "ddp_hook", "fsdp", "tsr"), default="ddp")
    ap.add_argument("--backend", choices=("gloo", "ccompress"), default="gloo")
    add_tsr_options(ap)
    ap.add_argument("--gift", type=int, default=0, metavar="RANK",
                    help="--mode ddp_hook, or fsdp on --backend ccompress (use_gift): whiten "
                         "the gradients with ccompress.torch.GIFT of this rank (0: off)")
    ap.add_argument("--gift-refresh", type=int, default=50, help="GIFT refresh_every")
    ap.add_argument("--gift-sketch", type=int, default=32, help="GIFT sketch (0: dense)")
    ap.add_argument("--gift-output", action="store_true", help="GIFT output_side")
    ap.add_argument("--ef", choices=("both", "worker", "server"), default="both",
                    help="--mode ddp_hook: the error-feedback residuals the hook keeps")
    ap.add_argument("--algo", default="auto",
                    help="--mode ddp_hook: the hook's schedule (auto picks one_shot for small "
                         "buckets, which sends n-1 copies; two_shot sends the fewest bytes)")
    ap.add_argument("--small-codec", default=None,
                    help="--mode ddp_hook: codec of the biases' and norm gains' gradients "
                         "(default: --codec)")
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    import ccompress.torch as cct

    torch.set_num_threads(args.threads)
    if args.mode in ("ddp_hook", "tsr") and args.backend != "gloo":
        raise SystemExit(f"--mode {args.mode} runs on --backend gloo")
    if args.gift and not (args.mode == "ddp_hook" or (args.mode, args.backend) == ("fsdp",
                                                                                    "ccompress")):
        raise SystemExit("--gift needs --mode ddp_hook, or --mode fsdp --backend ccompress")
    dist.init_process_group(args.backend)
    side = dist.new_group(backend="gloo")
    world = World(dist, side)
    size, rank = world.size, world.rank
    if args.batch % size:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the {size} ranks")
    data = [tinylm.load_text(*tinylm.find_corpus(args.corpus)) if rank == 0 else None]
    dist.broadcast_object_list(data, src=0, group=side)
    train, val, info = data[0]

    torch.manual_seed(args.seed)
    model = tinylm.build_model(torch, args.d_model, args.layers, args.heads, args.ctx)
    hook, pg, gift = None, None, None

    def make_gift():
        return cct.GIFT(model, rank=args.gift, refresh_every=args.gift_refresh,
                        sketch=args.gift_sketch, output_side=args.gift_output)

    if args.mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for blk in model.h:
            fully_shard(blk)
        net = fully_shard(model)
        if args.gift:
            gift = make_gift()
            cct.compressed_group().use_gift(gift)
    elif args.mode == "tsr":  # TSR-Adam communicates the gradients itself
        net = model
    else:
        net = torch.nn.parallel.DistributedDataParallel(model)
        if args.mode == "ddp_hook":
            if args.gift:
                gift = make_gift()
            hook = cct.ddp_comm_hook(codec=args.codec, gift=gift, small_codec=args.small_codec,
                                     algo=args.algo,
                                     error_feedback=True if args.ef == "both" else args.ef)
            net.register_comm_hook(state=None, hook=hook)
    if args.backend == "ccompress":
        pg = cct.compressed_group()
    if args.mode == "tsr":
        opt = make_tsr_adam(model, None, args, weight_decay={
            n: 0.1 if p.dim() == 2 else 0.0 for n, p in model.named_parameters()})
    else:
        opt = tc.make_optimizer(torch, net, args.lr)
    codec = (hook.codec if hook else pg.options.all_reduce if pg and args.mode == "ddp"
             else pg.options.reduce_scatter if pg else "none")
    ef = bool(hook.error_feedback if hook else pg.options.error_feedback if pg else False)
    if args.mode == "tsr":
        codec, ef = f"tsr r{args.tsr_rank} cores {args.tsr_codec}", args.tsr_ef
    nparams = sum(p.numel() for p in model.parameters())
    tc.say(world, f"text: {info['corpus']}; model {nparams / 1e6:.2f}M parameters; "
           f"{args.mode} on backend {args.backend} over {size} ranks; codec {codec}, "
           f"error feedback {'on' if ef else 'off'}")

    vb = tc.val_batches(torch, args, val, torch.device("cpu"))
    mine = vb[rank::size]
    rng = np.random.default_rng([args.seed, 100 + rank])

    def step_fn(step: int) -> float:
        x, y = tinylm.batch(torch, train, rng, args.batch // size, args.ctx)
        loss = net(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        return float(np.mean(world.allgather(loss.item())))

    def eval_fn() -> float:
        if args.mode == "fsdp":  # every rank runs the forward (it gathers parameters)
            return tc.mean_loss(torch, net, vb)
        parts = world.allgather([tc.mean_loss(torch, net, [b]) for b in mine])
        return float(np.mean([v for p in parts for v in p]))

    def sent() -> int:
        if args.mode == "tsr":
            return opt.comm.bytes_sent
        return hook.comm.bytes_sent if hook else pg.bytes_sent if pg else 0

    result = tc.train(args, opt, step_fn, eval_fn, sent, rank == 0)
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in net.parameters()]
    same = tc.identical_on_all_ranks(world, full)
    tc.say(world, f"replicas bit-identical on all {size} ranks: {'yes' if same else 'NO'}")
    import resource

    extra = {"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if gift is not None:
        extra.update(gift_selection=list(gift.selection.values()),
                     gift_memory_bytes=gift.memory_bytes())
        tc.say(world, f"GIFT whitens {sum(gift.treated.values())} of {len(gift.layers)} "
               f"layers; {gift.memory_bytes() / 2**20:.2f} MiB of statistics and factors")
    tc.finish(world, args, dict(result, mode=args.mode, backend=args.backend, ranks=size,
                                codec=codec + _variant(args),
                                error_feedback=ef, replicas_identical=same,
                                parameters=nparams, text=info, **extra,
                                **({"tsr": tsr_report(args)} if args.mode == "tsr" else {})))
    dist.destroy_process_group()


def _variant(args) -> str:
    """What a run adds to its codec's name in the tables: GIFT's rank and its options
    that differ from the defaults, the error-feedback residuals unless both, the codec of
    the 1-D parameters when it is another, and the schedule unless auto."""
    out = ""
    if args.gift:
        out += f"+gift{args.gift}" + "".join(
            f"{tag}{val}" for tag, val, default in (
                ("_refresh", args.gift_refresh, 50), ("_sketch", args.gift_sketch, 32))
            if val != default) + ("_output" if args.gift_output else "")
    out += "" if args.ef == "both" else f"+ef_{args.ef}"
    out += f"+small_{args.small_codec}" if args.small_codec else ""
    return out + ("" if args.algo == "auto" else f"@{args.algo}")


def report(paths) -> None:
    """The markdown table of perf/results/training.md from the runs' --json files: each compressed
    run's final held-out loss and step time against the exact gloo run of its seed and
    family (DDP: ``ddp`` on gloo; FSDP2: ``fsdp`` on gloo). Bytes per step are ccompress's
    count on rank 0; for the gloo runs, what an uncompressed ring sends per rank for the
    same collective (DDP: all-reduce 2(n-1)/n x 4 B per parameter; FSDP2: reduce-scatter
    (n-1)/n x 4 B; FSDP2's parameter all-gathers are exact in every run and not counted).
    Bits per element: 32 x those bytes / the exact ring's (GIFT's statistics included).
    A second table gives each compressed setting's mean over its seeds."""
    import json

    runs = [json.load(open(p)) for p in paths]
    exact = {(r["mode"], r["args"]["seed"]): r for r in runs if r["backend"] == "gloo"
             and r["mode"] != "ddp_hook"}
    means: dict = {}
    print("| run | codec (EF on) | seed | final held-out loss | vs exact | MiB/step | "
          "bits/element | s/step | vs gloo | replicas identical |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(runs, key=lambda r: (r["mode"] == "fsdp", r["backend"] != "gloo",
                                         r["mode"], r["codec"], r["args"]["seed"])):
        n, steps = r["ranks"], r["args"]["steps"]
        base = exact.get(("fsdp" if r["mode"] == "fsdp" else "ddp", r["args"]["seed"]))
        mib = r["comm_bytes_per_step"] / 2**20
        if r["backend"] == "gloo" and r["mode"] not in ("ddp_hook", "tsr"):
            mib = (1 if r["mode"] == "fsdp" else 2) * (n - 1) / n * 4 * r["parameters"] / 2**20
        name = {"ddp": "DDP", "fsdp": "FSDP2", "ddp_hook": "DDP + hook", "tsr": "TSR-Adam"}[r["mode"]]
        name += f" on {r['backend']}" if r["mode"] != "ddp_hook" else " on gloo"
        vs = f"{100 * (r['val_loss'] / base['val_loss'] - 1):+.2f}%" if base and base is not r else "-"
        # bits per gradient element: the bytes against an exact ring's 32-bit count
        ring = (1 if r["mode"] == "fsdp" else 2) * (n - 1) / n * 4 * r["parameters"]
        bits = 32 * mib * 2**20 / ring
        t = r["seconds"] / steps
        tv = f"{t / (base['seconds'] / steps):.2f}x" if base and base is not r else "-"
        print(f"| {name} | {r['codec']} | {r['args']['seed']} | {r['val_loss']:.4f} | {vs} | "
              f"{mib:.3f} | {bits:.2f} | {t:.3f} | {tv} | "
              f"{'yes' if r['replicas_identical'] else 'NO'} |")
        if base and base is not r:
            means.setdefault((name, r["codec"], round(bits, 2)), []).append(
                (r["args"]["seed"], 100 * (r["val_loss"] / base["val_loss"] - 1)))
    print("\n| run | codec (EF on) | bits/element | seeds | mean vs exact | per seed |")
    print("|---|---|---|---|---|---|")
    for (name, codec, bits), got in sorted(means.items()):
        print(f"| {name} | {codec} | {bits:.2f} | {len(got)} | "
              f"{np.mean([v for _, v in got]):+.2f}% | "
              f"{', '.join(f'{s}: {v:+.2f}%' for s, v in sorted(got))} |")


def sweep(paths) -> None:
    """The learning-rate sweep table of perf/results/training.md from the runs' --json files: per
    setting (mode, and TSR's multiplier and whole-tensor codec) and peak rate, the final
    held-out loss of each seed and their mean, bytes per step (rank 0; for exact DDP the
    uncompressed ring's count of :func:`report`) and seconds per step."""
    import collections
    import json

    rows = collections.defaultdict(dict)
    for p in paths:
        r = json.load(open(p))
        t = r.get("tsr")
        name = (f"TSR-Adam x{t['scale']:g}" + (f", whole tensors {t['dense_codec']}"
                                               if t.get("dense_codec", "none") != "none" else "")
                if t else f"{r['mode']} on {r['backend']}")
        rows[(name, r["args"]["lr"])][r["args"]["seed"]] = r
    seeds = sorted({s for v in rows.values() for s in v})
    print("| run | peak rate | " + " | ".join(f"seed {s}" for s in seeds)
          + " | mean | bytes/step | s/step |")
    print("|---|---|" + "---|" * len(seeds) + "---|---|---|")
    for (name, lr), runs in sorted(rows.items()):
        vals = [runs[s]["val_loss"] if s in runs else None for s in seeds]
        got = [v for v in vals if v is not None]
        any_run = next(iter(runs.values()))
        b = any_run["comm_bytes_per_step"] or 2 * (any_run["ranks"] - 1) / any_run["ranks"] \
            * 4 * any_run["parameters"]
        t = np.mean([x["seconds"] / x["args"]["steps"] for x in runs.values()])
        print(f"| {name} | {lr:g} | " + " | ".join("-" if v is None else f"{v:.4f}" for v in vals)
              + f" | {np.mean(got):.4f} | {b:,.0f} | {t:.3f} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["report"]:
        report(sys.argv[2:])
    elif sys.argv[1:2] == ["sweep"]:
        sweep(sys.argv[2:])
    else:
        main()
