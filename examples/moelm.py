"""A small mixture-of-experts byte-level LM with expert parallelism, for the examples and the
MoE rows of perf/bench/train_e2e.py.

examples/tinylm.py's GPT (its attention: :func:`examples.tinylm.causal_attention`) with every
block's MLP replaced by ``experts`` experts (a GELU MLP of ``hidden`` units each) behind a
top-``top_k`` softmax router with a capacity factor (Switch/GShard style).
The experts are sharded over the ranks of the expert-parallel group (``experts / world``
each); a token reaches its experts' ranks by ``all_to_all_single`` (dispatch) and their outputs
come back by a second one (combine), through ``torch.distributed.nn.functional`` so that
autograd runs the reverse all-to-alls in backward on the same groups. Dispatch and combine
take a process group each, so that each direction can use its own codec (the ccompress
backend's ``all_to_all`` option; a gloo group is exact).

Every expert's slot buffer holds ``capacity = ceil(capacity_factor * tokens * top_k /
experts)`` rows (zero rows where fewer tokens chose it; tokens beyond it are dropped from
that expert, first choices before second choices), so every rank sends every other rank the
same number of rows: equal splits. Routing and dispatch are batched tensor ops (a one-hot
cumulative sum numbers each expert's slots, ``index_copy`` fills the send buffer, one batched
matrix product runs a rank's experts on what it received, ``index_add`` sums each token's
gated expert outputs): no Python loop over tokens or experts.

Data-parallel training wraps only the dense weights in DDP (:func:`dense_ddp`); each rank
owns its experts, whose gradients are complete after backward, since every rank's tokens
reached them, and are divided by the world size so that the update is that of the mean loss
over all ranks (:func:`build_model` registers the hooks). :func:`clip_grad_norm` clips by the
norm of the whole model's gradient, the experts of every rank included, so every rank
scales its dense gradients alike and the dense replicas stay bit-identical.

torch is imported by the caller and passed in, so this module imports without it.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, List, Optional

if __package__:
    from .tinylm import causal_attention
else:  # imported by a script run from examples/
    from tinylm import causal_attention

AUX_LOSS = 0.01  # the load-balancing loss's weight (Switch Transformer's)


def build_model(torch, d: int, layers: int, heads: int, ctx: int, *, experts: int = 8,
                top_k: int = 2, capacity_factor: float = 1.25, hidden: Optional[int] = None,
                dispatch_group: Any = None, combine_group: Any = None, exchange: bool = True,
                seed: int = 0):
    """The MoE GPT of this module for the calling rank.

    Parameters
    ----------
    torch : module
        The ``torch`` module.
    d, layers, heads, ctx : int
        Width, blocks, attention heads and context length, as in examples/tinylm.py.
    experts : int
        Experts per MoE layer; a multiple of the world size of ``dispatch_group``.
    top_k : int
        Experts each token goes to.
    capacity_factor : float
        Slots per expert, as a multiple of an even share of the ``tokens * top_k`` choices.
    hidden : int, optional
        Each expert's hidden units (default ``4 * d``, a dense MLP's; fine-grained experts,
        as in DeepSeek-V3 and Qwen-MoE, have fewer than ``d``).
    dispatch_group, combine_group : ProcessGroup, optional
        The groups of the dispatch and of the combine all-to-all (the default group where
        None); both span the same ranks in the same order.
    exchange : bool
        False: no all-to-all; each rank's experts run on the rank's own send buffer in place
        of what the other ranks would send it (the same shapes and arithmetic, nothing sent:
        the step's compute alone, for timing; not a model to train).
    seed : int
        Seeds every expert by its global index, so an expert's initial weights do not depend
        on the number of ranks.

    Returns
    -------
    torch.nn.Module
        ``model(idx, targets)`` returns the mean next-byte loss plus the load-balancing loss;
        ``model.expert_parameters()`` lists this rank's expert parameters.

    Raises
    ------
    ValueError
        Where ``experts`` is not a multiple of the group's size, ``top_k`` exceeds it, or
        ``hidden`` is below 1.
    """
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_to_all_single

    # torch 2.13 points to its functional collectives instead; this one is the autograd
    # all-to-all that torch.distributed documents, and what MoE code calls today.
    warnings.filterwarnings("ignore", category=FutureWarning,
                            message="torch.distributed.nn.functional.all_to_all_single")
    nn, F = torch.nn, torch.nn.functional
    world = dist.get_world_size(dispatch_group)
    rank = dist.get_rank(dispatch_group)
    if experts % world:
        raise ValueError(f"experts={experts} must be a multiple of the {world} ranks of the "
                         "expert-parallel group")
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k={top_k} must be between 1 and experts={experts}")
    hidden = 4 * d if hidden is None else hidden
    if hidden < 1:
        raise ValueError(f"hidden={hidden} must be 1 or more")
    local = experts // world

    class Expert(nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.up, self.down = nn.Linear(d, hidden), nn.Linear(hidden, d)
            g = torch.Generator().manual_seed(seed * 1000 + index)
            with torch.no_grad():  # GPT-2 initialisation, from the expert's own generator
                self.up.weight.normal_(0.0, 0.02, generator=g)
                self.down.weight.normal_(0.0, 0.02 / math.sqrt(2 * layers), generator=g)
                self.up.bias.zero_()
                self.down.bias.zero_()

    class MoE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.router = nn.Linear(d, experts, bias=False)
            self.experts = nn.ModuleList(Expert(rank * local + j) for j in range(local))
            self.top_k, self.capacity_factor = top_k, capacity_factor
            self.aux = None  # the load-balancing loss of the last forward

        def forward(self, x):
            shape = x.shape
            x = x.reshape(-1, d)
            n = x.shape[0]
            cap = math.ceil(capacity_factor * n * top_k / experts)
            probs = F.softmax(self.router(x), dim=-1)  # (n, experts)
            gate, chosen = probs.topk(top_k, dim=-1)
            gate = gate / gate.sum(dim=-1, keepdim=True)
            # Choice-major order: every token's first choice takes a slot before any second.
            which = chosen.t().reshape(-1)  # (top_k * n,)
            token = torch.arange(n).repeat(top_k)
            weight = gate.t().reshape(-1)
            onehot = F.one_hot(which, experts)
            pos = (onehot.cumsum(0) - 1).gather(1, which[:, None]).squeeze(1)
            keep = pos < cap
            slot = (which * cap + pos)[keep]
            token, weight = token[keep], weight[keep]
            send = x.new_zeros(experts * cap, d).index_copy(0, slot, x[token])
            # rows [r * local * cap, (r + 1) * local * cap) go to rank r: equal splits
            got = all_to_all_single(torch.empty_like(send), send, group=dispatch_group) \
                if exchange else send
            # (local, world * cap, d): each local expert's rows from every rank, and the
            # experts' GELU MLPs as one batched matrix product each way
            got = got.view(world, local, cap, d).transpose(0, 1).reshape(local, -1, d)
            ex = self.experts
            up = torch.stack([e.up.weight for e in ex]).transpose(1, 2)  # (local, d, hidden)
            down = torch.stack([e.down.weight for e in ex]).transpose(1, 2)
            h = torch.baddbmm(torch.stack([e.up.bias for e in ex])[:, None], got, up)
            out = torch.baddbmm(torch.stack([e.down.bias for e in ex])[:, None], F.gelu(h), down)
            out = out.view(local, world, cap, d).transpose(0, 1).reshape(-1, d)
            back = all_to_all_single(torch.empty_like(send), out, group=combine_group) \
                if exchange else out
            y = x.new_zeros(n, d).index_add(0, token, back[slot] * weight[:, None])
            # Switch's balance loss: experts x sum over experts of (share of first choices
            # x mean router probability)
            first = onehot[:n].float().mean(dim=0)
            self.aux = experts * (first * probs.mean(dim=0)).sum()
            return y.view(shape)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn_qkv, self.attn_out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.moe = MoE()

        def forward(self, x):
            x = x + causal_attention(F, self.attn_qkv, self.attn_out, self.ln1(x), heads)
            return x + self.moe(self.ln2(x))

    class MoEGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok_emb = nn.Embedding(256, d)
            self.pos_emb = nn.Parameter(torch.zeros(ctx, d))
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            g = torch.Generator().manual_seed(seed)
            with torch.no_grad():  # GPT-2 initialisation of the dense weights
                for name, p in self.named_parameters():
                    if ".experts." in name:
                        continue
                    if name.endswith("weight") and p.dim() == 2:
                        std = 0.02 / math.sqrt(2 * layers) if name.endswith("attn_out.weight") \
                            else 0.02
                        p.normal_(0.0, std, generator=g)
                    elif name.endswith("bias"):
                        p.zero_()
                self.pos_emb.normal_(0.0, 0.01, generator=g)
            for p in self.expert_parameters():  # the mean loss over the ranks (module doc)
                p.register_hook(lambda grad: grad / world)

        def expert_parameters(self) -> List[Any]:
            return [p for blk in self.h for p in blk.moe.experts.parameters()]

        def forward(self, idx, targets=None):
            x = self.tok_emb(idx) + self.pos_emb[: idx.shape[1]]
            for blk in self.h:
                x = blk(x)
            logits = self.ln_f(x) @ self.tok_emb.weight.T
            if targets is None:
                return logits
            aux = sum(blk.moe.aux for blk in self.h) / len(self.h)
            return F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1)) \
                + AUX_LOSS * aux

    return MoEGPT()


def expert_names(model) -> List[str]:
    """The names of ``model``'s expert parameters (those DDP must leave alone)."""
    return [n for n, _ in model.named_parameters() if ".experts." in n]


def dense_ddp(torch, model, process_group=None, **kwargs):
    """``DistributedDataParallel`` over ``model``'s dense weights only: the experts' parameters
    are left out (each rank owns its own experts), ``kwargs`` go to DDP."""
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, expert_names(model))
    return torch.nn.parallel.DistributedDataParallel(model, process_group=process_group,
                                                     **kwargs)


def clip_grad_norm(torch, model, max_norm: float, group=None) -> float:
    """Clips every gradient of ``model`` by the norm of the whole model's gradient: the dense
    part (the same on every rank after DDP) plus the experts of every rank, summed over
    ``group`` (an exact group: the sum must be the same on every rank). Returns that norm."""
    import torch.distributed as dist

    experts = {id(p) for p in model.expert_parameters()}
    dense = [p.grad for p in model.parameters() if p.grad is not None and id(p) not in experts]
    mine = [p.grad for p in model.expert_parameters() if p.grad is not None]
    sq = lambda gs: sum((g.double() ** 2).sum() for g in gs) if gs else torch.zeros((), dtype=torch.float64)  # noqa: E731
    expert_sq = sq(mine).reshape(1)
    dist.all_reduce(expert_sq, group=group)
    norm = float((sq(dense) + expert_sq[0]).sqrt())
    scale = max_norm / (norm + 1e-6)
    if scale < 1:
        for g in dense + mine:
            g.mul_(scale)
    return norm


def all_to_all_bytes(model, tokens: int, world: int) -> float:
    """The bytes a rank sends per training step through each of the two groups (dispatch,
    combine) when the all-to-all is exact, for ``tokens`` tokens per rank per step: per MoE
    layer one all-to-all forward and its reverse in backward, each sending the
    ``(world - 1) / world`` share of ``experts x capacity`` rows of float32."""
    moe = [blk.moe for blk in model.h]
    m = moe[0]
    experts, d = m.router.out_features, m.router.in_features
    cap = math.ceil(m.capacity_factor * tokens * m.top_k / experts)
    return len(moe) * 2 * (world - 1) / world * experts * cap * d * 4
