"""The ccompress backend's configuration and error-feedback keying, in one process (the
collectives themselves are tested under torchrun in test_torch_backend.py)."""
import ast
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the ccompress.torch "
                                            "tests need it; ccompress itself does not)")

import ccompress as cc  # noqa: E402
from ccompress.torch import BackendOptions  # noqa: E402
from ccompress.torch._feedback import BackwardFeedback  # noqa: E402
from ccompress.torch._options import parse_codec, resolve  # noqa: E402

ENV = ("CCOMPRESS_CODEC", "CCOMPRESS_ALLGATHER_CODEC", "CCOMPRESS_ALLTOALL_CODEC", "CCOMPRESS_ALGO",
       "CCOMPRESS_ERROR_FEEDBACK", "CCOMPRESS_MIN_NUMEL")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in ENV:
        monkeypatch.delenv(k, raising=False)


def test_defaults_are_exact():
    o = BackendOptions().resolved()
    assert (o.all_reduce, o.reduce_scatter, o.all_gather) == ("none", "none", "none")
    assert (o.algo, o.error_feedback, o.min_numel) == ("auto", False, 4096)


def test_environment_and_fields(monkeypatch):
    monkeypatch.setenv("CCOMPRESS_CODEC", "hint8")
    monkeypatch.setenv("CCOMPRESS_ERROR_FEEDBACK", "1")
    monkeypatch.setenv("CCOMPRESS_MIN_NUMEL", "10")
    o = BackendOptions().resolved()
    assert (o.all_reduce, o.reduce_scatter, o.all_gather) == ("hint8:g16:h128:s8",) * 2 + ("none",)
    assert o.error_feedback and o.min_numel == 10
    o = BackendOptions(reduce_scatter="bf16", all_gather="fp8_e4m3:g128",
                       error_feedback=False).resolved()
    assert (o.reduce_scatter, o.all_gather, o.error_feedback) == ("bf16", "fp8_e4m3:g128", False)


def test_all_to_all_codec_of_its_own(monkeypatch):
    """all_to_all reads CCOMPRESS_ALLTOALL_CODEC (unset: exact), not CCOMPRESS_CODEC; error
    feedback, on for the gradient collectives, is never applied to it (and not refused)."""
    from ccompress.torch import _engagement

    monkeypatch.setenv("CCOMPRESS_CODEC", "hint8")
    monkeypatch.setenv("CCOMPRESS_ERROR_FEEDBACK", "1")
    config = resolve(BackendOptions())
    assert config.options.all_to_all == "none" and config.codecs["all_to_all"].codec is None
    line = _engagement.plan_line(config)
    assert "all_to_all: exact (CCOMPRESS_ALLTOALL_CODEC is not set)" in line, line
    monkeypatch.setenv("CCOMPRESS_ALLTOALL_CODEC", "fp8_e4m3")
    config = resolve(BackendOptions())
    assert config.options.all_to_all == "fp8_e4m3:g128" and config.options.error_feedback
    line = _engagement.plan_line(config)
    assert "all_to_all: fp8_e4m3:g128 (" in line and "all_reduce: hint8:g16:h128:s8, algo " \
        "auto, error feedback" in line, line
    o = BackendOptions(all_to_all="mxfp8", error_feedback=True).resolved()
    assert (o.all_to_all, o.error_feedback) == ("mxfp8", True)


def test_report_counts_all_to_all_against_an_exact_all_to_all():
    """CCOMPRESS_REPORT's summary: the all-to-all's bytes against an exact all-to-all's."""
    from ccompress.torch import _engagement

    stats = _engagement.OpStats()
    stats.compressed("all_to_all", _engagement.exact_alltoall_bytes(4096, 1024, 4))
    stats.sent("all_to_all", 3300)
    stats.delegated("all_to_all", "dtype", 100)
    text = _engagement.summary(stats.snapshot(), 3300)
    assert ("all_to_all: 2 calls, 1 compressed, delegated exactly: dtype 1; sent 3300 B where "
            "an exact all-to-all sends 12288 B (3.72x)") in text, text
    assert "no all_reduce / reduce_scatter / all_gather / all_to_all calls" in \
        _engagement.summary(_engagement.OpStats().snapshot(), 0)


def test_auto_with_a_codec_of_its_own(monkeypatch):
    """auto weighs hint8 against exact; auto:CODEC that codec, its spec resolved."""
    monkeypatch.setenv("CCOMPRESS_CODEC", "auto:fp8_e4m3")
    o = BackendOptions(all_reduce="auto:nvfp4").resolved()
    assert (o.all_reduce, o.reduce_scatter) == ("auto:nvfp4", "auto:fp8_e4m3:g128")
    got = [parse_codec(c, "all_reduce", auto=True)
           for c in ("auto", o.all_reduce, o.reduce_scatter, "hint8")]
    assert [c.candidate_label if c.candidate else None for c in got] == \
        ["hint8", "nvfp4", "fp8_e4m3:g128", None]
    assert [c.candidate.name if c.candidate else None for c in got] == \
        ["hint8:g16:h128:s8", "nvfp4", "fp8_e4m3:g128", None]
    assert got[3].codec.name == "hint8:g16:h128:s8" and got[0].codec is None


def test_spec_parsed_once_per_group(monkeypatch):
    """The group keeps each op's codec parsed (a Codec object the collectives take as
    is); a variable shared by two ops yields one parsed object, and "none" none."""
    monkeypatch.setenv("CCOMPRESS_CODEC", "fp8_e4m3")
    config = resolve(BackendOptions(all_gather="bf16"))
    ar, rs, ag = (config.codecs[op] for op in ("all_reduce", "reduce_scatter", "all_gather"))
    assert isinstance(ar.codec, cc.Codec) and ar is rs and ar.codec.name == "fp8_e4m3:g128"
    assert ag.codec.name == "bf16" and config.options.all_gather == "bf16"
    monkeypatch.delenv("CCOMPRESS_CODEC")
    assert resolve(None).codecs["all_reduce"].codec is None


@pytest.mark.parametrize("kw,err", [
    (dict(all_reduce="fp8_e4m3:g7"), cc.InvalidArgument),
    (dict(all_reduce="auto8"), cc.Unsupported),
    (dict(all_reduce="auto:none"), cc.InvalidArgument),
    (dict(all_reduce="auto:auto4"), cc.Unsupported),
    (dict(all_reduce="auto:nvfp9"), cc.InvalidArgument),
    (dict(all_gather="auto"), cc.Unsupported),
    (dict(all_gather="auto:nvfp4"), cc.Unsupported),
    (dict(all_to_all="auto"), cc.Unsupported),
    (dict(all_to_all="auto8"), cc.Unsupported),
    (dict(all_to_all="fp8_e4m3:g7"), cc.InvalidArgument),
    (dict(algo="butterfly"), cc.InvalidArgument),
    (dict(all_reduce="hint8", algo="ring", error_feedback=True), cc.Unsupported),
    (dict(all_reduce="hint8", algo="hier", error_feedback=True), cc.Unsupported),
    (dict(min_numel=-1), cc.InvalidArgument),
])
def test_bad_options_raise_typed_errors(kw, err):
    with pytest.raises(err):
        BackendOptions(**kw).resolved()


def test_bad_environment(monkeypatch):
    monkeypatch.setenv("CCOMPRESS_ERROR_FEEDBACK", "maybe")
    with pytest.raises(cc.InvalidArgument, match="CCOMPRESS_ERROR_FEEDBACK"):
        BackendOptions().resolved()


@pytest.mark.parametrize("var,value", [("CCOMPRESS_CODEC", "hint9"),
                                       ("CCOMPRESS_ALLTOALL_CODEC", "mxfp9"),
                                       ("CCOMPRESS_ALGO", "butterfly"),
                                       ("CCOMPRESS_LOG", "loud"),
                                       ("CCOMPRESS_TRANSPORT", "pigeon")])
def test_configuration_errors_are_one_line_without_a_cause(monkeypatch, var, value):
    """Every configuration error is raised when the options are resolved (the group's
    creation), as one line naming the variable and its value, with no chained cause whose
    traceback a launcher would print too."""
    monkeypatch.setenv(var, value)
    with pytest.raises(cc.CCompressError) as e:
        BackendOptions().resolved()
    msg = str(e.value)
    assert "\n" not in msg and f"{var}={value!r}" in msg, msg
    assert e.value.__cause__ is None and (e.value.__context__ is None or
                                          e.value.__suppress_context__), msg


def _backward_lookups(fb, kinds_and_tensors):
    """fb.lookup for each (kind, tensor) from inside one backward pass."""
    got = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            got.extend(fb.lookup(k, t) for k, t in kinds_and_tensors)
            return g

    Probe.apply(torch.ones(1, requires_grad=True)).sum().backward()
    return got


def test_feedback_keyed_by_place_in_backward():
    fb = BackwardFeedback()
    bucket, other = torch.zeros(100), torch.zeros(100)
    rs = [torch.zeros(64), torch.zeros(64)]
    assert fb.lookup("all_reduce", bucket) is None, "outside backward: no error feedback"
    a = _backward_lookups(fb, [("all_reduce", bucket), ("reduce_scatter", rs[0]),
                               ("reduce_scatter", rs[1])])
    assert len({id(e) for e in a}) == 3
    # next pass: same places, fresh reduce-scatter buffers -> the same residuals
    b = _backward_lookups(fb, [("all_reduce", bucket), ("reduce_scatter", torch.zeros(64)),
                               ("reduce_scatter", torch.zeros(64))])
    assert [id(e) for e in a] == [id(e) for e in b]
    # a rebuilt bucket (another buffer) or another size starts a new residual
    c = _backward_lookups(fb, [("all_reduce", other), ("reduce_scatter", torch.zeros(64)),
                               ("reduce_scatter", torch.zeros(32))])
    assert c[0] is not a[0] and c[1] is a[1] and c[2] is not a[2]
    # residuals a pass did not use are dropped when the next one starts
    assert ("reduce_scatter", 2, 64, "torch.float32") in fb.slots
    _backward_lookups(fb, [("all_reduce", other)])
    assert ("reduce_scatter", 2, 64, "torch.float32") not in fb.slots and len(fb.slots) == 3
    _backward_lookups(fb, [("all_reduce", other)])
    assert list(fb.slots) == [("all_reduce", 0, 100, "torch.float32")]


def test_feedback_state_dict_roundtrip():
    fb = BackwardFeedback()
    x = torch.zeros(8)
    (ef,) = _backward_lookups(fb, [("reduce_scatter", x)])
    ef.buffers(8, 2, 0)  # allocate as a collective would
    ef._worker[:] = 0.25
    state = fb.state_dict()
    assert list(state) == ["reduce_scatter/0/8/torch.float32"]
    fb2 = BackwardFeedback()
    fb2.load_state_dict(state)
    (ef2,) = _backward_lookups(fb2, [("reduce_scatter", torch.zeros(8))])
    assert ef2.worker_residual.tolist() == [0.25] * 8


def test_torch_modules_import_one_way():
    """No import cycle among ccompress/torch/'s modules (imports inside functions included):
    the backend's surface imports its policy and runner, never the reverse."""
    root = Path(cc.__file__).resolve().parent / "torch"
    mods = {p.stem for p in root.glob("*.py")}
    graph = {m: set() for m in mods}
    for m in mods:
        for node in ast.walk(ast.parse((root / f"{m}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                graph[m].update(n.split(".")[0] for n in names if n.split(".")[0] in mods)
    graph["__init__"] = set()  # the package imports its modules; they never import it
    assert {"_options", "_policy", "_runner"} <= graph["backend"]
    assert graph["_options"] <= {"_p2p"} and "backend" not in graph["_runner"] | graph["_policy"]
    done, path = set(), []

    def visit(m):
        assert m not in path, " -> ".join(path[path.index(m):] + [m])
        if m not in done:
            path.append(m)
            for n in sorted(graph[m]):
                visit(n)
            path.pop()
            done.add(m)

    for m in sorted(mods):
        visit(m)


def test_plan_line_states_the_rate_sensitivity_of_4_bit(monkeypatch):
    """A gradient op at 4 bits (fixed, or auto's candidate) gets the measured rate
    sensitivity in the plan line; 8-bit codecs and exact do not."""
    from ccompress.torch import _engagement

    for spec, low in (("nvfp4", "nvfp4"), ("auto:hint4:g16", "hint4:g16"), ("hint8", None),
                      ("auto", None), ("none", None)):
        monkeypatch.setenv("CCOMPRESS_CODEC", spec)
        line = _engagement.plan_line(resolve(BackendOptions()))
        if low is None:
            assert _engagement.LOW_BIT_NOTE not in line, (spec, line)
        else:
            assert line.endswith(f". {low}: {_engagement.LOW_BIT_NOTE}"), (spec, line)
