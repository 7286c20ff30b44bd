"""The whole-pipeline benchmark's node tick (gpu.pipeline_bench) on the CPU: every session's
face is found where the scene put it and swapped there, the rest of the frame comes out as
it went in, and batching the sessions changes nothing in the result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpu.models.converted_tracking import MANIFEST_NAME, TrackingModelsUnavailable
from gpu.models.synthetic import build_synthetic_inswapper
from gpu.models.tflite_onnx import convert_builtin
from gpu.options import SwapOptions
from gpu.pipeline_bench.pipeline import NodeTick, host_rings
from gpu.pipeline_bench.scene import Head, load_heads, render_rings, save_heads
from gpu.pipeline_bench.stages import InswapperStage, make_tracking
from gpu.runners.select import make_runner
from streamer.samples import astronaut, grace_hopper
from swapcast.benchmarks.detection import FACE_BOXES

SESSIONS = 2


@pytest.fixture(scope="module")
def carry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What scripts/fetch-gpu-wheels.sh carries: converted models and the sample faces."""
    folder = tmp_path_factory.mktemp("carry")
    convert_builtin(folder / "models")
    heads = [Head("astronaut", astronaut(), FACE_BOXES["astronaut"]), Head("grace_hopper", grace_hopper(), FACE_BOXES["grace_hopper"])]
    save_heads(folder / "faces.npz", heads)
    return folder


def _node(carry: Path) -> NodeTick:
    rings = render_rings(load_heads(carry / "faces.npz"), variants=SESSIONS, frames=8)
    cpu_runner = lambda model, name: make_runner(model, device="cpu", name=name)  # noqa: E731
    tracking = make_tracking(carry / "models", cpu_runner, detect_every=4)
    swap = InswapperStage(cpu_runner(build_synthetic_inswapper(width=8, blocks=2), "synthetic"), SESSIONS, SwapOptions())
    return NodeTick(host_rings(rings, cuda=False), [r.boxes for r in rings], SESSIONS, tracking, swap, cuda=False, layout="i420")


@pytest.mark.slow
def test_tick_swaps_each_sessions_face_where_it_is_and_leaves_the_rest(carry: Path) -> None:
    node = _node(carry)
    node.run(0, batched=True)
    assert node.faces_swapped == SESSIONS
    assert node.tracking_iou(0) > 0.7
    height = node.host_out.shape[1] * 2 // 3
    for session in range(SESSIONS):
        source = node.host_rings[session % len(node.host_rings)][node.phases[session]]
        box = node.truth[session % len(node.truth)][node.phases[session]].astype(int)
        change = np.abs(node.host_out[session, :height].astype(int) - source[:height].astype(int))
        x0, y0, x1, y1 = box
        assert change[y0:y1, x0:x1].mean() > 5, "the face was not swapped"
        margin = (x1 - x0) // 2  # the paste mask stays inside the face box; the model's crop reaches a little past it
        outside = np.ones_like(change, dtype=bool)
        outside[max(0, y0 - margin) : y1 + margin, max(0, x0 - margin) : x1 + margin] = False
        assert change[outside].max() <= 2, "pixels away from the face changed (more than the YUV round trip)"

    one_at_a_time = _node(carry)
    one_at_a_time.run(0, batched=False)
    assert one_at_a_time.faces_swapped == SESSIONS
    difference = np.abs(one_at_a_time.host_out.astype(int) - node.host_out.astype(int))
    assert difference.max() <= 2 and difference.mean() < 0.01


def test_the_tracking_models_are_found_by_the_manifest_not_by_file_name(carry: Path, tmp_path: Path) -> None:
    """As a node without mediapipe: a later-sorting file of another converter version beside
    them is not picked up, and a model cut short is refused, naming the file."""
    models = tmp_path / "models"
    shutil.copytree(carry / "models", models)
    for stem in ("face_detection_full_range_sparse", "face_landmark"):
        (models / f"{stem}-ffffffffffff-c99.onnx").write_bytes(b"not a model")
    opened: list[tuple[str, str]] = []

    def cpu_runner(model: Path, name: str):
        opened.append((model.name, name))
        return make_runner(model, device="cpu", name=name)

    make_tracking(models, cpu_runner, detect_every=4)
    listed = json.loads((models / MANIFEST_NAME).read_text())["models"]
    assert opened == [(listed["face_detection_full_range_sparse.tflite"]["onnx"], "face_detection_full_range"),
                      (listed["face_landmark.tflite"]["onnx"], "face_landmark")]

    landmarker = models / listed["face_landmark.tflite"]["onnx"]
    landmarker.write_bytes(landmarker.read_bytes()[:1000])
    with pytest.raises(TrackingModelsUnavailable, match="cut short") as refused:
        make_tracking(models, cpu_runner, detect_every=4)
    assert landmarker.name in str(refused.value)
