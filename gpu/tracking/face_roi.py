"""The face landmark model's region of interest: from a detection or the previous mesh to a
rotated square crop, and the model's 468 points back to frame pixels.

mediapipe's face mesh runs its landmark model on a square around the face turned upright by
the eye line (FaceDetectionFrontDetectionToRoi for a detection, FaceLandmarkLandmarksToRoi
for the previous frame's mesh: both 1.5 x the long side of the face's box), resampled to
192 x 192, and projects the answer back (LandmarkProjectionCalculator). This is that,
batched over faces and written against the array module: NumPy inputs run on the CPU,
CuPy inputs on the device, same code.

Public API. An ROI is a row (cx, cy, side, rotation): centre and side in frame pixels,
rotation in radians (the eye line's angle, y down; positive = the head tilts clockwise):

- ``roi_from_detection(boxes, keypoints)`` -> (N, 4): boxes (N, 4) xyxy and BlazeFace's six
  keypoints (N, 6, 2) in frame pixels;
- ``roi_from_landmarks(points)`` -> (N, 4): the previous meshes (N, 468, 2+) in frame pixels;
- ``roi_matrices(rois, size)`` -> (N, 2, 3) float64 NumPy, frame -> crop pixels;
- ``landmark_input(frames, rois)`` -> (N, 3, 192, 192) float32 in [0, 1], the model's input;
- ``unproject_landmarks(raw, rois)`` -> (N, 468, 3) frame pixels (z on the x scale, as
  ``Face.depth``) from the model's ``[N, 1, 1, 1404]`` output;
- ``presence(logits)`` -> (N,) face-presence probabilities (mediapipe keeps a face over 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from gpu.device import array_module, to_host
from gpu.kernels import ops

LANDMARK_SIZE = 192  # face_landmark.tflite's input side
LANDMARK_COUNT = 468
ROI_SCALE = 1.5  # both of mediapipe's ROI graphs: the square is 1.5 x the face box's long side
# The eye line: BlazeFace keypoints 0 -> 1, mesh points 33 -> 263 (outer eye corners).
DETECTION_EYES = (0, 1)
MESH_EYES = (33, 263)


def roi_from_detection(boxes: Any, keypoints: Any, scale: float = ROI_SCALE) -> Any:
    """(N, 4) ROIs for detections: boxes (N, 4) x0, y0, x1, y1, keypoints (N, 6, 2)."""
    xp = array_module(boxes)
    start, end = keypoints[:, DETECTION_EYES[0]], keypoints[:, DETECTION_EYES[1]]
    return _roi(xp, boxes[:, :2], boxes[:, 2:4], start, end, scale)


def roi_from_landmarks(points: Any, scale: float = ROI_SCALE) -> Any:
    """(N, 4) ROIs following meshes (N, 468, 2 or 3) in frame pixels into the next frame."""
    xp = array_module(points)
    xy = points[:, :, :2]
    return _roi(xp, xy.min(axis=1), xy.max(axis=1), xy[:, MESH_EYES[0]], xy[:, MESH_EYES[1]], scale)


def _roi(xp, low: Any, high: Any, start: Any, end: Any, scale: float) -> Any:
    centre = (low + high) / 2
    side = (high - low).max(axis=1) * scale
    delta = end - start
    rotation = xp.arctan2(delta[:, 1], delta[:, 0])
    return xp.stack([centre[:, 0], centre[:, 1], side, rotation], axis=1).astype(xp.float32)


def roi_matrices(rois: Any, size: int = LANDMARK_SIZE) -> np.ndarray:
    """(N, 2, 3) frame pixels -> crop pixels: the ROI's square, turned upright, onto
    ``size`` x ``size`` (its corners onto the crop's, as mediapipe's ImageToTensor maps them)."""
    rois = to_host(rois).astype(np.float64).reshape(-1, 4)
    cx, cy, side, rotation = rois.T
    cos, sin = np.cos(rotation), np.sin(rotation)
    scale = size / side
    matrices = np.empty((len(rois), 2, 3))
    matrices[:, 0, 0], matrices[:, 0, 1] = scale * cos, scale * sin
    matrices[:, 1, 0], matrices[:, 1, 1] = -scale * sin, scale * cos
    matrices[:, 0, 2] = size / 2 - (matrices[:, 0, 0] * cx + matrices[:, 0, 1] * cy)
    matrices[:, 1, 2] = size / 2 - (matrices[:, 1, 0] * cx + matrices[:, 1, 1] * cy)
    return matrices


def landmark_input(frames: Sequence[Any], rois: Any, size: int = LANDMARK_SIZE) -> Any:
    """(N, 3, S, S) float32 in [0, 1] (FaceLandmarkCpu's scaling): face ``i`` cropped from
    ``frames[i]`` (repeats allowed) through ``rois[i]``, on the frames' device."""
    crops = ops.crop_faces(frames, roi_matrices(rois, size), size)
    return planar(crops, array_module(crops).float32(1 / 255.0))


def planar(crops: Any, scale: Any, offset: float | None = None) -> Any:
    """(N, 3, S, S) float32 ``crops * scale (+ offset)`` of (N, S, S, 3) uint8 crops, the
    models' input layout; ``scale`` a float32 scalar or per-pixel (N, S, S). On the host plane
    by plane from OpenCV's channel split: NumPy's strided transpose of the float crops took
    three times as long (the same float32 arithmetic, so the same values)."""
    xp = array_module(crops)
    if xp is not np:
        tensor = crops.astype(xp.float32) * (scale[..., None] if xp.ndim(scale) else scale)
        return xp.ascontiguousarray((tensor if offset is None else tensor + xp.float32(offset)).transpose(0, 3, 1, 2))
    count, size = crops.shape[0], crops.shape[1]
    tensor = np.empty((count, 3, size, size), np.float32)
    for index in range(count):
        factor = scale[index] if np.ndim(scale) else scale
        for plane, out in zip(cv2.split(crops[index]), tensor[index], strict=True):
            np.multiply(plane, factor, out=out, dtype=np.float32)
    if offset is not None:
        tensor += np.float32(offset)
    return tensor


def unproject_landmarks(raw: Any, rois: Any, size: int = LANDMARK_SIZE) -> Any:
    """(N, 468, 3) x, y, z in frame pixels from the model's (N, ..., 1404) crop-pixel output;
    z is scaled like x (mediapipe: z / input width x the ROI's width)."""
    xp = array_module(raw)
    points = raw.reshape(raw.shape[0], LANDMARK_COUNT, 3).astype(xp.float32)
    rois = xp.asarray(rois, dtype=xp.float32)
    cx, cy, side, rotation = (rois[:, i, None] for i in range(4))
    cos, sin = xp.cos(rotation), xp.sin(rotation)
    u = (points[:, :, 0] / size - 0.5) * side
    v = (points[:, :, 1] / size - 0.5) * side
    x = cx + cos * u - sin * v
    y = cy + sin * u + cos * v
    z = points[:, :, 2] / size * side
    return xp.stack([x, y, z], axis=2)


def presence(logits: Any) -> Any:
    """(N,) face-presence probabilities from the model's (N, ...) presence logits."""
    xp = array_module(logits)
    return 0.5 * (1.0 + xp.tanh(logits.reshape(logits.shape[0]) / 2))  # the sigmoid, without exp's overflow
