"""inswapper_128 (insightface / FaceFusion) behind the ``Swapper`` contract.

The file is exported with its batch fixed at 1; the batcher needs ``[N, ...]``. So the
graph is rewritten on load: dim 0 of inputs and outputs becomes symbolic, Reshapes whose
constant shape pins batch 1 are fixed, and intermediate shapes that pin it are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import cv2
import numpy as np
import onnx
from onnx import numpy_helper

from gpu.align import arcface_template, estimate_similarity, transform_points
from gpu.analysis.arcface import EMBEDDING_SIZE, ArcFaceEmbedder
from gpu.device import array_module
from gpu.errors import ModelFileError
from gpu.kernels.ops import crop_faces, paste_faces
from gpu.models.signatures import (
    FLOAT32_OR_16,
    check_count,
    check_tensor,
    find,
    format_shape,
    graph_inputs,
    graph_outputs,
    load_onnx,
    open_runner,
)
from gpu.options import SwapOptions
from gpu.runners.base import Runner
from gpu.swappers.base import FaceJob, KeepMask, keep_mask
from gpu.types import Face

CROP_SIZE = 128
BATCH_DIM = "N"


class InswapperSwapper:
    """Swaps a target face for a source identity (an ArcFace embedding projected by ``emap``)."""

    crop_size = CROP_SIZE

    def __init__(self, path: str | Path, embedder: ArcFaceEmbedder,
                 make_runner: Callable[[onnx.ModelProto, str], Runner] | None = None) -> None:
        """``make_runner(model, name)`` picks the runner for the node's device (the engine
        passes its own); ONNX Runtime on CPU when not given."""
        self.path = Path(path)
        self.name = self.path.stem
        self.embedder = embedder
        model = load_onnx(self.path)
        self._check(model)
        self.emap = _emap(self.path, model)
        make_batch_dynamic(model, self.path)
        self.runner = make_runner(model, self.name) if make_runner else open_runner(self.path, model)
        self._dtypes = {spec.name: spec.dtype for spec in self.runner.inputs}
        self._template = arcface_template(CROP_SIZE)

    def register(self, image: np.ndarray, face: Face) -> np.ndarray:
        """The source latent (512,) float32: normalize(embedding) @ emap, L2-normalised."""
        embedding = self.embedder.embed(image, face.kps).astype(np.float64)
        latent = (embedding / np.linalg.norm(embedding)) @ self.emap.astype(np.float64)
        return (latent / np.linalg.norm(latent)).astype(np.float32)

    def prepare(self, frame: np.ndarray, face: Face, source: np.ndarray, options: SwapOptions,
                keep: KeepMask | None = None) -> FaceJob:
        """Crop where the frame is (a CuPy frame: on the device); the mask is drawn on the
        host from the face box and moved there too."""
        xp = array_module(frame)
        matrix = estimate_similarity(face.kps, self._template)
        crop = crop_faces([frame], matrix[None], CROP_SIZE)[0]
        target = crop.transpose(2, 0, 1).astype(np.float32) / 255.0
        feeds = {
            "target": target.astype(self._dtypes["target"]),
            "source": xp.asarray(source, dtype=np.float32).astype(self._dtypes["source"]),
        }
        mask = paste_mask(face, matrix, CROP_SIZE, options.feather, options.mouth_mask) * np.float32(options.blend)
        occluded = keep_mask(keep, crop, face, matrix)
        if occluded is not None:
            mask = mask * (1.0 - occluded)
        return FaceJob(feeds=feeds, matrix=matrix, context={"mask": xp.asarray(mask)})

    def finish(self, frame: np.ndarray, job: FaceJob, row: Sequence[np.ndarray]) -> None:
        xp = array_module(frame)
        swapped = xp.asarray(row[0], dtype=np.float32).transpose(1, 2, 0)
        crop = xp.clip(swapped * 255.0 + 0.5, 0, 255).astype(np.uint8)
        paste_faces([frame], [0], crop[None], job.context["mask"][None], job.matrix[None])

    def _check(self, model: onnx.ModelProto) -> None:
        inputs, outputs = graph_inputs(model), graph_outputs(model)
        check_count(self.path, "input", inputs, 2)
        target = find(self.path, "input", inputs, "target")
        check_tensor(self.path, "input", target, (BATCH_DIM, 3, CROP_SIZE, CROP_SIZE), FLOAT32_OR_16)
        source = find(self.path, "input", inputs, "source")
        check_tensor(self.path, "input", source, (BATCH_DIM, EMBEDDING_SIZE), FLOAT32_OR_16)
        check_count(self.path, "output", outputs, 1)
        check_tensor(self.path, "output", outputs[0], (BATCH_DIM, 3, CROP_SIZE, CROP_SIZE), FLOAT32_OR_16)


def paste_mask(face: Face, matrix: np.ndarray, size: int, feather: float, mouth: bool) -> np.ndarray:
    """(size, size) float32 blend mask in crop space: the face box (clipped to the crop),
    eroded so the feather never reaches past it, then blurred. With ``mouth`` an ellipse
    over the mouth is cut out, so the target keeps its own mouth."""
    radius = max(0, round(feather * size))
    x0, y0, x1, y1 = (float(v) for v in face.box)
    corners = transform_points(np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]]), matrix)
    hard = np.zeros((size, size), dtype=np.uint8)
    cv2.fillConvexPoly(hard, np.round(corners * 16).astype(np.int32), 1, lineType=cv2.LINE_8, shift=4)
    # The blur spreads `radius` pixels; 3 more keep bilinear paste-back (and the polygon's
    # sub-pixel rounding) from touching frame pixels outside the box.
    margin = radius + 3
    kernel = cv2.getStructuringElement(cv2.MORPH_RECT, (2 * margin + 1, 2 * margin + 1))
    hard = cv2.erode(hard, kernel, borderType=cv2.BORDER_CONSTANT, borderValue=0)
    if mouth:
        left, right = transform_points(face.kps[3:5], matrix)
        width = float(np.linalg.norm(right - left))
        center = (left + right) / 2
        axes = (round(0.6 * width + radius / 2), round(0.3 * width + radius / 2))
        angle = float(np.degrees(np.arctan2(right[1] - left[1], right[0] - left[0])))
        cv2.ellipse(hard, (round(center[0]), round(center[1])), axes, angle, 0, 360, 0, thickness=-1)
    mask = hard.astype(np.float32)
    if radius:
        ksize = 2 * radius + 1
        mask = cv2.GaussianBlur(mask, (ksize, ksize), radius / 2, borderType=cv2.BORDER_CONSTANT)
    return mask


def make_batch_dynamic(model: onnx.ModelProto, path: str | Path) -> None:
    """Rewrite ``model`` in place so that its batch dimension is ``N`` instead of 1."""
    graph = model.graph
    constants = {init.name for init in graph.initializer}
    for value in [*(v for v in graph.input if v.name not in constants), *graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].dim_param = BATCH_DIM
    _unpin_reshapes(graph, path)
    pinned = [v for v in graph.value_info if _first_dim(v) == 1]
    for value in pinned:
        graph.value_info.remove(value)


def _unpin_reshapes(graph: onnx.GraphProto, path: str | Path) -> None:
    """Point every Reshape whose constant target shape starts with 1 at a copy starting with
    -1 (or 0, "copy the input's batch", when another dimension already is -1)."""
    shapes = {init.name: init for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                shapes[node.output[0]] = value
    rewritten: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "Reshape" or node.input[1] not in shapes:
            continue
        shape = numpy_helper.to_array(shapes[node.input[1]]).astype(np.int64)
        if shape.ndim != 1 or shape.size == 0 or shape[0] != 1:
            continue
        if node.input[1] not in rewritten:
            fixed = shape.copy()
            if -1 not in shape[1:]:
                fixed[0] = -1
            elif next((a.i for a in node.attribute if a.name == "allowzero"), 0):
                raise ModelFileError(path, f"Reshape '{node.name}' pins batch 1 with allowzero=1; cannot batch it")
            else:
                fixed[0] = 0
            name = f"{node.input[1]}__batch_{BATCH_DIM}"
            graph.initializer.append(numpy_helper.from_array(fixed, name))
            rewritten[node.input[1]] = name
        node.input[1] = rewritten[node.input[1]]


def _first_dim(value: onnx.ValueInfoProto) -> int | None:
    dims = value.type.tensor_type.shape.dim
    return dims[0].dim_value if dims and dims[0].HasField("dim_value") else None


def _emap(path: Path, model: onnx.ModelProto) -> np.ndarray:
    """The identity projection: by insightface's convention the graph's last initializer."""
    if not model.graph.initializer:
        raise ModelFileError(path, "has no initializers; expected the last one to be emap [512,512]")
    last = model.graph.initializer[-1]
    emap = numpy_helper.to_array(last)
    if emap.shape != (EMBEDDING_SIZE, EMBEDDING_SIZE):
        raise ModelFileError(
            path,
            f"last initializer '{last.name}' has shape {format_shape(emap.shape)}, "
            f"expected emap {format_shape((EMBEDDING_SIZE, EMBEDDING_SIZE))}",
        )
    return emap.astype(np.float32)
