#!/usr/bin/env bash
# Builds the C++ core and the CPU Python module with AddressSanitizer and
# UndefinedBehaviorSanitizer (CMake option CCOMPRESS_SANITIZE=ON) into build/sanitize, then
# runs the codec, schedule and in-process collective tests against that build. The same build
# has the CUDA backend compiled for the CPU emulation of the CUDA runtime
# (CCOMPRESS_CUDA_EMULATOR=ON, cuda/emu/README.md), so the GPU tests run here too: kernels
# against the CPU backend, the loopback pipeline, stream ordering, and the NCCL transport on the
# emulator's in-process stand-in for libnccl (cuda/emu/fake_nccl.cc). Any sanitizer report stops
# the run with a non-zero exit (halt_on_error). Leak checking is off: the Python interpreter
# itself keeps memory until exit. `bash scripts/sanitize.sh --build-only` builds and stops
# (CI builds it while scripts/setup.sh builds .venv, then runs the tests).
set -euo pipefail
BUILD_ONLY=0
if [ "${1:-}" = "--build-only" ]; then BUILD_ONLY=1; shift; fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
B="$ROOT/build/sanitize"
VENV="$B/venv"
mkdir -p "$B"
if [ ! -x "$VENV/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
# A plain venv (no editable ccompress in it), so the tests import this build.
"$VENV/bin/python" -m pip install -q numpy ml_dtypes pytest pytest-xdist pybind11 >"$B/pip.log" 2>&1 \
  || { cat "$B/pip.log" >&2; exit 1; }
# -O1 -g1 instead of RelWithDebInfo's -O2 -g: every unit builds at -O1 (ASan's usual level),
# the core library too (CCOMPRESS_CORE_OPT; its own default is -O3), and -g1 keeps the line
# tables the reports' file:line need. Measured per unit in CPU seconds: a pybind11 unit
# 90 -> 42, a core -O3 unit 105 -> 62 (-fno-omit-frame-pointer comes with CCOMPRESS_SANITIZE;
# halt_on_error stays below).
cmake -S "$ROOT" -B "$B/cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCCOMPRESS_SANITIZE=ON -DCCOMPRESS_CORE_OPT=-O1 \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCCOMPRESS_CUDA=OFF -DCCOMPRESS_CUDA_EMULATOR=ON -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
  -DPython_EXECUTABLE="$VENV/bin/python" \
  -Dpybind11_DIR="$("$VENV/bin/python" -m pybind11 --cmakedir)" >"$B/cmake.log" 2>&1 \
  || { cat "$B/cmake.log" >&2; exit 1; }
echo "[sanitize] building with -fsanitize=address,undefined (log: $B/build.log)" >&2
cmake --build "$B/cmake" -j "$(nproc)" >"$B/build.log" 2>&1 || { tail -50 "$B/build.log" >&2; exit 1; }
rm -rf "$B/pkg" && mkdir -p "$B/pkg"
cp -r "$ROOT/ccompress" "$B/pkg/"
cp -P "$B"/cmake/*.so* "$B/cmake/_build_config.py" "$B/pkg/ccompress/"
if [ "$BUILD_ONLY" = 1 ]; then exit 0; fi

# The sanitizer runtimes must come before libstdc++ so that they see every throw and alloc.
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export PYTHONPATH="$B/pkg"
# The emulated _cuda module counts as a GPU: a GPU test that would skip fails instead.
export CCOMPRESS_REQUIRE_GPU=1
cd "$B"  # not the repository root, whose ccompress/ has no compiled modules
T="$ROOT/tests"
# -s: a sanitizer report goes to stderr as the process stops, so nothing may capture it (with
# -n, pytest-xdist's workers write to this stderr; a worker that a report stopped fails the run
# as a crashed node). -o pythonpath=: not the repository root on sys.path (pyproject.toml puts
# it there for the perf/ and examples/ packages), whose ccompress/ would shadow this build's.
# CCOMPRESS_TEST_JOBS: pytest-xdist workers (as scripts/test.sh; 0: one process).
JOBS="${CCOMPRESS_TEST_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
PYTEST=("$VENV/bin/python" -m pytest -q -s -p no:cacheprovider --rootdir="$ROOT" -o pythonpath=)
# Two runs (below): arguments may select tests of one only, leaving the other with none
# (pytest's 5). That is a failure only without arguments, or when neither run collected any.
EMPTY_RUNS=0
pytest_run() {
  local rc=0
  "${PYTEST[@]}" "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then EMPTY_RUNS=$((EMPTY_RUNS + 1)); rc=0; fi
  return "$rc"
}
pytest_run -n "$JOBS" \
  "$T/codecs/test_codec_math.py" "$T/codecs/test_fp8_conversion.py" "$T/codecs/test_taco.py" \
  "$T/codecs/test_hint8.py" "$T/codecs/test_nvfp4.py" "$T/codecs/test_int4.py" "$T/codecs/test_mx.py" \
  "$T/codecs/test_stochastic_rounding.py" "$T/codecs/test_cast_sr.py" \
  "$T/collectives/test_collectives.py" "$T/collectives/test_ordered_executor.py" \
  "$T/codecs/test_autocodec.py" "$T/collectives/test_errors.py" \
  "$T/codecs/test_message_header.py" "$T/codecs/test_fuzz.py" "$T/collectives/test_nonfinite.py" \
  "$T/compress/test_error_feedback.py" "$T/collectives/test_array_checks.py" \
  "$T/collectives/test_call_seam.py" "$T/collectives/test_hier.py" \
  "$T/cuda/test_cuda.py" "$T/cuda/test_cuda_state.py" "$T/cuda/test_cuda_emulator.py" \
  "$T/cuda/test_device_paths.py" "$T/cuda/test_launch_bounds.py" "$T/cuda/test_exact_div.py" \
  "$T/collectives/test_alltoall.py" "$T/cuda/test_alltoall_cuda.py" "$T/jax/test_jax_cuda.py" "$@"
# Apart, in one process: once the NCCL stand-in is loaded it stays loaded.
pytest_run "$T/cuda/test_nccl_emulated.py" "$@"
if [ "$EMPTY_RUNS" -eq 2 ] || { [ "$EMPTY_RUNS" -gt 0 ] && [ "$#" -eq 0 ]; }; then
  echo "[sanitize] ERROR: pytest collected no tests" >&2
  exit 5
fi
