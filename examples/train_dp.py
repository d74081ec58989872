"""Data-parallel training of a small byte-level GPT on real text, with DistributedDataParallel
averaging the gradients through ccompress's compressed all-reduce (ccompress.torch's DDP
communication hook, optionally with error feedback).

    .venv/bin/torchrun --nproc_per_node 4 examples/train_dp.py --codec none   # exact
    .venv/bin/torchrun --nproc_per_node 4 examples/train_dp.py --codec hint8  # 8.5 bits + EF
    .venv/bin/mpiexec -n 4 .venv/bin/python examples/train_dp.py --codec hint8  # under MPI

Each rank trains on its own random windows of the text (--batch is the global batch, split
over the ranks); gloo on the CPU, NCCL when every rank has a GPU. Rank 0 shows the loss
(mean over ranks) and the bytes ccompress sent per step; at the end the held-out loss, and
whether the replicas are still bit-identical.
"""
from __future__ import annotations

import argparse

import numpy as np

import train_common as tc
from tinylm import batch, build_model


def main() -> None:
    ap = tc.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--error-feedback", action=argparse.BooleanOptionalAction, default=True,
                    help="keep each bucket's compression error for the next step "
                         "(--no-error-feedback to turn off; ignored with --codec none)")
    args = ap.parse_args()
    world, torch, device, train, val, info = tc.start(args)
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ccompress.torch import ddp_comm_hook

    size, rank = world.size, world.rank
    if args.batch % size:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the {size} ranks")
    torch.manual_seed(args.seed)
    model = build_model(torch, args.d_model, args.layers, args.heads, args.ctx).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    hook = ddp_comm_hook(codec=args.codec, error_feedback=args.error_feedback)
    ddp.register_comm_hook(state=None, hook=hook)
    opt = tc.make_optimizer(torch, model, args.lr)
    nparams = sum(p.numel() for p in model.parameters())
    tc.say(world, f"text: {info['corpus']}\n      {info['train_bytes']:,} bytes to train on, "
           f"{info['val_bytes']:,} held out")
    tc.say(world, f"model: {nparams / 1e6:.2f}M parameters ({args.layers} layers, d_model "
           f"{args.d_model}, {args.heads} heads, context {args.ctx}); data parallel over "
           f"{size} ranks on {device.type}, {args.batch // size} sequences per rank per step; "
           f"gradients: codec {hook.codec}, error feedback {'on' if hook.error_feedback else 'off'}")

    vb = tc.val_batches(torch, args, val, device)
    mine = vb[rank::size]  # replicas are identical: each evaluates its share of the batches
    rng = np.random.default_rng([args.seed, 100 + rank])

    def step_fn(step: int) -> float:
        x, y = (t.to(device) for t in batch(torch, train, rng, args.batch // size, args.ctx))
        loss = ddp(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # same grads on every rank
        opt.step()
        return world.allreduce(loss.item()) / size

    def eval_fn() -> float:
        parts = world.allgather([tc.mean_loss(torch, model, [b]) for b in mine])
        return float(np.mean([v for p in parts for v in p]))

    result = tc.train(args, opt, step_fn, eval_fn, lambda: hook.comm.bytes_sent, rank == 0)
    same = tc.identical_on_all_ranks(world, model.parameters())
    tc.say(world, f"replicas bit-identical on all {size} ranks: {'yes' if same else 'NO'}")
    tc.stop()
    tc.finish(world, args, dict(
        result, mode="data parallel", ranks=size, codec=hook.codec,
        error_feedback=hook.error_feedback, replicas_identical=same, parameters=nparams,
        text=info))


if __name__ == "__main__":
    main()
