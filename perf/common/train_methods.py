"""The gradient-communication methods research/train_compare/train_compare.py trains with: each computes this
rank's gradients, communicates them through the Communicator, and updates the model."""
from __future__ import annotations

from typing import Dict

import numpy as np

import ccompress as cc
from ccompress.compressors.gift import NumpyGIFT
from ccompress.compressors.powersgd import PowerSGD
from ccompress.compressors.tsr import TSR

CODECS = {"fp8": "fp8_e4m3:g128", "hint8": "hint8:g32", "nvfp4": "nvfp4",
          "hint4": "hint4"}  # hint4: L2 and the Adam-normalised error order it against nvfp4 apart
# The source's quantizer is FP8 E5M2 with one scale per tensor; the nearest codec here is
# E5M2 with one scale per 1024 elements (the largest group). Measured only, not trained with.
SOURCE_FP8 = "fp8_e5m2:g1024"
METHODS = (["exact"] + [f"{c}{s}" for c in CODECS for s in ("", "_ef")]
           + ["gift", "tsr", "tsr_reset", "powersgd"])
BETAS = (0.9, 0.95)
PSGD_RANK = 4


class Method:
    """Gradients averaged by ``sync`` (flat, one collective), then AdamW."""

    def __init__(self, torch, model, comm, args):
        self.torch, self.comm = torch, comm
        self.named = [(n, p) for n, p in model.named_parameters()]
        self.opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=BETAS,
                                     weight_decay=0.0)

    def forward_backward(self, model, x, y, step) -> float:
        model.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        return loss.item()

    def grads(self) -> Dict[str, np.ndarray]:
        return {n: p.grad.detach().numpy() for n, p in self.named}

    def step(self, model, lr, step) -> None:
        avg = self.sync(self.grads(), step)
        for n, p in self.named:
            p.grad.copy_(self.torch.from_numpy(np.ascontiguousarray(avg[n])))
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()

    def report(self) -> dict:
        return {}


class Codec(Method):
    def __init__(self, torch, model, comm, args, codec="none", feedback=False):
        super().__init__(torch, model, comm, args)
        self.codec, self.ef = codec, cc.ErrorFeedback() if feedback else None

    def sync(self, grads, step):
        flat = np.concatenate([g.reshape(-1) for g in grads.values()])
        flat = self.comm.allreduce(flat, codec=self.codec, algo="two_shot", op="avg",
                                   error_feedback=self.ef)
        out, at = {}, 0
        for n, g in grads.items():
            out[n] = flat[at:at + g.size].reshape(g.shape)
            at += g.size
        return out

    def report(self):
        return {"codec": self.codec, "nonfinite": 0 if self.ef is None else self.ef.nonfinite}


class PowerSGDMethod(Method):
    def __init__(self, torch, model, comm, args):
        super().__init__(torch, model, comm, args)
        self.ps = PowerSGD(rank=PSGD_RANK)

    def sync(self, grads, step):
        return self.ps.allreduce(self.comm, grads)

    def report(self):
        return {"rank": PSGD_RANK}


def add_tsr_options(ap) -> None:
    """The TSR-Adam options research/train_compare/train_compare.py and perf/bench/train_torchrun.py share."""
    ap.add_argument("--tsr-rank", type=int, default=32)
    ap.add_argument("--tsr-every", type=int, default=50, help="TSR refresh interval K")
    ap.add_argument("--tsr-ef", action="store_true", help="TSR with error feedback")
    ap.add_argument("--tsr-codec", default="none",
                    help="TSR: wire codec of the r x r cores (e.g. bf16)")
    ap.add_argument("--tsr-sketch-codec", default="none",
                    help="TSR: wire codec of the refresh sketches (e.g. bf16; none: exact)")
    ap.add_argument("--tsr-dense-codec", default="none",
                    help="TSR: wire codec of the vectors and small matrices (none: exact; the "
                         "cores' codec: one collective per step)")
    ap.add_argument("--tsr-basis-ema", type=float, default=0.0,
                    help="TSR: bases from a running average of each rank's gradient (beta)")
    ap.add_argument("--tsr-scale", type=float, default=8.0,
                    help="TSR-Adam update multiplier (rank r moves r x r directions; 8 was best "
                         "of 1/4/8/16 in 60-step runs)")


def make_tsr_adam(model, comm, args, on_refresh="rotate", weight_decay=0.0):
    """ccompress.torch.tsr_adam.TSRAdam over ``comm`` (a Communicator, a torch group or None)
    from the options of :func:`add_tsr_options`."""
    from ccompress.torch.tsr_adam import TSRAdam
    tsr = TSR(rank=args.tsr_rank, refresh_every=args.tsr_every, error_feedback=args.tsr_ef,
              basis_ema=args.tsr_basis_ema, codec=args.tsr_codec,
              sketch_codec=args.tsr_sketch_codec, dense_codec=args.tsr_dense_codec)
    return TSRAdam(model.named_parameters(), comm, tsr, lr=args.lr, betas=BETAS,
                   weight_decay=weight_decay, on_refresh=on_refresh, scale=args.tsr_scale)


def tsr_report(args, on_refresh="rotate") -> dict:
    """The TSR settings of a run's results file."""
    a = args
    return {"rank": a.tsr_rank, "refresh_every": a.tsr_every, "on_refresh": on_refresh,
            "scale": a.tsr_scale, "error_feedback": a.tsr_ef, "basis_ema": a.tsr_basis_ema,
            "core_codec": a.tsr_codec, "sketch_codec": a.tsr_sketch_codec,
            "dense_codec": a.tsr_dense_codec}


class TSRMethod(Method):
    def __init__(self, torch, model, comm, args, on_refresh="rotate"):
        self.torch, self.comm = torch, comm
        self.on_refresh = on_refresh
        self.args = args
        self.opt = make_tsr_adam(model, comm, args, on_refresh)

    def step(self, model, lr, step):
        self.opt.param_groups[0]["lr"] = lr
        self.opt.step()

    def report(self):
        return tsr_report(self.args, self.on_refresh)


class GIFTMethod(Method):
    """fp8 + GIFT + error feedback; activation moments of every Linear's input (and with
    ``--gift-output`` of the loss gradient of its output) are collected every
    ``--gift-every`` steps; layers are selected at step 0 from measured error."""

    def __init__(self, torch, model, comm, args):
        super().__init__(torch, model, comm, args)
        from mpi4py import MPI
        self.gift = NumpyGIFT(codec=CODECS["fp8"], rank=args.gift_rank, sketch=args.gift_sketch,
                         seed=args.seed,
                         **({} if args.gift_ema is None else {"ema": args.gift_ema}))
        self.meas = cc.Communicator.from_mpi(MPI.COMM_WORLD.Dup(), timeout=600)
        self.world = MPI.COMM_WORLD
        self.linears = {f"{n}.weight": m for n, m in model.named_modules()
                        if isinstance(m, torch.nn.Linear)}
        self.inputs, self.deltas, self.fidelity = {}, {}, []
        self.output_side = args.gift_output
        self.every = args.gift_every
        # step 0 and half-way (fresh statistics), the steps before those collections
        # (stalest), and the last step
        half = args.steps // 2 // self.every * self.every
        self.measure_at = {0, self.every - 1, half, half + self.every - 1, args.steps - 1}

    def forward_backward(self, model, x, y, step):
        if step % self.every:
            return super().forward_backward(model, x, y, step)
        hooks = [m.register_forward_hook(
            lambda mod, inp, out, k=k: self.inputs.__setitem__(k, inp[0].detach()))
            for k, m in self.linears.items()]
        if self.output_side:
            hooks += [m.register_full_backward_hook(
                lambda mod, gin, gout, k=k: self.deltas.__setitem__(k, gout[0].detach()))
                for k, m in self.linears.items()]
        loss = super().forward_backward(model, x, y, step)
        for h in hooks:
            h.remove()
        moments, out_moments = ({k: self._moment(a) for k, a in got.items()}
                                for got in (self.inputs, self.deltas))
        self.gift.observe(self.comm, moments, out_moments if self.output_side else None)
        if step == 0:
            self.gift.select(self.comm, self.grads(), list(self.linears), min_gain=1.1)
        return loss

    @staticmethod
    def _moment(a):
        """x^T x / tokens of one layer's per-token vectors."""
        a = a.reshape(-1, a.shape[-1])
        return (a.T @ a / a.shape[0]).numpy()

    def sync(self, grads, step):
        if step in self.measure_at:
            self.fidelity.append({"step": step, "layers": self._measure(grads)})
        return self.gift.allreduce(self.comm, grads)

    def _measure(self, grads):
        """One-step relative error of the all-reduce on this step's real gradients:
        plain fp8 and hint8, and fp8 through the GIFT transform (no error feedback), against
        the fp64 mean; Euclidean and A-weighted (K-FAC input metric) norms."""
        rows = []
        for k in sorted(self.linears):
            g = grads[k].astype(np.float32)
            ref = np.mean(self.world.allgather(g.astype(np.float64)), axis=0)
            w, a = self.gift.factors[k], self.gift.second_moment[k]
            got = {c: self.meas.allreduce(g, codec=CODECS[c], algo="two_shot", op="avg")
                   for c in ("fp8", "hint8")}
            wire = w.to_wire(g.astype(np.float64)).astype(np.float32)
            got["gift_fp8"] = w.from_wire(self.meas.allreduce(
                wire, codec=CODECS["fp8"], algo="two_shot", op="avg").astype(np.float64))
            got["e5m2"] = self.meas.allreduce(g, codec=SOURCE_FP8, algo="two_shot", op="avg")
            got["gift_e5m2"] = w.from_wire(self.meas.allreduce(
                wire, codec=SOURCE_FP8, algo="two_shot", op="avg").astype(np.float64))
            row = {"layer": k}
            for c, y in got.items():
                e = y - ref
                row[c] = float(np.linalg.norm(e) / np.linalg.norm(ref))
                row[c + "_fisher"] = float(np.sqrt(np.einsum("ij,jk,ik->", e, a, e)
                                                   / np.einsum("ij,jk,ik->", ref, a, ref)))
            rows.append(row)
        return rows

    def report(self):
        return {"gift_ema": self.gift.ema, "gift_damping": self.gift.damping,
                "gift_output": self.output_side, "gift_damping_out": self.gift.damping_out,
                "gift_rank": self.gift.rank, "gift_selection": self.gift.selection, "gift_layers": self.gift.layers,
                "gift_every": self.every, "gift_sketch": self.gift.sketch, "gift_fidelity": self.fidelity, "nonfinite": self.gift.ef.nonfinite}


def make_method(name, torch, model, comm, args) -> Method:
    if name == "exact":
        return Codec(torch, model, comm, args)
    base = name[:-3] if name.endswith("_ef") else name
    if base in CODECS:
        return Codec(torch, model, comm, args, CODECS[base], feedback=name.endswith("_ef"))
    if name == "gift":
        return GIFTMethod(torch, model, comm, args)
    if name in ("tsr", "tsr_reset"):
        return TSRMethod(torch, model, comm, args, "reset" if name == "tsr_reset" else "rotate")
    if name == "powersgd":
        return PowerSGDMethod(torch, model, comm, args)
    raise ValueError(name)
