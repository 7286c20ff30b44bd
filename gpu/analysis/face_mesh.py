"""Built-in landmarker: mediapipe's 468-point face mesh, on still images and as a tracker.

Faces are found by ``detection.FaceFinder`` and each face's mesh runs on a square region
around it, turned upright by the head's roll, so a small or tilted face is as well
landmarked as a close upright one; a candidate without a plausible mesh is no face. Video
adds stable track ids, re-detection spread over frames (new faces enter) and One Euro
smoothing per track (a still face does not jitter)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

import cv2
import numpy as np

from gpu.analysis.blazeface import BlazeFaceRange
from gpu.analysis.detection import FaceFinder, SweepSchedule, box_contains, box_iou, roll_of, weighted_nms
from gpu.analysis.landmarks import five_points
from gpu.analysis.quiet import QuietGraph
from gpu.analysis.smoothing import OneEuroFilter
from gpu.types import Face

# The mesh runs on a square this many times the face box, so the whole head is in view.
REGION_SCALE = 1.8
# A region is turned upright when the head tilts more than this; below it, a plain crop.
UPRIGHT_DEGREES = 5.0
# A turned region is resampled to at most this side (the mesh model itself sees 192 px).
MAX_REGION = 512
# Still images: the mesh's own roll differing from the detector's by more than this runs
# the mesh once more on a region turned by the mesh's roll.
RETRY_DEGREES = 15.0

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


def mesh_in_region(graph: QuietGraph, image: np.ndarray, box: np.ndarray, roll: float = 0.0,
                   scale: float = REGION_SCALE, black_border: bool = False) -> np.ndarray | None:
    """The (468, 3) mesh of the face in ``box`` (frame pixels, z on the x scale), run on a
    square region ``scale`` x the box around it turned by ``roll`` degrees (the head's tilt,
    see ``detection.roll_of``) so the face is upright in it: the mesh's own detector and
    landmark model expect that, and past ~45° of tilt lose the face or bend the mesh.
    ``black_border``: a region reaching past the frame is black there rather than cut to the
    frame (a face cut by the edge, see ``still_graphs``)."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    side = max(box[2] - box[0], box[3] - box[1]) * scale
    if side < 16:
        return None
    if abs(roll) < UPRIGHT_DEGREES and not (black_border and reaches_past(cx, cy, side, image.shape)):
        return _mesh_in_crop(graph, image, cx, cy, side / 2)
    size = int(round(min(side, MAX_REGION)))
    scale = size / side
    to_region = cv2.getRotationMatrix2D((float(cx), float(cy)), float(roll), scale)
    to_region[:, 2] += size / 2 - np.array([cx, cy])
    region = cv2.warpAffine(image, to_region, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    result = graph.process(region)
    if not result.multi_face_landmarks:
        return None
    points = _mesh_points(result.multi_face_landmarks[0], size, size)
    back = cv2.invertAffineTransform(to_region)
    xy = points[:, :2] @ back[:, :2].T.astype(np.float32) + back[:, 2].astype(np.float32)
    return np.concatenate([xy, points[:, 2:] / scale], axis=1).astype(np.float32)


def reaches_past(cx: float, cy: float, side: float, shape: tuple[int, ...]) -> bool:
    """Whether a square of ``side`` about (cx, cy) reaches past a frame of ``shape``."""
    return min(cx, cy) < side / 2 or cx + side / 2 > shape[1] or cy + side / 2 > shape[0]


def _mesh_in_crop(graph: QuietGraph, image: np.ndarray, cx: float, cy: float, half: float) -> np.ndarray | None:
    """An upright face: the region is a plain crop (clipped to the frame), no resampling."""
    height, width = image.shape[:2]
    x0, y0 = int(max(0, cx - half)), int(max(0, cy - half))
    x1, y1 = int(min(width, cx + half)), int(min(height, cy + half))
    if x1 - x0 < 16 or y1 - y0 < 16:
        return None
    result = graph.process(np.ascontiguousarray(image[y0:y1, x0:x1]))
    if not result.multi_face_landmarks:
        return None
    return _mesh_points(result.multi_face_landmarks[0], x1 - x0, y1 - y0) + np.array([x0, y0, 0.0], dtype=np.float32)


def mesh_roll(points: np.ndarray) -> float:
    """Head roll in degrees from a mesh: the line between the outer eye corners."""
    dx, dy = points[263, :2] - points[33, :2]
    return float(np.degrees(np.arctan2(dy, dx)))


def plausible_mesh(points: np.ndarray, box: np.ndarray) -> bool:
    """Whether a mesh found for the candidate ``box`` is that face: finite, centred inside
    the box, of a face's size and proportions. A mesh on the neighbour's face, or one
    collapsed on a pattern, is a false detection, not a face."""
    if not np.isfinite(points).all():
        return False
    xy = points[:, :2]
    low, high = xy.min(0), xy.max(0)
    centre, extent = (low + high) / 2, high - low
    size = max(box[2] - box[0], box[3] - box[1])
    if not (box[0] <= centre[0] <= box[2] and box[1] <= centre[1] <= box[3]):
        return False
    if not 0.4 * size <= max(extent) <= 3.0 * size:
        return False
    eyes = float(np.linalg.norm(xy[263] - xy[33]))
    return min(extent) >= 8 and eyes >= 0.15 * float(max(extent))


class FaceMesh:
    """Dense landmarks for faces found on still images (sources, references, scoring)."""

    def __init__(self) -> None:
        self._graph = _mesh_graph(tracking=False)

    def landmarks(self, image: np.ndarray, face: Face, scale: float = REGION_SCALE,
                  black_border: bool = False) -> Face | None:
        """The face in ``face.box`` with its mesh, mesh-derived keypoints and the mesh's
        bounding box; None when no plausible mesh is found there (not a face). The region
        (``scale`` x the box, ``black_border``: see ``mesh_in_region``) is turned upright by
        the keypoints' roll, and once more by the mesh's own if the two disagree (a HOG box
        has no real keypoints)."""
        roll = roll_of(face.kps)
        points = mesh_in_region(self._graph, image, face.box, roll, scale, black_border)
        if points is not None and abs(mesh_roll(points) - roll) > RETRY_DEGREES:
            points = mesh_in_region(self._graph, image, face.box, mesh_roll(points), scale, black_border)
        if points is None or not plausible_mesh(points, face.box):
            return None
        return face_from_mesh(points, score=face.score)

    def close(self) -> None:
        self._graph.close()


@dataclass
class _Track:
    track_id: int
    box: np.ndarray
    graph: QuietGraph  # a tracking-mode mesh graph following this face
    smoother: OneEuroFilter
    mesh: np.ndarray | None = None  # (468, 3): x, y, z in pixels


# Track ids are unique in the process, not per stream: per-track state kept by the node's
# shared swapper (a track's neutral shape) must never mix two sessions' faces.
_TRACK_IDS = count(1)


def new_track_id() -> int:
    """The next process-unique track id (every tracker backend takes its ids here)."""
    return next(_TRACK_IDS)


class FaceTracker:
    """Per-stream video landmarker: faces with meshes, stable ids and smoothing.

    Each track owns a tracking-mode mesh graph fed with a region around the face's last
    position, turned by its last roll; the detector's sweep (whole frame every
    ``detect_every`` frames, one tile in between, see ``SweepSchedule``)
    picks up faces that enter. Mesh graphs are pooled: creating one costs ~60 ms."""

    def __init__(
        self,
        max_faces: int = 4,
        smoothing: bool = True,
        detect_every: int = 8,
        detector_range: BlazeFaceRange = "full",
        sweep: bool = True,
    ) -> None:
        self.max_faces = max_faces
        self.smoothing = smoothing
        self.detect_every = detect_every
        self._finder = FaceFinder(detector_range, finest="full")  # see FaceFinder: live has no HOG
        self._schedule = SweepSchedule(self._finder, detect_every, sweep)
        self._tracks: list[_Track] = []
        self._spare_graphs: list[QuietGraph] = []

    def process(self, frame: np.ndarray, timestamp: float) -> list[Face]:
        """Faces in this frame (RGB uint8) at ``timestamp`` seconds, with track ids."""
        tracks = []
        for track in self._tracks:
            roll = mesh_roll(track.mesh) if track.mesh is not None else 0.0
            track.mesh = mesh_in_region(track.graph, frame, track.box, roll)
            if track.mesh is None:
                self._spare_graphs.append(track.graph)
            else:
                track.box = np.concatenate([track.mesh[:, :2].min(0), track.mesh[:, :2].max(0)])
                tracks.append(track)
        views = self._schedule.views_for(frame.shape[1], frame.shape[0], tracking=bool(tracks))
        if views and len(tracks) < self.max_faces:
            tracks.extend(self._new_tracks(frame, tracks, views))
        self._tracks = self._without_duplicates(tracks)
        faces = []
        for track in self._tracks:
            mesh = track.smoother(track.mesh, timestamp) if self.smoothing else track.mesh
            faces.append(face_from_mesh(mesh, track.track_id))
        return faces

    def _new_tracks(self, frame: np.ndarray, tracks: list[_Track], views) -> list[_Track]:
        found = []
        for detection in weighted_nms(self._finder.run(frame, views)):
            if len(tracks) + len(found) >= self.max_faces:
                break
            if any(box_contains(t.box, detection.center) for t in [*tracks, *found]):
                continue
            graph = self._spare_graphs.pop() if self._spare_graphs else _mesh_graph(tracking=True)
            mesh = mesh_in_region(graph, frame, detection.box, roll_of(detection.kps))
            if mesh is None or not plausible_mesh(mesh, detection.box):
                self._spare_graphs.append(graph)
                continue
            box = np.concatenate([mesh[:, :2].min(0), mesh[:, :2].max(0)])
            found.append(_Track(new_track_id(), box, graph, OneEuroFilter(), mesh))
        return found

    def _without_duplicates(self, tracks: list[_Track]) -> list[_Track]:
        """Two tracks that converged on one face: the older one stays."""
        kept: list[_Track] = []
        for track in sorted(tracks, key=lambda t: t.track_id):
            if any(box_iou(track.box, other.box) > 0.5 for other in kept):
                self._spare_graphs.append(track.graph)
            else:
                kept.append(track)
        return kept

    def close(self) -> None:
        for graph in [*self._spare_graphs, *(t.graph for t in self._tracks)]:
            graph.close()
        self._finder.close()
        self._tracks, self._spare_graphs = [], []
