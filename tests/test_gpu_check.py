"""scripts/gpu-check.sh in its dry run (no CUDA): the script the GPU machine runs must not
find out it is broken on that machine, whose minutes are few. The dry run records the
image's modules, makes the carry (converted models, sample faces) afresh, runs the
whole-pipeline benchmark tiny on the CPU, collects the gpu tests (they must import), runs a
small runner benchmark, and writes the same report the GPU run writes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_dry_run_writes_a_complete_report(tmp_path: Path) -> None:
    env = {**os.environ, "GPU_CHECK_DRY_RUN": "1", "GPU_CHECK_SITE": str(tmp_path / "site")}
    done = subprocess.run(
        ["bash", "scripts/gpu-check.sh", str(tmp_path / "out")],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False,
    )
    out = tmp_path / "out"
    report = json.loads((out / "gpu-report.json").read_text())
    log = (out / "gpu-check.log").read_text()
    assert done.returncode == 0 and report["ok"], f"{report['failed']}\n{log[-4000:]}"
    assert len(list(out.iterdir())) <= 8  # what one device call brings back

    steps = {step["step"]: step["exit"] for step in report["steps"]}
    for name in ("device-image", "carry", "imports", "pipeline-bench", "gpu-tests-collect", "bench-gpu"):
        assert steps[name] == 0, f"{name}: {steps[name]}"
    assert "tests/gpu/test_gpu_pipeline.py::" in log  # the gpu tests were collected, so they import
    assert "tests/gpu/test_gpu_pipeline_bench.py::" in log

    image = report["device_image"]
    assert image["modules"]["numpy"]["importable"] and "missing" in image

    pipeline = report["pipeline_bench"]
    for name in ("synthetic_inswapper", "builtin_mesh3d"):
        entry = pipeline["swappers"][name]
        assert "error" not in entry, entry.get("error")
        assert set(entry["points"]) == {"1", "2"}
        for mode in ("batched", "unbatched"):
            row = entry["points"]["2"][mode]
            assert row["ticks"] >= 2 and row["faces_per_frame"] >= 0.9, row  # every session's face swapped
            assert row["tracking_iou"] > 0.6, row  # ... where it truly is
            assert row["host_cpu_ms_per_frame"] > 0
        assert entry["points"]["2"]["batched"]["stage_host_ms_per_tick"]["swap_model"] > 0
        assert set(entry["max_sessions_held"]) == {"batched", "unbatched"}
    headline = report["headline"]["pipeline"]
    assert set(headline) == {"synthetic_inswapper", "builtin_mesh3d"}
    assert headline["synthetic_inswapper"]["batched_over_unbatched"] > 0
    assert pipeline["models"]["face_landmark"]["runner"] == "onnxruntime"

    assert report["headline"]["runners"]["runner"] == "onnxruntime"
    assert set(report["headline"]["runners"]["sessions_p99_ms"]) == {"1", "2"}
    assert set(report["headline"]["runners"]["faces_per_s_by_batch"]) == {"1", "4"}
    assert 5 < report["carry_mib"]["carry"] < 64
    assert "TensorRT runner (no TensorRT on this machine)" in report["not_exercised"]
