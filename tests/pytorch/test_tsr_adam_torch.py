"""The PyTorch TSR-Adam (ccompress/torch/tsr_adam.py) against the NumPy one it wraps."""
import numpy as np
import pytest

import ccompress as cc
from ccompress.compressors.tsr import TSR
from ccompress.compressors.tsr_adam import NumpyTSRAdam

torch = pytest.importorskip("torch")
from ccompress.torch.tsr_adam import TSRAdam  # noqa: E402

P = 2


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Tanh(), torch.nn.Linear(24, 4))


def test_torch_steps_match_numpy_and_agree_across_ranks():
    rng = np.random.default_rng(3)
    xs = [torch.from_numpy(rng.standard_normal((P, 10, 16)).astype(np.float32)) for _ in range(4)]
    init = {n: p.detach().numpy().copy() for n, p in make_model(0).named_parameters()}
    # Built here, not in the rank threads: torch's global generator is not per thread.
    models = [make_model(0) for _ in range(P)]

    def torch_rank(comm):
        model = models[comm.rank]
        opt = TSRAdam(model.named_parameters(), comm, TSR(rank=3, refresh_every=2), lr=0.01,
                      weight_decay=0.1, scale=2.0)
        grads = []
        for x in xs:
            opt.zero_grad()
            model(x[comm.rank]).square().mean().backward()
            grads.append({n: p.grad.numpy().copy() for n, p in model.named_parameters()})
            opt.step()
        return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}, grads, \
            opt.state_dict()

    res = cc.run_inproc(P, torch_rank)
    for n in init:
        assert res[0][0][n].tobytes() == res[1][0][n].tobytes(), n

    def numpy_rank(comm):  # the same gradients through the NumPy optimizer
        params = {n: v.copy() for n, v in init.items()}
        opt = NumpyTSRAdam(params, TSR(rank=3, refresh_every=2), lr=0.01, weight_decay=0.1,
                           scale=2.0)
        for g in res[comm.rank][1]:
            opt.step(comm, g)
        return params

    ref = cc.run_inproc(P, numpy_rank)[0]
    for n in init:
        assert np.array_equal(res[0][0][n], ref[n]), n
    assert res[0][2]["tsr_adam"]["tsr"]["step"] == 4


def test_refuses_non_cpu_float32():
    model = torch.nn.Linear(4, 4).double()
    comm = cc.Communicator.inproc(1)[0]
    with pytest.raises(cc.Unsupported, match="float32 CPU"):
        TSRAdam(model.named_parameters(), comm)
