"""Face enhancer: GFPGAN 1.4, GPEN-BFR 256/512 and CodeFormer, run on the swapped face.

Signature (FaceFusion facefusion/processors/modules/face_enhancer/core.py): input ``input``
float32 ``[N, 3, S, S]``, an RGB crop scaled to [-1, 1]; first output the same shape and
range. S and the crop's template per file: gfpgan_1.4, gpen_bfr_512 and codeformer 512 px
``ffhq_512``; gpen_bfr_256 256 px ``arcface_128``. CodeFormer has a second input ``weight``
(double ``[1]``, fidelity: 0 = most restored, 1 = closest to the input); it is one value per
node, baked into the graph as a constant, so rows of every session share calls.

The result is pasted back through FaceFusion's box mask (blur 0.3) times ``blend``, and
nowhere a keep mask keeps the target (an occluder stays untouched by the enhancer too).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path

import cv2
import numpy as np

from gpu.align import estimate_similarity
from gpu.errors import ModelFileError
from gpu.kernels.warp import crop_faces, mask_bounds, paste_back
from gpu.models.user_models import ENHANCER_FILES
from gpu.processors.masks import ARCFACE_128, FFHQ_512, CropMask, template
from gpu.processors.model import BatchedModel, MakeRunner, TensorRule, bake_input, load_checked
from gpu.swappers.inswapper import BATCH_DIM
from gpu.types import Face

# file stem -> (crop size, template), in the order ENHANCER_FILES prefers them
ENHANCERS = {
    "gfpgan_1.4": (512, FFHQ_512),
    "codeformer": (512, FFHQ_512),
    "gpen_bfr_512": (512, FFHQ_512),
    "gpen_bfr_256": (256, ARCFACE_128),
}
WEIGHTED = ("codeformer",)
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
MASK_BLUR = 0.3  # FaceFusion's default face_mask_blur


class FaceEnhancer:
    kind = "enhancer"

    def __init__(self, path: str | Path, *, weight: float = 0.5, make_runner: MakeRunner | None = None,
                 **batching) -> None:
        self.path = Path(path)
        if self.path.stem not in ENHANCERS:
            raise ModelFileError(self.path, f"not a known face enhancer (expected one of {', '.join(ENHANCER_FILES)})")
        self.size, points = ENHANCERS[self.path.stem]
        self.weight = weight if self.path.stem in WEIGHTED else None
        crop = TensorRule("input", (BATCH_DIM, 3, self.size, self.size))
        inputs = [crop, TensorRule("weight", (1,), FLOATS)] if self.weight is not None else [crop]
        model = load_checked(self.path, inputs, [TensorRule(None, crop.shape)], extra_outputs=True)
        if self.weight is not None:
            bake_input(self.path, model, "weight", np.array([self.weight]))
        self.model = BatchedModel(self.path, model, make_runner, **batching)
        self._template = template(points, self.size)
        self._box = box_mask(self.size)
        self._bounds = mask_bounds(self._box)  # every paste mask lies inside the box's

    def feed(self, frame: np.ndarray, face: Face) -> tuple[dict[str, np.ndarray], np.ndarray]:
        matrix = estimate_similarity(face.kps, self._template)
        crop = crop_faces([frame], matrix[None], self.size)[0]
        scaled = crop.astype(np.float32) / np.float32(127.5) - np.float32(1.0)
        return {"input": np.ascontiguousarray(scaled.transpose(2, 0, 1))}, matrix

    def enhance(self, frame: np.ndarray, faces: Sequence[Face], session_id: Hashable, blend: float,
                keep: Sequence[CropMask | None] | None = None) -> None:
        """Enhance ``faces`` of the host ``frame`` in place."""
        if not faces or blend <= 0:
            return
        prepared = [self.feed(frame, face) for face in faces]
        rows = self.model.run(session_id, [feed for feed, _ in prepared])
        for index, (row, (_, matrix)) in enumerate(zip(rows, prepared, strict=True)):
            crop = ((np.clip(row, -1.0, 1.0) + 1.0) * 127.5 + 0.5).astype(np.uint8).transpose(1, 2, 0)
            mask = self._box * np.float32(blend)
            kept = keep[index] if keep is not None else None
            if kept is not None:
                mask = mask * (1.0 - kept.in_crop(matrix, self.size))
            paste_back(frame, np.ascontiguousarray(crop), mask, matrix, self._bounds)

    def close(self) -> None:
        self.model.close()


def box_mask(size: int, blur: float = MASK_BLUR) -> np.ndarray:
    """FaceFusion's static box mask (face_masker.create_box_mask, padding 0)."""
    amount = int(size * 0.5 * blur)
    edge = max(amount // 2, 1)
    mask = np.ones((size, size), np.float32)
    mask[:edge], mask[-edge:], mask[:, :edge], mask[:, -edge:] = 0, 0, 0, 0
    return cv2.GaussianBlur(mask, (0, 0), amount * 0.25) if amount > 0 else mask
