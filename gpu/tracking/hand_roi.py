"""The hand models' geometry: palm detections -> the hand landmark model's region of interest,
its 21 points back to frame pixels, and the next frame's region from them.

This is what mediapipe's hand tracking graph does (PalmDetectionCpu's decode, then
HandLandmarkCpu with DetectionsToRects, HandLandmarksToRect and RectTransformation), in the
ROI rows of ``gpu.tracking.face_roi`` (cx, cy, side, rotation; frame pixels, radians), so
the same crop kernel and matrices serve both. A hand's rotation turns it fingers-up in its
crop: the crop's upward axis lies along the wrist -> middle knuckle direction.

Public API:

- ``PALM`` (``DetectorSpec``): palm_detection_full as PalmDetectionCpu configures it;
- ``roi_from_palms(keypoints)`` -> (N, 4): the palms' boxes (N, 4) and seven keypoints (N, 7, 2);
- ``roi_from_hands(points)`` -> (N, 4): the previous frame's hands (N, 21, 2+);
- ``unproject(raw, rois)`` -> (N, 21, 3) frame pixels from the landmark model's (N, 63).
"""

from __future__ import annotations

import numpy as np

from gpu.tracking.blazeface_decode import DetectorSpec

LANDMARK_SIZE = 224  # hand_landmark's input side
JOINTS = 21
PALM = DetectorSpec("palm_detection_full.tflite", 192, (8, 16, 16, 16), 1.0, 0.5, value_range=(0.0, 1.0), keypoints=7)
PALM_WRIST, PALM_MIDDLE = 0, 2  # the palm detector's keypoints the hand is turned by
PALM_SCALE, PALM_SHIFT = 2.6, -0.5  # PalmDetectionDetectionToRoi: the palm box grown to the whole hand, moved fingerwards
WRIST, INDEX_KNUCKLE, MIDDLE_KNUCKLE, RING_KNUCKLE = 0, 5, 9, 13
# HandLandmarkLandmarksToRoi: the joints the next box is taken over (not the fingertips,
# which move most), grown 2x and moved a tenth fingerwards
ROI_JOINTS = (0, 1, 2, 3, 5, 6, 9, 10, 13, 14, 17, 18)
HAND_SCALE, HAND_SHIFT = 2.0, -0.1


def roi_from_palms(boxes: np.ndarray, keypoints: np.ndarray) -> np.ndarray:
    """(N, 4) ROIs for palm detections: boxes (N, 4) x0, y0, x1, y1 and keypoints (N, 7, 2)
    in frame pixels."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    keypoints = np.asarray(keypoints, np.float64)
    rotation = _upright(keypoints[:, PALM_WRIST], keypoints[:, PALM_MIDDLE])
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    size = boxes[:, 2:] - boxes[:, :2]
    return _transformed(centre, size, rotation, PALM_SCALE, PALM_SHIFT)


def roi_from_hands(points: np.ndarray) -> np.ndarray:
    """(N, 4) ROIs following hands (N, 21, 2+) in frame pixels into the next frame: turned
    by the wrist and the knuckles, the box of the palm's joints in that turned frame."""
    xy = np.asarray(points, np.float64)[:, :, :2]
    knuckles = ((xy[:, INDEX_KNUCKLE] + xy[:, RING_KNUCKLE]) / 2 + xy[:, MIDDLE_KNUCKLE]) / 2
    rotation = _upright(xy[:, WRIST], knuckles)
    cos, sin = np.cos(rotation)[:, None], np.sin(rotation)[:, None]
    joints = xy[:, ROI_JOINTS]
    # the joints in the hand's own axes (u across, v along the crop's downward axis)
    u = joints[..., 0] * cos + joints[..., 1] * sin
    v = -joints[..., 0] * sin + joints[..., 1] * cos
    low_u, high_u, low_v, high_v = u.min(1), u.max(1), v.min(1), v.max(1)
    mid_u, mid_v = (low_u + high_u) / 2, (low_v + high_v) / 2
    centre = np.stack([mid_u * cos[:, 0] - mid_v * sin[:, 0], mid_u * sin[:, 0] + mid_v * cos[:, 0]], axis=1)
    size = np.stack([high_u - low_u, high_v - low_v], axis=1)
    return _transformed(centre, size, rotation, HAND_SCALE, HAND_SHIFT)


def unproject(raw: np.ndarray, rois: np.ndarray, size: int = LANDMARK_SIZE) -> np.ndarray:
    """(N, 21, 3) x, y, z in frame pixels from the model's (N, 63) crop-pixel output (z on the
    x scale)."""
    points = np.asarray(raw, np.float64).reshape(len(raw), JOINTS, 3)
    rois = np.asarray(rois, np.float64).reshape(-1, 4)
    cx, cy, side, rotation = (rois[:, i, None] for i in range(4))
    cos, sin = np.cos(rotation), np.sin(rotation)
    u = (points[:, :, 0] / size - 0.5) * side
    v = (points[:, :, 1] / size - 0.5) * side
    return np.stack([cx + cos * u - sin * v, cy + sin * u + cos * v, points[:, :, 2] / size * side], axis=2).astype(np.float32)


def _upright(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """(N,) rotation turning ``start`` -> ``end`` upward in the crop (mediapipe's target angle
    of 90 degrees): the crop's downward axis (-sin, cos) is the reverse of that direction."""
    delta = end - start
    return np.arctan2(delta[:, 0], -delta[:, 1])


def _transformed(centre: np.ndarray, size: np.ndarray, rotation: np.ndarray, scale: float, shift: float) -> np.ndarray:
    """RectTransformationCalculator: the rect moved ``shift`` of its height along its own
    downward axis, grown ``scale`` times and squared on its long side."""
    height = size[:, 1]
    moved = centre + shift * height[:, None] * np.stack([-np.sin(rotation), np.cos(rotation)], axis=1)
    side = size.max(axis=1) * scale
    return np.stack([moved[:, 0], moved[:, 1], side, rotation], axis=1).astype(np.float32)
