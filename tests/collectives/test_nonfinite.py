"""The NaN/Inf policy for every codec and schedule: a non-finite input reaches exactly the
outputs of its own element, or at most of the scale group / rotation block the codec states,
never the rest of the tensor; it is counted in last_stats; nonfinite="raise" raises
NonFiniteError on every rank."""
import numpy as np
import pytest

import ccompress as cc
from helpers.common import same_bits

P, N = 4, 4 * 4096  # chunk boundaries at multiples of 4096: every block is whole
# codec -> elements one non-finite input may turn non-finite (an aligned block), as stated
# in README "Guarantees" and at each codec's definition.
EXTENT = {
    "none": 1, "bf16": 1, "fp16": 1,
    "fp8_e4m3:g128": 1, "fp8_e5m2:g64": 1, "nvfp4": 1,  # scale from the finite values only
    "taco:g128": 128, "taco_e5m2:g32": 32,              # the group's (a, s) become NaN
    "hint8": 128, "hint8:g32:h256:s16": 256,            # the rotation block
    "hnvfp4:g16": 16, "hint4": 16, "hint4:g32:h64": 64,
    "mxfp8": 1, "mxfp8_e5m2": 1, "mxfp4": 1,  # E8M0 block scales from the finite values only
}
ALGOS = ["ring", "two_shot", "tree", "one_shot"]
# (rank, index, value): NaN alone; +Inf and -Inf in neighbours (one block for extent > 1);
# +Inf from two ranks in one element.
BAD = [(1, 5000, np.nan), (2, 9000, np.inf), (3, 9001, -np.inf), (0, 13000, np.inf),
       (2, 13000, np.inf)]


def make_parts(rng):
    parts = (rng.standard_normal((P, N)) * np.exp(rng.standard_normal((P, 1)))).astype(np.float32)
    clean = parts.copy()
    for r, i, v in BAD:
        parts[r, i] = v
    return parts, clean


def regions(extent):
    mask = np.zeros(N, bool)
    for _, i, _ in BAD:
        lo = i // extent * extent
        mask[lo:lo + extent] = True
    return mask


def run(parts, codec, algo, **kw):
    def body(c):
        y = c.allreduce(parts[c.rank], codec=codec, algo=algo, **kw)
        return y, c.last_stats

    return cc.run_inproc(P, body)


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("codec", sorted(EXTENT))
def test_nonfinite_stays_in_its_block(rng, codec, algo):
    parts, clean = make_parts(rng)
    mask = regions(EXTENT[codec])
    res = run(parts, codec, algo)
    ys = [y for y, _ in res]
    assert same_bits(ys)
    y = ys[0]
    bad_out = ~np.isfinite(y)
    assert bad_out[[i for _, i, _ in BAD]].all(), "a non-finite input must not vanish"
    assert not bad_out[~mask].any(), np.flatnonzero(bad_out & ~mask)[:10]
    # Outside the affected blocks the result is exactly that of the same inputs with those
    # blocks zeroed: nothing else saw the NaN/Inf (no scale, no sum, no rotation).
    ref_parts = clean.copy()
    ref_parts[:, mask] = 0
    ref = run(ref_parts, codec, algo)[0][0]
    assert np.array_equal(y[~mask].view(np.uint32), ref[~mask].view(np.uint32))
    if EXTENT[codec] == 1 and codec not in ("fp8_e4m3:g128", "nvfp4", "mxfp8", "mxfp4"):
        # Formats with an Inf keep the sign of a lone +-Inf; +Inf + -Inf is NaN.
        assert np.isnan(y[5000]) and y[9000] == np.inf and y[9001] == -np.inf
        assert y[13000] == np.inf
    for r, (_, st) in enumerate(res):
        assert st["nonfinite_in"] == sum(1 for rr, _, _ in BAD if rr == r)
        assert st["nonfinite_out"] == int(bad_out.sum())


@pytest.mark.parametrize("codec", ["fp8_e4m3:g128", "taco:g128", "hint8"])
def test_reduce_scatter_and_allgather(rng, codec):
    parts, _ = make_parts(rng)
    ext = EXTENT[codec]

    def body(c):
        rs = c.reduce_scatter(parts[c.rank], codec=codec)
        rs_stats = c.last_stats
        ag = c.allgather(parts[c.rank], codec=codec)
        return rs, rs_stats, ag, c.last_stats

    res = cc.run_inproc(P, body)
    rs = np.concatenate([r[0] for r in res])
    mask = regions(ext)
    assert (~np.isfinite(rs))[[i for _, i, _ in BAD]].all() and np.isfinite(rs[~mask]).all()
    assert [r[1]["nonfinite_out"] for r in res] == [int((~np.isfinite(r[0])).sum()) for r in res]
    assert same_bits([r[2] for r in res])
    ag = res[0][2]
    for r in range(P):
        own = np.zeros(N, bool)
        for rr, i, _ in BAD:
            if rr == r:
                own[i // ext * ext:i // ext * ext + ext] = True
        assert np.isfinite(ag[r][~own]).all()
        assert (~np.isfinite(ag[r][own])).any() == own.any()
    assert all(r[3]["nonfinite_out"] == int((~np.isfinite(ag)).sum()) for r in res)


@pytest.mark.parametrize("what", ["allreduce", "reduce_scatter", "allgather"])
def test_raise_mode_raises_on_every_rank(rng, what):
    parts, clean = make_parts(rng)
    only_rank1 = clean.copy()
    only_rank1[1, 7] = np.nan  # lands in rank 0's reduce-scatter chunk only

    def body(c):
        call = getattr(c, what)
        y = call(clean[c.rank], codec="fp8_e4m3:g128")  # finite: no error
        assert np.isfinite(y).all() and c.last_stats["nonfinite_out"] == 0
        with pytest.raises(cc.NonFiniteError, match="non-finite") as e:
            call(only_rank1[c.rank], codec="fp8_e4m3:g128")
        assert c.last_stats["nonfinite_in"] == (1 if c.rank == 1 else 0)
        # The per-call option overrides the communicator's, and the group is still usable.
        y = call(only_rank1[c.rank], codec="fp8_e4m3:g128", nonfinite="propagate")
        return str(e.value), int((~np.isfinite(y)).sum())

    res = cc.run_inproc(P, body, nonfinite="raise")
    assert len(res) == P and all("nonfinite='raise'" in msg for msg, _ in res)


def test_bad_nonfinite_option():
    with pytest.raises(cc.InvalidArgument, match="propagate"):
        cc.Communicator.inproc(1, nonfinite="ignore")
    c = cc.Communicator.inproc(1)[0]
    with pytest.raises(cc.InvalidArgument, match="propagate"):
        c.allreduce(np.ones(4, np.float32), nonfinite="zero")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_count_nonfinite_matches_numpy(rng, dtype):
    from ccompress import _core
    from ccompress._internal.arrays import numpy_dtype

    x = rng.standard_normal(1001).astype(numpy_dtype(dtype))
    assert _core.count_nonfinite(x.ctypes.data, dtype, x.size) == (0, -1)
    x[[17, 500, 999]] = [np.nan, np.inf, -np.inf]
    assert _core.count_nonfinite(x.ctypes.data, dtype, x.size) == (3, 17)


@pytest.mark.parametrize("auto", ["auto8", "auto4"])
def test_auto_codec_choice_ignores_nonfinite(rng, auto):
    """A NaN/Inf does not change which codec auto8/auto4 pick, and then stays in that
    codec's block."""
    parts, clean = make_parts(rng)
    picked = {}
    for name, p in (("clean", clean), ("bad", parts)):
        res = cc.run_inproc(P, lambda c: (c.allreduce(p[c.rank], codec=auto), c.last_stats))
        picked[name] = res[0][1]["codec"]
        y = res[0][0]
    assert picked["bad"] == picked["clean"]
    ext = cc.Codec.parse(picked["bad"])._c.rotation or 1
    assert not (~np.isfinite(y))[~regions(ext)].any()
