"""PyTorch integration: the torch.distributed backend "ccompress" (registered on import:
``dist.init_process_group("ccompress")`` under torchrun runs unmodified DDP and FSDP2
scripts with compressed all_reduce / reduce_scatter_tensor / all_gather_into_tensor), a
DistributedDataParallel communication hook and Megatron-style tensor-parallel layers over
compressed ccompress all-reduces, GIFT (:mod:`ccompress.torch.gift`: whitened gradients
inside that hook, or in FSDP2's reduce-scatters on the backend:
``compressed_group().use_gift(gift)``), and TSR-Adam (:mod:`ccompress.torch.tsr_adam`).

    from ccompress.torch import ddp_comm_hook, tp_all_reduce
    model.register_comm_hook(state=None, hook=ddp_comm_hook(codec="hint8"))

Needs torch (``import ccompress`` itself never imports it). Every adapter finds the
communicator of its torch process group in every launch mode: under torchrun host tensors
travel over the group's gloo point-to-point (``Communicator.from_torch``), under mpiexec
over MPI, in one process as one rank; CUDA tensors go through the CUDA backend (NCCL, its
id through the group's store) on the current stream.
"""
try:
    import torch as _torch  # noqa: F401
except ImportError as _e:  # pragma: no cover - exercised only where torch is absent
    raise ImportError("ccompress.torch needs PyTorch: pip install torch "
                      "(ccompress itself works without it)") from _e

from ._common import init_process_group_from_mpi, world_communicator
from .ddp import CompressedAllreduceHook, ddp_comm_hook
from .gift import GIFT
from .tensor_parallel import ColumnParallelLinear, RowParallelLinear, tp_all_reduce, tp_copy
from .tsr_adam import TSRAdam

__all__ = [
    "ColumnParallelLinear", "CompressedAllreduceHook", "GIFT", "RowParallelLinear", "TSRAdam",
    "ddp_comm_hook", "init_process_group_from_mpi", "tp_all_reduce", "tp_copy",
    "world_communicator",
]

from . import backend as _backend
from ._options import BackendOptions
from .backend import CompressedProcessGroup, compressed_group

_backend.register()  # dist.init_process_group("ccompress")
__all__ += ["BackendOptions", "CompressedProcessGroup", "compressed_group"]
