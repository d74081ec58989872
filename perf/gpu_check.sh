#!/usr/bin/env bash
# One command for a machine with a GPU: builds ccompress for it, runs the GPU tests (every
# codec's kernels bit-identical to the CPU backend, every algorithm on 2-4 virtual ranks of
# the GPU bit-identical to the host collectives, the all-to-all of every codec family on 3
# virtual ranks bit for bit the senders' encoding, stream ordering; the torch and CuPy CUDA
# tests: CuPy arrays and torch CUDA tensors on virtual ranks through the adapters,
# tp_all_reduce, the DDP hook's CUDA buckets and the ccompress torch.distributed backend's
# collectives; ccompress.jax's CUDA handlers, and a jitted
# call on a GPU array where a CUDA jaxlib is present), then times every kernel of every codec
# family (MX included) at 256 MiB of bfloat16 and of float32 against the device-to-device copy
# bandwidth measured in the same run, the loopback pipeline of every codec, and the
# mixture-of-experts all-to-all (none, fp8, mxfp8, nvfp4 at 8 MiB and 256 KiB a rank, the
# median time per call against none's) (perf/bench/gpu_bench.py). Writes logs, table.md and
# kernels.json under $OUT (default build/gpu_check); copy kernels.json to
# perf/gpu/kernels.json, which perf/model/gpu_projection.py reads. Sized to finish within 8
# minutes on an H100/H200: a step that would overrun is trimmed in size, never in rows
# (GPU_CHECK_MIB, GPU_CHECK_PIPE_MIB, GPU_CHECK_A2A_MIB).
#
# Environment: OUT, CMAKE_CUDA_ARCHITECTURES (default 90: this GPU only, a quicker build),
# GPU_CHECK_MIB (kernel size, default 256), GPU_CHECK_PIPE_MIB (all-reduce size, default 64),
# GPU_CHECK_A2A_MIB (all-to-all sizes per rank, default 8,0.25),
# GPU_CHECK_PYTHON (the Python to build into when it holds the build tools, default python3),
# GPU_CHECK_VENV=1 (always build .venv with scripts/setup.sh), GPU_CHECK_SKIP_PIP=1 (in the
# .venv build: no best-effort installs of cupy-cuda13x / nvidia-nccl-cu13, e.g. on a machine
# without network). Without a GPU it stops at the first step that needs one, saying so.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-build/gpu_check}"
mkdir -p "$OUT"
export CMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}"
start=$(date +%s)
step() { echo "[gpu_check $(( $(date +%s) - start ))s] $*" >&2; }
fail() { echo "[gpu_check] FAILED: $*" >&2; exit 1; }

step "device"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader | tee "$OUT/device.txt" || echo "nvidia-smi not available" | tee "$OUT/device.txt"

# Two ways to build. A GPU image that already holds the build tools and the array libraries
# (scikit-build-core, pybind11, numpy, ml_dtypes, pytest, CuPy: the lent H200 machines have no
# network and hold all of these) gets ccompress installed into that Python with no download;
# anywhere else scripts/setup.sh makes .venv, as for the CPU.
SYS_PY="${GPU_CHECK_PYTHON:-python3}"
if [ "${GPU_CHECK_VENV:-0}" != 1 ] && "$SYS_PY" -c \
    "import scikit_build_core, pybind11, numpy, ml_dtypes, pytest, cupy" >/dev/null 2>&1; then
  PY="$(command -v "$SYS_PY")"
  step "build into $PY (its own build tools, no download; CUDA architectures $CMAKE_CUDA_ARCHITECTURES; log $OUT/setup.log)"
  "$PY" -m pip install --no-build-isolation --no-deps --no-index \
    -C build-dir=build/gpu-{wheel_tag} -C cmake.define.CMAKE_CUDA_ARCHITECTURES="$CMAKE_CUDA_ARCHITECTURES" \
    -v -e . >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; fail "build"; }
else
  step "build (scripts/setup.sh, CUDA architectures $CMAKE_CUDA_ARCHITECTURES; log $OUT/setup.log)"
  bash scripts/setup.sh >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; fail "build"; }
  PY="$ROOT/.venv/bin/python"
  if [ "${GPU_CHECK_SKIP_PIP:-0}" != 1 ]; then
    step "best-effort: cupy-cuda13x and nvidia-nccl-cu13 (for the CuPy tests and NCCL)"
    timeout 120 "$PY" -m pip install -q cupy-cuda13x nvidia-nccl-cu13 >"$OUT/pip.log" 2>&1 \
      || echo "[gpu_check] (pip install failed or timed out: CuPy tests skip; see $OUT/pip.log)" >&2
  fi
fi
grep -E "ccompress (MPI transport|CUDA module):" "$OUT/setup.log" | sed 's/^.*-- /[gpu_check] /' >&2 || true
"$PY" -c "from ccompress import _cuda; n = _cuda.device_count(); print('devices:', n); assert n > 0" \
  >"$OUT/devices.txt" 2>&1 || { cat "$OUT/devices.txt"; fail "no CUDA device visible to ccompress"; }
"$PY" -m ccompress.tools.info >"$OUT/build_info.json"

# Each step has a time limit (timeout: exit 124), so that a hang cannot eat the lease; the
# sizes are set so that the whole script takes well under 8 minutes on an H100/H200.
step "GPU tests (log $OUT/tests.log)"
# CCOMPRESS_REQUIRE_GPU turns a GPU test's skip into an error: here they must all run.
# A failing test does not stop the timings (one run of this script should give both); the
# script still exits non-zero at the end.
tests_ok=1
JOBS="$(( $(nproc) < 8 ? $(nproc) : 8 ))"
CCOMPRESS_REQUIRE_GPU=1 timeout 240 "$PY" -m pytest -q -rfEs -p no:cacheprovider -n "$JOBS" \
  tests/cuda/test_cuda.py tests/cuda/test_cuda_state.py tests/cuda/test_exact_div.py \
  tests/cuda/test_alltoall_cuda.py tests/collectives/test_ordered_executor.py \
  tests/jax/test_jax_cuda.py >"$OUT/tests.log" 2>&1 || { tests_ok=0; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -40 >&2 || true; }
tail -3 "$OUT/tests.log" >&2

# The torch and CuPy CUDA tests: torch CUDA tensors and CuPy arrays on virtual ranks of the
# GPU through the adapters (tp_all_reduce, the DDP hook's CUDA buckets, the backend's
# collectives on a CompressedProcessGroup per virtual rank). Their skips name what is missing;
# here a skip is a failure (the GPU image holds torch and CuPy), and so is one of these tests
# missing from the passed ones (-rA lists them).
step "torch and CuPy CUDA tests (log $OUT/torch_tests.log)"
"$PY" -c "import torch, cupy; assert torch.cuda.is_available(), 'torch sees no GPU'" \
  >"$OUT/torch_tests.log" 2>&1 || { tests_ok=0; echo "[gpu_check] torch or CuPy with CUDA missing:" >&2; tail -3 "$OUT/torch_tests.log" >&2; }
timeout 120 "$PY" -m pytest -q -rA -p no:cacheprovider tests/cuda/test_gpu_adapters.py \
  >>"$OUT/torch_tests.log" 2>&1 || { tests_ok=0; grep -E "^(FAILED|ERROR)" "$OUT/torch_tests.log" | head -20 >&2 || true; }
# Skipped: only the example under mpiexec that needs two GPUs may skip on one.
if grep -E "^SKIPPED" "$OUT/torch_tests.log" | grep -v "needs 2 CUDA" >&2; then
  tests_ok=0; echo "[gpu_check] torch CUDA tests skipped (above): they must run here" >&2
fi
for t in test_cupy_allreduce_on_callers_stream test_torch_cuda_tp_and_hook \
    test_torch_cuda_backend_on_virtual_ranks; do
  grep -qE "^PASSED .*::$t\[" "$OUT/torch_tests.log" \
    || { tests_ok=0; echo "[gpu_check] $t did not pass" >&2; }
done
tail -1 "$OUT/torch_tests.log" >&2

# ccompress.jax's CUDA handlers from a jitted program on a GPU array: only where this Python
# has a CUDA jaxlib (jax[cuda], which this script does not install); there it must not skip.
if "$PY" -c "import jax; jax.devices('cuda')" >/dev/null 2>&1; then
  step "ccompress.jax on the GPU (log $OUT/jax_tests.log)"
  timeout 120 "$PY" -m pytest -q -rfEs -p no:cacheprovider tests/jax/test_jax_cuda.py -k jit_on_gpu \
    >"$OUT/jax_tests.log" 2>&1 || { tests_ok=0; grep -E "^(FAILED|ERROR)" "$OUT/jax_tests.log" | head -20 >&2 || true; }
  if grep -E "^SKIPPED" "$OUT/jax_tests.log" >&2; then
    tests_ok=0; echo "[gpu_check] the ccompress.jax GPU test skipped (above): it must run here" >&2
  fi
  tail -1 "$OUT/jax_tests.log" >&2
else
  echo "[gpu_check] no CUDA jaxlib here: the jitted ccompress.jax GPU test is left out" >&2
fi

step "timings (kernels at ${GPU_CHECK_MIB:-256} MiB of bfloat16 and float32, loopback pipeline at ${GPU_CHECK_PIPE_MIB:-64} MiB, all-to-all at ${GPU_CHECK_A2A_MIB:-8,0.25} MiB)"
"$PY" -m perf.bench.gpu_bench --mib "${GPU_CHECK_MIB:-256}" --dtypes bfloat16,float32 \
  --pipe-mib "${GPU_CHECK_PIPE_MIB:-64}" --a2a-mib "${GPU_CHECK_A2A_MIB:-8,0.25}" \
  --out "$OUT" >"$OUT/bench.log" 2>&1 \
  || { tail -30 "$OUT/bench.log"; fail "timings"; }
cat "$OUT/table.md"
step "projection with the measured rates"
"$PY" -m perf.model.gpu_projection --kernels "$OUT/kernels.json" --md >"$OUT/projection.md" 2>&1 \
  || { tail -10 "$OUT/projection.md"; fail "projection"; }
[ "$tests_ok" = 1 ] || fail "GPU tests (the timings above ran anyway; see $OUT/tests.log and $OUT/torch_tests.log)"
step "done: $OUT/table.md, $OUT/kernels.json (copy it to perf/gpu/kernels.json), $OUT/projection.md"
