"""The ``ccompress`` backend on virtual ranks, threads of this process, each group running its
compressed calls on its thread's Communicator.inproc (``comm=``): the CPU twin of
tests/cuda/test_gpu_adapters.py::test_torch_cuda_backend_on_virtual_ranks, the same harness
(helpers/torch_backend/virtual_ranks.py) on CPU tensors. And ``comm=`` refused, on every
rank alike, where it is given on some ranks only or belongs to another rank."""
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the ccompress.torch "
                                            "tests need it; ccompress itself does not)")
import torch.distributed as dist  # noqa: E402

import ccompress as cc  # noqa: E402
from ccompress._internal.ranks import on_threads  # noqa: E402
from ccompress.torch.backend import CompressedProcessGroup  # noqa: E402
from helpers.torch_backend.virtual_ranks import run_backend  # noqa: E402
from helpers.torch_helpers import no_deprecated_calls_by_ccompress  # noqa: E402


@pytest.mark.parametrize("size,codec", [(2, "hint8"), (3, "fp8_e4m3:g128")])
def test_backend_collectives_on_virtual_ranks(size, codec):
    """Also: nothing the backend calls in torch is deprecated in the installed torch (the
    harness's own calls of torch.distributed may be)."""
    with no_deprecated_calls_by_ccompress():
        run_backend(cc.run_inproc, size, "cpu", codec)


def _refused(comm_of):
    """What each of 2 ranks raises making its group with ``comm=comm_of(comms, rank)``."""
    store = dist.HashStore()
    comms = cc.Communicator.inproc(2)

    def body(_, r):
        try:
            CompressedProcessGroup(store, r, 2, timedelta(seconds=20), comm=comm_of(comms, r))
        except cc.MismatchError as e:
            return str(e)
        finally:
            comms[r].close()
        raise AssertionError(f"rank {r} made the group")

    return on_threads(comms, body)


def test_comm_given_on_some_ranks_only_fails_on_every_rank():
    errors = _refused(lambda comms, r: comms[r] if r == 0 else None)
    for e in errors:
        assert "the communicator (comm=) is 'given (inproc)' on ranks [0], " \
               "'made over the store' on ranks [1]" in e, e


def test_comm_of_another_rank_fails_on_every_rank():
    errors = _refused(lambda comms, r: comms[1 - r])
    for r, e in enumerate(errors):
        assert f"communicator is rank {1 - r} of 2, but this ccompress process group is " \
               f"rank {r} of 2" in e, e
