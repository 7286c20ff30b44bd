"""Face occluder: FaceFusion's XSeg models (``xseg_1/2/3.onnx``) -> keep masks.

Signature (FaceFusion facefusion/face_masker.py, ``create_occlusion_mask``): input
``input`` float32 ``[N, 256, 256, 3]`` (NHWC), a BGR crop scaled to [0, 1]; output
``[N, 256, 256, 1]``, the probability that a pixel is visible face. Whatever covers the face
(a hand, a cup, a microphone) reads as not-face, so ``1 - face`` is what the target keeps.
The crop is FaceFusion's inswapper crop (``arcface_128`` template) at 256 px.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpu.processors.masks import ARCFACE_128, MaskProcessor, soften, template
from gpu.processors.model import BatchedModel, MakeRunner, TensorRule, load_checked
from gpu.swappers.inswapper import BATCH_DIM

SIZE = 256


class XsegOccluder(MaskProcessor):
    kind = "occluder"
    size = SIZE

    def __init__(self, path: str | Path, make_runner: MakeRunner | None = None, **batching) -> None:
        self.path = Path(path)
        model = load_checked(self.path, [TensorRule("input", (BATCH_DIM, SIZE, SIZE, 3))],
                             [TensorRule(None, (BATCH_DIM, SIZE, SIZE, 1))])
        self.model = BatchedModel(self.path, model, make_runner, **batching)
        self._template = template(ARCFACE_128, SIZE)

    def feed_crop(self, crop: np.ndarray) -> dict[str, np.ndarray]:
        return {"input": np.ascontiguousarray(crop[..., ::-1], dtype=np.float32) / np.float32(255.0)}

    def keep_of(self, row: np.ndarray) -> np.ndarray:
        return 1.0 - soften(row[..., 0], SIZE)
