"""Where the visible upper face went, by the image: a cue an object's drag cannot move.

With an object held over the mouth and chin the landmark model moves its whole mesh, eyes
included, toward the object. Measured on the arrivals set: a cup held against a turned head
drags the mesh 0.1-0.2 face widths off within eight frames and the next crop follows it
until the face is lost; with the crop held on the face (the true mesh's ROI) the model still
settles 0.08 off. The eyes, brows and nose bridge above the object are in view all along,
and their image motion from the last frame -- pyramidal Lucas-Kanade, each point checked by
tracking it back -- says where the face went.

``UpperFaceFlow`` keeps those points per track. Where the track's anchor finds the lower
face in the track's shape the model is trusted whole (``trust_of_model``: its answer is
untouched and the points are its own again each frame). Where it finds the lower face
dragged off that shape, the points move by the image alone and the model's mesh is turned
and shifted onto them, almost wholly; where the model loses the face behind the object
altogether, the last mesh moves with them for up to two seconds. The mesh's shape (the
expression, the turn) and its size stay the model's."""

from __future__ import annotations

import cv2
import numpy as np

from gpu.tracking.anchor import face_axes, robust_fit, similarity

# The anchor's share of lower-face outliers (see ``FaceAnchor.lower_outliers``): clear faces
# read 0-0.1, an object over the mouth and chin 0.3-0.7 (the arrivals set).
CLEAR_SHARE = 0.15  # at or under it the model is trusted whole
COVERED_SHARE = 0.35  # at or over it the model keeps only ``COVERED_TRUST``
COVERED_TRUST = 0.05  # the model's pull per frame under an object: its drag is slow to come back in
# The points followed: from ``ABOVE_EYES`` over the eye line to ``BELOW_EYES`` of the way down
# to the chin, and at most ``ACROSS`` of the outer eye corners' distance from the face's
# middle: brows, eyes, the nose's bridge, the forehead's middle -- none on the face's edge,
# where the background or the hair beside it moves otherwise.
ABOVE_EYES, BELOW_EYES, ACROSS = 0.25, 0.3, 0.6
MAX_POINTS = 60  # followed per face (evenly over the upper face's middle): the fit needs no more
MIN_POINTS = 8  # fewer points followed back to where they started: no image cue this frame
BACK_ERROR = 0.01  # of the face's width: a point tracked forward and back lands this close to its start
MIN_WINDOW, MAX_WINDOW = 9, 31  # Lucas-Kanade window (pixels), an eighth of the face's width between these


def trust_of_model(lower_outliers: float) -> float:
    """How far the landmark model's own place for the face is taken (1 = wholly), from the
    share of its lower-face points the anchor finds off the track's shape."""
    covered = np.clip((lower_outliers - CLEAR_SHARE) / (COVERED_SHARE - CLEAR_SHARE), 0.0, 1.0)
    return float(1.0 - covered * (1.0 - COVERED_TRUST))


def upper_points(mesh: np.ndarray) -> np.ndarray:
    """Indices of at most ``MAX_POINTS`` of the mesh's points in the upper face's middle
    (``ABOVE_EYES``, ``BELOW_EYES``, ``ACROSS``)."""
    along, across = face_axes(mesh)
    chosen = np.flatnonzero((along > -ABOVE_EYES) & (along < BELOW_EYES) & (np.abs(across) < ACROSS))
    return chosen[::-(-len(chosen) // MAX_POINTS)]


class UpperFaceFlow:
    """One track's upper-face points as the image carries them from frame to frame. While
    the model is trusted whole they are the model's own points again each frame (no flow
    error builds up); while it is not, they move by the image alone, so the model's drag
    cannot creep into them through the mesh they are fitted to."""

    def __init__(self) -> None:
        self._indices: np.ndarray | None = None
        self._points: np.ndarray | None = None  # (K, 2) float32, where the image carried them
        self.following = False  # whether the image carried them into the last frame

    def follow(self, previous_gray: np.ndarray, gray: np.ndarray, previous_mesh: np.ndarray, mesh: np.ndarray | None,
               trust: float) -> np.ndarray | None:
        """The face's mesh in ``gray``: the model's ``mesh`` moved ``1 - trust`` of the way
        onto where the image carried the upper points from ``previous_gray``, or, with no
        ``mesh`` (the model lost the face behind an object), ``previous_mesh`` moved with
        them; None where there is no mesh and too few points were followed."""
        carried = self._carried(previous_gray, gray, previous_mesh) if trust < 1.0 or mesh is None else None
        self.following = carried is not None
        if carried is None:
            out = mesh
        elif mesh is None:
            before, after = carried
            out = _moved_onto(previous_mesh, before, after, 1.0)
        else:
            out = _moved_onto(mesh, np.asarray(mesh[self._indices, :2], np.float64), carried[1], 1.0 - trust)
        if carried is None or trust >= 1.0:  # the model's points again: taken from its mesh when next needed
            self._indices = self._points = None
        return out

    def _carried(self, previous_gray: np.ndarray, gray: np.ndarray, previous_mesh: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray] | None:
        """(where the followed points were, where they are now); only the points Lucas-Kanade
        follows there and back are kept. None for too few."""
        if self._points is None:
            self._indices = upper_points(previous_mesh)
            self._points = np.ascontiguousarray(previous_mesh[self._indices, :2], np.float32)
        width = float(np.ptp(previous_mesh[:, 0]))
        side = int(np.clip(width / 8, MIN_WINDOW, MAX_WINDOW)) | 1
        options = {"winSize": (side, side), "maxLevel": 3,
                   "criteria": (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 20, 0.03)}
        moved, found, _ = cv2.calcOpticalFlowPyrLK(previous_gray, gray, self._points, None, **options)
        back, found_back, _ = cv2.calcOpticalFlowPyrLK(gray, previous_gray, moved, None, **options)
        good = (found[:, 0] == 1) & (found_back[:, 0] == 1) & (np.linalg.norm(back - self._points, axis=1) < BACK_ERROR * width)
        if good.sum() < MIN_POINTS:
            self._points = None
            return None
        before = self._points[good].astype(np.float64)
        self._indices, self._points = self._indices[good], np.ascontiguousarray(moved[good])
        return before, self._points.astype(np.float64)


def _moved_onto(mesh: np.ndarray, sources: np.ndarray, targets: np.ndarray, amount: float) -> np.ndarray:
    """``mesh`` moved ``amount`` (0..1) of the way by the turn and shift that put ``sources``
    (points of it) onto ``targets``, fitted robustly (points on an object or a
    blinking lid drop out). The size stays the model's: the upper face's image scale, taken
    over to the chin, moved the lower face more than the drag did (the tuning half)."""
    _, rotation, _, weights = robust_fit(sources, targets, iterations=3)
    weights = weights if weights.sum() >= MIN_POINTS else np.ones(len(sources))
    _, rotation, _ = similarity(sources, targets, weights)
    translation = (weights @ targets - (weights @ sources) @ rotation.T) / weights.sum()
    xy = np.asarray(mesh[:, :2], np.float64)
    out = np.array(mesh, copy=True)
    out[:, :2] = xy + amount * (xy @ rotation.T + translation - xy)
    return out.astype(mesh.dtype)
