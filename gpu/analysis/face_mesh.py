"""Built-in landmarker: mediapipe's 468-point face mesh, on still images and as a tracker.

Faces are found by BlazeFace (full range finds small faces too) and each face's mesh runs
on a square region around it, so a face far from the camera is as well landmarked as a
close one. Video adds stable track ids, re-detection every few frames (new faces enter)
and One Euro smoothing per track (a still face does not jitter)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

import numpy as np

from gpu.analysis.blazeface import BlazeFaceDetector, BlazeFaceRange
from gpu.analysis.landmarks import five_points
from gpu.analysis.quiet import QuietGraph
from gpu.analysis.smoothing import OneEuroFilter
from gpu.types import Face

# The mesh runs on a square this many times the face box, so the whole head is in view.
REGION_SCALE = 1.8

# A serialized NormalizedLandmark without visibility/presence is 17 bytes: message tag,
# length 15, then x, y, z as tagged little-endian floats. Reading the bytes with numpy is
# ~20x faster than touching 468 protobuf objects from Python.
_LANDMARK_WIRE = np.dtype(
    [("tag", "u1"), ("size", "u1"), ("x_tag", "u1"), ("x", "<f4"), ("y_tag", "u1"), ("y", "<f4"), ("z_tag", "u1"), ("z", "<f4")]
)
_WIRE_TAGS = {"tag": 0x0A, "size": 15, "x_tag": 0x0D, "y_tag": 0x15, "z_tag": 0x1D}


def _mesh_points(landmarks, width: int, height: int) -> np.ndarray:
    """(468, 3) pixel coordinates (x, y, z; z on the x scale) from a NormalizedLandmarkList."""
    scale = np.array([width, height, width], dtype=np.float32)
    wire = landmarks.SerializeToString()
    if len(wire) % _LANDMARK_WIRE.itemsize == 0:
        rows = np.frombuffer(wire, dtype=_LANDMARK_WIRE)
        if all((rows[name] == value).all() for name, value in _WIRE_TAGS.items()):
            return (np.stack([rows["x"][:468], rows["y"][:468], rows["z"][:468]], axis=1) * scale).astype(np.float32)
    return np.array([(p.x, p.y, p.z) for p in landmarks.landmark[:468]], dtype=np.float32) * scale


def face_from_mesh(points: np.ndarray, track_id: int | None = None, score: float = 1.0) -> Face:
    """A face from (468, 3) mesh points (x, y, z in pixels)."""
    mesh = np.ascontiguousarray(points[:, :2], dtype=np.float32)
    box = np.concatenate([mesh.min(0), mesh.max(0)]).astype(np.float32)
    depth = np.ascontiguousarray(points[:, 2], dtype=np.float32)
    return Face(box=box, kps=five_points(mesh), score=score, mesh=mesh, depth=depth, track_id=track_id)


def _mesh_graph(tracking: bool) -> QuietGraph:
    from mediapipe.python.solutions import face_mesh

    return QuietGraph(
        lambda: face_mesh.FaceMesh(
            static_image_mode=not tracking, max_num_faces=1, min_detection_confidence=0.5, min_tracking_confidence=0.5
        )
    )


def mesh_in_region(graph: QuietGraph, image: np.ndarray, box: np.ndarray) -> np.ndarray | None:
    """The (468, 3) mesh of the face in ``box`` (frame pixels, z on the x scale), run on a
    square region around it."""
    height, width = image.shape[:2]
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    half = max(box[2] - box[0], box[3] - box[1]) * REGION_SCALE / 2
    x0, y0 = int(max(0, cx - half)), int(max(0, cy - half))
    x1, y1 = int(min(width, cx + half)), int(min(height, cy + half))
    if x1 - x0 < 16 or y1 - y0 < 16:
        return None
    result = graph.process(np.ascontiguousarray(image[y0:y1, x0:x1]))
    if not result.multi_face_landmarks:
        return None
    return _mesh_points(result.multi_face_landmarks[0], x1 - x0, y1 - y0) + np.array([x0, y0, 0.0], dtype=np.float32)


class FaceMesh:
    """Dense landmarks for faces found on still images (sources, references, scoring)."""

    def __init__(self) -> None:
        self._graph = _mesh_graph(tracking=False)

    def landmarks(self, image: np.ndarray, face: Face) -> Face:
        """``face`` with its mesh (and mesh-derived keypoints), or unchanged if none is found."""
        points = mesh_in_region(self._graph, image, face.box)
        if points is None:
            return face
        mesh = np.ascontiguousarray(points[:, :2])
        return Face(box=face.box, kps=five_points(mesh), score=face.score, mesh=mesh, depth=np.ascontiguousarray(points[:, 2]))

    def close(self) -> None:
        self._graph.close()


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _contains(box: np.ndarray, point: np.ndarray) -> bool:
    return bool(box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3])


@dataclass
class _Track:
    track_id: int
    box: np.ndarray
    graph: QuietGraph  # a tracking-mode mesh graph following this face
    smoother: OneEuroFilter
    mesh: np.ndarray | None = None  # (468, 3): x, y, z in pixels


class FaceTracker:
    """Per-stream video landmarker: faces with meshes, stable ids and smoothing.

    Each track owns a tracking-mode mesh graph fed with a region around the face's last
    position; BlazeFace runs every ``detect_every`` frames (every frame while no face is
    tracked) to pick up faces that enter. Mesh graphs are pooled: creating one costs ~60 ms."""

    def __init__(
        self,
        max_faces: int = 4,
        smoothing: bool = True,
        detect_every: int = 8,
        detector_range: BlazeFaceRange = "full",
    ) -> None:
        self.max_faces = max_faces
        self.smoothing = smoothing
        self.detect_every = detect_every
        self._detector = BlazeFaceDetector(detector_range)
        self._tracks: list[_Track] = []
        self._spare_graphs: list[QuietGraph] = []
        self._ids = count(1)
        self._frames = 0

    def process(self, frame: np.ndarray, timestamp: float) -> list[Face]:
        """Faces in this frame (RGB uint8) at ``timestamp`` seconds, with track ids."""
        tracks = []
        for track in self._tracks:
            track.mesh = mesh_in_region(track.graph, frame, track.box)
            if track.mesh is None:
                self._spare_graphs.append(track.graph)
            else:
                track.box = np.concatenate([track.mesh[:, :2].min(0), track.mesh[:, :2].max(0)])
                tracks.append(track)
        if self._frames % self.detect_every == 0 or not tracks:
            tracks.extend(self._new_tracks(frame, tracks))
        self._frames += 1
        self._tracks = self._without_duplicates(tracks)
        faces = []
        for track in self._tracks:
            mesh = track.smoother(track.mesh, timestamp) if self.smoothing else track.mesh
            faces.append(face_from_mesh(mesh, track.track_id))
        return faces

    def _new_tracks(self, frame: np.ndarray, tracks: list[_Track]) -> list[_Track]:
        found = []
        for detection in self._detector.detect(frame):
            if len(tracks) + len(found) >= self.max_faces:
                break
            if any(_contains(t.box, detection.center) for t in [*tracks, *found]):
                continue
            graph = self._spare_graphs.pop() if self._spare_graphs else _mesh_graph(tracking=True)
            mesh = mesh_in_region(graph, frame, detection.box)
            if mesh is None:
                self._spare_graphs.append(graph)
                continue
            box = np.concatenate([mesh[:, :2].min(0), mesh[:, :2].max(0)])
            found.append(_Track(next(self._ids), box, graph, OneEuroFilter(), mesh))
        return found

    def _without_duplicates(self, tracks: list[_Track]) -> list[_Track]:
        """Two tracks that converged on one face: the older one stays."""
        kept: list[_Track] = []
        for track in sorted(tracks, key=lambda t: t.track_id):
            if any(_iou(track.box, other.box) > 0.5 for other in kept):
                self._spare_graphs.append(track.graph)
            else:
                kept.append(track)
        return kept

    def close(self) -> None:
        for graph in [*self._spare_graphs, *(t.graph for t in self._tracks)]:
            graph.close()
        self._detector.close()
        self._tracks, self._spare_graphs = [], []
