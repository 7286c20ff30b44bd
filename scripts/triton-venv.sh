#!/usr/bin/env bash
# A virtualenv with a real Triton Inference Server (nvidia-pytriton's tritonserver, Python
# backend) and ONNX Runtime, for the tests in tests/triton_runner/. Built on Debian's python3.11:
# pytriton's Python-backend stub fails at model load under pyenv's 3.11.7
# ('_thread.RLock' object has no attribute '_recursion_count'). Idempotent: a stamp file
# names what was installed; an existing, matching venv is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRITON_VENV:-.venv-triton}
PACKAGES="nvidia-pytriton==0.7.0 onnxruntime==1.32.0 numpy<2"
STAMP="$VENV/.swapcast-stamp"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$PACKAGES" ]]; then
  exit 0
fi
PYTHON=/usr/bin/python3.11
if [[ ! -x $PYTHON ]]; then
  echo "triton-venv: $PYTHON is missing (apt-get install python3.11 python3.11-venv libpython3.11)" >&2
  exit 1
fi
rm -rf "$VENV"
$PYTHON -m venv "$VENV"
# shellcheck disable=SC2086
"$VENV/bin/pip" install -q --disable-pip-version-check $PACKAGES
SERVER="$VENV/lib/python3.11/site-packages/pytriton/tritonserver"
cp "$SERVER/python_backend_stubs/3.11/triton_python_backend_stub" "$SERVER/backends/python/"
echo "$PACKAGES" > "$STAMP"
