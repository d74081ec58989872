"""The public API's docstrings have the NumPy sections the reference (scripts/docs.sh) is
built from: ``Parameters`` where a call takes arguments, ``Returns`` where it returns
something (not annotated ``-> None``), ``Raises`` where its body raises. A class documents
its constructor's. Read from the source (no import, so the torch modules are checked
without torch)."""
import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ccompress"

# The public modules: what ccompress/__init__ exports, the codec layer, the communicator,
# the compressors and the PyTorch adapters (the backend's own files are left to their split).
MODULES = [
    "communicator.py", "simulate.py", "codec.py", "error_feedback.py", "bounds.py",
    "perfmodel.py", "autocodec.py", "adam_fidelity.py", "_internal/build_info.py",
    "_internal/work.py", "_internal/device.py", "_internal/errors.py",
    "compressors/gift.py", "compressors/tsr.py", "compressors/tsr_adam.py",
    "compressors/powersgd.py",
    "torch/ddp.py", "torch/gift.py", "torch/tensor_parallel.py", "torch/tsr_adam.py",
    "torch/_common.py",
]
# Names of the private modules above that are public API (re-exported by ccompress or
# ccompress.torch); in the others every public name counts.
PUBLIC = {
    "_internal/build_info.py": {"build_info"},
    "_internal/work.py": {"Work"},
    "_internal/device.py": {"nccl_unique_id"},
    "torch/_common.py": {"init_process_group_from_mpi", "world_communicator"},
}


def _section(doc: str, name: str) -> bool:
    return re.search(rf"^\s*{name}\n\s*-{{{len(name)}}}\s*$", doc, re.M) is not None


def _raises(fn: ast.AST) -> bool:
    """Whether ``fn``'s own body (not a nested function's) has a raise statement."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Raise):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                 ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def _params(fn: ast.AST, method: bool) -> list:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    if method and names and names[0] in ("self", "cls") and not any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
        names = names[1:]
    return [n for n in names if not n.startswith("_")]


def _returns_none(fn: ast.AST) -> bool:
    r = fn.returns
    return isinstance(r, ast.Constant) and r.value is None


def _problems(fn: ast.AST, where: str, method: bool, doc_of=None) -> list:
    doc = ast.get_docstring(doc_of or fn) or ""
    out = []
    if not doc:
        return [f"{where}: no docstring"]
    is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
    if _params(fn, method) and not is_property and not _section(doc, "Parameters"):
        out.append(f"{where}: no Parameters section")
    if doc_of is None and not _returns_none(fn) and not _section(doc, "Returns") \
            and not _section(doc, "Yields"):
        out.append(f"{where}: no Returns section")
    if _raises(fn) and not _section(doc, "Raises"):
        out.append(f"{where}: raises, but has no Raises section")
    return out


def _dataclass(cls: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in cls.decorator_list)


def check(path: Path, public=None, package: Path = PACKAGE) -> list:
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(package.parent).as_posix()
    all_names = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__"
                                                for t in node.targets):
            all_names = {e.value for e in node.value.elts}
    out = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
            continue
        if (public is not None and node.name not in public) or \
                (all_names is not None and node.name not in all_names):
            continue
        where = f"{rel}:{node.lineno} {node.name}"
        if isinstance(node, ast.FunctionDef):
            out += _problems(node, where, False)
            continue
        doc = ast.get_docstring(node) or ""
        if not doc:
            out.append(f"{where}: no docstring")
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                     and n.name == "__init__"), None)
        if init is not None:
            out += _problems(init, where, True, doc_of=node)
        elif _dataclass(node) and any(isinstance(n, ast.AnnAssign) for n in node.body) \
                and not (_section(doc, "Parameters") or _section(doc, "Attributes")):
            out.append(f"{where}: no Parameters (or Attributes) section for its fields")
        for m in node.body:
            if isinstance(m, ast.FunctionDef) and not m.name.startswith("_"):
                out += _problems(m, f"{rel}:{m.lineno} {node.name}.{m.name}", True)
    return out


def test_the_check_finds_what_is_missing(tmp_path):
    probe = tmp_path / "ccompress" / "probe.py"
    probe.parent.mkdir()
    probe.write_text('def f(x):\n    """Does.\n\n    Returns\n    -------\n    int\n'
                     '        One.\n    """\n    if x:\n        raise ValueError(x)\n    return 1\n'
                     'def g() -> None:\n    """Nothing to say."""\n')
    found = check(probe, package=tmp_path / "ccompress")
    assert found == ["ccompress/probe.py:1 f: no Parameters section",
                     "ccompress/probe.py:1 f: raises, but has no Raises section"]


@pytest.mark.parametrize("module", MODULES)
def test_public_docstrings_have_their_sections(module):
    problems = check(PACKAGE / module, PUBLIC.get(module))
    assert not problems, "NumPy-style sections missing:\n" + "\n".join(problems)
