"""The video tracker on the converted graphs (``engine.tracker: graphs``).

Behaves as ``gpu.analysis.face_mesh.FaceTracker`` does (the detector's sweep spread over
frames, faces down to 40 px, One Euro smoothing per track, process-unique track ids, mesh
and depth filled) but runs no mediapipe graph: each track's ROI follows its face's pose, a
robust fit of its reference shape onto the previous mesh, carried a frame ahead
(``gpu.tracking.anchor``: mediapipe's rule, the previous mesh's box, follows an occluder's
drag off the face), a mesh whose lower face the anchor finds dragged off its shape is
placed by the upper face's image motion (``gpu.tracking.face_flow``), a new face's ROI
comes from its detection (seen again by short range in a region around it, as
``FaceTracker``'s mesh graph sees it), and all of a
frame's landmark crops go to the node's landmark batcher in one request, where they share
runner calls with every other session's."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import cv2
import numpy as np

from gpu.analysis.blazeface import BlazeFaceRange
from gpu.analysis.detection import FaceFinder, SweepSchedule, box_contains, box_iou, weighted_nms
from gpu.analysis.face_mesh import REGION_SCALE, face_from_mesh, new_track_id, plausible_mesh
from gpu.analysis.smoothing import MeshSmoother
from gpu.batcher import BatcherBusy
from gpu.tracking import face_roi
from gpu.tracking.anchor import FaceAnchor
from gpu.tracking.face_flow import UpperFaceFlow, trust_of_model
from gpu.tracking.graphs import GraphBlazeFace, TrackingGraphs
from gpu.types import Face

MIN_PRESENCE = 0.5  # mediapipe's face mesh (min_tracking_confidence): a track below it has lost its face ...
# ... unless it only dipped to ``HOLD_PRESENCE`` while its mesh stayed where the face was: a
# cup sliding in over the mouth and chin of a turned head drops presence to 0.13-0.37 for a
# few frames (then, the cup in place, it is back over 0.9: the occlusion set's turning
# clips), and a face dropped there is not found again by the detector until the cup goes
# (seconds unswapped). A crop of background reads up to ~0.2 too, so a track is held so
# only for ``HOLD_FRAMES`` in a row, and only while its mesh stays where the face was.
HOLD_PRESENCE = 0.05
HOLD_FRAMES = 15
HOLD_DRIFT = 0.2  # of the face's width: a held mesh's centre moves at most this much a frame
HOLD_SCALE = 1.25  # ... and its size changes by at most this factor
# A track whose upper face the image follows behind an object (``UpperFaceFlow``) is held so
# for up to this many frames: a cup held over the mouth keeps presence under 0.5 for longer
# than ``HOLD_FRAMES`` (the arrivals set), the eyes above it in view all along.
IMAGE_HOLD_FRAMES = 60

_tracker_ids = itertools.count(1)


@dataclass
class _Track:
    track_id: int
    mesh: np.ndarray  # (468, 3): x, y, z in pixels
    smoother: MeshSmoother
    anchor: FaceAnchor  # the pose the next frame's ROI comes from
    upper: UpperFaceFlow = field(default_factory=UpperFaceFlow)  # its upper face as the image moves it
    held: int = 0  # frames in a row it was held under ``MIN_PRESENCE``

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
        self._previous_gray: np.ndarray | None = None  # the last frame, for the upper face's image motion
        self._closed = False
        self.frames_dropped = 0  # frames the batchers refused: tracks held, not updated

    def process(self, frame: np.ndarray, timestamp: float) -> list[Face]:
        """Faces in this frame (RGB uint8) at ``timestamp`` seconds, with track ids. A frame
        whose rows the node's batchers refuse or cannot run in time (an overloaded node)
        keeps the tracks where they were: the swap goes on, one frame late, ids intact."""
        try:
            self._tracks = self._tracked(frame)
        except (BatcherBusy, TimeoutError):
            self.frames_dropped += 1
        faces = []
        for track in self._tracks:
            mesh = track.smoother(track.mesh, timestamp) if self.smoothing else track.mesh
            faces.append(face_from_mesh(mesh, track.track_id))
        return faces

    def _tracked(self, frame: np.ndarray) -> list[_Track]:
        """The tracks followed into ``frame`` and the new faces found there."""
        candidates = self._candidates(frame)
        rois = [track.anchor.next_roi() for track in self._tracks]
        if candidates:
            seen = self._seen_closer(frame, candidates)
            rois.append(face_roi.roi_from_detection(np.stack([f.box for f in seen]), np.stack([f.kps for f in seen])))
        tracks = []
        gray = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY) if rois else None
        if rois:
            stacked = np.concatenate(rois)
            points, presence = self._graphs.landmarks(self._session, [frame] * len(stacked), stacked)
            for track, mesh, alive in zip(self._tracks, points, presence, strict=False):
                track.held = 0 if alive >= MIN_PRESENCE else track.held + 1
                trust = trust_of_model(track.anchor.lower_outliers)
                hold = IMAGE_HOLD_FRAMES if track.upper.following else HOLD_FRAMES
                seen = alive >= MIN_PRESENCE or (alive >= HOLD_PRESENCE and track.held <= hold and _stays(track, mesh))
                if self._previous_gray is not None and (seen or (trust < 1.0 and track.held <= hold)):
                    # the image places a face the model drags, or carries one it lost, behind an object
                    mesh = track.upper.follow(self._previous_gray, gray, track.mesh, mesh if seen else None, trust)
                elif not seen:
                    continue
                if mesh is None:
                    continue
                track.mesh = mesh
                track.anchor.update(mesh)
                tracks.append(track)
            for face, mesh, alive in zip(candidates, points[len(self._tracks):], presence[len(self._tracks):], strict=True):
                if alive >= MIN_PRESENCE and plausible_mesh(mesh, face.box):
                    tracks.append(_Track(new_track_id(), mesh, MeshSmoother(), FaceAnchor(mesh)))
        self._previous_gray = gray
        return _without_duplicates(tracks)

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

    def _seen_closer(self, frame: np.ndarray, candidates: list[Face]) -> list[Face]:
        """Each candidate as short range sees it in a square region of ``REGION_SCALE`` x its
        box (what ``FaceTracker``'s mesh graph does on its region): a face found small in a
        tile has keypoints too coarse to turn its ROI by; in its region it fills the view.
        A candidate short range does not find there keeps its own detection."""
        height, width = frame.shape[:2]
        windows = [_region(face.box, width, height) for face in candidates]
        found = self._graphs.detect(self._session, "short", frame, windows)
        seen = []
        for face, in_region in zip(candidates, found, strict=True):
            inside = [f for f in in_region if box_contains(face.box, f.center)]
            seen.append(max(inside, key=lambda f: f.score) if inside else face)
        return seen

    def close(self) -> None:
        """Leave the node's batchers (the graphs themselves are the engine's)."""
        if not self._closed:
            self._closed = True
            self._graphs.detach(self._session)
        self._tracks = []


def _stays(track: _Track, mesh: np.ndarray) -> bool:
    """Whether a mesh found with low presence is still the track's face: plausible for its
    box, and moved and scaled no more than a face does in a frame."""
    if not plausible_mesh(mesh, track.box):
        return False
    before, now = track.box, np.concatenate([mesh[:, :2].min(0), mesh[:, :2].max(0)])
    width = float(before[2] - before[0])
    drift = float(np.hypot(*((now[:2] + now[2:]) - (before[:2] + before[2:])) / 2))
    scale = float(now[2] - now[0]) / max(width, 1.0)
    return drift <= HOLD_DRIFT * width and 1 / HOLD_SCALE <= scale <= HOLD_SCALE


def _region(box: np.ndarray, width: int, height: int) -> tuple[int, int, int, int]:
    """The square of ``REGION_SCALE`` x the box's long side about its centre, in the frame."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    half = max(box[2] - box[0], box[3] - box[1]) * REGION_SCALE / 2
    x0, y0 = max(0, int(cx - half)), max(0, int(cy - half))
    x1, y1 = min(width, int(np.ceil(cx + half))), min(height, int(np.ceil(cy + half)))
    return x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)


def _without_duplicates(tracks: list[_Track]) -> list[_Track]:
    """Two tracks that converged on one face: the older one stays."""
    kept: list[_Track] = []
    for track in sorted(tracks, key=lambda t: t.track_id):
        if all(box_iou(track.box, other.box) <= 0.5 for other in kept):
            kept.append(track)
    return kept
