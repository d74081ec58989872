"""Where 4-bit gradients lose at a high learning rate: one step's error of each codec on the
real gradients of a training run, per layer, in the gradient's units and in Adam's.

``python -m perf.diagnose.fourbit_lr`` trains examples/tinylm.py's byte-level GPT (the
``lm-small`` model of ``perf/bench/train_e2e.py loss``: the same corpus, batches, AdamW,
clipping and warm-up with cosine decay) with exact averaging of ``--ranks`` virtual ranks'
gradients in this one process. At the steps of ``--at`` it hands every rank's real gradient
(divided by the rank count, as DDP does; the parameters in reverse order in one flat bucket,
as DDP fills its buckets) to :mod:`ccompress.simulate` for each codec and measures, against
the float64 mean of the ranks' gradients:

- ``grad``: the relative error ||avg - exact|| / ||exact|| of the averaged gradient, per
  layer kind (token embedding and output head, which are tied; position embedding; norms;
  attention; MLP; biases), the whole bucket all-reduced at once (two_shot);
- ``adam``: the relative error of the AdamW update direction m / (sqrt(v) + eps) that this
  step's averaged gradient gives from the exact run's moments (the error the compressed
  gradient causes in the parameters' own units), and ``adam_lowv``: the same over the tenth
  of a layer's coordinates whose second moment is smallest;
- ``rs`` / ``ag``: the error with only the reduce-scatter compressed (the chunks gathered
  exactly) and with only the all-gather compressed (the chunks reduced exactly);
- ``tensor``: the error with every tensor all-reduced on its own (its own scales) instead of
  inside the bucket of mixed magnitudes.

Every rank's result must be bit-identical (checked); no error feedback (one step's error).
Prints a table per step and rate and writes them as JSON (``--json``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np

CODECS = "nvfp4,nvfp4:sr,hint4:g16,mxfp4,hint8"
KINDS = ("emb", "pos", "norm", "attn", "mlp", "bias")


def kind(name: str) -> str:
    """A parameter's layer kind (the token embedding is the output head too: tied)."""
    if name == "tok_emb.weight":
        return "emb"
    if name == "pos_emb":
        return "pos"
    if "ln" in name:
        return "norm"
    if name.endswith("bias"):
        return "bias"
    return "attn" if ".attn" in name else "mlp"


def rel(a: np.ndarray, b: np.ndarray) -> float:
    n = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / n if n else 0.0


def identical(outs: List[np.ndarray], what: str) -> np.ndarray:
    for r, o in enumerate(outs[1:], 1):
        if not np.array_equal(o.view(np.uint32), outs[0].view(np.uint32)):
            raise AssertionError(f"{what}: rank {r}'s result differs from rank 0's")
    return outs[0]


class Adam:
    """The exact run's AdamW moments (torch's defaults: betas 0.9, 0.999, eps 1e-8)."""

    def __init__(self, opt, params) -> None:
        self.opt, self.params = opt, params

    def direction(self, g: np.ndarray, sl: Dict[str, slice], step: int) -> np.ndarray:
        """m / (sqrt(v) + eps) after this step's gradient ``g`` (bias corrected), flat."""
        out = np.empty_like(g, dtype=np.float64)
        for name, p in self.params:
            st = self.opt.state.get(p, {})
            gi = g[sl[name]].astype(np.float64)
            m = st["exp_avg"].detach().double().view(-1).numpy() if st else 0.0
            v = st["exp_avg_sq"].detach().double().view(-1).numpy() if st else 0.0
            m, v = 0.9 * m + 0.1 * gi, 0.999 * v + 0.001 * gi * gi
            t = step + 1
            out[sl[name]] = (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        return out


def measure(parts: List[np.ndarray], codec: str, sl, kinds, adam: Adam, step: int,
            v_flat: np.ndarray, slice_elems: int) -> Dict[str, Dict[str, float]]:
    """The errors of one codec on one step's gradients, per layer kind (and ``all``)."""
    from ccompress import simulate

    exact = np.sum(np.stack(parts).astype(np.float64), 0)  # the parts are grad / ranks
    full = identical(simulate.allreduce(parts, codec=codec, algo="two_shot",
                                        slice_elems=slice_elems), codec)
    pad = [np.pad(p, (0, -p.size % len(parts))) for p in parts]  # equal chunks per rank
    rs = simulate.reduce_scatter(pad, codec=codec, slice_elems=slice_elems)
    rs_only = np.concatenate(rs)[: exact.size]
    rs_exact = simulate.reduce_scatter(pad, codec="none", slice_elems=slice_elems)
    ag_only = identical([np.concatenate(o)[: exact.size] if isinstance(o, list) else
                         np.asarray(o).reshape(-1)[: exact.size]
                         for o in simulate.allgather(rs_exact, codec=codec,
                                                     slice_elems=slice_elems)], codec + " ag")
    per_tensor = np.empty_like(full)
    for name, s in sl.items():
        per_tensor[s] = identical(simulate.allreduce([p[s].copy() for p in parts], codec=codec,
                                                     algo="two_shot", slice_elems=slice_elems),
                                  codec + " " + name)
    clip = lambda g: g * min(1.0, 1.0 / (float(np.linalg.norm(g)) + 1e-6))  # noqa: E731
    d_exact = adam.direction(clip(exact), sl, step)  # the trainer clips the average at 1.0
    d_full = adam.direction(clip(full.astype(np.float64)), sl, step)
    res: Dict[str, Dict[str, float]] = {}
    for k in ("all", *KINDS):
        idx = np.ones(exact.size, bool) if k == "all" else kinds == k
        if not idx.any():
            continue
        low = idx & (v_flat <= np.quantile(v_flat[idx], 0.1))
        res[k] = {"grad": rel(full[idx], exact[idx]), "rs": rel(rs_only[idx], exact[idx]),
                  "ag": rel(ag_only[idx], exact[idx]),
                  "tensor": rel(per_tensor[idx], exact[idx]),
                  "adam": rel(d_full[idx], d_exact[idx]),
                  "adam_lowv": rel(d_full[low], d_exact[low]),
                  "mag": float(np.sqrt(np.mean(exact[idx] ** 2)))}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.diagnose.fourbit_lr",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", default="4e-3", help="peak rates, comma separated (4e-3)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--at", default="30,150,290", help="steps measured (30,150,290)")
    ap.add_argument("--codecs", default=CODECS)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seq", type=int, default=8, help="windows per rank per step (8)")
    ap.add_argument("--ctx", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slice-elems", type=int, default=262144,
                    help="elements per pipelined slice (262144, the MPI and TCP transports')")
    ap.add_argument("--json", default="build/diagnose/fourbit_lr.json")
    args = ap.parse_args(argv)
    at = {int(x) for x in args.at.split(",")}
    if not at or max(at) >= args.steps or min(at) < 0:
        ap.error(f"--at {args.at} must name steps in [0, --steps {args.steps})")
    import torch

    from examples import tinylm
    from perf.bench.train_e2e import corpus, held_out

    torch.set_num_threads(1)
    train, _ = held_out(corpus())
    out = []
    for lr in [float(x) for x in args.lr.split(",")]:
        torch.manual_seed(args.seed)
        model = tinylm.build_model(torch, args.d_model, args.layers, args.heads, args.ctx)
        params = list(reversed(list(model.named_parameters())))  # DDP's bucket order
        sizes = [p.numel() for _, p in params]
        offs = np.cumsum([0, *sizes])
        sl = {n: slice(int(a), int(b)) for (n, _), a, b in zip(params, offs[:-1], offs[1:])}
        kinds = np.concatenate([np.full(s, kind(n)) for (n, _), s in zip(params, sizes)])
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
        adam = Adam(opt, params)
        rngs = [np.random.default_rng([args.seed, r]) for r in range(args.ranks)]
        for step in range(args.steps):
            for g in opt.param_groups:
                g["lr"] = tinylm.lr_at(step, args.steps, lr)
            parts, loss = [], 0.0
            for r in range(args.ranks):
                x, y = tinylm.batch(torch, train, rngs[r], args.seq, args.ctx)
                model.zero_grad(set_to_none=True)
                li = model(x, y)
                li.backward()
                loss += float(li.detach()) / args.ranks
                parts.append(np.concatenate([p.grad.detach().view(-1).numpy() / args.ranks
                                             for _, p in params]).astype(np.float32))
            if step in at:
                v_flat = np.concatenate([
                    opt.state[p]["exp_avg_sq"].detach().view(-1).numpy() if p in opt.state
                    else np.zeros(p.numel(), np.float32) for _, p in params])
                for codec in args.codecs.split(","):
                    res = measure(parts, codec, sl, kinds, adam, step, v_flat, args.slice_elems)
                    out.append({"lr": lr, "step": step, "codec": codec, "loss": loss,
                                "errors": res})
                    print_rows(out[-1])
            exact = np.sum(np.stack(parts).astype(np.float64), 0).astype(np.float32)
            for name, p in params:
                p.grad = torch.from_numpy(exact[sl[name]].reshape(p.shape).copy())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    print("\n" + "\n".join(summary(out)))
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"args": vars(args), "results": out}, indent=1))
    print(f"wrote {path}")
    return 0


def print_rows(r: dict) -> None:
    """One line per layer kind: its relative errors in percent."""
    head = f"lr {r['lr']:g} step {r['step']} {r['codec']} (train loss {r['loss']:.3f})"
    print(f"\n{head}\n| kind | rms grad | grad % | rs only % | ag only % | per tensor % | "
          "adam % | adam low-v % |\n|---|---|---|---|---|---|---|---|")
    for k, e in r["errors"].items():
        print(f"| {k} | {e['mag']:.2e} | {100 * e['grad']:.2f} | {100 * e['rs']:.2f} | "
              f"{100 * e['ag']:.2f} | {100 * e['tensor']:.2f} | {100 * e['adam']:.2f} | "
              f"{100 * e['adam_lowv']:.2f} |", flush=True)


def summary(results: List[dict]) -> List[str]:
    """One line per rate and codec: the whole bucket's errors in percent, the mean over the
    measured steps, and the range of the gradient's error over the layer kinds."""
    lines = ["| peak lr | codec | grad % | layer kinds' range % | rs only % | ag only % | "
             "ag's share of the squared error | per tensor % | adam % | adam low-v % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for lr, codec in dict.fromkeys((r["lr"], r["codec"]) for r in results):
        got = [r["errors"] for r in results if (r["lr"], r["codec"]) == (lr, codec)]
        m = {k: 100 * float(np.mean([e["all"][k] for e in got]))
             for k in ("grad", "rs", "ag", "tensor", "adam", "adam_lowv")}
        kinds = [100 * float(np.mean([e[k]["grad"] for e in got])) for k in KINDS
                 if all(k in e for e in got)]
        share = m["ag"] ** 2 / (m["ag"] ** 2 + m["rs"] ** 2) if m["ag"] + m["rs"] else 0.0
        lines.append(f"| {lr:g} | {codec} | {m['grad']:.2f} | {min(kinds):.1f}-{max(kinds):.1f}"
                     f" | {m['rs']:.2f} | {m['ag']:.2f} | {100 * share:.0f}% | "
                     f"{m['tensor']:.2f} | {m['adam']:.2f} | {m['adam_lowv']:.2f} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
