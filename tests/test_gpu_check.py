"""scripts/gpu-check.sh in its dry run (no CUDA): the script the GPU machine runs must not
find out it is broken on that machine, whose minutes are few. The dry run collects the gpu
tests (they must import), runs the CPU twins and a small CPU benchmark, and writes the same
report the GPU run writes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_writes_a_complete_report(tmp_path: Path) -> None:
    env = {**os.environ, "GPU_CHECK_DRY_RUN": "1", "GPU_CHECK_SITE": str(tmp_path / "site")}
    done = subprocess.run(
        ["bash", "scripts/gpu-check.sh", str(tmp_path / "out")],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False,
    )
    report = json.loads((tmp_path / "out" / "gpu-report.json").read_text())
    log = (tmp_path / "out" / "gpu-check.log").read_text()
    assert done.returncode == 0 and report["ok"], f"{report['failed']}\n{log[-4000:]}"

    steps = {step["step"]: step["exit"] for step in report["steps"]}
    for name in ("environment", "imports", "gpu-tests-collect", "cpu-twin-tests", "bench-gpu"):
        assert steps[name] == 0, f"{name}: {steps[name]}"
    assert "tests/gpu/test_gpu_pipeline.py::" in log  # the gpu tests were collected, so they import
    assert report["cpu_twin_tests"]["tests"] > 20 and report["cpu_twin_tests"]["failures"] == 0

    headline = report["headline"]
    assert headline["runner"] == "onnxruntime"
    assert headline["batched_vs_unbatched"]["ratio"] > 0
    assert set(headline["max_sessions_held_720p30"]) == {"batched", "unbatched"}
    assert set(headline["batched_p99_ms"]) == {"1", "2", "4"}
    pipeline = report["bench_gpu"]["models"]["synthetic_inswapper"]["pipeline_720p"]
    assert pipeline["4"]["batched"]["n"] > 0 and pipeline["4"]["unbatched"]["n"] > 0
    assert "TensorRT runner (no TensorRT on this machine)" in report["not_exercised"]
