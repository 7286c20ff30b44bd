"""Where a tracked face is, robust to things in front of it: the next frame's landmark ROI.

mediapipe's tracking rule crops the next frame around the previous mesh's box. That box
follows whatever the mesh does: a cup over the mouth drags the lower face's points down and
sideways, the next crop follows them, the model drags further, and within five frames the
mesh sits a fifth of the face's width off the face (measured on the occlusion set). The crop
is also one frame late, which on the pose set's fast zoom or pan is a fifth of the face.

``FaceAnchor`` instead fits the track's reference shape (3D, so a turning head fits too)
onto each new mesh by a robust similarity fit: the points an occluder drags are outliers
and do not move the pose. The ROI is the box of the fitted reference (its eye line for the
rotation), carried one frame ahead at the pose's own speed. The reference learns slowly from
the inlier points, so a shape that changes gradually (a turning head's) becomes part of it;
points far off it (a sudden expression, an occluder's drag) only stay out of the pose."""

from __future__ import annotations

import numpy as np

from gpu.tracking import face_roi

FIT_ITERATIONS = 1  # a frame's fit starts from the last frame's weights: an occluder that stays is already down-weighted
# Tukey's biweight cut-off, in median residuals (tight: a quarter of the face dragged away
# drags a plain fit too, and its points must still stand out), floored at a fraction of the
# face's size: below that floor every point counts (a still face's residuals are the model's
# noise, not outliers).
TUKEY_C = 2.5
MIN_CUTOFF_OF_SIZE = 0.03
REFERENCE_RATE = 0.05  # how fast the reference takes in a frame's inlier points: slower than an occluder drags
OUTLIER_WEIGHT = 0.3  # a point weighted under this by the last fit counts as dragged off the shape
NOSE_TIP, CHIN = 1, 152
PREDICTION = 0.8  # of the last frame's ROI motion carried into the next frame
# Below these steps (of the ROI's side; radians) a move is mostly the model's jitter, and
# carrying it forward would only feed the jitter back: the carried share falls off as
# step^2 / (step^2 + knee^2).
MOVE_KNEE = 0.02
TURN_KNEE = 0.02


def face_axes(mesh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each mesh point's place down the face (0 on the eye line, 1 at the chin) and across
    it (in outer eye corners' distances from the eyes' middle)."""
    xy = np.asarray(mesh, np.float64)[:, :2]
    left, right = xy[face_roi.MESH_EYES[0]], xy[face_roi.MESH_EYES[1]]
    eyes = (left + right) / 2
    down, across = xy[CHIN] - eyes, right - left
    return (xy - eyes) @ down / max(float(down @ down), 1e-9), (xy - eyes) @ across / max(float(across @ across), 1e-9)


def similarity(source: np.ndarray, target: np.ndarray, weights: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Weighted least-squares similarity (Umeyama): scale, rotation (D x D), translation (D,)
    with ``target ~ scale * source @ rotation.T + translation``."""
    total = float(weights.sum())
    source_mean = weights @ source / total
    target_mean = weights @ target / total
    a = source - source_mean
    weighted = a * weights[:, None]
    u, singular, vt = np.linalg.svd((target - target_mean).T @ weighted)
    sign = np.ones(len(singular))
    sign[-1] = -1.0 if np.linalg.det(u @ vt) < 0 else 1.0  # a rotation, not a reflection
    rotation = (u * sign) @ vt
    scale = float((singular * sign).sum() / max(float(np.einsum("ij,ij->", weighted, a)), 1e-12))
    return scale, rotation, target_mean - scale * source_mean @ rotation.T


def robust_fit(source: np.ndarray, target: np.ndarray, weights: np.ndarray | None = None,
               iterations: int = FIT_ITERATIONS) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """``source`` fitted onto ``target`` by a similarity with Tukey-reweighted points, from
    ``weights`` (default: all 1): scale, rotation, translation (the last fit) and each point's
    weight by that fit's residual (0 = an outlier), the next fit's start."""
    weights = np.ones(len(source)) if weights is None else weights
    middle = len(source) // 2
    size = float(np.ptp(target[:, 0]) + np.ptp(target[:, 1])) / 2
    floor = (MIN_CUTOFF_OF_SIZE * size) ** 2
    for _ in range(iterations):
        scale, rotation, translation = similarity(source, target, weights)
        squared = ((target - (scale * source @ rotation.T + translation)) ** 2).sum(1)
        cutoff = max(TUKEY_C ** 2 * float(np.partition(squared, middle)[middle]), floor)  # squared: the median residual's square
        weights = np.square(np.maximum(1.0 - squared / cutoff, 0.0))
        if weights.sum() < 0.1 * len(weights):  # nothing agrees: no pose to hold on to
            weights = np.ones(len(source))
    return scale, rotation, translation, weights


class FaceAnchor:
    """A track's pose: ``update`` with each accepted mesh, ``next_roi`` for the next frame."""

    def __init__(self, mesh: np.ndarray) -> None:
        self.reference = np.asarray(mesh, np.float64)[:, :3].copy()
        self._fitted = self.reference
        self._weights = np.ones(len(self.reference))
        self._rois: list[np.ndarray] = [self._roi()]
        along, _ = face_axes(self.reference)
        self._lower = along > along[NOSE_TIP]  # below the nose tip, from the eye line toward the chin

    @property
    def lower_outliers(self) -> float:
        """The share of the lower face's points the last fit found off the track's shape:
        near 0 on a clear face, 0.3-0.7 with an object over the mouth and chin."""
        return float((self._weights[self._lower] < OUTLIER_WEIGHT).mean())

    def update(self, mesh: np.ndarray) -> None:
        """Fit the reference onto ``mesh`` (468, 3): the face where its inliers put it."""
        mesh = np.asarray(mesh, np.float64)[:, :3]
        scale, rotation, translation, weights = robust_fit(self.reference, mesh, self._weights)
        self._weights = weights
        self._fitted = scale * self.reference @ rotation.T + translation
        in_reference_frame = (mesh - translation) @ rotation / scale  # the fit undone
        self.reference = self.reference + REFERENCE_RATE * weights[:, None] * (in_reference_frame - self.reference)
        self._rois = [self._rois[-1], self._roi()]

    def next_roi(self) -> np.ndarray:
        """(1, 4) the ROI for the next frame: the fitted face's, moved on as it last moved."""
        last = self._rois[-1]
        if len(self._rois) < 2:
            return last[None].astype(np.float32)
        before = self._rois[0]
        move = (last[:2] - before[:2]) / last[2]
        zoom = np.log(last[2] / before[2])
        turn = (last[3] - before[3] + np.pi) % (2 * np.pi) - np.pi
        ahead = last.copy()
        ahead[:2] += _carried(move, MOVE_KNEE) * last[2]
        ahead[2] *= np.exp(_carried(np.array([zoom]), MOVE_KNEE)[0])
        ahead[3] += _carried(np.array([turn]), TURN_KNEE)[0]
        return ahead[None].astype(np.float32)

    def _roi(self) -> np.ndarray:
        """(4,) the fitted face's ROI, as ``face_roi.roi_from_landmarks`` draws it."""
        xy = self._fitted[:, :2]
        low, high = xy.min(0), xy.max(0)
        eyes = xy[face_roi.MESH_EYES[1]] - xy[face_roi.MESH_EYES[0]]
        centre = (low + high) / 2
        return np.array([centre[0], centre[1], (high - low).max() * face_roi.ROI_SCALE, np.arctan2(eyes[1], eyes[0])])


def _carried(step: np.ndarray, knee: float) -> np.ndarray:
    """The part of the last step carried into the next frame: ``PREDICTION`` of a clear move, little of a jitter."""
    size = float((step ** 2).sum())
    return PREDICTION * size / (size + knee ** 2) * step
