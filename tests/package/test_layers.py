"""The package's layers import downward only: the import-linter contract in pyproject.toml
([tool.importlinter]; docs/architecture.md describes the layers), run as CI runs it."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")

# CI installs the test extras: there a missing lint-imports fails instead of skipping.
pytestmark = pytest.mark.skipif(not LINT.exists() and os.environ.get("CI") != "true",
                                reason="import-linter is not installed (pip install .[test])")


def _lint(cwd: Path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_contracts_are_kept():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "2 kept, 0 broken" in r.stdout, r.stdout[-2000:]


def test_an_upward_import_breaks_the_contract(tmp_path):
    """The same contract on a copy of the package where _internal imports the communicator
    (an upward import, as _internal/resolve.py once did) and the package's __init__ imports a
    tool: both are reported, with the importing module."""
    shutil.copytree(ROOT / "ccompress", tmp_path / "ccompress",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "ccompress" / "_internal" / "errors.py", "a") as f:
        f.write("\nfrom .. import communicator  # noqa: E402\n")
    with open(tmp_path / "ccompress" / "__init__.py", "a") as f:
        f.write("\nfrom .tools import info as _info  # noqa: E402\n")
    # Without site (-S), so that the editable install's finder does not hand over the real
    # package: the copy comes first on the path, the installed dependencies after it.
    env = {"PYTHONPATH": f"{tmp_path}:{sysconfig.get_paths()['purelib']}", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-S", "-c",
                        "import sys; from importlinter.cli import lint_imports_command; "
                        "sys.exit(lint_imports_command())", "--no-cache"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout[-3000:]
    assert "ccompress._internal is not allowed to import ccompress.communicator" in r.stdout
    assert "ccompress._internal.errors" in r.stdout
    assert "ccompress -> ccompress.tools.info" in r.stdout, r.stdout[-3000:]
