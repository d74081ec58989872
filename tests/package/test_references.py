"""Every module and object the package's own text names (docstrings, comments, --help
strings: ``ccompress.x.y``) exists where it is named, and no code or text of the library
names an old import path that only warns (a rename left behind is caught here, as
``ccompress.adam_fidelity`` once was in ccompress-fidelity's --help)."""
import importlib
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ccompress"
ROOT = PACKAGE.parent
NAME = re.compile(r"\bccompress(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# Repository paths the text names (a file that moved leaves its old path behind).
PATH = re.compile(r"\b((?:ccompress|perf|tests|docs|cuda|examples|scripts|bindings|research)"
                  r"/[\w/.-]*\.(?:py|md|json|sh|cc|h|cu|cuh))\b")
# The old paths (a module that warns and hands on); only their own files name them.
OLD = ("ccompress.gift", "ccompress.tsr", "ccompress.tsr_adam", "ccompress.powersgd",
       "ccompress.tools.bounds", "ccompress.tools.perfmodel", "ccompress.tools.adam_fidelity",
       "ccompress.compressors.error_feedback")
OLD_FILES = {"ccompress/" + m[len("ccompress."):].replace(".", "/") + ".py" for m in OLD}
# Files outside OLD_FILES that may still name an old path: (file, old module).
OLD_ALLOWED: set = set()


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for p in parts[i:]:
                obj = getattr(obj, p)
        except AttributeError:
            return False
        return True
    return False


def _names():
    for f in sorted(PACKAGE.rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        for n, line in enumerate(f.read_text().splitlines(), 1):
            text = re.sub(r"from \.+[\w.]* import", "", line)
            for m in NAME.finditer(text):
                yield rel, n, m.group(0).rstrip(".")
            # a relative import of an old module (from ..compressors.error_feedback import X)
            r = re.match(r"\s*from (\.+)(\w[\w.]*) import", line)
            if r:
                base = rel[:-3].split("/")[:-(len(r.group(1)))] if len(r.group(1)) else []
                yield rel, n, ".".join(base + r.group(2).split("."))


def _checkable(name: str) -> bool:
    """Whether ``name`` can be looked up here: ccompress.torch needs torch, the names in
    the compiled CUDA and MPI modules need a build that has them."""
    for prefix, needs in (("ccompress.torch", "torch"), ("ccompress._cuda", "ccompress._cuda"),
                          ("ccompress._mpi", "ccompress._mpi")):
        if name == prefix or name.startswith(prefix + "."):
            try:
                importlib.import_module(needs)
            except ImportError:
                return False
    return True


def test_named_objects_exist():
    bad = sorted({f"{rel}:{n}: {name}" for rel, n, name in _names()
                  if _checkable(name) and not _resolves(name)})
    assert not bad, "the text names what does not exist:\n" + "\n".join(bad)


def test_the_library_names_no_old_path():
    bad = sorted({f"{rel}:{n}: {name}" for rel, n, name in _names()
                  if rel not in OLD_FILES and (rel, name) not in OLD_ALLOWED
                  and any(name == o or name.startswith(o + ".") for o in OLD)})
    assert not bad, "name the module where the code lives:\n" + "\n".join(bad)


def test_named_paths_exist():
    bad = sorted({f"{f.relative_to(ROOT)}:{n}: {m.group(1)}"
                  for f in PACKAGE.rglob("*.py")
                  for n, line in enumerate(f.read_text().splitlines(), 1)
                  for m in PATH.finditer(line) if not (ROOT / m.group(1)).exists()})
    assert not bad, "the text names files that do not exist:\n" + "\n".join(bad)
