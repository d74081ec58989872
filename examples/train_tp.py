"""Tensor-parallel (Megatron-style) training of a small byte-level GPT on real text, with
the activations summed by ccompress's compressed all-reduce.

    .venv/bin/torchrun --nproc_per_node 4 examples/train_tp.py --codec none   # exact
    .venv/bin/torchrun --nproc_per_node 4 examples/train_tp.py --codec hint8  # 8.5 bits
    .venv/bin/mpiexec -n 4 .venv/bin/python examples/train_tp.py --codec hint8  # under MPI

Every rank holds 1/4 of each block: its attention heads (a ColumnParallelLinear slice of
the fused QKV projection and the matching RowParallelLinear columns of the output
projection) and 1/4 of the MLP (column-parallel up, row-parallel down projection);
embeddings and norms are replicated. Per block and step, forward sums the two row-parallel
outputs (with --codec) and backward the two column-parallel input gradients over the
ranks (with --grad-codec, by default --codec). The model starts as the same unsharded GPT
on every rank (same seed), sliced, so the exact run trains the model a single process
would. All ranks see the same batches.
"""
from __future__ import annotations

import numpy as np

import train_common as tc
from tinylm import batch, build_model


def shard_model(torch, model, comm, codec: str, grad_codec: str, d: int, heads: int) -> None:
    """Replaces every block of the tinylm GPT by its tensor-parallel slice on this rank:
    row-parallel outputs summed with ``codec``, column-parallel input gradients with
    ``grad_codec``."""
    from ccompress.torch import ColumnParallelLinear, RowParallelLinear

    nn, F = torch.nn, torch.nn.functional
    if heads % comm.size:
        raise SystemExit(f"--heads {heads} must be a multiple of the {comm.size} ranks")

    class TPBlock(nn.Module):
        def __init__(self, blk) -> None:
            super().__init__()
            self.ln1, self.ln2 = blk.ln1, blk.ln2
            col, row = dict(group=comm, codec=grad_codec), dict(group=comm, codec=codec)
            self.attn_qkv = ColumnParallelLinear.from_linear(blk.attn_qkv, parts=3, **col)
            self.attn_out = RowParallelLinear.from_linear(blk.attn_out, **row)
            self.mlp_up = ColumnParallelLinear.from_linear(blk.mlp_up, **col)
            self.mlp_down = RowParallelLinear.from_linear(blk.mlp_down, **row)
            self.heads, self.width = heads // comm.size, d // comm.size

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.attn_qkv(self.ln1(x)).split(self.width, dim=2)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_out(a.transpose(1, 2).reshape(b, t, self.width))
            return x + self.mlp_down(F.gelu(self.mlp_up(self.ln2(x))))

    model.h = nn.ModuleList(TPBlock(blk) for blk in model.h)


def sharded(model):
    """The parameters that differ between ranks (slices), and the replicated ones."""
    from ccompress.torch import ColumnParallelLinear, RowParallelLinear

    shards = set()
    for m in model.modules():
        if isinstance(m, ColumnParallelLinear):
            shards |= {id(p) for p in m.parameters()}
        elif isinstance(m, RowParallelLinear):
            shards.add(id(m.weight))  # the row-parallel bias is replicated
    params = list(model.parameters())
    return ([p for p in params if id(p) in shards], [p for p in params if id(p) not in shards])


def clip_grad_norm(torch, world, shards, replicated, max_norm: float) -> None:
    """Clips by the norm of the whole (unsharded) model's gradient: slices' squares summed
    over the ranks (exactly, in double), replicated parameters counted once."""
    sq = lambda ps: float(sum(p.grad.double().square().sum() for p in ps if p.grad is not None))  # noqa: E731
    total = (world.allreduce(sq(shards)) + sq(replicated)) ** 0.5
    if total > max_norm:
        for p in shards + replicated:
            if p.grad is not None:
                p.grad.mul_(max_norm / (total + 1e-6))


def main() -> None:
    ap = tc.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--grad-codec", default=None, help="codec of the backward all-reduces "
                    "(column-parallel input gradients); default: --codec")
    args = ap.parse_args()
    if args.grad_codec is None:
        args.grad_codec = args.codec
    world, torch, device, train, val, info = tc.start(args)
    from ccompress.torch import world_communicator

    comm = world_communicator()  # torchrun: gloo point-to-point; mpiexec: MPI
    torch.manual_seed(args.seed)
    model = build_model(torch, args.d_model, args.layers, args.heads, args.ctx)
    nparams = sum(p.numel() for p in model.parameters())
    shard_model(torch, model, comm, args.codec, args.grad_codec, args.d_model, args.heads)
    model.to(device)
    shards, replicated = sharded(model)
    opt = tc.make_optimizer(torch, model, args.lr)
    tc.say(world, f"text: {info['corpus']}\n      {info['train_bytes']:,} bytes to train on, "
           f"{info['val_bytes']:,} held out")
    tc.say(world, f"model: {nparams / 1e6:.2f}M parameters ({args.layers} layers, d_model "
           f"{args.d_model}, {args.heads} heads, context {args.ctx}); tensor parallel over "
           f"{comm.size} ranks on {device.type} ({sum(p.numel() for p in shards) / 1e6:.2f}M "
           f"sliced parameters per rank), {args.batch} sequences per step; activations: "
           f"codec {args.codec}, their gradients: codec {args.grad_codec}")

    vb = tc.val_batches(torch, args, val, device)
    rng = np.random.default_rng([args.seed, 0])  # the same batches on every rank

    def step_fn(step: int) -> float:
        x, y = (t.to(device) for t in batch(torch, train, rng, args.batch, args.ctx))
        loss = model(x, y)  # identical on every rank: the logits are replicated
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm(torch, world, shards, replicated, 1.0)
        opt.step()
        return loss.item()

    result = tc.train(args, opt, step_fn, lambda: tc.mean_loss(torch, model, vb),
                      lambda: comm.bytes_sent, world.rank == 0)
    same = tc.identical_on_all_ranks(world, replicated)
    tc.say(world, f"replicated parameters bit-identical on all {comm.size} ranks: "
           f"{'yes' if same else 'NO'}")
    tc.stop()
    tc.finish(world, args, dict(
        result, mode="tensor parallel", ranks=comm.size, codec=args.codec,
        grad_codec=args.grad_codec,
        replicas_identical=same, parameters=nparams, text=info))


if __name__ == "__main__":
    main()
