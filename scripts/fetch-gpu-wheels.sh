#!/usr/bin/env bash
# Everything scripts/gpu-check.sh needs on the GPU test machine (Python 3.12, manylinux
# x86_64, no network there), made here: scripts/fetch-gpu-wheels.sh [--carry-only DIR]
#
# - .whl/: the wheels it installs. That image already has CUDA 13, CuPy 14, PyTorch 2.11,
#   onnx, onnxruntime (CPU), numpy, opencv-python-headless, scipy, uvloop and aiohttp; gpu/
#   needs only onnx2torch on top, and the tests pytest (pinned here, so both machines run one).
# - .gpu-carry/: what the pipeline benchmark reads and that image cannot make (it has no
#   mediapipe and no media stack): models/ holds the mediapipe wheel's face detection and
#   landmark models converted to ONNX (`swapcast models convert`), faces.npz the two sample
#   face photos with their face boxes.
# Both folders are git-ignored; the device call carries them: carry [".whl", ".gpu-carry"].
# The sizes are printed against the 64 MiB a device call may carry (tracked files included).
#
# Not brought, on purpose:
# - torchvision: onnx2torch imports it for NMS/RoiAlign only; gpu/runners/torch_cuda.py
#   stands in for it, and a torchvision would have to match the image's torch build exactly.
# - mediapipe, dlib, av, aiortc, pydantic, pyyaml: the media stack and the CLI. The GPU
#   check runs gpu/ alone (python -m gpu.pipeline_bench, python -m gpu.runners.bench).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(
  onnx2torch==1.5.15
  pytest==9.2.0
  pluggy==1.7.0
  iniconfig==2.3.1
  packaging==26.4
  pygments==2.21.0
  pytest-timeout==2.4.0
)
LIMIT_MIB=64
HOST_PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && HOST_PY=.venv/bin/python

# make_carry DIR: converted models and the sample faces, from this machine's wheels
make_carry() {
  local dir="$1"
  rm -rf "$dir/models"
  mkdir -p "$dir/models"
  "$HOST_PY" -m swapcast.cli models convert --cache-dir "$dir/models"
  "$HOST_PY" - "$dir/faces.npz" <<'PYEOF'
import sys
from pathlib import Path

from gpu.pipeline_bench.scene import Head, save_heads
from streamer.samples import astronaut, grace_hopper
from swapcast.benchmarks.detection import FACE_BOXES

photos = {"astronaut": astronaut(), "grace_hopper": grace_hopper()}
save_heads(Path(sys.argv[1]), [Head(name, photo, FACE_BOXES[name]) for name, photo in photos.items()])
PYEOF
}

if [ "${1:-}" = "--carry-only" ]; then
  make_carry "${2:?usage: $0 --carry-only DIR}"
  exit 0
fi

mkdir -p .whl
"${PYTHON:-python3}" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
make_carry .gpu-carry

tree_bytes=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 cat 2>/dev/null | wc -c)
whl_bytes=$(cat .whl/*.whl | wc -c)
carry_bytes=$(find .gpu-carry -type f -print0 | xargs -0 cat | wc -c)
total=$((tree_bytes + whl_bytes + carry_bytes))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "working tree $(mib "$tree_bytes") + .whl $(mib "$whl_bytes") + .gpu-carry $(mib "$carry_bytes") = $(mib "$total") of ${LIMIT_MIB} MiB"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "too much to carry in one device call" >&2
  exit 1
fi
