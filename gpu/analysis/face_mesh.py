"""Built-in landmarker: mediapipe's 468-point face mesh, on still images and as a tracker.

The tracking graph re-runs BlazeFace only when it tracks fewer faces than asked for, and
otherwise follows each face from its previous landmarks; this module adds stable track
ids (box overlap between frames) and One Euro smoothing per track."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

import numpy as np

from gpu.analysis.landmarks import five_points
from gpu.analysis.smoothing import OneEuroFilter
from gpu.analysis.quiet import QuietGraph
from gpu.types import Face


# A serialized NormalizedLandmark without visibility/presence is 17 bytes: message tag,
# length 15, then x, y, z as tagged little-endian floats. Reading the bytes with numpy is
# ~20x faster than touching 468 protobuf objects from Python.
_LANDMARK_WIRE = np.dtype(
    [("tag", "u1"), ("size", "u1"), ("x_tag", "u1"), ("x", "<f4"), ("y_tag", "u1"), ("y", "<f4"), ("z_tag", "u1"), ("z", "<f4")]
)
_WIRE_TAGS = {"tag": 0x0A, "size": 15, "x_tag": 0x0D, "y_tag": 0x15, "z_tag": 0x1D}


def _mesh_points(landmarks, width: int, height: int) -> np.ndarray:
    """(468, 2) pixel coordinates from a NormalizedLandmarkList."""
    wire = landmarks.SerializeToString()
    if len(wire) % _LANDMARK_WIRE.itemsize == 0:
        rows = np.frombuffer(wire, dtype=_LANDMARK_WIRE)
        if all((rows[name] == value).all() for name, value in _WIRE_TAGS.items()):
            return (np.stack([rows["x"][:468], rows["y"][:468]], axis=1) * np.array([width, height])).astype(np.float32)
    return np.array([(p.x * width, p.y * height) for p in landmarks.landmark[:468]], dtype=np.float32)


def _faces_from_result(result, width: int, height: int) -> list[Face]:
    return [_face_from_mesh(_mesh_points(lm, width, height)) for lm in result.multi_face_landmarks or ()]


def _face_from_mesh(mesh: np.ndarray, track_id: int | None = None) -> Face:
    box = np.concatenate([mesh.min(0), mesh.max(0)]).astype(np.float32)
    return Face(box=box, kps=five_points(mesh), mesh=mesh, track_id=track_id)


class FaceMesh:
    """Dense landmarks on still images (source faces, reference images)."""

    def __init__(self, max_faces: int = 8, min_score: float = 0.5) -> None:
        from mediapipe.python.solutions import face_mesh

        self._graph = QuietGraph(
            lambda: face_mesh.FaceMesh(static_image_mode=True, max_num_faces=max_faces, min_detection_confidence=min_score)
        )

    def detect(self, image: np.ndarray) -> list[Face]:
        """Faces with meshes in an RGB uint8 image, largest first."""
        height, width = image.shape[:2]
        faces = _faces_from_result(self._graph.process(np.ascontiguousarray(image)), width, height)
        return sorted(faces, key=lambda face: face.area, reverse=True)

    def close(self) -> None:
        self._graph.close()


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


@dataclass
class _Track:
    track_id: int
    box: np.ndarray
    smoother: OneEuroFilter = field(default_factory=OneEuroFilter)


class FaceTracker:
    """Per-session video landmarker: faces with meshes, stable ids and smoothing."""

    def __init__(self, max_faces: int = 4, smoothing: bool = True, min_score: float = 0.5) -> None:
        from mediapipe.python.solutions import face_mesh

        self._graph = QuietGraph(
            lambda: face_mesh.FaceMesh(
                static_image_mode=False,
                max_num_faces=max_faces,
                min_detection_confidence=min_score,
                min_tracking_confidence=0.5,
            )
        )
        self.smoothing = smoothing
        self._tracks: list[_Track] = []
        self._ids = count(1)

    def process(self, frame: np.ndarray, timestamp: float) -> list[Face]:
        """Faces in this frame (RGB uint8) at ``timestamp`` seconds, with track ids."""
        height, width = frame.shape[:2]
        detected = _faces_from_result(self._graph.process(np.ascontiguousarray(frame)), width, height)
        tracks: list[_Track] = []
        faces: list[Face] = []
        free = list(self._tracks)
        for face in sorted(detected, key=lambda f: f.area, reverse=True):
            best = max(free, key=lambda t: _iou(t.box, face.box), default=None)
            if best is not None and _iou(best.box, face.box) > 0.3:
                free.remove(best)
                track = best
            else:
                track = _Track(next(self._ids), face.box)
            mesh = track.smoother(face.mesh, timestamp) if self.smoothing else face.mesh
            smoothed = _face_from_mesh(mesh, track.track_id)
            track.box = smoothed.box
            tracks.append(track)
            faces.append(smoothed)
        self._tracks = tracks
        return faces

    def new_track_ids(self, faces: list[Face], known: set[int]) -> list[int]:
        """Ids among ``faces`` not in ``known``: where identity (dlib) must be computed."""
        return [f.track_id for f in faces if f.track_id is not None and f.track_id not in known]

    def close(self) -> None:
        self._graph.close()
