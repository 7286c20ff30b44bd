"""BlazeFace's raw outputs -> detections, as mediapipe's face detection graphs decode them.

The converted detectors (``gpu.models.tflite_onnx``) answer per anchor: 16 regressors (box
centre and size, six keypoints, in input pixels relative to the anchor) and a score logit.
This module is what mediapipe's SsdAnchorsCalculator, TensorsToDetectionsCalculator and
NonMaxSuppressionCalculator (WEIGHTED) do with them, so the converted graphs find the faces
mediapipe finds. The per-anchor math is written against the array module: NumPy inputs run
on the CPU, CuPy inputs on the device (same code); only the few candidates over the score
threshold come to the host for the suppression.

Public API (coordinates: tensor-normalised [0, 1] until ``to_frame``):

- ``SHORT_RANGE`` / ``FULL_RANGE`` (``DetectorSpec``) and ``ssd_anchors(spec)`` -> (A, 2)
  anchor centres;
- ``letterbox_matrices(windows, size)`` -> (N, 2, 3) frame -> tensor pixels for square
  views of ``windows`` (x0, y0, x1, y1), centred and padded as mediapipe letterboxes;
- ``detector_input(frames, windows, spec)`` -> (N, 3, S, S) float32 model input (zero
  border, scaled to the spec's value range) on the frames' device; ``windows`` integer;
- ``decode(boxes, scores, spec, min_score)`` -> per row a ``Detections`` (boxes xyxy,
  keypoints (K, 6, 2), scores), suppressed by ``weighted_nms``;
- ``to_frame(detections, window, spec.size)`` -> the same in frame pixels.

``gpu.tracking.graphs.TrackingGraphs`` runs the models on these (crop, runner via the
node's micro-batcher, decode) for the tracker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from gpu.device import array_module, to_host
from gpu.kernels import ops
from gpu.tracking import face_roi

KEYPOINTS = 6  # right eye, left eye (the subject's), nose tip, mouth centre, right and left ear tragion
NMS_IOU = 0.3  # mediapipe's face detection graphs: min_suppression_threshold
SCORE_CLIP = 100.0  # TensorsToDetections score_clipping_thresh


@dataclass(frozen=True)
class DetectorSpec:
    """One BlazeFace model as mediapipe configures it (SSD anchors + tensor decode)."""

    model_file: str
    size: int  # square input side, pixels
    strides: tuple[int, ...]
    interpolated_scale_aspect_ratio: float
    min_score: float  # the graph's own TensorsToDetections threshold: anchors under it join no cluster
    value_range: tuple[float, float] = (-1.0, 1.0)
    keypoints: int = KEYPOINTS  # (x, y) pairs after the box in each anchor's row (the palm detector: 7)
    min_scale: float = 0.1484375
    max_scale: float = 0.75
    anchor_offset: float = 0.5


SHORT_RANGE = DetectorSpec("face_detection_short_range.tflite", 128, (8, 16, 16, 16), 1.0, 0.5)
# Full range keeps 0.6 whatever min_detection_confidence asks (measured against mediapipe's
# FaceDetection on the sample faces: with 0.5 the weighted boxes move by up to 1.8 px).
FULL_RANGE = DetectorSpec("face_detection_full_range_sparse.tflite", 192, (4,), 0.0, 0.6)


@dataclass
class Detections:
    """Faces of one view: ``boxes`` (K, 4) x0, y0, x1, y1; ``keypoints`` (K, 6, 2) x, y;
    ``scores`` (K,) probabilities, best first. NumPy, in the coordinates the caller asked for."""

    boxes: np.ndarray
    keypoints: np.ndarray
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)


def ssd_anchors(spec: DetectorSpec) -> np.ndarray:
    """(A, 2) anchor centres (x, y) in [0, 1], in the order the model emits its rows.

    mediapipe's SsdAnchorsCalculator with fixed_anchor_size: consecutive layers of equal
    stride share one feature map, each layer adds one anchor per cell (plus one when
    ``interpolated_scale_aspect_ratio`` > 0); only centres matter, sizes are all 1."""
    centres = []
    layer = 0
    while layer < len(spec.strides):
        per_cell = 0
        last = layer
        while last < len(spec.strides) and spec.strides[last] == spec.strides[layer]:
            per_cell += 2 if spec.interpolated_scale_aspect_ratio > 0 else 1
            last += 1
        side = int(np.ceil(spec.size / spec.strides[layer]))
        grid = (np.arange(side, dtype=np.float64) + spec.anchor_offset) / side
        ys, xs = np.meshgrid(grid, grid, indexing="ij")
        cells = np.stack([xs.ravel(), ys.ravel()], axis=1)
        centres.append(np.repeat(cells, per_cell, axis=0))
        layer = last
    return np.concatenate(centres).astype(np.float32)


@lru_cache(maxsize=None)
def _anchors(spec: DetectorSpec) -> np.ndarray:
    """``ssd_anchors(spec)``, computed once per model (read-only), not on every decode."""
    anchors = ssd_anchors(spec)
    anchors.setflags(write=False)
    return anchors


def letterbox_matrices(windows: np.ndarray, size: int) -> np.ndarray:
    """(N, 2, 3) frame pixels -> tensor pixels: each window (x0, y0, x1, y1) padded to a
    square about its centre (mediapipe's keep_aspect_ratio) and scaled to ``size``."""
    windows = np.asarray(windows, dtype=np.float64).reshape(-1, 4)
    side = np.maximum(windows[:, 2] - windows[:, 0], windows[:, 3] - windows[:, 1])
    scale = size / side
    left = (windows[:, 0] + windows[:, 2]) / 2 - side / 2
    top = (windows[:, 1] + windows[:, 3]) / 2 - side / 2
    matrices = np.zeros((len(windows), 2, 3))
    matrices[:, 0, 0] = matrices[:, 1, 1] = scale
    matrices[:, 0, 2] = -left * scale
    matrices[:, 1, 2] = -top * scale
    return matrices


def detector_input(frames: Sequence[Any], windows: np.ndarray, spec: DetectorSpec) -> Any:
    """(N, 3, S, S) float32 input for ``spec``'s model: ``frames[i]`` seen through
    ``windows[i]`` (integer pixels), letterboxed as mediapipe's ImageToTensor does with
    BORDER_ZERO, scaled to ``spec.value_range``.

    The crop kernel replicates the edge; where a bilinear sample reaches past the window,
    its only neighbour inside is that edge pixel, so the zero border's value is the
    replicated one times the sample's coverage of the window (exact, separable)."""
    windows = np.asarray(windows, dtype=np.int64).reshape(-1, 4)
    views = [frame[y0:y1, x0:x1] for frame, (x0, y0, x1, y1) in zip(frames, windows, strict=True)]
    xp = array_module(views[0]) if views else np
    if xp is not np:  # the device kernel reads whole frames; OpenCV reads a NumPy view in place
        views = [xp.ascontiguousarray(view) for view in views]  # (a copy each: a 16 MP photo's 46 views ~150 MB)
    sizes = windows[:, 2:] - windows[:, :2]  # (width, height) per view
    matrices = letterbox_matrices(np.concatenate([np.zeros_like(sizes), sizes], axis=1), spec.size)
    crops = ops.crop_faces(views, matrices, spec.size)
    pixel = np.arange(spec.size, dtype=np.float64)
    source = (pixel[None, None, :] - matrices[:, :, 2, None]) / matrices[:, 0, 0, None, None]  # (N, 2, S): x, y
    beyond = np.maximum(np.maximum(-source, source - (sizes[:, :, None] - 1)), 0)
    coverage = np.clip(1 - beyond, 0, 1).astype(np.float32)
    weight = xp.asarray(coverage[:, 1, :, None] * coverage[:, 0, None, :])  # (N, S, S)
    lo, hi = spec.value_range
    return face_roi.planar(crops, weight * xp.float32((hi - lo) / 255.0), lo)


def decode(boxes: Any, scores: Any, spec: DetectorSpec, min_score: float = 0.5, iou: float = NMS_IOU) -> list[Detections]:
    """Per row of the model's outputs (``boxes`` [N, A, 4 + 2 K], ``scores`` [N, A, 1]; NumPy or
    CuPy), the faces (or palms) mediapipe would report: anchor decode, sigmoid scores over
    ``min_score`` (and over the graph's own ``spec.min_score``), weighted suppression.
    Tensor-normalised coordinates."""
    xp = array_module(boxes)
    anchors = xp.asarray(_anchors(spec))
    raw = boxes.reshape(boxes.shape[0], -1, 4 + 2 * spec.keypoints)
    if raw.shape[1] != len(anchors):
        raise ValueError(f"{spec.model_file}: {raw.shape[1]} rows of outputs for {len(anchors)} anchors")
    logits = xp.clip(scores.reshape(raw.shape[0], -1), -SCORE_CLIP, SCORE_CLIP)
    probability = 0.5 * (1.0 + xp.tanh(logits / 2))  # the sigmoid, without exp's overflow
    # fixed-size anchors: offsets are in input pixels from the anchor's centre, sizes absolute
    centre = raw[..., 0:2] / spec.size + anchors
    half = raw[..., 2:4] / spec.size / 2
    corners = xp.concatenate([centre - half, centre + half], axis=-1)
    keypoints = raw[..., 4:].reshape(raw.shape[0], raw.shape[1], spec.keypoints, 2) / spec.size + anchors[:, None, :]
    keep = probability >= max(min_score, spec.min_score)
    rows, columns = (to_host(index) for index in xp.nonzero(keep))
    chosen = (to_host(corners[keep]), to_host(keypoints[keep]), to_host(probability[keep]))
    return [weighted_nms(*(part[rows == row] for part in chosen), iou=iou) for row in range(raw.shape[0])]


def weighted_nms(boxes: np.ndarray, keypoints: np.ndarray, scores: np.ndarray, iou: float = NMS_IOU) -> Detections:
    """mediapipe's WEIGHTED non-maximum suppression: best first, every candidate overlapping
    it by more than ``iou`` joins its cluster, whose box and keypoints are the
    score-weighted mean of its members; the score stays the best's."""
    order = np.argsort(-scores, kind="stable")
    boxes, keypoints, scores = boxes[order], keypoints[order], scores[order]
    remaining = np.arange(len(scores))
    kept_boxes, kept_points, kept_scores = [], [], []
    while len(remaining):
        best = remaining[0]
        overlap = _iou(boxes[best], boxes[remaining])
        cluster = remaining[overlap > iou]
        weights = scores[cluster, None]
        kept_boxes.append((boxes[cluster] * weights).sum(0) / weights.sum())
        kept_points.append((keypoints[cluster] * weights[:, :, None]).sum(0) / weights.sum())
        kept_scores.append(scores[best])
        remaining = remaining[overlap <= iou]
    if not kept_scores:
        return Detections(np.zeros((0, 4), np.float32), np.zeros((0, *keypoints.shape[1:]), np.float32), np.zeros(0, np.float32))
    return Detections(
        np.stack(kept_boxes).astype(np.float32), np.stack(kept_points).astype(np.float32), np.array(kept_scores, np.float32)
    )


def to_frame(detections: Detections, window: Sequence[float], size: int) -> Detections:
    """``detections`` of the view of ``window`` (tensor-normalised) in frame pixels."""
    matrix = letterbox_matrices(np.asarray(window)[None], size)[0]
    scale, offset = matrix[0, 0], matrix[:, 2]
    to_pixels = size / scale
    boxes = detections.boxes * to_pixels - np.tile(offset / scale, 2)
    keypoints = detections.keypoints * to_pixels - offset / scale
    return Detections(boxes.astype(np.float32), keypoints.astype(np.float32), detections.scores)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    low = np.maximum(box[:2], boxes[:, :2])
    high = np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=1)
    area = np.prod(box[2:] - box[:2])
    areas = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)
