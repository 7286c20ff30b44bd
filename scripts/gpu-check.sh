#!/usr/bin/env bash
# The one command for the GPU test machine (one H200; Python 3.12, CUDA 13, CuPy 14,
# PyTorch 2.11, onnx, onnxruntime CPU, numpy, opencv-python-headless; no network, no
# TensorRT, no media stack): scripts/gpu-check.sh OUT_DIR
#
# Made here first: scripts/fetch-gpu-wheels.sh (fills .whl/ and .gpu-carry/); the device
# call carries both: run(command="bash scripts/gpu-check.sh $OUT", carry=[".whl", ".gpu-carry"],
# timeout_s=480). The whole script keeps to GPU_CHECK_BUDGET_S (default 420 s): every step
# runs under `timeout`, cut to what the budget leaves after the time kept for the steps
# after it; a step the budget cannot fit is recorded as skipped, never silently dropped.
#
#  1. device-image: what that image has and lacks (versions, and which of the modules the
#     project uses import there) -> OUT_DIR/device-image.json, for the next session to read
#  2. install-wheels: what it lacks, from .whl/ (into GPU_CHECK_SITE, on PYTHONPATH)
#  3. imports: gpu/ on that stack; carry-manifest: the carried converted models load by their
#     manifest, as a node without mediapipe loads them (gpu/models/converted_tracking.py)
#  4. pipeline-bench: `python -m gpu.pipeline_bench` (gpu/pipeline_bench): N single-face
#     720p30 sessions from decoded frames through detection, landmarks, swap (synthetic
#     inswapper-class model and the built-in mesh3d swapper), paste-back and RGB -> YUV,
#     batched vs unbatched, N swept to the largest held at tick p99 <= 60 ms, GPU memory per
#     session, host CPU ms per frame, per-stage ms -> OUT_DIR/pipeline-bench.json
#  5. gpu-tests: the tests marked gpu (CuPy kernels vs their CPU twins, the torch runner and
#     the device swap path on CUDA) -> OUT_DIR/gpu-junit.xml
#  6. bench-gpu: the runners alone (`python -m gpu.runners.bench`: batch 1/8/32 TFLOP/s)
#  7. cpu-twin-tests, with what time is left
#  8. OUT_DIR/gpu-report.json: every step (exit code, seconds), the carry's size, the test
#     counts, both benchmarks and their headline; OUT_DIR/gpu-check.log holds every output.
# At most 7 files land in OUT_DIR (the device call brings back 8).
#
# GPU_CHECK_DRY_RUN=1 runs it on a machine without CUDA (CI: tests/test_gpu_check.py): the
# carry is made afresh in a temporary folder, the gpu tests are only collected (they must
# import), and the benchmarks run tiny on the CPU. The TensorRT runner is not exercised
# here (no TensorRT on any of our machines).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: scripts/gpu-check.sh OUT_DIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/gpu-check.log"
WORK="$(mktemp -d)"
STEPS="$WORK/steps.tsv"
: >"$LOG"
: >"$STEPS"
DRY="${GPU_CHECK_DRY_RUN:-0}"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && [ "$DRY" = 1 ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
SITE="${GPU_CHECK_SITE:-/tmp/swapcast-gpu-site}"
CARRY="${GPU_CHECK_CARRY:-.gpu-carry}"
BUDGET="${GPU_CHECK_BUDGET_S:-420}"
START=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

log() { echo "[gpu-check $(date +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME LIMIT KEEP COMMAND...: run under timeout (LIMIT, cut so that KEEP seconds of the
# budget stay for the steps after it), log everything, record rc and duration
step() {
  local name="$1" limit="$2" keep="$3" start rc allowed
  shift 3
  allowed=$(($(left) - keep))
  [ "$allowed" -lt "$limit" ] && limit=$allowed
  if [ "$limit" -lt 5 ]; then
    log "step $name: skipped, the budget is spent ($(left) s left, $keep s kept for later steps)"
    printf '%s\tbudget\t0\n' "$name" >>"$STEPS"
    return 1
  fi
  log "step $name (limit ${limit}s): $*"
  start=$(date +%s%N)
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( ($(date +%s%N) - start) / 1000000 ))" >>"$STEPS"
  log "step $name: exit $rc"
  return $rc
}

log "dry run: $DRY; python: $PY; out: $OUT; budget: ${BUDGET}s"
step device-image 30 0 "$PY" - "$OUT/device-image.json" <<'PYEOF'
"""What the image has: versions, and whether each module the project uses would import."""
import importlib.metadata as metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys

MODULES = {  # module: distribution
    "torch": "torch", "cupy": "cupy-cuda13x", "onnx": "onnx", "onnxruntime": "onnxruntime",
    "onnx2torch": "onnx2torch", "torchvision": "torchvision", "numpy": "numpy", "cv2": "opencv-python-headless",
    "scipy": "scipy", "skimage": "scikit-image", "matplotlib": "matplotlib", "pytest": "pytest",
    "tensorrt": "tensorrt", "tflite": "tflite", "mediapipe": "mediapipe-numpy2", "dlib": "dlib-bin",
    "av": "av", "aiortc": "aiortc", "aiohttp": "aiohttp", "uvloop": "uvloop", "redis": "redis",
    "pydantic": "pydantic", "yaml": "pyyaml", "PyNvVideoCodec": "pynvvideocodec",
}
found = {}
for module, dist in MODULES.items():
    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        version = None
    found[module] = {"importable": importlib.util.find_spec(module) is not None, "version": version}
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=20).stdout.strip()
except (OSError, subprocess.TimeoutExpired) as exc:
    smi = f"nvidia-smi: {exc}"
report = {"python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count(),
          "nvidia_smi": smi, "modules": found, "missing": sorted(m for m, v in found.items() if not v["importable"])}
json.dump(report, open(sys.argv[1], "w"), indent=2)
print(json.dumps(report))
PYEOF

if compgen -G ".whl/*.whl" >/dev/null; then
  step install-wheels 60 0 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:$SITE"  # after the repo, before the image's site-packages
else
  log "no .whl/ wheels: installing nothing (run scripts/fetch-gpu-wheels.sh here first)"
  printf 'install-wheels\tskipped\t0\n' >>"$STEPS"
fi

if [ "$DRY" = 1 ]; then
  CARRY="$WORK/carry"
  step carry 120 0 bash scripts/fetch-gpu-wheels.sh --carry-only "$CARRY"
elif [ ! -f "$CARRY/faces.npz" ]; then
  log "$CARRY is missing: run scripts/fetch-gpu-wheels.sh here and carry .gpu-carry"
fi

step imports 60 0 "$PY" -c "import gpu.device, gpu.kernels.ops, gpu.kernels.cuda, gpu.runners.select, gpu.runners.torch_cuda, gpu.runners.tensorrt, gpu.models.synthetic, gpu.tracking.blazeface_decode, gpu.pipeline_bench.stages; from gpu.runners.torch_cuda import import_onnx2torch; import_onnx2torch(); print('gpu/ imports')"
step carry-manifest 30 0 "$PY" -c "import sys; from pathlib import Path; from gpu.models.converted_tracking import CONVERTER_VERSION, TrackingManifest; folder = Path(sys.argv[1]); print(TrackingManifest.read(folder).files(folder, CONVERTER_VERSION))" "$CARRY/models"

PYTEST=("$PY" -m pytest -p no:cacheprovider -q -ra)
if [ "$DRY" = 1 ]; then
  step pipeline-bench 150 120 "$PY" -m gpu.pipeline_bench --carry "$CARRY" --device cpu --small --sessions 1,2 \
    --seconds 0.2 --min-ticks 2 --warmup 1 --ring-frames 12 --variants 2 --budget-s 120 --json "$OUT/pipeline-bench.json"
  step gpu-tests-collect 120 60 "${PYTEST[@]}" --collect-only -m gpu tests/gpu tests/test_kernels.py tests/test_runners.py
  step bench-gpu 120 0 "$PY" -m gpu.runners.bench --device cpu --small --seconds 0.2 --sessions 2 --batches 1,4 --json "$OUT/bench-gpu.json"
else
  # the headline first, keeping up to 170 s (at most 2/5 of what is left) for the tests and
  # the runner benchmark; its own --budget-s keeps it inside the step's limit
  keep=$(( $(left) * 2 / 5 ))
  [ "$keep" -gt 170 ] && keep=170
  allowed=$(( $(left) - keep ))
  [ "$allowed" -gt 300 ] && allowed=300
  step pipeline-bench "$allowed" "$keep" "$PY" -m gpu.pipeline_bench --carry "$CARRY" --device cuda \
    --budget-s $((allowed - 20)) --json "$OUT/pipeline-bench.json"
  step gpu-tests 120 50 "${PYTEST[@]}" -m gpu tests/gpu tests/test_kernels.py tests/test_runners.py --junitxml="$OUT/gpu-junit.xml"
  step bench-gpu 90 15 "$PY" -m gpu.runners.bench --device cuda --sessions 32 --seconds 0.5 --json "$OUT/bench-gpu.json"
  step cpu-twin-tests 60 5 "${PYTEST[@]}" -m "not gpu" tests/test_kernels.py tests/test_runners.py --junitxml="$OUT/cpu-junit.xml"
fi

"$PY" - "$OUT" "$DRY" "$STEPS" "$CARRY" <<'PYEOF' 2>>"$LOG"
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path

out, dry, steps_file, carry = Path(sys.argv[1]), sys.argv[2] == "1", Path(sys.argv[3]), Path(sys.argv[4])
steps = []
for line in steps_file.read_text().splitlines():
    name, rc, seconds = line.split("\t")
    steps.append({"step": name, "exit": rc if rc in ("skipped", "budget") else int(rc), "seconds": round(int(seconds or 0) / 1000, 1)})

def junit(name):
    path = out / name
    if not path.exists():
        return None
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["failed_tests"] = [
        f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    counts["skipped_tests"] = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase") if c.find("skipped") is not None]
    return counts

def load(name):
    path = out / name
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except ValueError as exc:
        return {"unreadable": str(exc)}

def runner_headline(bench):
    """The runners alone: the synthetic inswapper by batch size, and N sessions' faces per tick."""
    try:
        model = bench["models"]["synthetic_inswapper"]
    except (KeyError, TypeError):
        return None
    return {
        "model": f"synthetic inswapper, {model.get('gflop_per_face')} GFLOP/face (no real weights exist here)",
        "runner": model["runner"],
        "faces_per_s_by_batch": {k: v["faces_per_s"] for k, v in model["batch"].items()},
        "tflops_by_batch": {k: v.get("tflops") for k, v in model["batch"].items()},
        "sessions_p99_ms": {k: v["p99_ms"] for k, v in model["sessions"].items()},
    }

def size(path):
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else []
    return round(sum(p.stat().st_size for p in files) / 2**20, 2)

pipeline = load("pipeline-bench.json")
gpu_tests = junit("gpu-junit.xml")
failed = [s["step"] for s in steps if s["exit"] not in (0, "skipped")]
if gpu_tests and gpu_tests["skipped"]:
    failed.append("gpu-tests skipped some tests (a skip is a failure here too)")
report = {
    "dry_run": dry,
    "ok": not failed,
    "failed": failed,
    "steps": steps,
    "carry_mib": {".whl": size(Path(".whl")), "carry": size(carry), "limit": 64},
    "device_image": load("device-image.json"),
    "headline": {
        "pipeline": (pipeline or {}).get("headline"),
        "runners": runner_headline(load("bench-gpu.json")),
    },
    "pipeline_bench": pipeline,
    "gpu_tests": gpu_tests,
    "cpu_twin_tests": junit("cpu-junit.xml"),
    "bench_gpu": load("bench-gpu.json"),
    "not_exercised": [
        "TensorRT runner (no TensorRT on this machine)",
        "NVENC/NVDEC (no media stack in this image): the pipeline benchmark uploads decoded I420 "
        "and downloads the encoder's YUV, each its own stage",
        "ONNX Runtime's CUDA provider with IO binding (onnxruntime-gpu is too big to bring)",
        "the FaceEngine / FrameSwapper objects and mediapipe's own graphs (not in this image): the "
        "pipeline benchmark runs their device path (converted tracking graphs, gpu.tracking, the "
        "swappers, the kernels) stage by stage",
    ],
}
(out / "gpu-report.json").write_text(json.dumps(report, indent=2))
print(json.dumps({"ok": report["ok"], "failed": failed, "headline": report["headline"]["pipeline"]}))
PYEOF
rm -rf "$WORK"
log "report: $OUT/gpu-report.json ($(( $(date +%s) - START )) s)"
"$PY" -c "import json,sys; sys.exit(0 if json.load(open('$OUT/gpu-report.json'))['ok'] else 1)"
