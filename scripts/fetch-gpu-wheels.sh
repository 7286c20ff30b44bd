#!/usr/bin/env bash
# Fetch into .whl/ the wheels scripts/gpu-check.sh installs on the GPU test machine (Python
# 3.12, manylinux x86_64; no network there). That image already has CUDA 13, CuPy 14,
# PyTorch 2.11, onnx, onnxruntime (CPU), numpy, opencv-python-headless, uvloop and aiohttp;
# gpu/ needs only onnx2torch on top, and the tests need pytest. Total ~3 MiB (limit 64 MiB).
#
# Not brought, on purpose:
# - torchvision: onnx2torch imports it for NMS/RoiAlign only; gpu/runners/torch_cuda.py
#   stands in for it, and a torchvision would have to match the image's torch build exactly.
# - scipy (~35 MiB), mediapipe, dlib, av, pydantic, pyyaml: the media stack and the CLI.
#   The GPU check runs gpu/ alone (python -m gpu.runners.bench), never gpu/swappers/mesh.py
#   (the only scipy user, for Delaunay) nor the FaceEngine.
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
mkdir -p .whl
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
du -ch .whl/*.whl | tail -1
