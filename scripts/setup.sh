#!/usr/bin/env bash
# Creates .venv in the repository root and installs ccompress into it (editable), in groups:
#   core        ccompress itself (the C++ module built), mpi4py and the mpich wheel that
#               provides libmpi and mpiexec: all that `bash scripts/bench.sh` needs
#   test        pytest, pytest-xdist and the fidelity extras (safetensors, matplotlib)
#   torch       CPU torch, for the DLPack and ccompress.torch tests (best effort)
#   frameworks  Lightning and Accelerate, for the framework tests and their examples
#   jax         CPU jax and optax (the jax extra), for ccompress.jax and its example
#               (installed before the core is built: the build compiles its XLA FFI module
#               only where jax is present)
# By default every group; `--core` installs the core alone, `--with GROUP` adds a group to
# that (`bash scripts/setup.sh --core --with torch`). A group is a function group_NAME below
# and a name in DEFAULT_GROUPS (or OPTIONAL_GROUPS, installed only when named with --with).
# Quick on a re-run: the C++/CUDA build is redone
# only when a file under cuda/ or bindings/, CMakeLists.txt or pyproject.toml has changed
# (edits to Python files need no reinstall: the install is editable; adding a module does).
# Each step prints a line with the seconds since the start, the build its [n/N] progress.
#
# The CUDA module is built where it can run: CCOMPRESS_CUDA defaults to ON when a GPU is
# visible (nvidia-smi lists one) and to OFF otherwise, so a machine without a GPU does not
# spend minutes in nvcc; CCOMPRESS_CUDA=ON builds it anyway (CI does, so that every CUDA
# source is compiled there), CCOMPRESS_CUDA=AUTO builds it wherever nvcc is found.
#
# Environment: PYTHON (default python3), CCOMPRESS_CUDA=ON|OFF|AUTO, CMAKE_CUDA_ARCHITECTURES,
# MPI_HOME (another MPI than the mpich wheel), CCOMPRESS_SKIP_TORCH=1 (no torch or frameworks
# group), CCOMPRESS_REQUIRE_TORCH=1 (fail instead of skipping the torch tests when torch
# cannot be installed; CI sets it), CCOMPRESS_SKIP_JAX=1 and CCOMPRESS_REQUIRE_JAX=1 (the same
# for the jax group).
set -euo pipefail

# The groups installed after the core, in order; --core empties the list, --with adds one.
DEFAULT_GROUPS=(test torch frameworks jax)
OPTIONAL_GROUPS=()
GROUPS_WANTED=("${DEFAULT_GROUPS[@]}")
usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --core) GROUPS_WANTED=() ;;
    --with)
      [ $# -ge 2 ] || { echo "[setup] ERROR: --with needs a group name" >&2; exit 2; }
      GROUPS_WANTED+=("$2"); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "[setup] ERROR: unknown argument '$1' (--core, --with GROUP, --help)" >&2; usage; exit 2 ;;
  esac
  shift
done
for g in ${GROUPS_WANTED[@]+"${GROUPS_WANTED[@]}"}; do
  case " ${DEFAULT_GROUPS[*]} ${OPTIONAL_GROUPS[*]-} " in
    *" $g "*) ;;
    *) echo "[setup] ERROR: --with $g: no such group (groups: ${DEFAULT_GROUPS[*]} ${OPTIONAL_GROUPS[*]-})" >&2; exit 2 ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.ccompress-build-key"

START=$SECONDS
say() { echo "[setup +$((SECONDS - START))s] $*" >&2; }
# pip, quietly: its output is shown only when it fails (this machine's pip configuration
# otherwise warns about every package an extra index lacks).
pip_q() {
  local log; log="$(mktemp)"
  if "$PY" -m pip install -q "$@" >"$log" 2>&1; then rm -f "$log"; return 0; fi
  cat "$log" >&2; rm -f "$log"; return 1
}

if [ ! -x "$PY" ]; then
  say "creating $VENV with $(command -v "${PYTHON:-python3}")"
  "${PYTHON:-python3}" -m venv "$VENV"
fi
# The build runs in this venv (no build isolation, so the CMake build folder stays valid
# between builds): mpicc from the mpich wheel and cmake are found on PATH.
export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

if [ -z "${CCOMPRESS_CUDA:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    CCOMPRESS_CUDA=ON
  else
    CCOMPRESS_CUDA=OFF
    if command -v nvcc >/dev/null 2>&1; then
      say "no GPU visible: the CUDA module is not built (CCOMPRESS_CUDA=ON bash scripts/setup.sh builds it)"
    fi
  fi
fi
export CCOMPRESS_CUDA

# The jax group, before the core: the build compiles ccompress._jax_ffi (the XLA FFI module
# of ccompress.jax) only where jax is installed. Best effort like torch; CCOMPRESS_SKIP_JAX=1
# leaves it out, CCOMPRESS_REQUIRE_JAX=1 (CI) fails instead of skipping the JAX tests.
# The requirements of the pyproject.toml extras named as arguments, one a line (markers kept).
extra_reqs() {
  "$PY" - "$@" <<'PYEOF'
import re, sys
text = open("pyproject.toml").read()
block = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
for extra in sys.argv[1:]:
    line = re.search(rf"^{extra}\s*=\s*\[(.*)\]", block, re.M).group(1)
    print("\n".join(re.findall(r'"([^"]+)"', line)))
PYEOF
}

# Whether every requirement on stdin that applies to this machine is installed.
reqs_installed() {
  "$PY" -c "
import importlib.metadata as m, sys
from pip._vendor.packaging.requirements import Requirement
for line in sys.stdin.read().split():
    r = Requirement(line)
    if r.marker is None or r.marker.evaluate():
        m.version(r.name)
" 2>/dev/null
}

JAX_VERSION=0.10.2
# The jax extra's other requirements: optax, for examples/jax_train.py and its benchmark.
JAX_EXTRA="$(extra_reqs jax | grep -v '^jax[<>=! ]' || true)"
if [[ " ${GROUPS_WANTED[*]-} " == *" jax "* ]] && [ "${CCOMPRESS_SKIP_JAX:-0}" != 1 ] \
   && ! { "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('jax') != '$JAX_VERSION')" 2>/dev/null \
          && printf '%s\n' "$JAX_EXTRA" | reqs_installed; }; then
  # shellcheck disable=SC2086,SC2116
  say "jax: installing jax==$JAX_VERSION (CPU) and $(echo $JAX_EXTRA) for ccompress.jax"
  # shellcheck disable=SC2086
  if ! pip_q "jax==$JAX_VERSION" $JAX_EXTRA; then
    if [ "${CCOMPRESS_REQUIRE_JAX:-0}" = 1 ]; then
      say "ERROR: jax==$JAX_VERSION could not be installed and CCOMPRESS_REQUIRE_JAX=1"
      exit 1
    fi
    say "WARNING: jax==$JAX_VERSION could not be installed; the JAX tests will be skipped"
  fi
fi

build_key() {
  {
    "$PY" -VV
    "$PY" -c "import jax; print('jax', jax.__version__)" 2>/dev/null || echo "no jax"
    echo "CCOMPRESS_CUDA=${CCOMPRESS_CUDA:-} ARCH=${CMAKE_CUDA_ARCHITECTURES:-} MPI_HOME=${MPI_HOME:-}"
    find CMakeLists.txt pyproject.toml cuda bindings -type f -print0 | sort -z | xargs -0 sha256sum
    # The editable install maps the package's modules when it is made: a module or
    # subpackage added or removed under ccompress/ needs a reinstall too.
    find ccompress -name '*.py' | sort
  } | sha256sum | cut -c1-32
}

# Runs "$@" with its output in LOG, printing the build's latest [n/N] line (CMake, ninja)
# every 10 s while it runs; returns its exit status.
with_progress() {
  local log="$1"; shift
  "$@" >"$log" 2>&1 &
  local pid=$! last="" line rc=0 t=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1; t=$((t + 1))
    if [ $((t % 10)) -eq 0 ]; then
      line="$(grep -oE '^ *\[ *[0-9]+(/[0-9]+|%)\] [^ ]+ [^ ]+( [^ ]+)?( [^ ]+)?' "$log" 2>/dev/null | tail -n 1 || true)"
      line="${line#"${line%%[![:space:]]*}"}"  # without its indent
      if [ -n "$line" ] && [ "$line" != "$last" ]; then say "  build $line"; last="$line"; fi
    fi
  done
  wait "$pid" || rc=$?
  return "$rc"
}

# The core: ccompress built and installed editable, with mpi4py and the mpich wheel.
KEY="$(build_key)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ] \
   && "$PY" -c "import ccompress._core, mpi4py" 2>/dev/null; then
  say "core: ccompress is up to date in $VENV (no C++/CUDA change since the last build)"
else
  say "core: installing build tools"
  pip_q -U pip
  pip_q "scikit-build-core>=0.10" "pybind11>=2.12" mpich
  # CMake caches the CUDA architectures and the MPI it found: another choice gets its own
  # build folder instead of silently reusing the old one.
  BUILD_DIR="build/venv-{wheel_tag}"
  if [ -n "${CMAKE_CUDA_ARCHITECTURES:-}${MPI_HOME:-}" ]; then
    BUILD_DIR="build/venv-$(echo "${CMAKE_CUDA_ARCHITECTURES:-}|${MPI_HOME:-}" | sha256sum | cut -c1-8)-{wheel_tag}"
  fi
  EXTRA=()
  if [ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then
    EXTRA+=(-C "cmake.define.CMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES")
  fi
  install() {
    "$PY" -m pip install -v --no-build-isolation -C "build-dir=$BUILD_DIR" ${EXTRA[@]+"${EXTRA[@]}"} \
      -e ".[mpi]"
  }
  say "core: building and installing ccompress (the first build takes a few minutes; log: build/setup.log)"
  mkdir -p build
  if ! with_progress build/setup.log install; then
    # A build folder configured by another toolchain or Python can confuse CMake: retry clean.
    say "build failed; retrying from a clean build folder (tail of the log follows)"
    tail -n 30 build/setup.log >&2
    rm -rf build/venv-*
    if ! with_progress build/setup.log install; then
      tail -n 80 build/setup.log >&2
      say "ERROR: pip install failed; full log in $ROOT/build/setup.log"
      exit 1
    fi
  fi
  grep -E "ccompress (MPI transport|JAX FFI module|CUDA module):" build/setup.log | sed 's/^.*-- /[setup] /' >&2 || true
  echo "$KEY" >"$STAMP"
  say "core: built"
fi

# The test tools: pytest, pytest-xdist (the test extra) and the fidelity extras, from
# pyproject.toml's lists, without rebuilding (the core is installed already).
group_test() {
  local reqs
  reqs="$(extra_reqs test fidelity)"
  # Up to date when every one that applies to this machine is installed (an extra added
  # to pyproject.toml gets installed into an existing .venv too).
  if printf '%s\n' "$reqs" | reqs_installed; then
    say "test: up to date"; return 0
  fi
  # shellcheck disable=SC2086,SC2116
  say "test: installing the test and fidelity extras ($(echo $reqs))"
  # shellcheck disable=SC2086
  pip_q $reqs
}

# CPU torch for the DLPack and ccompress.torch tests: best effort, the tests skip without it.
TORCH_VERSION=2.13.0
group_torch() {
  [ "${CCOMPRESS_SKIP_TORCH:-0}" != 1 ] || { say "torch: skipped (CCOMPRESS_SKIP_TORCH=1)"; return 0; }
  if "$PY" -c "import importlib.metadata as m, sys; sys.exit(not m.version('torch').startswith('$TORCH_VERSION'))" 2>/dev/null; then
    say "torch: up to date"; return 0
  fi
  say "torch: installing torch==$TORCH_VERSION (CPU) for the DLPack and torch tests"
  if ! pip_q "torch==$TORCH_VERSION"; then
    if [ "${CCOMPRESS_REQUIRE_TORCH:-0}" = 1 ]; then
      say "ERROR: torch==$TORCH_VERSION could not be installed and CCOMPRESS_REQUIRE_TORCH=1"
      exit 1
    fi
    say "WARNING: torch==$TORCH_VERSION could not be installed; the torch tests will be skipped"
  fi
}

# The frameworks of the torch integration tests (tests/pytorch/test_torch_frameworks.py) and
# of examples/lightning_ccompress.py and accelerate_ccompress.py, pinned with the torch above
# so that pip keeps it (best effort like torch; required with CCOMPRESS_REQUIRE_TORCH=1).
FRAMEWORKS="lightning==2.6.6 accelerate==1.16.0"
group_frameworks() {
  [ "${CCOMPRESS_SKIP_TORCH:-0}" != 1 ] || { say "frameworks: skipped (CCOMPRESS_SKIP_TORCH=1)"; return 0; }
  if "$PY" -c "import importlib.metadata as m, sys; sys.exit(not (m.version('lightning') == '2.6.6' and m.version('accelerate') == '1.16.0'))" 2>/dev/null; then
    say "frameworks: up to date"; return 0
  fi
  say "frameworks: installing $FRAMEWORKS for the framework tests"
  # shellcheck disable=SC2086
  if ! pip_q $FRAMEWORKS "torch==$TORCH_VERSION"; then
    if [ "${CCOMPRESS_REQUIRE_TORCH:-0}" = 1 ]; then
      say "ERROR: $FRAMEWORKS could not be installed and CCOMPRESS_REQUIRE_TORCH=1"
      exit 1
    fi
    say "WARNING: $FRAMEWORKS could not be installed; the framework tests will be skipped"
  fi
}

# jax was installed before the core (above); here, whether the build found it.
group_jax() {
  [ "${CCOMPRESS_SKIP_JAX:-0}" != 1 ] || { say "jax: skipped (CCOMPRESS_SKIP_JAX=1)"; return 0; }
  if "$PY" -c "import ccompress._jax_ffi" 2>/dev/null; then
    say "jax: ccompress._jax_ffi built against jax $("$PY" -c "import jax; print(jax.__version__)")"
  elif [ "${CCOMPRESS_REQUIRE_JAX:-0}" = 1 ]; then
    say "ERROR: ccompress._jax_ffi was not built and CCOMPRESS_REQUIRE_JAX=1 (build/setup.log)"
    exit 1
  else
    say "WARNING: ccompress._jax_ffi was not built; the JAX tests will be skipped"
  fi
}

for g in ${GROUPS_WANTED[@]+"${GROUPS_WANTED[@]}"}; do
  "group_$g"
done
if [ ${#GROUPS_WANTED[@]} -eq 0 ]; then
  say "core only (--core): bash scripts/setup.sh adds the test tools, torch, the frameworks and jax"
fi

"$PY" - <<'PYEOF' >&2
import shutil, sys, ccompress as cc
info = cc.build_info()
mpi, cuda = info["mpi"], info["cuda"]
print(f"[setup] python     {sys.executable} ({info['python']})")
print(f"[setup] ccompress  {info['version']}, editable: Python from {cc.__path__[-1]}, "
      f"compiled modules in {cc.__path__[0]}")
print(f"[setup] MPI        {'available' if mpi['available'] else 'UNAVAILABLE: ' + mpi.get('reason', '')}"
      f" ({mpi.get('library', '?')}); mpiexec: {shutil.which('mpiexec')}")
print(f"[setup] CUDA       {cuda['build']}; devices: {cuda['devices']}")
try:
    from importlib.metadata import version
    torch = version("torch")
except Exception:
    torch = "not installed (the torch tests skip)"
print(f"[setup] torch      {torch}")
print(f"[setup] commands   {shutil.which('ccompress-perf')}, {shutil.which('ccompress-info')}")
PYEOF
say "done; commands in $VENV/bin (source .venv/bin/activate puts them on PATH)"
