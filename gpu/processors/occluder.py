"""Face occluder: FaceFusion's XSeg models (``xseg_1/2/3.onnx``) -> keep masks.

Signature (FaceFusion facefusion/face_masker.py, ``create_occlusion_mask``): input
``input`` float32 ``[N, 256, 256, 3]`` (NHWC), a BGR crop scaled to [0, 1]; output
``[N, 256, 256, 1]``, the probability that a pixel is visible face. Whatever covers the face
(a hand, a cup, a microphone) reads as not-face, so ``1 - face`` is what the target keeps.
The crop is FaceFusion's inswapper crop (``arcface_128`` template) at 256 px.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np

from gpu.align import estimate_similarity
from gpu.kernels.warp import crop_faces
from gpu.processors.masks import ARCFACE_128, KeepMask, soften, template
from gpu.processors.model import BatchedModel, MakeRunner, TensorRule, load_checked
from gpu.swappers.inswapper import BATCH_DIM
from gpu.types import Face

SIZE = 256


class XsegOccluder:
    kind = "occluder"

    def __init__(self, path: str | Path, make_runner: MakeRunner | None = None, **batching) -> None:
        self.path = Path(path)
        model = load_checked(self.path, [TensorRule("input", (BATCH_DIM, SIZE, SIZE, 3))],
                             [TensorRule(None, (BATCH_DIM, SIZE, SIZE, 1))])
        self.model = BatchedModel(self.path, model, make_runner, **batching)
        self._template = template(ARCFACE_128, SIZE)

    def feed(self, frame: np.ndarray, face: Face) -> tuple[dict[str, np.ndarray], np.ndarray]:
        matrix = estimate_similarity(face.kps, self._template)
        crop = crop_faces([frame], matrix[None], SIZE)[0]
        return {"input": np.ascontiguousarray(crop[..., ::-1], dtype=np.float32) / np.float32(255.0)}, matrix

    def keep_masks(self, frame: np.ndarray, faces: Sequence[Face], session_id: Hashable) -> list[KeepMask]:
        prepared = [self.feed(frame, face) for face in faces]
        rows = self.model.run(session_id, [feed for feed, _ in prepared])
        return [KeepMask(1.0 - soften(row[..., 0], SIZE), matrix) for row, (_, matrix) in zip(rows, prepared, strict=True)]

    def close(self) -> None:
        self.model.close()
