"""ArcFace identity embedder (insightface ``w600k_r50.onnx``): 112x112 aligned face -> 512-d.

Embeddings are computed once per source face (not per frame), so a file whose batch
dimension is fixed at 1 is simply run row by row instead of being rewritten.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpu.align import arcface_template, estimate_similarity
from gpu.kernels.warp import crop_faces
from gpu.models.signatures import (
    check_count,
    check_tensor,
    graph_inputs,
    graph_outputs,
    load_onnx,
    open_runner,
)

CROP_SIZE = 112
EMBEDDING_SIZE = 512


class ArcFaceEmbedder:
    """Aligns faces on the five ArcFace keypoints and returns raw (unnormalised) embeddings."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        model = load_onnx(self.path)
        inputs, outputs = graph_inputs(model), graph_outputs(model)
        check_count(self.path, "input", inputs, 1)
        check_tensor(self.path, "input", inputs[0], ("N", 3, CROP_SIZE, CROP_SIZE))
        check_count(self.path, "output", outputs, 1)
        check_tensor(self.path, "output", outputs[0], ("N", EMBEDDING_SIZE))
        self.runner = open_runner(self.path, model)
        self._input = self.runner.inputs[0].name
        self._batch_of_one = self.runner.inputs[0].shape[0] == 1
        self._template = arcface_template(CROP_SIZE)

    def embed(self, image: np.ndarray, kps: np.ndarray) -> np.ndarray:
        """(512,) float32 embedding of the face with keypoints ``kps`` (5, 2) in RGB ``image``."""
        matrix = estimate_similarity(kps, self._template)
        return self.embed_crops(crop_faces([image], matrix[None], CROP_SIZE))[0]

    def embed_crops(self, crops: np.ndarray) -> np.ndarray:
        """(N, 512) float32 embeddings of aligned RGB uint8 crops (N, 112, 112, 3)."""
        blob = (crops.astype(np.float32).transpose(0, 3, 1, 2) - 127.5) / 127.5
        if self._batch_of_one:
            rows = [self.runner.run({self._input: blob[i : i + 1]})[0] for i in range(len(blob))]
            out = np.concatenate(rows) if rows else np.zeros((0, EMBEDDING_SIZE), np.float32)
        else:
            out = self.runner.run({self._input: blob})[0]
        return out.astype(np.float32, copy=False)
