"""The video tracker on the converted graphs (``engine.tracker: graphs``).

Behaves as ``gpu.analysis.face_mesh.FaceTracker`` does (the detector's sweep spread over
frames, faces down to 40 px, One Euro smoothing per track, process-unique track ids, mesh
and depth filled) but runs no mediapipe graph: each track's ROI follows its previous mesh
(mediapipe's own tracking rule), a new face's ROI comes from its detection, and all of a
frame's landmark crops go to the node's landmark batcher in one request, where they share
runner calls with every other session's."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from gpu.analysis.blazeface import BlazeFaceRange
from gpu.analysis.detection import FaceFinder, SweepSchedule, box_contains, box_iou, weighted_nms
from gpu.analysis.face_mesh import face_from_mesh, new_track_id, plausible_mesh
from gpu.analysis.smoothing import OneEuroFilter
from gpu.tracking import face_roi
from gpu.tracking.graphs import GraphBlazeFace, TrackingGraphs
from gpu.types import Face

MIN_PRESENCE = 0.5  # mediapipe's face mesh (min_tracking_confidence): a track below it has lost its face

_tracker_ids = itertools.count(1)


@dataclass
class _Track:
    track_id: int
    mesh: np.ndarray  # (468, 3): x, y, z in pixels
    smoother: OneEuroFilter

    @property
    def box(self) -> np.ndarray:
        return np.concatenate([self.mesh[:, :2].min(0), self.mesh[:, :2].max(0)])


class GraphFaceTracker:
    """Per-stream video landmarker on the node's ``TrackingGraphs``; ``process`` has the
    contract of ``FaceTracker.process``."""

    def __init__(
        self,
        graphs: TrackingGraphs,
        max_faces: int = 4,
        smoothing: bool = True,
        detect_every: int = 8,
        detector_range: BlazeFaceRange = "full",
        sweep: bool = True,
    ) -> None:
        self.max_faces = max_faces
        self.smoothing = smoothing
        self.detect_every = detect_every
        self._graphs = graphs
        self._session = f"tracker-{next(_tracker_ids)}"
        graphs.attach(self._session)
        detectors = {name: GraphBlazeFace(graphs, name, self._session) for name in ("short", "full")}
        self._finder = FaceFinder(detector_range, finest="full", detectors=detectors)  # as FaceTracker's
        self._schedule = SweepSchedule(self._finder, detect_every, sweep)
        self._tracks: list[_Track] = []
        self._closed = False

    def process(self, frame: np.ndarray, timestamp: float) -> list[Face]:
        """Faces in this frame (RGB uint8) at ``timestamp`` seconds, with track ids."""
        candidates = self._candidates(frame)
        rois = [face_roi.roi_from_landmarks(track.mesh[None]) for track in self._tracks]
        if candidates:
            boxes = np.stack([face.box for face in candidates])
            rois.append(face_roi.roi_from_detection(boxes, np.stack([face.kps for face in candidates])))
        tracks = []
        if rois:
            stacked = np.concatenate(rois)
            points, presence = self._graphs.landmarks(self._session, [frame] * len(stacked), stacked)
            for track, mesh, alive in zip(self._tracks, points, presence, strict=False):
                if alive >= MIN_PRESENCE:
                    track.mesh = mesh
                    tracks.append(track)
            for face, mesh, alive in zip(candidates, points[len(self._tracks):], presence[len(self._tracks):], strict=True):
                if alive >= MIN_PRESENCE and plausible_mesh(mesh, face.box):
                    tracks.append(_Track(new_track_id(), mesh, OneEuroFilter()))
        self._tracks = _without_duplicates(tracks)
        faces = []
        for track in self._tracks:
            mesh = track.smoother(track.mesh, timestamp) if self.smoothing else track.mesh
            faces.append(face_from_mesh(mesh, track.track_id))
        return faces

    def _candidates(self, frame: np.ndarray) -> list[Face]:
        """New faces the sweep's views of this frame find outside the tracked ones."""
        views = self._schedule.views_for(frame.shape[1], frame.shape[0], tracking=bool(self._tracks))
        if not views or len(self._tracks) >= self.max_faces:
            return []
        found: list[Face] = []
        boxes = [track.box for track in self._tracks]
        for detection in weighted_nms(self._finder.run(frame, views)):
            if len(self._tracks) + len(found) >= self.max_faces:
                break
            if not any(box_contains(box, detection.center) for box in [*boxes, *(f.box for f in found)]):
                found.append(detection)
        return found

    def close(self) -> None:
        """Leave the node's batchers (the graphs themselves are the engine's)."""
        if not self._closed:
            self._closed = True
            self._graphs.detach(self._session)
        self._tracks = []


def _without_duplicates(tracks: list[_Track]) -> list[_Track]:
    """Two tracks that converged on one face: the older one stays."""
    kept: list[_Track] = []
    for track in sorted(tracks, key=lambda t: t.track_id):
        if all(box_iou(track.box, other.box) <= 0.5 for other in kept):
            kept.append(track)
    return kept
