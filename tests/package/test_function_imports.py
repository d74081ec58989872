"""Imports at the top: every module of ccompress imports what it needs when it is imported,
except an optional dependency, which a function may import where it is used (so that
``import ccompress`` works without it). A rename that leaves an import of a module that no
longer exists then fails at import, in every test, instead of in the one call that reaches
it."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ccompress"

# Optional: not in pyproject's [project] dependencies (numpy and ml_dtypes are), and the
# compiled modules that a build may leave out (_core is always built).
OPTIONAL = {"torch", "cupy", "jax", "jaxlib", "mpi4py", "safetensors", "matplotlib"}
OPTIONAL_COMPILED = {"_cuda", "_mpi", "_jax_ffi", "_build_config"}

# Function-level imports allowed beyond the optional dependencies: (file, imported module).
ALLOWED: set = set()


def _absolute(node: ast.ImportFrom, module: str) -> list:
    """The modules an ``import from`` names, absolute (``from .. import _cuda`` in
    ccompress/_internal/x.py is ccompress._cuda)."""
    if node.level == 0:
        return [node.module]
    package = module.split(".")[:-node.level]
    base = ".".join(package + ([node.module] if node.module else []))
    if node.module:
        return [base]
    return [f"{base}.{a.name}" for a in node.names]


def _function_imports(path: Path, package: Path = PACKAGE):
    """(line, imported module) of each import inside a function or method of ``path``, a
    module of ``package``."""
    module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    if path.name == "__init__.py":
        module += ".__init__"
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda))
            if in_function and isinstance(child, ast.Import):
                found.extend((child.lineno, a.name) for a in child.names)
            elif in_function and isinstance(child, ast.ImportFrom):
                found.extend((child.lineno, m) for m in _absolute(child, module))
            visit(child, inside)

    visit(tree, False)
    return found


def _optional(name: str) -> bool:
    parts = name.split(".")
    if parts[0] in OPTIONAL:
        return True
    return parts[0] == "ccompress" and len(parts) == 2 and parts[1] in OPTIONAL_COMPILED


def test_absolute_names_resolve_relative_imports():
    """The rule reads relative imports right (else it would check the wrong names)."""
    tree = ast.parse("from .. import _cuda\nfrom .errors import X\nfrom . import a, b\n")
    names = [m for node in tree.body for m in _absolute(node, "ccompress._internal.device")]
    assert names == ["ccompress._cuda", "ccompress._internal.errors", "ccompress._internal.a",
                     "ccompress._internal.b"]
    pkg = [m for node in ast.parse("from .gift import G\n").body
           for m in _absolute(node, "ccompress.torch.__init__")]
    assert pkg == ["ccompress.torch.gift"]


def test_the_rule_finds_a_function_level_import(tmp_path):
    """A function-level import of a library module is found, with its line."""
    source = "import os\n\ndef f():\n    import json\n    from ._internal import errors\n"
    tree_path = tmp_path / "ccompress" / "probe.py"
    tree_path.parent.mkdir()
    tree_path.write_text(source)
    assert _function_imports(tree_path, tmp_path / "ccompress") == [
        (4, "json"), (5, "ccompress._internal")]
    assert not _optional("json") and not _optional("ccompress._internal")
    assert _optional("torch.distributed") and _optional("ccompress._cuda")


def test_imports_inside_functions_are_optional_dependencies_only():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        for line, name in _function_imports(path):
            if not _optional(name) and (rel, name) not in ALLOWED:
                bad.append(f"{rel}:{line}: imports {name} inside a function")
    assert not bad, ("import these at the top of the module (a function may import only an "
                     "optional dependency: " + ", ".join(sorted(OPTIONAL | OPTIONAL_COMPILED))
                     + "):\n" + "\n".join(bad))


def test_allow_list_entries_are_still_needed():
    """Each allowed exception still exists (a fixed one is taken off the list)."""
    present = set()
    for rel, name in ALLOWED:
        path = PACKAGE.parent / rel
        if path.exists():
            present |= {(rel, n) for _, n in _function_imports(path) if n == name}
    stale = sorted(ALLOWED - present)
    assert not stale, f"take these off ALLOWED, they are fixed: {stale}"


def _root_imports(path: Path, package: Path = PACKAGE):
    """(line, name) of each name a module takes from the package's root itself (``from ..
    import X`` where X is no module file of ccompress/, ``import ccompress``)."""
    module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    if path.name == "__init__.py":
        module += ".__init__"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name == "ccompress"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module if node.level == 0 else ".".join(
                module.split(".")[:-node.level] + ([node.module] if node.module else []))
            if base == "ccompress":
                found += [(node.lineno, f"ccompress.{a.name}") for a in node.names]
    return [(line, name) for line, name in sorted(found)
            if not (package / f"{name.split('.')[-1]}.py").exists()
            and not (package / name.split(".")[-1]).is_dir()]


def test_the_library_takes_only_compiled_modules_from_the_root():
    """Below tools/, a module takes from the package's root only its compiled modules
    (``from .. import _core``): the import-linter contract cannot see those, so it ignores
    every import of the root, and this keeps that blind spot closed (``import ccompress``
    in _internal would import every layer above it)."""
    allowed = OPTIONAL_COMPILED | {"_core"}
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel.startswith("ccompress/tools/") or rel == "ccompress/__init__.py":
            continue
        for line, name in _root_imports(path):
            if name.split(".")[-1] not in allowed:
                bad.append(f"{rel}:{line}: imports {name} from the package's root")
    assert not bad, "import the module that holds it instead:\n" + "\n".join(bad)


def test_root_imports_are_found(tmp_path):
    pkg = tmp_path / "ccompress"
    (pkg / "_internal").mkdir(parents=True)
    (pkg / "codec.py").write_text("")
    probe = pkg / "_internal" / "probe.py"
    probe.write_text("import ccompress\nfrom .. import _core, Codec\nfrom .. import codec\n"
                     "from ccompress import Communicator\n")
    assert _root_imports(probe, pkg) == [(1, "ccompress"), (2, "ccompress.Codec"),
                                         (2, "ccompress._core"), (4, "ccompress.Communicator")]
