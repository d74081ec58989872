"""The ``ccompress`` backend's ops that are always the inner gloo (NCCL for CUDA) group's own:
exact, its result and its Work, through the group's runner (which refuses them after a
failed collective)."""
from __future__ import annotations

import torch.distributed as dist


class Delegating:
    """The pass-through ops of :class:`ccompress.torch.backend.CompressedProcessGroup`
    (``self._runner`` and ``self._inner`` are the group's)."""

    # Every op that torch's ProcessGroup trampoline routes to Python is overridden here,
    # even where it only delegates: the trampoline calls the base class with the GIL held
    # when Python has no override, and gloo, which may need the GIL while it holds its
    # queue lock (freeing a finished Work's tensors), then deadlocks. Calling the inner
    # group from Python releases the GIL first.
    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._runner.delegate(lambda: self._inner.all_gather_single_coalesced(
            outputs, inputs, opts or dist.AllgatherOptions()))

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._runner.delegate(lambda: self._inner.reduce_scatter_single_coalesced(
            outputs, inputs, opts or dist.ReduceScatterOptions()))

    def start_coalescing(self, device):
        self._runner.check_usable()
        self._inner._start_coalescing(device)

    def end_coalescing(self, device):
        return self._runner.delegate(lambda: self._inner._end_coalescing(device))

    def allreduce_coalesced(self, tensors, opts=None):
        return self._runner.delegate(lambda: self._inner.allreduce_coalesced(tensors, opts))

    def allgather(self, outputs, inputs, opts=None):
        return self._runner.delegate(lambda: self._inner.allgather(outputs, inputs, opts))

    def broadcast(self, tensors, opts=None):
        return self._runner.delegate(lambda: self._inner.broadcast(tensors, opts))

    def barrier(self, opts=None):
        return self._runner.delegate(lambda: self._inner.barrier(opts))

    def reduce_scatter(self, outputs, inputs, opts=None):
        return self._runner.delegate(lambda: self._inner.reduce_scatter(outputs, inputs, opts))

    def send(self, tensors, dst, tag=0):
        return self._runner.delegate(lambda: self._inner.send(tensors, dst, tag))

    def recv(self, tensors, src, tag=0):
        return self._runner.delegate(lambda: self._inner.recv(tensors, src, tag))
