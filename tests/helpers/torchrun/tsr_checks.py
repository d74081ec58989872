"""Run under torchrun (tests/pytorch/test_torchrun.py launches it): ccompress.torch.tsr_adam.TSRAdam
with ``comm=None`` finds the world group's communicator (gloo point-to-point, no MPI) and
trains a small model on different data per rank. After every step the parameters, and at the
end the state every rank shares (moments, bases, step), are bit-identical on all ranks; the
core-space update is checked against the fp64 expansion of the averaged core. A checkpoint
through torch.save / torch.load(weights_only=True) resumes bit for bit what the
uninterrupted optimizer does. With CCOMPRESS_TRACE set, each optimizer's steps are spans on
a track of its own, their bytes all that the communicator sent. Prints "OK <rank>".
"""
import hashlib
import io
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

from ccompress.torch.tsr_adam import TSRAdam
from ccompress.compressors.tsr import TSR
from helpers.torch_backend.common import final_barrier

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)
dist.init_process_group("gloo")


def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()


def assert_identical(arrays, what):
    got = [None] * size
    dist.all_gather_object(got, digest(arrays))
    assert len(set(got)) == 1, f"{what}: ranks differ"


def model_and_opt(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.Tanh(), torch.nn.Linear(20, 8))
    tsr = TSR(rank=4, refresh_every=3, codec="fp8_e4m3:g128", sketch_codec="bf16",
              basis_ema=0.9, error_feedback=True)
    opt = TSRAdam(net.named_parameters(), None, tsr, lr=0.01, betas=(0.9, 0.95),
                  weight_decay={"0.weight": 0.1, "2.weight": 0.1}, scale=2.0)
    return net, opt


def step(net, opt, x):
    opt.zero_grad()
    net(x).square().mean().backward()
    opt.step()


def shared_state(opt):
    """What every rank must hold alike: moments, bases, step (not residuals/averages)."""
    s = opt.state_dict()["tsr_adam"]
    out = [np.asarray(s["tsr"]["step"])]
    for part in (s["tsr"]["u"], s["tsr"]["v"]):
        out += [part[k].numpy() for k in sorted(part)]
    for k in sorted(s["moments"]):
        m = s["moments"][k]
        out += [np.asarray(m["t"]), m["m"].numpy(), m["v"].numpy()]
    return out


rng = np.random.default_rng([7, rank])
xs = [torch.from_numpy(rng.standard_normal((6, 12)).astype(np.float32)) for _ in range(7)]
net, opt = model_and_opt()
assert opt.comm.transport == "tcp" and opt.comm.size == size, opt.comm
assert "mpi4py.MPI" not in sys.modules

for i, x in enumerate(xs[:4]):
    before = net[0].weight.detach().numpy().astype(np.float64)
    step(net, opt, x)
    assert_identical([p.detach().numpy() for p in net.parameters()], f"parameters, step {i}")
    # the matrix update is lr * (scale * U adam(core) V^T + wd W) of the averaged core
    st, tsr = opt.impl.state["0.weight"], opt.impl.tsr
    b1, b2 = opt.impl.betas
    m_hat = st["m"].astype(np.float64) / (1 - b1 ** st["t"])
    v_hat = st["v"].astype(np.float64) / (1 - b2 ** st["t"])
    upd = tsr.u["0.weight"].astype(np.float64) @ (m_hat / (np.sqrt(v_hat) + opt.impl.eps)) \
        @ tsr.v["0.weight"].astype(np.float64).T
    want = before * (1 - 0.01 * 0.1) - 0.01 * 2.0 * upd
    err = np.abs(net[0].weight.detach().numpy() - want).max()
    assert err <= 1e-6 * (1 + np.abs(want).max()), f"step {i}: update off by {err}"
assert_identical(shared_state(opt), "TSR-Adam state")

# checkpoint after 4 steps, then 3 more steps: resumed == uninterrupted, bit for bit
buf = io.BytesIO()
torch.save({"model": net.state_dict(), "opt": opt.state_dict()}, buf)
for x in xs[4:]:
    step(net, opt, x)
ck = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
net2, opt2 = model_and_opt(seed=1)  # other initial weights: all of it comes from the file
net2.load_state_dict(ck["model"])
opt2.load_state_dict(ck["opt"])
for x in xs[4:]:
    step(net2, opt2, x)
for (n, a), b in zip(net.named_parameters(), net2.parameters()):
    assert torch.equal(a, b), f"resumed {n} differs"
assert digest(shared_state(opt)) == digest(shared_state(opt2)), "resumed state differs"
assert_identical(shared_state(opt2), "resumed TSR-Adam state")

if os.environ.get("CCOMPRESS_TRACE"):  # a span per optimizer step, a track per optimizer
    import json

    with open(os.path.join(os.environ["CCOMPRESS_TRACE"], f"ccompress-trace-rank{rank}.json")) as f:
        events = json.load(f)
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert list(tracks.values()) == [f"ccompress TSR-Adam {t} (rank {rank} of {size})"
                                     for t in (1, 2)], tracks
    spans = [e for e in events if e["ph"] == "X"]
    assert [e["tid"] for e in spans] == [1] * 7 + [2] * 3, spans
    assert {e["name"] for e in spans} == {"tsr_adam step r4 fp8_e4m3:g128"}, spans
    numel = sum(p.numel() for p in net.parameters())
    assert all(e["args"]["numel"] == numel and e["args"]["bytes_sent"] > 0 and
               e["args"]["exact_bytes"] == 2 * (size - 1) * numel * 4 // size for e in spans)
    # the two optimizers' steps are all that the world communicator sent
    assert sum(e["args"]["bytes_sent"] for e in spans) == opt.comm.bytes_sent, spans

final_barrier()
print(f"OK {rank}", flush=True)
dist.destroy_process_group()
