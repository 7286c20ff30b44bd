"""Built-in face detector: mediapipe BlazeFace (short range for webcams, full range for
small faces) -> boxes and five ArcFace-order keypoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

from gpu.analysis.quiet import QuietGraph
from gpu.types import Face

BlazeFaceRange = Literal["short", "full"]
Window = tuple[int, int, int, int]  # x0, y0, x1, y1 in frame pixels


class WindowDetector(Protocol):
    """A BlazeFace model run over views of a frame: mediapipe's graph
    (``BlazeFaceDetector``) or the converted one (``gpu.tracking.graphs.GraphBlazeFace``)."""

    def detect_windows(self, image: np.ndarray, windows: Sequence[Window]) -> list[list[Face]]: ...

    def close(self) -> None: ...

# BlazeFace has one mouth point (the centre); the ArcFace template's mouth corners sit
# 0.83 of an eye distance apart, so they are placed along the eye line from that centre.
_MOUTH_HALF_WIDTH = 0.415


class BlazeFaceDetector:
    """Runs mediapipe's BlazeFace graph shipped inside the mediapipe wheel."""

    def __init__(self, model_range: BlazeFaceRange = "short", min_score: float = 0.5) -> None:
        from mediapipe.python.solutions import face_detection

        self.model_range = model_range
        self._graph = QuietGraph(
            lambda: face_detection.FaceDetection(
                model_selection=0 if model_range == "short" else 1, min_detection_confidence=min_score
            )
        )

    def detect(self, image: np.ndarray) -> list[Face]:
        """Faces in an RGB uint8 image, highest score first."""
        height, width = image.shape[:2]
        result = self._graph.process(np.ascontiguousarray(image))
        faces = []
        for detection in result.detections or ():
            data = detection.location_data
            rel = data.relative_bounding_box
            box = np.array(
                [rel.xmin * width, rel.ymin * height, (rel.xmin + rel.width) * width, (rel.ymin + rel.height) * height],
                dtype=np.float32,
            )
            points = np.array([[p.x * width, p.y * height] for p in data.relative_keypoints], dtype=np.float32)
            faces.append(Face(box=box, kps=five_from_blazeface(points), score=float(detection.score[0])))
        faces.sort(key=lambda face: face.score, reverse=True)
        return faces

    def detect_windows(self, image: np.ndarray, windows: Sequence[Window]) -> list[list[Face]]:
        """Faces in each window (x0, y0, x1, y1) of ``image``, in ``image`` pixels: one
        graph run per window (mediapipe's graph takes one image at a time)."""
        found = []
        for x0, y0, x1, y1 in windows:
            offset = np.array([x0, y0], dtype=np.float32)
            faces = self.detect(np.ascontiguousarray(image[y0:y1, x0:x1]))
            found.append([Face(box=f.box + np.tile(offset, 2), kps=f.kps + offset, score=f.score) for f in faces])
        return found

    def close(self) -> None:
        self._graph.close()


def five_from_blazeface(points: np.ndarray) -> np.ndarray:
    """BlazeFace's six points (eyes, nose, mouth centre, ears) -> ArcFace's five."""
    eye_a, eye_b, nose, mouth = points[0], points[1], points[2], points[3]
    left, right = (eye_a, eye_b) if eye_a[0] <= eye_b[0] else (eye_b, eye_a)
    half = _MOUTH_HALF_WIDTH * (right - left)
    return np.stack([left, right, nose, mouth - half, mouth + half]).astype(np.float32)
