"""The Python seam of the collectives: one keyword-only signature order for the three, one
place that validates a call's kind, algo and op (the C++ CallSpec, before any data moves),
and one binding (rank.run) that host and device backends share."""
import inspect

import numpy as np
import pytest

import ccompress as cc
from ccompress import _core

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather")
ORDER = ["codec", "algo", "intra_codec", "inter_algo", "op", "out", "async_op", "stream", "step",
         "nonfinite", "error_feedback"]


def one_rank():
    return cc.Communicator.inproc(1)[0]


@pytest.mark.parametrize("name", COLLECTIVES)
def test_everything_after_the_tensor_is_keyword_only_in_one_order(name):
    params = list(inspect.signature(getattr(cc.Communicator, name)).parameters.values())
    assert [p.name for p in params[:2]] == ["self", "x"]
    rest = params[2:]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in rest), name
    names = [p.name for p in rest]
    assert names == [n for n in ORDER if n in names], names
    assert names[0] == "codec"
    with pytest.raises(TypeError):
        getattr(one_rank(), name)(np.ones(4, np.float32), "bf16")


def test_algo_and_op_apply_only_where_they_mean_something():
    sig = {n: inspect.signature(getattr(cc.Communicator, n)).parameters for n in COLLECTIVES}
    assert "algo" in sig["allreduce"] and "op" in sig["allreduce"]
    # reduce_scatter and allgather have one flat schedule; algo is for "hier" only there.
    assert sig["reduce_scatter"]["algo"].default is None and "op" in sig["reduce_scatter"]
    assert sig["allgather"]["algo"].default is None and "op" not in sig["allgather"]
    with pytest.raises(cc.InvalidArgument, match="algo applies to allreduce only"):
        _core.CallSpec("reduce_scatter", algo="ring")
    assert _core.CallSpec("allgather", algo="hier", ranks_per_node=2).algo == "hier"
    with pytest.raises(cc.InvalidArgument, match="op does not apply"):
        _core.CallSpec("allgather", op="sum")
    with pytest.raises(cc.InvalidArgument, match="unknown collective"):
        _core.CallSpec("broadcast")
    s = _core.CallSpec("allreduce", algo="tree", op="avg")
    assert (s.kind, s.algo, s.op) == ("allreduce", "tree", "avg")


@pytest.mark.parametrize("kw,match", [({"algo": "fastest"}, "unknown algo 'fastest'"),
                                      ({"op": "max"}, "unknown op 'max'")])
def test_bad_algo_or_op_raises_before_anything_moves(kw, match):
    """Refused by the C++ parse at the call, before any data moves or the step is taken:
    the communicator stays usable and numbers its next call as if nothing had happened."""
    parts = [np.random.default_rng(r).standard_normal(1000).astype(np.float32) for r in range(2)]

    def body(c, bad):
        if bad:
            with pytest.raises(cc.InvalidArgument, match=match):
                c.allreduce(parts[c.rank], **kw)
            assert c.usable
        return c.allreduce(parts[c.rank], codec="fp8_e4m3:g128:sr")

    fresh = cc.run_inproc(2, lambda c: body(c, False))
    after = cc.run_inproc(2, lambda c: body(c, True))
    for a, b in zip(fresh, after):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_host_transport_refuses_a_stream():
    c = one_rank()
    x, y = np.ones(4, np.float32), np.empty(4, np.float32)
    spec = _core.CallSpec("allreduce")
    with pytest.raises(cc.Unsupported, match="stream"):
        c._t.run(spec, x.ctypes.data, y.ctypes.data, 4, "float32", _core.Codec.parse("none"),
                 stream=1)
    stats = c._t.run(spec, x.ctypes.data, y.ctypes.data, 4, "float32", _core.Codec.parse("none"))
    assert np.array_equal(y, x) and stats["algo"] == "one_shot"
    with pytest.raises(cc.Unsupported, match="stream"):
        c.allreduce(x, stream=0)
