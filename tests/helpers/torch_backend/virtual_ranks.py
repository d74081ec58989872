"""The ``ccompress`` backend on virtual ranks: threads of this process, each with a
CompressedProcessGroup of its own over one shared HashStore, whose compressed calls run on
that thread's communicator (``comm=``). The same code runs on CPU tensors over
Communicator.inproc (tests/pytorch/test_torch_backend_virtual.py, in CI) and on CUDA tensors
over Communicator.cuda_loopback, the ranks sharing one GPU (tests/cuda/test_gpu_adapters.py,
perf/gpu_check.sh).

Each rank calls, through torch.distributed, the compressed collectives (all_reduce avg,
reduce_scatter_tensor sum, all_gather_into_tensor, all_to_all_single with uneven splits and
an empty piece, asynchronously, and all_to_all, the list form, whose outputs are written back
from a buffer after the collective) and one delegated call (all_reduce max, exact through
the inner gloo group). On CUDA they run on a side stream whose inputs are still being written by
kernels queued behind a spin kernel, and each result is doubled on that stream before any
host synchronisation: a call that ignored the caller's stream reads or leaves wrong bytes.
Checked: every result within its stated bound of the fp64 result (ccompress.bounds), the
all-gather's and all-to-all's parts bit for bit the sender's CPU encode + decode (the list
form's the single form's), the results bit-identical on every rank, the delegated max
exact, the counters (every compressed op compressed, fewer bytes than exact, all on the
given communicator), and the communicator still open after the group's shutdown."""
import contextlib
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

import ccompress as cc
from ccompress.bounds import allreduce_error_bound
from ccompress.torch import BackendOptions
from ccompress.torch.backend import CompressedProcessGroup
from helpers.alltoall_checks import check_received, inputs, piece, split_table
from helpers.common import same_bits
from helpers.torch_helpers import check_reduced, rank_tensor, to_numpy

TIMEOUT_S = 30  # a rank that fails leaves the others waiting this long, then they raise
N_REDUCE = 50_001  # odd: the chunks of two_shot differ in size
N_SHARD = 12_289  # elements of a reduce-scatter's output and of an all-gather's input
ROW = (4,)  # the all-to-all's rows


def _side_stream(device):
    """A context that makes a new stream current on CUDA (nothing on the CPU), and the
    function that waits for it."""
    if device == "cpu":
        return contextlib.nullcontext(), lambda: None
    s = torch.cuda.Stream()
    return torch.cuda.stream(s), s.synchronize


def _late(t, device):
    """``t`` on ``device``, written by a kernel queued on the current stream behind a spin of
    a few milliseconds on CUDA: a collective that does not wait for the caller's stream reads
    it before it is written."""
    if device == "cpu":
        return t.clone()
    x = t.to(device)
    torch.cuda._sleep(20_000_000)  # about 10 ms at 2 GHz
    return x * 1.0


def run_backend(run, size, device, codec):
    """The backend's collectives on ``size`` virtual ranks, checked (the module docstring).

    Parameters
    ----------
    run : callable
        ``run(size, fn, timeout=...)``: ``fn(comm)`` on one thread per rank, its results in
        rank order (cc.run_inproc, cc.run_cuda_loopback).
    size : int
        The ranks.
    device : {"cpu", "cuda"}
        Where the tensors live.
    codec : str
        The codec of every compressed op (no stochastic rounding).
    """
    store = dist.HashStore()
    opts = BackendOptions(all_reduce=codec, reduce_scatter=codec, all_gather=codec,
                          all_to_all=codec, algo="two_shot", error_feedback=False,
                          min_numel=1)
    table = split_table(np.random.default_rng(7), size, 300)
    pieces = inputs(11, table, row_shape=ROW)  # rank r's all-to-all input, rows of ROW

    def body(comm):
        r = comm.rank
        pg = CompressedProcessGroup(store, r, size, timedelta(seconds=TIMEOUT_S), opts,
                                    comm=comm)
        streamed, wait = _side_stream(device)
        try:
            with streamed:
                y = _late(rank_tensor(r, N_REDUCE, seed=1), device)
                dist.all_reduce(y, op=dist.ReduceOp.AVG, group=pg)
                shard = torch.empty(N_SHARD, device=device)
                dist.reduce_scatter_tensor(shard, _late(rank_tensor(r, size * N_SHARD, seed=2),
                                                        device), group=pg)
                gathered = torch.empty(size * N_SHARD, device=device)
                dist.all_gather_into_tensor(gathered, _late(rank_tensor(r, N_SHARD, seed=3),
                                                            device), group=pg)
                got = torch.full((int(table[:, r].sum()),) + ROW, float("nan"), device=device)
                work = dist.all_to_all_single(got, _late(torch.from_numpy(pieces[r]), device),
                                              table[:, r].tolist(), table[r].tolist(),
                                              group=pg, async_op=True)
                assert work.get_future().wait()[0] is got
                listed = [torch.full((int(k),) + ROW, float("nan"), device=device)
                          for k in table[:, r]]  # the list form: written back from a buffer
                dist.all_to_all(listed, [_late(torch.from_numpy(piece(pieces[r], table, r, j)),
                                               device) for j in range(size)], group=pg)
                listed = torch.cat(listed)
                most = _late(rank_tensor(r, 1000, seed=4), device)
                dist.all_reduce(most, op=dist.ReduceOp.MAX, group=pg)  # delegated: exact
                outs = [y, shard, gathered, got, most, listed]
                doubled = [t * 2 for t in outs]  # queued behind the collectives
            wait()
            stats = pg.stats()
            assert pg.communicator() is comm and pg.bytes_sent == comm.bytes_sent > 0
        finally:
            pg.shutdown()
        assert comm.usable, "the group closed the communicator it was given"
        return [to_numpy(t) for t in outs], [to_numpy(t) for t in doubled], stats

    res = run(size, body, timeout=TIMEOUT_S)
    for outs, doubled, _ in res:
        for k, (t, d) in enumerate(zip(outs, doubled)):
            assert not np.isnan(t).any(), f"result {k}: elements left unwritten (NaN)"
            assert np.array_equal(t * 2, d), f"result {k} was read before the collective wrote it"
    # all_reduce avg
    assert same_bits([o[0] for o, _, _ in res]), "all_reduce: ranks differ"
    check_reduced(torch.from_numpy(res[0][0][0]),
                  [rank_tensor(r, N_REDUCE, seed=1) for r in range(size)], codec, "two_shot",
                  op="avg", what=f"all_reduce avg {codec} on {device}")
    # reduce_scatter_tensor sum: rank r holds chunk r
    stack = np.stack([to_numpy(rank_tensor(r, size * N_SHARD, seed=2)) for r in range(size)])
    bound = allreduce_error_bound(stack, codec, "reduce_scatter")
    exact = stack.astype(np.float64).sum(axis=0)
    for r, (o, _, _) in enumerate(res):
        lo, hi = cc.chunk_range(size * N_SHARD, size, r)
        err = np.abs(o[1].astype(np.float64) - exact[lo:hi])
        assert np.all(err <= bound[lo:hi]), f"reduce_scatter rank {r}: {err.max()}"
    # all_gather_into_tensor: every part the sender's encode + decode, on every rank
    c = cc.Codec.parse(codec)
    for r in range(size):
        part = to_numpy(rank_tensor(r, N_SHARD, seed=3))
        for o, _, _ in res:
            got_part = o[2][r * N_SHARD:(r + 1) * N_SHARD]
            assert same_bits([got_part, c.roundtrip(part)]), f"all_gather part {r}"
            err = np.abs(got_part.astype(np.float64) - part)
            assert np.all(err <= allreduce_error_bound(part[None], codec, "one_shot"))
    assert same_bits([o[2] for o, _, _ in res]), "all_gather: ranks differ"
    # all_to_all_single: piece by piece the sender's encode + decode, within the bound
    for r, (o, _, _) in enumerate(res):
        check_received(o[3], pieces, table, codec, r)
        assert same_bits([o[5], o[3]]), "all_to_all (list form) differs from all_to_all_single"
    # the delegated max: exact
    want = np.max([to_numpy(rank_tensor(r, 1000, seed=4)) for r in range(size)], axis=0)
    for o, _, _ in res:
        assert np.array_equal(o[4], want), "all_reduce max (delegated)"
    for _, _, stats in res:
        for op in ("all_reduce", "reduce_scatter", "all_gather"):
            assert stats[op]["compressed"] == 1, (op, stats[op])
        assert stats["all_to_all"]["compressed"] == 2, stats["all_to_all"]
        assert stats["all_reduce"]["delegated"]["op"] == 1, stats["all_reduce"]
        assert 0 < stats["total"]["bytes_sent"] < stats["total"]["exact_bytes"], stats["total"]
