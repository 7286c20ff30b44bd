"""The node's tracking graphs: the wheel's face and hand models converted to ONNX, each
behind its runner and its micro-batcher, so detection and landmarks of every session share
runner calls as the swap's rows do.

One ``TrackingGraphs`` per engine. A tracker (one per stream) asks under its own session id;
the batcher stacks its rows with other sessions' rows of the same model (one session alone
runs inline, see ``gpu.batcher``). Crops, decode and un-projection are
``gpu.tracking.blazeface_decode`` and ``gpu.tracking.face_roi``, on the frames' device.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpu import threads
from gpu.analysis.blazeface import BlazeFaceRange, Window, five_from_blazeface
from gpu.batcher import MicroBatcher
from gpu.device import array_module, to_host
from gpu.models.converted_tracking import INPUT_NAME, tracking_models
from gpu.runners.base import Runner
from gpu.swappers.base import FaceJob
from gpu.tracking import blazeface_decode, face_roi, hand_roi
from gpu.tracking.blazeface_decode import DetectorSpec, Detections
from gpu.types import Face

SPECS: dict[BlazeFaceRange, DetectorSpec] = {"short": blazeface_decode.SHORT_RANGE, "full": blazeface_decode.FULL_RANGE}
# each graph's converted model, by the TFLite file it comes from in the mediapipe wheel
MODEL_FILES = {"landmarks": "face_landmark.tflite", "short": "face_detection_short_range.tflite",
               "full": "face_detection_full_range_sparse.tflite", "palm": "palm_detection_full.tflite",
               "hand": "hand_landmark_lite.tflite"}
RUN_TIMEOUT_S = 5.0  # rows waiting longer raise TimeoutError (the tracker then holds its tracks for that frame)


class TrackingGraphs:
    """Landmark model, both BlazeFace models, the palm detector and the hand landmarks, with
    their runners and batchers.

    ``make_runner(model, name)`` builds a runner on the node's device (the engine's
    ``_runner_for``); ``cache_dir`` keeps the converted models (None: converted in memory);
    without the mediapipe wheel they load from ``cache_dir`` by its manifest
    (``gpu.models.converted_tracking``).
    ``wait_for_company``: whether rows wait ``max_queue_delay_ms`` for other sessions' rows;
    by default not on the CPU, where a batch of two costs what two calls cost (the landmark
    model: 3.96 vs 4.13 ms), so each session's call runs at once, side by side with the
    others' on the other cores (``gpu.batcher``)."""

    def __init__(self, make_runner: Callable[[Any, str], Runner], cache_dir: Path | None = None,
                 max_batch: int = 32, max_queue_delay_ms: float = 4.0, wait_for_company: bool | None = None) -> None:
        models = tracking_models(cache_dir)
        self._batchers: dict[str, MicroBatcher] = {}
        for name, file_name in MODEL_FILES.items():
            stem = Path(file_name).stem
            runner = make_runner(models[file_name], stem)
            waits = not _on_cpu(runner) if wait_for_company is None else wait_for_company
            self._batchers[name] = MicroBatcher(
                runner, max_batch=max_batch, max_queue_delay_ms=max_queue_delay_ms, wait_for_company=waits,
                max_in_flight=int(getattr(runner, "max_concurrency", 1)) if waits else calls_per_machine(),
                name=f"batcher-{stem}",
            )

    def attach(self, session: Hashable) -> None:
        for batcher in self._batchers.values():
            batcher.attach(session)

    def detach(self, session: Hashable) -> None:
        for batcher in self._batchers.values():
            batcher.detach(session)

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Each model's batcher numbers (``MicroBatcher.metrics``), by model."""
        return {name: batcher.metrics() for name, batcher in self._batchers.items()}

    def reset_metrics(self) -> None:
        for batcher in self._batchers.values():
            batcher.reset_metrics()

    def landmarks(self, session: Hashable, frames: Sequence[Any], rois: Any) -> tuple[np.ndarray, np.ndarray]:
        """(N, 468, 3) mesh points in frame pixels and (N,) face-presence probabilities of
        the faces in ``rois`` (N, 4; see ``face_roi``), face ``i`` in ``frames[i]``."""
        if len(frames) == 0:
            return np.zeros((0, face_roi.LANDMARK_COUNT, 3), np.float32), np.zeros(0, np.float32)
        crops = face_roi.landmark_input(frames, rois)
        matrices = face_roi.roi_matrices(rois)
        mesh, logits = self._run("landmarks", session, crops, matrices)
        points = face_roi.unproject_landmarks(mesh, rois)
        return to_host(points), to_host(face_roi.presence(logits))

    def detect(self, session: Hashable, model: BlazeFaceRange, image: Any, windows: Sequence[Window],
               min_score: float = 0.5) -> list[list[Face]]:
        """Faces in each window of ``image`` (frame pixels) by the ``model`` BlazeFace, decoded
        and suppressed per window as mediapipe's face detection graph does."""
        if not windows:
            return []
        spec = SPECS[model]
        boxes = np.asarray(windows, dtype=np.float64).reshape(-1, 4)
        tensors = blazeface_decode.detector_input([image] * len(boxes), boxes, spec)
        raw_boxes, raw_scores = self._run(model, session, tensors, blazeface_decode.letterbox_matrices(boxes, spec.size))
        found = []
        for window, detections in zip(windows, blazeface_decode.decode(raw_boxes, raw_scores, spec, min_score), strict=True):
            pixels = blazeface_decode.to_frame(detections, window, spec.size)
            found.append([
                Face(box=box, kps=five_from_blazeface(points), score=float(score))
                for box, points, score in zip(pixels.boxes, pixels.keypoints, pixels.scores, strict=True)
            ])
        return found

    def palms(self, session: Hashable, image: Any, windows: Sequence[Window], min_score: float = 0.5) -> list[Detections]:
        """Palms in each window of ``image``, in frame pixels (boxes, the detector's seven
        keypoints, scores), decoded and suppressed as PalmDetectionCpu does."""
        if not windows:
            return []
        spec = hand_roi.PALM
        boxes = np.asarray(windows, dtype=np.float64).reshape(-1, 4)
        tensors = blazeface_decode.detector_input([image] * len(boxes), boxes, spec)
        raw_boxes, raw_scores = self._run("palm", session, tensors, blazeface_decode.letterbox_matrices(boxes, spec.size))
        return [blazeface_decode.to_frame(found, window, spec.size)
                for window, found in zip(windows, blazeface_decode.decode(raw_boxes, raw_scores, spec, min_score), strict=True)]

    def hands(self, session: Hashable, frame: Any, rois: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, 21, 3) hand joints in frame pixels and (N,) hand-presence probabilities of the
        hands in ``rois`` (N, 4; see ``hand_roi``)."""
        if len(rois) == 0:
            return np.zeros((0, hand_roi.JOINTS, 3), np.float32), np.zeros(0, np.float32)
        crops = face_roi.landmark_input([frame] * len(rois), rois, hand_roi.LANDMARK_SIZE)
        outputs = self._run("hand", session, crops, face_roi.roi_matrices(rois, hand_roi.LANDMARK_SIZE))
        joints, presence = to_host(outputs[0]), to_host(outputs[1])
        return hand_roi.unproject(joints, rois), presence.reshape(len(rois)).astype(np.float32)

    def _run(self, name: str, session: Hashable, tensors: Any, matrices: np.ndarray) -> list[Any]:
        """The model's outputs for the rows of ``tensors``, batched with other sessions' rows."""
        jobs = [FaceJob(feeds={INPUT_NAME: row}, matrix=matrix) for row, matrix in zip(tensors, matrices, strict=True)]
        rows = self._batchers[name].run(session, jobs, timeout=RUN_TIMEOUT_S)
        xp = array_module(rows[0][0])
        return [xp.stack([row[output] for row in rows]) for output in range(len(rows[0]))]

    def close(self) -> None:
        for batcher in self._batchers.values():
            batcher.close()


def _on_cpu(runner: Runner) -> bool:
    """ONNX Runtime with only its CPU provider (the CPU node's runner)."""
    providers = getattr(runner, "providers", None)
    return providers is not None and "CUDAExecutionProvider" not in providers


def calls_per_machine() -> int:
    """CPU calls that fit side by side: a core's worth of intra-op threads each."""
    return max(1, threads.usable_cpus() // max(1, threads.current().runner_threads))


class GraphBlazeFace:
    """One converted BlazeFace model as a ``WindowDetector`` for ``FaceFinder``, asking
    under one session's id."""

    def __init__(self, graphs: TrackingGraphs, model: BlazeFaceRange, session: Hashable, min_score: float = 0.5) -> None:
        self._graphs, self._model, self._session, self._min_score = graphs, model, session, min_score

    def detect_windows(self, image: np.ndarray, windows: Sequence[Window]) -> list[list[Face]]:
        return self._graphs.detect(self._session, self._model, image, windows, self._min_score)

    def close(self) -> None:
        """The graphs are the node's: nothing of this session's to release here."""
