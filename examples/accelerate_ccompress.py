"""Hugging Face Accelerate with ccompress, on its two routes:

    # the backend: every DDP gradient all-reduce compressed (CCOMPRESS_* configure it)
    CCOMPRESS_CODEC=hint8 .venv/bin/torchrun --nproc_per_node 2 \\
        examples/accelerate_ccompress.py --route backend
    # the DDP hook, on Accelerate's own (gloo/NCCL) group
    .venv/bin/torchrun --nproc_per_node 2 examples/accelerate_ccompress.py --route hook \\
        --codec hint8

Accelerate 1.x picks the process-group backend itself on CPU (``gloo``, or ``mpi``) and
refuses any other with ``ValueError: Your assigned backend ccompress is not available``
(``AcceleratorState._prepare_backend``). It leaves a process group that exists alone, so
on CPU the route is to make the group first::

    import ccompress.torch
    dist.init_process_group("ccompress")     # before Accelerator(...)
    acc = Accelerator(cpu=True)              # acc.state.backend still says "gloo"

On GPUs Accelerate keeps a backend it is given, so there
``Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="ccompress")])`` works after
``import ccompress.torch`` (not run here: this example runs on CPU where there is no GPU).
The hook route needs neither: ``model.register_comm_hook(None, ddp_comm_hook(codec))`` on
the DDP model ``acc.prepare`` returns. ``--route none`` is plain Accelerate (exact, gloo),
for comparison; ``--out FILE`` writes rank 0's losses and counters as JSON.
"""
import argparse
import json

import torch
import torch.distributed as dist
from accelerate import Accelerator

import ccompress.torch  # noqa: F401  (registers the "ccompress" backend)
from ccompress.torch import compressed_group, ddp_comm_hook

STEPS = 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--route", choices=["backend", "hook", "none"], default="backend")
    ap.add_argument("--codec", default="hint8", help="the hook's codec (--route hook)")
    ap.add_argument("--out", help="write rank 0's losses and counters here (JSON)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cpu = not torch.cuda.is_available()
    if args.route == "backend":
        dist.init_process_group("ccompress")  # Accelerate then keeps this group
    acc = Accelerator(cpu=cpu)
    ref = dist.new_group(backend="gloo")  # exact, to average the loss for the log
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(100 + acc.process_index)
    xs = torch.randn(STEPS * 16, 64, generator=g)
    ys = torch.sin(xs[:, :8]) + 0.1 * torch.randn(STEPS * 16, 8, generator=g)
    model, opt = acc.prepare(model, opt)
    hook = None
    if args.route == "hook":
        hook = ddp_comm_hook(codec=args.codec)
        model.register_comm_hook(state=None, hook=hook)
    losses = []
    for i in range(STEPS):
        x, y = xs[16 * i:16 * (i + 1)].to(acc.device), ys[16 * i:16 * (i + 1)].to(acc.device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        acc.backward(loss)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total, group=ref)
        losses.append(float(total) / acc.num_processes)
    stats = (compressed_group().stats()["total"] if args.route == "backend" else
             hook.stats() if hook is not None else None)
    if acc.is_main_process:
        print(f"route {args.route}, process group backend {dist.get_backend()}, "
              f"losses {['%.5f' % v for v in losses]}")
        if stats is not None:
            print(f"ccompress: {stats['compressed']} of {stats['calls']} calls compressed, "
                  f"{stats['bytes_sent']} bytes sent where an exact ring sends "
                  f"{stats['exact_bytes']}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"losses": losses, "stats": stats, "backend": dist.get_backend()}, f)
    acc.end_training()  # destroys the process group (CCOMPRESS_REPORT=1 prints there)


if __name__ == "__main__":
    main()
