"""ccompress.torch.GIFT inside the DDP communication hook, on in-process ranks (threads) with
DDP's bucket interface: the whitening round trip against fp64, the lossy result against its
bound, identical state on every rank, checkpoints, and parity with the plain hook. Real
DistributedDataParallel under torchrun: tests/helpers/torchrun/adapter_checks.py (section 6)."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the ccompress.torch "
                                            "tests need it; ccompress itself does not)")

import ccompress as cc  # noqa: E402
from ccompress.bounds import allreduce_error_bound  # noqa: E402
from ccompress.torch import GIFT, ddp_comm_hook  # noqa: E402
from helpers.torch_helpers import same_bits  # noqa: E402

N = 4
EPS32 = 2.0 ** -24


class GiftBucket:
    """What DDP hands a hook, with the per-parameter interface GIFT reads: the flat buffer
    holds the parameters' gradients back to back in ``parameters()`` order."""

    def __init__(self, params, index, last):
        self._params, self._index, self._last = params, index, last
        self._buffer = torch.cat([p.grad.reshape(-1) for p in params])

    def buffer(self):
        return self._buffer

    def index(self):
        return self._index

    def is_last(self):
        return self._last

    def parameters(self):
        return list(self._params)

    def gradients(self):
        out, at = [], 0
        for p in self._params:
            out.append(self._buffer.narrow(0, at, p.numel()).view(p.shape))
            at += p.numel()
        return out


def make_model():
    """The same weights on every rank and every call (a local generator: the threads of
    run_inproc share torch's global one)."""
    model = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 40))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def rank_input(rank, step):
    """Rank ``rank``'s batch at ``step``: correlated features (the case GIFT is for)."""
    g = torch.Generator().manual_seed(100 * step + rank)
    mix = torch.randn(48, 48, generator=torch.Generator().manual_seed(7)) / 7
    x = torch.randn(32, 48, generator=g) @ (torch.eye(48) + mix)
    return x * torch.linspace(0.1, 3.0, 48)


def bucket_params(model):
    """The parameters of the two buckets: reverse parameter order, as DDP builds them."""
    ps = list(model.parameters())[::-1]
    return [ps[:2], ps[2:]]


def buckets_of(model):
    """Two buckets of the model's gradients."""
    return [GiftBucket(ps, i, i == 1) for i, ps in enumerate(bucket_params(model))]


def step(model, hook, rank, k):
    """One training step's gradients through the hook: the averaged bucket buffers."""
    model.zero_grad()
    model(rank_input(rank, k)).square().mean().backward()
    bs = buckets_of(model)
    return [hook(None, b).wait().clone() for b in bs], bs


def local_buffers(rank, k):
    """This rank's own bucket buffers at step ``k`` (no hook), to build references from."""
    model = make_model()
    model(rank_input(rank, k)).square().mean().backward()
    return [b.buffer().clone() for b in buckets_of(model)]


def dense_factor(gift, name):
    """L of layer ``name`` as a dense float64 matrix (the transform is G -> G L^-T)."""
    return gift.core.factors[name].dense()


def transform_rounding(n, r):
    """c of one float32 transform of a row h (width n, factor rank r): h -> h M^(+-1) =
    h + ((h Q) * f) Q^T with orthonormal Q (n x r) and |f| <= max(1, ||M||), by the
    elementwise bound |fl(AB) - AB| <= k 2^-24 |A||B| (k the inner width), which per row
    gives ||fl(h Q) - h Q|| <= n 2^-24 sqrt(r) ||h|| and ||fl(s Q^T) - s Q^T|| <=
    (r + 1) 2^-24 sqrt(r) ||s||, plus the scaling by d: error <= c 2^-24 ||h|| ||M||."""
    return n * np.sqrt(r) + (r + 1) * (1 + np.sqrt(r)) + 2


def test_whitening_round_trip_matches_fp64():
    """Codec "none", every layer whitened: the hook returns the fp64 average of the ranks'
    gradients. Bound, per layer, with L = D^1/2 M (rank r, width n), c = transform_rounding:
    - each rank's float32 transform G -> G L^-T errs by <= c 2^-24 ||D^-1/2|| ||G_r||_F,
      which L^T maps back (x ||L||);
    - the wire rounds that to fl32 (2^-24 relative), the exact sum adds N roundings, L^T
      maps them back: (N + 1) 2^-24 cond(L) mean_r ||G_r||_F;
    - the float32 transform back H -> H L^T errs by <= c 2^-24 ||H||_F ||M|| ||D^1/2||, and
      its result is rounded once more (2^-24 ||avg||_F);
    so ||out - avg||_F <= [(N + 1) cond(L) + c ||D^-1/2|| ||L||] 2^-24 mean_r ||G_r||_F
    + c 2^-24 ||avg L^-T||_F ||M|| ||D^1/2|| + 2^-24 ||avg||_F, times (1 + 1e-6)."""
    def body(comm):
        model = make_model()
        gift = GIFT(model, rank=8, refresh_every=1, select=False)
        hook = ddp_comm_hook("none", error_feedback=False, comm=comm, gift=gift)
        outs, _ = step(model, hook, comm.rank, 0)
        dsqrt = {n: gift.core.factors[n].dsqrt for n in gift.layers}
        return outs, {n: dense_factor(gift, n) for n in gift.layers}, dict(gift.treated), dsqrt

    res = cc.run_inproc(N, body)
    outs, factors, treated, dsqrt = res[0]
    assert all(treated.values()) and len(treated) == 2
    parts = [local_buffers(r, 0) for r in range(N)]
    checked = 0
    for b, out in enumerate(outs):
        ref = np.mean([p[b].double().numpy() for p in parts], axis=0)
        assert same_bits([r[0][b] for r in res]), f"bucket {b}: ranks differ"
        model = make_model()
        params = bucket_params(model)[b]
        names = {id(m.weight): n for n, m in model.named_modules()
                 if isinstance(m, torch.nn.Linear)}
        at = 0
        for p in params:
            n = p.numel()
            got = out[at:at + n].double().numpy()
            want = ref[at:at + n]
            if id(p) in names:
                lmat, d = factors[names[id(p)]], dsqrt[names[id(p)]]
                cond, c = np.linalg.cond(lmat), transform_rounding(p.shape[-1], 8)
                m_norm = np.linalg.norm(lmat / d[:, None], 2)
                norms = np.mean([np.linalg.norm(q[b][at:at + n].double().numpy())
                                 for q in parts])
                wire = np.linalg.norm(np.linalg.solve(lmat, want.reshape(p.shape).T))
                bound = ((N + 1) * cond + c * np.linalg.norm(lmat, 2) / d.min()) * EPS32 * \
                    norms + c * EPS32 * wire * m_norm * d.max() + EPS32 * np.linalg.norm(want)
                bound *= 1 + 1e-6
                err = np.linalg.norm(got - want)
                assert err <= bound, f"{names[id(p)]}: error {err:.3g} > bound {bound:.3g}"
                assert cond > 2, "the test's factor must not be near the identity"
                checked += 1
            else:  # biases travel as they are: the exact codec's average
                assert np.allclose(got, want, rtol=0, atol=N * EPS32 * np.abs(want).max())
            at += n
    assert checked == 2


def test_lossy_gift_within_its_bound():
    """nvfp4 without error feedback: each whitened weight's result errs from the fp64
    average by at most the codec's all-reduce bound on the whitened inputs mapped back
    through L^T: |E L^T|_ij <= (B |L|^T)_ij, plus fp32 rounding of the transforms."""
    def body(comm):
        model = make_model()
        gift = GIFT(model, rank=8, refresh_every=1, select=False)
        hook = ddp_comm_hook("nvfp4", error_feedback=False, comm=comm, algo="two_shot",
                             gift=gift)
        outs, _ = step(model, hook, comm.rank, 0)
        return outs, {n: dense_factor(gift, n) for n in gift.layers}

    res = cc.run_inproc(N, body)
    outs, factors = res[0]
    parts = [local_buffers(r, 0) for r in range(N)]
    model = make_model()
    names = {id(m.weight): n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    worst = 0.0
    for b, out in enumerate(outs):
        assert same_bits([r[0][b] for r in res]), f"bucket {b}: ranks differ"
        stack = np.stack([p[b].double().numpy() for p in parts])
        ref, at = stack.mean(0), 0
        # The wire: every rank's whitened bucket (biases as they are), as the hook sent it.
        wire = stack.copy()
        layers = []
        for p in bucket_params(model)[b]:
            n = p.numel()
            if id(p) in names:
                lmat = factors[names[id(p)]]
                g = wire[:, at:at + n].reshape(N, p.shape[0], -1)
                wire[:, at:at + n] = (g @ np.linalg.inv(lmat).T).reshape(N, -1)
                layers.append((at, n, p.shape, lmat))
            at += n
        bound = allreduce_error_bound(wire.astype(np.float32), "nvfp4", "two_shot", op="avg")
        for at, n, shape, lmat in layers:
            bw = bound[at:at + n].reshape(shape[0], -1)
            b_out = bw @ np.abs(lmat).T + 64 * EPS32 * np.abs(ref[at:at + n]).max()
            err = np.abs(out[at:at + n].double().numpy() - ref[at:at + n]).reshape(shape[0], -1)
            assert np.all(err <= b_out), f"layer at {at}: error {(err / b_out).max():.3g}x bound"
            worst = max(worst, float((err / b_out).max()))
    assert 0 < worst <= 1


def test_state_identical_on_every_rank_and_selection():
    """Moments, factors, the whitened layers and the selection table: the same bits on every
    rank, although each rank saw its own data; the selection whitens a layer only where the
    measured error falls."""
    def body(comm):
        model = make_model()
        gift = GIFT(model, rank=8, refresh_every=2, sketch=16)
        hook = ddp_comm_hook("nvfp4", comm=comm, algo="two_shot", gift=gift)
        for k in range(3):
            step(model, hook, comm.rank, k)
        core = gift.core
        blob = b"".join(core.second_moment[n].tobytes() + core.factors[n].q.tobytes()
                        for n in sorted(core.second_moment))
        return blob, dict(gift.treated), copy.deepcopy(gift.selection), gift.step

    res = cc.run_inproc(N, body)
    assert len({r[0] for r in res}) == 1, "GIFT statistics differ between ranks"
    assert all(r[1:] == res[0][1:] for r in res), "selection differs between ranks"
    treated, table, steps = res[0][1:]
    assert steps == 3 and set(table) == {"0", "2"}
    for name, row in table.items():
        assert row["step"] == 2  # refreshed at steps 0 and 2
        assert treated[name] == (row["err_plain"] > row["err_gift"]) == row["selected"]


def test_checkpoint_round_trip_gives_the_same_next_step():
    """state_dict after 3 steps (GIFT's moments and selection, the residuals in whitened
    coordinates) -> a new model, GIFT and hook -> the 4th step's bits equal the original's."""
    def body(comm):
        model = make_model()
        gift = GIFT(model, rank=8, refresh_every=2)
        hook = ddp_comm_hook("nvfp4", comm=comm, algo="two_shot", gift=gift)
        for k in range(3):
            step(model, hook, comm.rank, k)
        state = copy.deepcopy(hook.state_dict())
        fresh = make_model()
        hook2 = ddp_comm_hook("nvfp4", comm=comm, algo="two_shot",
                              gift=GIFT(fresh, rank=8, refresh_every=2))
        hook2.load_state_dict(state)
        a, _ = step(model, hook, comm.rank, 3)
        b, _ = step(fresh, hook2, comm.rank, 3)
        # Step 4 is a refresh step: the EMA and the residual remap must carry over too.
        a2, _ = step(model, hook, comm.rank, 4)
        b2, _ = step(fresh, hook2, comm.rank, 4)
        unsaved = ddp_comm_hook("nvfp4", comm=comm, algo="two_shot",
                                gift=GIFT(make_model(), rank=8, refresh_every=2))
        c, _ = step(make_model(), unsaved, comm.rank, 3)
        return a + a2, b + b2, c, state

    for a, b, c, state in cc.run_inproc(N, body):
        assert all(torch.equal(x, y) for x, y in zip(a, b)), \
            f"restored GIFT hook differs: {[torch.equal(x, y) for x, y in zip(a, b)]}"
        assert not all(torch.equal(x, y) for x, y in zip(a[:2], c)), \
            "the state must matter (a fresh hook should differ)"
        assert state["gift"]["step"] == 3 and state["error_feedback"]


def test_gift_hook_with_exact_codec_matches_plain_averaging():
    """Hook parity: with codec "none" and every layer whitened, the GIFT hook equals the
    plain hook's average within the round trip's bound (stated in
    test_whitening_round_trip_matches_fp64; here relative 1e-4 of each bucket's largest
    gradient, cond(L) being below 100 for this model); the selection keeps every layer
    unwhitened under "none" (nothing to gain), so the hook is then bit-identical."""
    def body(comm):
        plain = ddp_comm_hook("none", error_feedback=False, comm=comm, algo="two_shot")
        m1, m2, m3 = make_model(), make_model(), make_model()
        forced = ddp_comm_hook("none", error_feedback=False, comm=comm, algo="two_shot",
                               gift=GIFT(m2, rank=8, refresh_every=1, select=False))
        g3 = GIFT(m3, rank=8, refresh_every=1)
        chosen = ddp_comm_hook("none", error_feedback=False, comm=comm, algo="two_shot",
                               gift=g3)
        return (step(m1, plain, comm.rank, 0)[0], step(m2, forced, comm.rank, 0)[0],
                step(m3, chosen, comm.rank, 0)[0], dict(g3.treated))

    for p, f, c, treated in cc.run_inproc(N, body):
        assert not any(treated.values())
        for x, y, z in zip(p, f, c):
            assert torch.equal(x, z)
            tol = 1e-4 * float(x.abs().max())
            assert float((x - y).abs().max()) <= tol
            assert not torch.equal(x, y)  # the transform ran (fp32 rounding differs)


def test_overlapped_steps_match_the_calling_thread():
    """Between refreshes the hook whitens in the calling thread and overlaps the all-reduce
    and the map back with backward (ccompress's worker thread); with async_op=False all of
    it runs in the calling thread. Both give the same bits at every step, refreshes (steps
    0 and 2) included, with nvfp4 and error feedback in whitened coordinates."""
    def body(comm):
        outs = []
        for async_op in (None, False):
            model = make_model()
            gift = GIFT(model, rank=8, refresh_every=2, select=False)
            hook = ddp_comm_hook("nvfp4", comm=comm, algo="two_shot", gift=gift,
                                 async_op=async_op)
            outs.append([step(model, hook, comm.rank, k)[0] for k in range(4)])
            assert gift.step == 4 and all(gift.treated.values())
        return outs

    for overlapped, inline in cc.run_inproc(N, body):
        for k, (a, b) in enumerate(zip(overlapped, inline)):
            assert all(torch.equal(x, y) for x, y in zip(a, b)), f"step {k} differs"


def test_settings_that_differ_between_ranks_raise_on_every_rank():
    """GIFT settings that differ between ranks would whiten each rank's gradient through
    another factor before the sum: a wrong result, silently. The hook's first bucket
    compares them over its communicator and every rank raises MismatchError naming each
    differing setting with its ranks; the same settings everywhere pass (the other tests)."""
    def body(comm):
        model = make_model()
        gift = GIFT(model, rank=4 if comm.rank == 3 else 8, refresh_every=2,
                    damping=0.1 if comm.rank == 1 else 0.3)
        hook = ddp_comm_hook("nvfp4", comm=comm, algo="two_shot", gift=gift)
        with pytest.raises(cc.MismatchError) as e:
            step(model, hook, comm.rank, 0)
        return str(e.value), gift.step

    for msg, steps in cc.run_inproc(N, body):
        assert "GIFT rank is 8 on ranks [0, 1, 2], 4 on ranks [3]" in msg, msg
        assert "GIFT damping is 0.3 on ranks [0, 2, 3], 0.1 on ranks [1]" in msg, msg
        assert "GIFT ema" not in msg and steps == 0, msg


def test_fsdp2_gift_refuses_an_auto_reduce_scatter_codec():
    """use_gift binds GIFT's selection to the group's reduce_scatter codec, so an ``auto``
    one (chosen only at the first call) is refused with a typed error naming it."""
    from types import SimpleNamespace

    from ccompress.torch import _gift_fsdp

    for spec in ("auto", "auto:nvfp4"):
        pg = SimpleNamespace(options=SimpleNamespace(reduce_scatter=spec))
        with pytest.raises(cc.Unsupported, match="fixed reduce_scatter codec"):
            _gift_fsdp.settings(pg, GIFT(make_model()))
    pg = SimpleNamespace(options=SimpleNamespace(reduce_scatter="nvfp4"))
    assert _gift_fsdp.settings(pg, GIFT(make_model()))["codec"] == "nvfp4"


def test_gift_errors():
    with pytest.raises(cc.InvalidArgument, match="nn.Module"):
        GIFT(object())
    with pytest.raises(cc.InvalidArgument, match="no nn.Linear"):
        GIFT(torch.nn.Sequential(torch.nn.GELU()))
    with pytest.raises(cc.InvalidArgument, match="not nn.Linear"):
        GIFT(make_model(), layers=["1"])
    with pytest.raises(cc.InvalidArgument, match="refresh_every"):
        GIFT(make_model(), refresh_every=0)
    with pytest.raises(cc.InvalidArgument, match="min_gain"):
        GIFT(make_model(), min_gain=0.5)
    with pytest.raises(cc.Unsupported, match="fixed codec"):
        ddp_comm_hook("auto4", error_feedback=False, gift=GIFT(make_model()))
    gift = GIFT(make_model())
    ddp_comm_hook("nvfp4", gift=gift)
    with pytest.raises(cc.InvalidArgument, match="one GIFT per hook"):
        ddp_comm_hook("hint4", gift=gift)
    with pytest.raises(cc.InvalidArgument, match="not a ccompress.torch.GIFT"):
        gift.load_state_dict({"step": 1})
    other = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(cc.InvalidArgument, match="does not hook"):
        GIFT(other).load_state_dict(GIFT(make_model()).state_dict() | {
            "core": {**gift.core.state_dict(), "second_moment": {"9": np.eye(2)}}})
    assert GIFT(make_model(), layers=lambda n, m: n == "2").layers == ["2"]


def test_output_side_gift_round_trip():
    """output_side=True: the backward hooks feed S = E[delta delta^T], the layers get both
    K-FAC factors (Kronecker), and with codec "none" the hook still returns the plain
    average within 1e-4 of each bucket's largest gradient (two fp32 transforms, cond(L_A)
    cond(L_S) below 10^3 here); the ranks agree bit for bit."""
    def body(comm):
        plain = ddp_comm_hook("none", error_feedback=False, comm=comm, algo="two_shot")
        m1, m2 = make_model(), make_model()
        gift = GIFT(m2, rank=8, refresh_every=1, select=False, output_side=True)
        hooked = ddp_comm_hook("none", error_feedback=False, comm=comm, algo="two_shot",
                               gift=gift)
        out = step(m1, plain, comm.rank, 0)[0], step(m2, hooked, comm.rank, 0)[0]
        kinds = {n: type(f).__name__ for n, f in gift.core.factors.items()}
        return out, kinds, sorted(gift.core.output_moment)

    res = cc.run_inproc(N, body)
    for (p, h), kinds, outs in res:
        assert kinds == {"0": "Kronecker", "2": "Kronecker"} and outs == ["0", "2"]
        for x, y in zip(p, h):
            assert float((x - y).abs().max()) <= 1e-4 * float(x.abs().max())
            assert not torch.equal(x, y)
    for b in range(2):
        assert same_bits([r[0][1][b] for r in res])
