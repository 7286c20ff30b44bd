"""SCRFD face detector (insightface ``det_10g.onnx``): boxes and five ArcFace keypoints.

The file outputs, per stride 8/16/32 and two anchors per feature-map cell, a score, a box as
distances from the anchor centre and five keypoints as offsets, all in units of the stride.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx

from gpu.errors import ModelFileError
from gpu.models.signatures import (
    check_count,
    check_tensor,
    graph_inputs,
    graph_outputs,
    load_onnx,
    open_runner,
)
from gpu.types import Face

STRIDES = (8, 16, 32)
ANCHORS = 2
_LAST_DIMS = (1, 4, 10)  # scores, boxes, keypoints
_KINDS = ("scores", "boxes", "keypoints")


class ScrfdDetector:
    """Runs det_10g on a letterboxed ``input_size`` square and decodes faces in image pixels."""

    def __init__(
        self,
        path: str | Path,
        input_size: int = 640,
        score_threshold: float = 0.5,
        nms_threshold: float = 0.4,
    ) -> None:
        if input_size % max(STRIDES):
            raise ValueError(f"input_size must be a multiple of {max(STRIDES)}, not {input_size}")
        self.path = Path(path)
        self.input_size = input_size
        self.score_threshold = score_threshold
        self.nms_threshold = nms_threshold
        model = load_onnx(self.path)
        self._check(model)
        self.runner = open_runner(self.path, model)
        self._input = self.runner.inputs[0].name
        self._centers = [_anchor_centers(input_size // s, s) for s in STRIDES]

    def detect(self, image: np.ndarray) -> list[Face]:
        """Faces in an RGB uint8 (H, W, 3) image, highest score first."""
        blob, scale_x, scale_y = self._letterbox(image)
        outputs = self.runner.run({self._input: blob})
        scores, boxes, kps = self._decode(outputs)
        keep = nms(boxes, scores, self.nms_threshold)
        boxes[:, 0::2] /= scale_x
        boxes[:, 1::2] /= scale_y
        kps[:, :, 0] /= scale_x
        kps[:, :, 1] /= scale_y
        return [Face(box=boxes[i].copy(), kps=kps[i].copy(), score=float(scores[i])) for i in keep]

    def _check(self, model: onnx.ModelProto) -> None:
        inputs, outputs = graph_inputs(model), graph_outputs(model)
        check_count(self.path, "input", inputs, 1)
        check_tensor(self.path, "input", inputs[0], ("N", 3, self.input_size, self.input_size))
        check_count(self.path, "output", outputs, len(STRIDES) * len(_LAST_DIMS))
        for i, spec in enumerate(outputs):
            last = _LAST_DIMS[i // len(STRIDES)]
            shape = ("N", "A", last) if len(spec.shape) == 3 else ("A", last)
            check_tensor(self.path, "output", spec, shape)

    def _letterbox(self, image: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Resize keeping the aspect ratio, pad right/bottom; returns the NCHW blob and the
        per-axis scales (rounding the resized size makes them differ slightly)."""
        height, width = image.shape[:2]
        scale = self.input_size / max(height, width)
        new_w = min(self.input_size, max(1, round(width * scale)))
        new_h = min(self.input_size, max(1, round(height * scale)))
        canvas = np.zeros((self.input_size, self.input_size, 3), dtype=np.float32)
        canvas[:new_h, :new_w] = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
        blob = ((canvas - 127.5) / 128.0).transpose(2, 0, 1)[None]
        return np.ascontiguousarray(blob), new_w / width, new_h / height

    def _decode(self, outputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All candidates above the score threshold: scores (K,), boxes (K, 4), kps (K, 5, 2)
        in letterboxed-input pixels."""
        count = len(STRIDES)
        scores, boxes, kps = [], [], []
        for i, (stride, centers) in enumerate(zip(STRIDES, self._centers, strict=True)):
            score = self._rows(outputs, i, len(centers))[:, 0]
            hit = score >= self.score_threshold
            center = centers[hit]
            dist = self._rows(outputs, count + i, len(centers))[hit] * stride
            offsets = self._rows(outputs, 2 * count + i, len(centers))[hit].reshape(-1, 5, 2) * stride
            scores.append(score[hit])
            boxes.append(np.concatenate([center - dist[:, :2], center + dist[:, 2:]], axis=1))
            kps.append(center[:, None, :] + offsets)
        return np.concatenate(scores), np.concatenate(boxes), np.concatenate(kps)

    def _rows(self, outputs: list[np.ndarray], index: int, expected: int) -> np.ndarray:
        """Output ``index`` as (rows, last) float32, with or without its batch axis of 1."""
        last = _LAST_DIMS[index // len(STRIDES)]
        out = outputs[index]
        if out.ndim == 3 and out.shape[0] == 1:
            out = out[0]
        if out.shape != (expected, last):
            stride = STRIDES[index % len(STRIDES)]
            side = self.input_size // stride
            raise ModelFileError(
                self.path,
                f"output {index} ({_KINDS[index // len(STRIDES)]}, stride {stride}) has shape "
                f"{list(outputs[index].shape)}, expected [{expected},{last}] "
                f"({ANCHORS} anchors on a {side}x{side} grid)",
            )
        return out.astype(np.float32, copy=False)


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> list[int]:
    """Greedy non-maximum suppression; indices of the kept boxes, highest score first."""
    order = np.argsort(-scores, kind="stable")
    areas = np.maximum(0.0, boxes[:, 2] - boxes[:, 0]) * np.maximum(0.0, boxes[:, 3] - boxes[:, 1])
    keep: list[int] = []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        top_left = np.maximum(boxes[best, :2], boxes[rest, :2])
        bottom_right = np.minimum(boxes[best, 2:], boxes[rest, 2:])
        inter = np.prod(np.clip(bottom_right - top_left, 0.0, None), axis=1)
        iou = inter / np.maximum(areas[best] + areas[rest] - inter, 1e-9)
        order = rest[iou <= threshold]
    return keep


def _anchor_centers(side: int, stride: int) -> np.ndarray:
    """(side*side*ANCHORS, 2) anchor centres in row-major cell order, anchors adjacent."""
    ys, xs = np.mgrid[:side, :side]
    centers = np.stack([xs, ys], axis=-1).reshape(-1, 2).astype(np.float32) * stride
    return np.repeat(centers, ANCHORS, axis=0)
