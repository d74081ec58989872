#!/usr/bin/env bash
# Builds the API reference from the docstrings (NumPy style: Parameters, Returns, Raises)
# with pdoc (a test extra) into build/api (or the folder given): open build/api/index.html.
# Any warning pdoc prints fails the build. Runs in .venv (scripts/setup.sh; PYTHON= another
# interpreter). ccompress.torch is documented where torch is installed (CI has it;
# CCOMPRESS_REQUIRE_TORCH=1 makes its absence an error); elsewhere it is left out, said so.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
OUT="${1:-$ROOT/build/api}"
# The public modules; a package whose __init__ names its __all__ shows only those names, so
# its modules are listed too (ccompress's __all__ brings ccompress.simulate). The old import
# paths that warn (kept for a while) are left out.
MODULES=(
  ccompress ccompress.codec ccompress.communicator ccompress.error_feedback
  ccompress.bounds ccompress.perfmodel ccompress.autocodec ccompress.adam_fidelity
  ccompress.compressors ccompress.tools
  '!ccompress.compressors.error_feedback' '!ccompress.tools.bounds' '!ccompress.tools.perfmodel'
  '!ccompress.tools.adam_fidelity'
)
if "$PY" -c "import torch" 2>/dev/null; then
  MODULES+=(ccompress.torch ccompress.torch.ddp ccompress.torch.gift ccompress.torch.tensor_parallel
            ccompress.torch.tsr_adam ccompress.torch.backend)
elif [ "${CCOMPRESS_REQUIRE_TORCH:-0}" = 1 ]; then
  echo "[docs] ERROR: torch is not installed and CCOMPRESS_REQUIRE_TORCH=1" >&2
  exit 1
else
  echo "[docs] torch is not installed: ccompress.torch is left out of the reference" >&2
fi
mkdir -p "$ROOT/build"
ERR="$ROOT/build/docs.stderr"
rm -rf "$OUT"
# pdoc reports what it cannot document (an import that fails, an annotation it cannot parse,
# a docstring it cannot read) as Python warnings on stderr, and still writes the pages.
rc=0
"$PY" -m pdoc --docformat numpy -o "$OUT" "${MODULES[@]}" 2>"$ERR" || rc=$?
if [ "$rc" -ne 0 ] || [ -s "$ERR" ]; then
  cat "$ERR" >&2
  echo "[docs] ERROR: pdoc failed or warned (exit $rc); see above" >&2
  exit 1
fi
echo "[docs] API reference: $OUT/index.html ($(find "$OUT" -name '*.html' | wc -l) pages)" >&2
