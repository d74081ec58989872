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
  inside the bucket of mixed magnitudes;
- ``mom`` (with ``--ef on``): the relative error of the momentum, the running average
  ``m = 0.9 m + 0.1 g`` (AdamW's first moment) of the compressed averages against that of the
  exact ones since step 0: what error feedback exists to keep small.

``--ef off`` (the default) measures one step's error: the codec sees only the measured
steps' gradients. ``--ef on`` runs every codec at every step with each rank's
:class:`ccompress.ErrorFeedback` (the worker and server residuals of two_shot, as the
``ccompress`` backend keeps them for the training rows), still training with exact averages,
and measures ``grad``, ``adam`` and ``mom`` of the compensated result; ``--ef off,on`` runs
both, the uncompensated codec at every step too (for its ``mom``). ``--auto auto4,auto4:adam``
counts what those auto codecs pick at the measured steps, for the whole bucket and for each
tensor on its own (2-D tensors in either scale-group layout).

``--model lm`` takes the 7.2M GPT of ``train_e2e --model lm`` (width 256, 9 blocks, 2
windows per rank) instead of ``lm-small``'s width 64, 2 blocks, 8 windows.

Every rank's result must be bit-identical (checked). Prints a table per step and rate and
writes them as JSON (``--json``).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

CODECS = "nvfp4,nvfp4:sr,hint4:g16,mxfp4,hint8"
KINDS = ("emb", "pos", "norm", "attn", "mlp", "bias")
# (d_model, blocks, windows per rank per step) of train_e2e's byte-level GPTs
MODELS = {"lm-small": (64, 2, 8), "lm": (256, 9, 2)}
BETA1 = 0.9  # AdamW's first moment, the momentum the "mom" error is of


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


def allreduce(parts: List[np.ndarray], codec: str, slice_elems: int,
              efs: Optional[list] = None) -> np.ndarray:
    """The two_shot all-reduce of ``parts`` over ``len(parts)`` virtual ranks, with each rank's
    ErrorFeedback of ``efs`` where given; every rank's result bit-identical (checked)."""
    from ccompress import run_inproc

    return identical(run_inproc(len(parts), lambda c: c.allreduce(
        parts[c.rank], codec=codec, algo="two_shot",
        error_feedback=None if efs is None else efs[c.rank]), slice_elems=slice_elems),
        codec)


def measure(parts: List[np.ndarray], codec: str, sl, kinds, adam: Adam, step: int,
            v_flat: np.ndarray, slice_elems: int, full: Optional[np.ndarray] = None,
            stages: bool = True, mom: Optional[float] = None) -> Dict[str, Dict[str, float]]:
    """The errors of one codec on one step's gradients, per layer kind (and ``all``).

    ``full`` is the all-reduced result when the caller has it (with error feedback: the
    compensated one); ``stages`` adds the reduce-scatter-only, all-gather-only and per-tensor
    runs (one step's, without error feedback); ``mom`` is the caller's momentum error of the
    whole bucket (None: not tracked)."""
    from ccompress import simulate

    exact = np.sum(np.stack(parts).astype(np.float64), 0)  # the parts are grad / ranks
    if full is None:
        full = allreduce(parts, codec, slice_elems)
    nan = np.full(exact.size, np.nan)
    rs_only = ag_only = per_tensor = nan
    if stages:
        pad = [np.pad(p, (0, -p.size % len(parts))) for p in parts]  # equal chunks per rank
        rs = simulate.reduce_scatter(pad, codec=codec, slice_elems=slice_elems)
        rs_only = np.concatenate(rs)[: exact.size]
        rs_exact = simulate.reduce_scatter(pad, codec="none", slice_elems=slice_elems)
        ag_only = identical([np.concatenate(o)[: exact.size] if isinstance(o, list) else
                             np.asarray(o).reshape(-1)[: exact.size]
                             for o in simulate.allgather(rs_exact, codec=codec,
                                                         slice_elems=slice_elems)],
                            codec + " ag")
        per_tensor = np.empty_like(full)
        for name, s in sl.items():
            per_tensor[s] = allreduce([p[s].copy() for p in parts], codec, slice_elems)
    clip = lambda g: g * min(1.0, 1.0 / (float(np.linalg.norm(g)) + 1e-6))  # noqa: E731
    d_exact = adam.direction(clip(exact), sl, step)  # the trainer clips the average at 1.0
    d_full = adam.direction(clip(full.astype(np.float64)), sl, step)
    res: Dict[str, Dict[str, float]] = {}
    for k in ("all", *KINDS):
        idx = np.ones(exact.size, bool) if k == "all" else kinds == k
        if not idx.any():
            continue
        low = idx & (v_flat <= np.quantile(v_flat[idx], 0.1))
        staged = {m: rel(a[idx], exact[idx]) if stages else None
                  for m, a in (("rs", rs_only), ("ag", ag_only), ("tensor", per_tensor))}
        res[k] = {"grad": rel(full[idx], exact[idx]), **staged,
                  "adam": rel(d_full[idx], d_exact[idx]),
                  "adam_lowv": rel(d_full[low], d_exact[low]),
                  "mom": mom if k == "all" else None,
                  "mag": float(np.sqrt(np.mean(exact[idx] ** 2)))}
    return res


def auto_choices(parts: List[np.ndarray], spec: str, params, sl, slice_elems: int) -> dict:
    """What the auto codec ``spec`` picks for the whole bucket and for each tensor on its own
    (in its parameter's shape, so a 2-D tensor may pick the column layout): the same choice
    on every rank (checked)."""
    from ccompress import run_inproc

    def pick(xs: List[np.ndarray], what: str) -> List[str]:
        got = run_inproc(len(xs), lambda c: (
            c.allreduce(xs[c.rank], codec=spec, algo="two_shot"),
            [c.last_stats["codec"], c.last_stats["layout"]])[1], slice_elems=slice_elems)
        if any(g != got[0] for g in got[1:]):
            raise AssertionError(f"{spec} {what}: the ranks chose differently: {got}")
        return got[0]

    return {"bucket": pick(parts, "bucket"),
            "tensors": {name: pick([p[sl[name]].reshape(t.shape).copy() for p in parts], name)
                        + [int(t.numel())] for name, t in params}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.diagnose.fourbit_lr",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", default="4e-3", help="peak rates, comma separated (4e-3)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--at", default="30,150,290", help="steps measured (30,150,290)")
    ap.add_argument("--codecs", default=CODECS)
    ap.add_argument("--ef", default="off",
                    help="error feedback: off, on, or off,on (off: one step's error)")
    ap.add_argument("--auto", default="",
                    help="auto codecs whose choices to count, comma separated (auto4,auto4:adam)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--model", choices=sorted(MODELS), default="lm-small",
                    help="the defaults of --d-model, --layers and --seq (lm-small)")
    ap.add_argument("--seq", type=int, default=None, help="windows per rank per step")
    ap.add_argument("--ctx", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slice-elems", type=int, default=262144,
                    help="elements per pipelined slice (262144, the MPI and TCP transports')")
    ap.add_argument("--json", default="build/diagnose/fourbit_lr.json")
    args = ap.parse_args(argv)
    at = {int(x) for x in args.at.split(",")}
    if not at or max(at) >= args.steps or min(at) < 0:
        ap.error(f"--at {args.at} must name steps in [0, --steps {args.steps})")
    efs = args.ef.split(",")
    if not efs or any(e not in ("off", "on") for e in efs) or len(set(efs)) < len(efs):
        ap.error(f"--ef {args.ef}: use off, on or off,on")
    autos = [a for a in args.auto.split(",") if a]
    from ccompress import autocodec

    if any(not autocodec.is_auto(a) for a in autos):
        ap.error(f"--auto {args.auto}: name auto codecs (auto4, auto4:adam, auto8)")
    preset = MODELS[args.model]
    args.d_model = args.d_model or preset[0]
    args.layers = args.layers or preset[1]
    args.seq = args.seq or preset[2]
    import torch

    from ccompress import ErrorFeedback
    from examples import tinylm
    from perf.bench.train_e2e import corpus, held_out

    torch.set_num_threads(1)
    train, _ = held_out(corpus())
    out: List[dict] = []
    picks: List[dict] = []
    codecs = args.codecs.split(",")
    track = "on" in efs  # every codec runs at every step (error feedback, the momentum)
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
        state = {(c, e): {"ef": [ErrorFeedback() for _ in range(args.ranks)] if e == "on"
                          else None, "m": 0.0} for c in codecs for e in efs} if track else {}
        m_exact = 0.0
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
            exact64 = np.sum(np.stack(parts).astype(np.float64), 0)
            m_exact = BETA1 * m_exact + (1 - BETA1) * exact64
            results = {}
            for key, st in state.items():
                y = allreduce(parts, key[0], args.slice_elems, st["ef"])
                st["m"] = BETA1 * st["m"] + (1 - BETA1) * y.astype(np.float64)
                results[key] = y
            if step in at:
                v_flat = np.concatenate([
                    opt.state[p]["exp_avg_sq"].detach().view(-1).numpy() if p in opt.state
                    else np.zeros(p.numel(), np.float32) for _, p in params])
                for codec in codecs:
                    for e in efs:
                        st = state.get((codec, e))
                        res = measure(parts, codec, sl, kinds, adam, step, v_flat,
                                      args.slice_elems, full=results.get((codec, e)),
                                      stages=e == "off",
                                      mom=rel(st["m"], m_exact) if st else None)
                        out.append({"lr": lr, "step": step, "codec": codec, "ef": e,
                                    "loss": loss, "errors": res})
                        print_rows(out[-1])
                for spec in autos:
                    picks.append({"lr": lr, "step": step, "spec": spec,
                                  **auto_choices(parts, spec, params, sl, args.slice_elems)})
                    print_picks(picks[-1])
            exact = exact64.astype(np.float32)
            for name, p in params:
                p.grad = torch.from_numpy(exact[sl[name]].reshape(p.shape).copy())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    print("\n" + "\n".join(summary(out)))
    if picks:
        print("\n" + "\n".join(pick_summary(picks)))
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"args": vars(args), "results": out, "auto": picks}, indent=1))
    print(f"wrote {path}")
    return 0


def pct(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}"


def print_rows(r: dict) -> None:
    """One line per layer kind: its relative errors in percent ("-": not measured)."""
    head = (f"lr {r['lr']:g} step {r['step']} {r['codec']}, error feedback {r['ef']} "
            f"(train loss {r['loss']:.3f})")
    print(f"\n{head}\n| kind | rms grad | grad % | rs only % | ag only % | per tensor % | "
          "adam % | adam low-v % | momentum % |\n|---|---|---|---|---|---|---|---|---|")
    for k, e in r["errors"].items():
        print(f"| {k} | {e['mag']:.2e} | {pct(e['grad'])} | {pct(e['rs'])} | "
              f"{pct(e['ag'])} | {pct(e['tensor'])} | {pct(e['adam'])} | "
              f"{pct(e['adam_lowv'])} | {pct(e['mom'])} |", flush=True)


def mean(xs: List[Optional[float]]) -> Optional[float]:
    return None if any(x is None for x in xs) else float(np.mean(xs))


def summary(results: List[dict]) -> List[str]:
    """One line per rate, codec and error feedback: the whole bucket's errors in percent, the
    mean over the measured steps, and the range of the gradient's error over the layer
    kinds."""
    lines = ["| peak lr | codec | error feedback | grad % | layer kinds' range % | rs only % | "
             "ag only % | ag's share of the squared error | per tensor % | adam % | "
             "adam low-v % | momentum % |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lr, codec, ef in dict.fromkeys((r["lr"], r["codec"], r["ef"]) for r in results):
        got = [r["errors"] for r in results if (r["lr"], r["codec"], r["ef"]) == (lr, codec, ef)]
        m = {k: mean([e["all"][k] for e in got])
             for k in ("grad", "rs", "ag", "tensor", "adam", "adam_lowv", "mom")}
        kinds = [100 * float(np.mean([e[k]["grad"] for e in got])) for k in KINDS
                 if all(k in e for e in got)]
        share = "-" if m["rs"] is None else \
            f"{100 * m['ag'] ** 2 / max(m['ag'] ** 2 + m['rs'] ** 2, 1e-300):.0f}%"
        lines.append(f"| {lr:g} | {codec} | {ef} | {pct(m['grad'])} | "
                     f"{min(kinds):.1f}-{max(kinds):.1f} | {pct(m['rs'])} | {pct(m['ag'])} | "
                     f"{share} | {pct(m['tensor'])} | {pct(m['adam'])} | "
                     f"{pct(m['adam_lowv'])} | {pct(m['mom'])} |")
    return lines


def print_picks(p: dict) -> None:
    """What an auto codec picked at one step: the bucket's choice and the tensors' counts."""
    count = Counter(c for c, _, _ in p["tensors"].values())
    print(f"\nlr {p['lr']:g} step {p['step']} {p['spec']}: bucket {p['bucket'][0]}; tensors "
          + ", ".join(f"{c} {n}" for c, n in count.most_common()), flush=True)


def pick_summary(picks: List[dict]) -> List[str]:
    """One line per rate and auto codec: how often it picked each codec over the measured
    steps, for the bucket and for the tensors (by count and by share of the elements)."""
    lines = ["| peak lr | auto codec | bucket: picks | tensors: picks | tensors: share of the "
             "elements |", "|---|---|---|---|---|"]
    for lr, spec in dict.fromkeys((p["lr"], p["spec"]) for p in picks):
        got = [p for p in picks if (p["lr"], p["spec"]) == (lr, spec)]
        buckets = Counter(p["bucket"][0] for p in got)
        tensors, elems = Counter(), Counter()
        for p in got:
            for c, _, n in p["tensors"].values():
                tensors[c] += 1
                elems[c] += n
        total = sum(elems.values())
        lines.append(f"| {lr:g} | {spec} | "
                     + ", ".join(f"{c} {n}/{len(got)}" for c, n in buckets.most_common())
                     + " | " + ", ".join(f"{c} {n}/{sum(tensors.values())}"
                                        for c, n in tensors.most_common())
                     + " | " + ", ".join(f"{c} {100 * n / total:.1f}%"
                                        for c, n in elems.most_common()) + " |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
