"""PyTorch Lightning on the ccompress backend: DDP (``DDPStrategy``) or FSDP2
(``ModelParallelStrategy`` with ``fully_shard`` in ``configure_model``), on CPU or GPU.

    CCOMPRESS_CODEC=hint8 .venv/bin/torchrun --nproc_per_node 2 \\
        examples/lightning_ccompress.py --strategy ddp
    CCOMPRESS_CODEC=fp8_e4m3:g128 CCOMPRESS_ALLGATHER_CODEC=bf16 \\
        .venv/bin/torchrun --nproc_per_node 2 examples/lightning_ccompress.py --strategy fsdp2

The one change to a Lightning script is the strategy's ``process_group_backend="ccompress"``
and the ``import ccompress.torch`` that registers the backend. Lightning passes no
``pg_options``, so the codecs come from the ``CCOMPRESS_*`` environment (README); rank 0
logs what each op does at the first collective. ``--backend gloo`` runs the same training
exactly, for comparison; ``--out FILE`` writes rank 0's losses and the group's counters
(``compressed_group().stats()``) as JSON.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import lightning as L
from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

import ccompress.torch  # noqa: F401  (registers the "ccompress" backend)
from ccompress.torch import compressed_group

STEPS = 8


class Regression(L.LightningModule):
    def __init__(self, fsdp2: bool):
        super().__init__()
        self.fsdp2 = fsdp2
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                       torch.nn.Linear(256, 256), torch.nn.GELU(),
                                       torch.nn.Linear(256, 8))
        self.losses = []

    def configure_model(self):
        if self.fsdp2:  # ModelParallelStrategy: shard over its data-parallel mesh
            from torch.distributed.fsdp import fully_shard

            mesh = self.device_mesh["data_parallel"]
            for layer in self.net:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh)
            fully_shard(self.net, mesh=mesh)

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        total = loss.detach().clone()
        dist.all_reduce(total, group=self.trainer.strategy_ref_group)  # exact, for the log
        self.losses.append(float(total) / dist.get_world_size())
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def data(rank: int):
    g = torch.Generator().manual_seed(100 + rank)
    xs = torch.randn(STEPS * 16, 64, generator=g)
    ys = torch.sin(xs[:, :8]) + 0.1 * torch.randn(STEPS * 16, 8, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=16)


class RefGroup(L.Callback):
    """An exact gloo group beside the training group, to average the loss for the log."""

    def setup(self, trainer, module, stage):
        trainer.strategy_ref_group = dist.new_group(backend="gloo")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strategy", choices=["ddp", "fsdp2"], default="ddp")
    ap.add_argument("--backend", default="ccompress", help="ccompress (default) or gloo")
    ap.add_argument("--out", help="write rank 0's losses and counters here (JSON)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.strategy == "ddp":
        strategy = DDPStrategy(process_group_backend=args.backend)
    else:
        strategy = ModelParallelStrategy(data_parallel_size=int(os.environ.get("WORLD_SIZE", 1)),
                                         tensor_parallel_size=1,
                                         process_group_backend=args.backend)
    trainer = L.Trainer(accelerator="cpu" if not torch.cuda.is_available() else "auto",
                        devices=int(os.environ.get("LOCAL_WORLD_SIZE", 1)), strategy=strategy,
                        max_steps=STEPS, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[RefGroup()])
    module = Regression(args.strategy == "fsdp2")
    trainer.fit(module, data(int(os.environ.get("RANK", 0))))
    stats = compressed_group().stats() if args.backend == "ccompress" else None
    if trainer.global_rank == 0:
        print(f"losses {['%.5f' % v for v in module.losses]}")
        if stats is not None:
            t = stats["total"]
            print(f"ccompress: {t['compressed']} of {t['calls']} calls compressed, "
                  f"{t['bytes_sent']} bytes sent where an exact ring sends {t['exact_bytes']}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"losses": module.losses, "stats": stats}, f)


if __name__ == "__main__":
    main()
