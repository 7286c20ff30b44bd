"""A node without the mediapipe wheel tracks and registers faces on tracking graphs converted
elsewhere (``swapcast models convert``, the image's build stage), loaded by the manifest
beside them; a stale, incomplete or missing folder is refused in one line that says what to run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpu.engine import EngineSettings, FaceEngine
from gpu.models.builtin import MediapipeFaceModels
from gpu.models.converted_tracking import (
    CONVERTER_VERSION, MANIFEST_NAME, TRACKING_TFLITE, TrackingModelsUnavailable, sha256_of, tracking_models,
)
from gpu.tracking.graph_tracker import GraphFaceTracker
from streamer.samples import moving_face_frames
from swapcast.cli import main


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    """A folder written by the CLI on this machine, which has the wheel."""
    folder = tmp_path_factory.mktemp("converted")
    assert main(["models", "convert", "--cache-dir", str(folder)]) == 0
    return folder


@pytest.fixture
def no_mediapipe(monkeypatch) -> None:
    """mediapipe neither importable nor findable (``find_spec`` answers None), as on a GPU image."""
    for name in [name for name in sys.modules if name == "mediapipe" or name.startswith("mediapipe.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mediapipe", None)
    with pytest.raises(ImportError):
        import mediapipe  # noqa: F401
    with pytest.raises(Exception, match="mediapipe: package is not installed"):
        MediapipeFaceModels.locate()


def _copy(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    return copy


def test_the_cli_writes_a_manifest_of_the_wheels_three_models(converted: Path) -> None:
    manifest = json.loads((converted / MANIFEST_NAME).read_text())
    wheel = MediapipeFaceModels.locate()
    assert manifest["converter_version"] == CONVERTER_VERSION
    assert set(manifest["models"]) == set(TRACKING_TFLITE)
    for path in (wheel.face_mesh, wheel.blazeface_short, wheel.blazeface_full):
        entry = manifest["models"][path.name]
        assert entry["tflite_sha256"] == sha256_of(path)
        onnx_file = converted / entry["onnx"]
        assert sha256_of(onnx_file) == entry["onnx_sha256"]
        assert onnx_file.stat().st_mode & 0o044 == 0o044  # readable by the image's unprivileged user


def test_without_mediapipe_the_engine_tracks_and_registers_on_the_converted_folder(
    converted: Path, no_mediapipe, grace_image, tracking_graphs
) -> None:
    assert tracking_models(converted) == {name: converted / json.loads((converted / MANIFEST_NAME).read_text())["models"][name]["onnx"]
                                          for name in TRACKING_TFLITE}
    frames = moving_face_frames(grace_image, 4, (640, 480), seed=3)
    engine = FaceEngine(EngineSettings(tracker="graphs", engine_cache_dir=converted))
    tracker, reference = engine.tracker(smoothing=False), GraphFaceTracker(tracking_graphs, smoothing=False)
    try:
        for index, frame in enumerate(frames):
            faces, expected = tracker.process(frame, index / 30), reference.process(frame, index / 30)
            assert len(faces) == len(expected) == 1
            # the same models as the wheel's converted in memory: the same mesh
            np.testing.assert_allclose(faces[0].mesh, expected[0].mesh, atol=1e-2)
        source = engine.register_source(grace_image)
        assert source.face.mesh is not None and source.identity.shape == (128,)
    finally:
        tracker.close()
        reference.close()
        engine.close()
    assert not any(name.startswith("mediapipe.") for name in sys.modules)


def test_a_node_with_neither_mediapipe_nor_the_tflite_package_builds_the_graphs(converted: Path) -> None:
    """As on the device machine: the loader imports neither the wheel nor the converter."""
    script = f"""
import sys
sys.modules["mediapipe"] = sys.modules["tflite"] = None
import numpy as np
from pathlib import Path
from gpu.runners.select import make_runner
from gpu.tracking.graphs import TrackingGraphs
graphs = TrackingGraphs(lambda model, name: make_runner(model, device="cpu", runner="onnxruntime", name=name, threads=1),
                        Path({str(converted)!r}))
mesh, presence = graphs.landmarks("s", [np.zeros((192, 192, 3), np.uint8)], np.array([[96.0, 96.0, 192.0, 0.0]], np.float32))
graphs.close()
assert mesh.shape == (1, 468, 3), mesh.shape
assert "gpu.models.tflite_onnx" not in sys.modules and "tflite" not in [m.split(".")[0] for m in sys.modules if sys.modules[m]]
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_without_mediapipe_or_a_converted_folder_the_error_says_what_to_run(no_mediapipe, tmp_path: Path) -> None:
    for cache_dir, problem in ((None, "engine.engine_cache_dir: not set"), (tmp_path, f"{MANIFEST_NAME} is missing")):
        with pytest.raises(TrackingModelsUnavailable) as raised:
            tracking_models(cache_dir)
        message = str(raised.value)
        assert problem in message and "swapcast models convert --cache-dir DIR" in message and "\n" not in message


def test_without_mediapipe_or_a_converted_folder_the_engine_stops_at_start(no_mediapipe, tmp_path: Path) -> None:
    with pytest.raises(TrackingModelsUnavailable, match=f"{MANIFEST_NAME} is missing"):
        FaceEngine(EngineSettings(tracker="graphs", engine_cache_dir=tmp_path))


def test_a_stale_manifest_is_refused_without_mediapipe(converted: Path, tmp_path: Path, no_mediapipe) -> None:
    stale = _copy(converted, tmp_path)
    manifest = json.loads((stale / MANIFEST_NAME).read_text())
    manifest["converter_version"] = CONVERTER_VERSION - 1
    (stale / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(TrackingModelsUnavailable,
                       match=f"stale: written by converter version {CONVERTER_VERSION - 1}, this swapcast needs version {CONVERTER_VERSION}"):
        tracking_models(stale)


def test_a_model_cut_short_is_refused_without_mediapipe(converted: Path, tmp_path: Path, no_mediapipe) -> None:
    damaged = _copy(converted, tmp_path)
    landmark = next(damaged.glob("face_landmark-*.onnx"))
    landmark.write_bytes(landmark.read_bytes()[:1000])
    with pytest.raises(TrackingModelsUnavailable, match="not the file the manifest lists"):
        tracking_models(damaged)


def test_with_mediapipe_a_stale_folder_is_converted_again_by_hash(converted: Path, tmp_path: Path) -> None:
    folder = _copy(converted, tmp_path)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["converter_version"] = CONVERTER_VERSION - 1
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    found = tracking_models(folder)  # the wheel is here: its files' hashes decide, as before manifests
    assert set(found) == set(TRACKING_TFLITE) and all(path.parent == folder for path in found.values())
    assert json.loads((folder / MANIFEST_NAME).read_text())["converter_version"] == CONVERTER_VERSION


def test_doctor_lists_the_converted_models_by_the_manifest_without_mediapipe(
    converted: Path, no_mediapipe, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("SWAPCAST_ENGINE__ENGINE_CACHE_DIR", str(converted))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    listed = json.loads((converted / MANIFEST_NAME).read_text())["models"]
    for tflite in TRACKING_TFLITE:
        line = next((line for line in out.splitlines() if line.startswith(f"converted     {tflite}")), None)
        assert line is not None and str(converted / listed[tflite]["onnx"]) in line, out
    assert "engine        swapper=" in out and "builtin       dlib_identity" in out
    assert not any(line.startswith("builtin       face_mesh") for line in out.splitlines())


def test_doctor_says_what_to_run_without_mediapipe_or_a_manifest(no_mediapipe, monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("SWAPCAST_ENGINE__ENGINE_CACHE_DIR", str(tmp_path))
    assert main(["doctor"]) == 2
    out = capsys.readouterr().out
    tracking = [line for line in out.splitlines() if line.startswith("tracking      not usable")]
    assert len(tracking) == 1 and f"{MANIFEST_NAME} is missing" in tracking[0], out
    assert "swapcast models convert --cache-dir DIR" in tracking[0]
    assert "engine        cannot start" in out
