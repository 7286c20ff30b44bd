"""The node's tracking graphs: rows of several sessions share runner calls and each gets
its own answer; the Torch runner (the GPU path's code, here fp32 on the CPU) answers as
ONNX Runtime does."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from gpu.runners.select import make_runner
from gpu.tracking import face_roi
from gpu.tracking.graphs import TrackingGraphs, calls_per_machine
from streamer.samples import grace_hopper, moving_face_frames


def _graphs(runner: str, delay_ms: float = 4.0, wait_for_company: bool | None = None) -> TrackingGraphs:
    return TrackingGraphs(lambda model, name: make_runner(model, device="cpu", runner=runner, name=name, threads=1),
                          max_queue_delay_ms=delay_ms, wait_for_company=wait_for_company)


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return _clip()


def _clip() -> list[np.ndarray]:
    """Grace Hopper moving over four 640x480 frames."""
    return moving_face_frames(grace_hopper(), 4, (640, 480), seed=2)


def _rois(graphs: TrackingGraphs, frames: list[np.ndarray]) -> np.ndarray:
    rois = []
    for frame in frames:
        (faces,) = graphs.detect("setup", "full", frame, [(0, 0, 640, 480)])
        rois.append(face_roi.roi_from_detection(faces[0].box[None], faces[0].kps[None])[0])
    return np.stack(rois)


def test_rows_of_several_sessions_share_a_batch_and_equal_rows_run_alone(frames, tracking_graphs) -> None:
    rois = _rois(tracking_graphs, frames)
    alone = [tracking_graphs.landmarks("alone", [frame], roi[None]) for frame, roi in zip(frames, rois, strict=True)]
    graphs = _graphs("onnxruntime", delay_ms=200.0, wait_for_company=True)  # long enough for all four sessions to join
    sessions = [f"session-{k}" for k in range(len(frames))]
    for session in sessions:
        graphs.attach(session)
    results: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    start = threading.Barrier(len(frames))

    def session_main(k: int) -> None:
        start.wait()
        results[k] = graphs.landmarks(sessions[k], [frames[k]], rois[k][None])

    try:
        threads = [threading.Thread(target=session_main, args=(k,)) for k in range(len(frames))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        metrics = graphs.metrics()["landmarks"]
    finally:
        graphs.close()
    assert metrics["rows"] == len(frames) and metrics["batches"] < len(frames), metrics
    for k, (points, presence) in enumerate(alone):
        np.testing.assert_allclose(results[k][0], points, atol=1e-3)
        np.testing.assert_allclose(results[k][1], presence, atol=1e-5)


def test_on_the_cpu_sessions_calls_run_at_once_side_by_side_without_waiting_for_company(frames, tracking_graphs) -> None:
    rois = _rois(tracking_graphs, frames)
    graphs = _graphs("onnxruntime", delay_ms=10_000.0)  # the CPU default: no waiting, whatever the delay
    sessions = ["a", "b"]
    for session in sessions:
        graphs.attach(session)
    results: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    start = threading.Barrier(2)

    def session_main(k: int) -> None:
        start.wait()
        results[k] = graphs.landmarks(sessions[k], [frames[k]], rois[k][None])

    try:
        threads = [threading.Thread(target=session_main, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(5.0)  # far less than the 10 s a waiting row would wait
        assert not any(thread.is_alive() for thread in threads)
        metrics = graphs.metrics()["landmarks"]
    finally:
        graphs.close()
    assert metrics["rows"] == 2 and metrics["inline_batches"] >= 1 and metrics["max_in_flight"] == calls_per_machine()
    for k in range(2):
        points, presence = tracking_graphs.landmarks("alone", [frames[k]], rois[k][None])
        np.testing.assert_allclose(results[k][0], points, atol=1e-3)


@pytest.mark.slow
def test_the_torch_runner_tracks_like_onnx_runtime() -> None:
    """Run in a child process: in three of four full runs here, with ~1000 threads other
    tests left behind, closing the torch graphs hung (MicroBatcher.close waiting on a run
    thread while three native threads spun); alone it takes seconds. A hang in the child
    fails this test instead of stalling the suite."""
    root = Path(__file__).resolve().parent.parent
    code = "import sys; sys.path[:0] = ['tests', '.']; import test_tracking_graphs as t; t.compare_torch_with_onnx_runtime()"
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the torch/ONNX Runtime comparison did not finish in {exc.timeout} s")
    assert done.returncode == 0, done.stderr[-4000:]


def compare_torch_with_onnx_runtime() -> None:
    """The torch runner's landmarks and detections equal ONNX Runtime's on the same rows."""
    frames = _clip()
    onnx_graphs, torch_graphs = _graphs("onnxruntime"), _graphs("torch")
    try:
        rois = _rois(onnx_graphs, frames)
        expected = onnx_graphs.landmarks("ort", frames, rois)
        got = torch_graphs.landmarks("torch", frames, rois)
        np.testing.assert_allclose(got[0], expected[0], atol=0.01)  # frame pixels
        np.testing.assert_allclose(got[1], expected[1], atol=1e-3)
        windows = [(0, 0, 640, 480), (320, 0, 640, 320)]
        for model in ("short", "full"):
            for theirs, mine in zip(onnx_graphs.detect("ort", model, frames[0], windows),
                                    torch_graphs.detect("torch", model, frames[0], windows), strict=True):
                assert len(mine) == len(theirs)
                for a, b in zip(theirs, mine, strict=True):
                    np.testing.assert_allclose(b.box, a.box, atol=0.05)
                    assert abs(a.score - b.score) < 1e-3
    finally:
        torch_graphs.close()
        onnx_graphs.close()
