"""Face parser: FaceFusion's BiSeNet models (``bisenet_resnet_18/34.onnx``) -> keep masks
for chosen regions (glasses, hair, ...).

Signature (FaceFusion facefusion/face_masker.py, ``create_region_mask``): input ``input``
float32 ``[N, 3, 512, 512]``, an RGB crop scaled to [0, 1] then normalised with ImageNet
mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225); first output ``[N, 19, 512, 512]``
class scores, argmax = the CelebAMask-HQ region below. The parser has no class for hands:
a hand or an object over the face is labelled background (or cloth), so keeping
``background`` keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpu.errors import SwapcastError
from gpu.processors.masks import FFHQ_512, MaskProcessor, soften, template
from gpu.processors.model import BatchedModel, MakeRunner, TensorRule, load_checked
from gpu.swappers.inswapper import BATCH_DIM

SIZE = 512
REGIONS = {  # CelebAMask-HQ classes, named as FaceFusion names them
    "background": 0, "skin": 1, "left-eyebrow": 2, "right-eyebrow": 3, "left-eye": 4, "right-eye": 5,
    "glasses": 6, "left-ear": 7, "right-ear": 8, "earring": 9, "nose": 10, "mouth": 11, "upper-lip": 12,
    "lower-lip": 13, "neck": 14, "necklace": 15, "cloth": 16, "hair": 17, "hat": 18,
}
DEFAULT_KEEP = ("background", "glasses", "earring", "necklace", "cloth", "hair", "hat")
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def check_regions(names: Sequence[str]) -> tuple[str, ...]:
    unknown = [n for n in names if n not in REGIONS]
    if unknown:
        raise SwapcastError(f"unknown face parser region(s) {', '.join(unknown)}; choose from {', '.join(REGIONS)}")
    return tuple(names)


class BisenetParser(MaskProcessor):
    kind = "parser"
    size = SIZE

    def __init__(self, path: str | Path, keep: Sequence[str] = DEFAULT_KEEP,
                 make_runner: MakeRunner | None = None, **batching) -> None:
        self.path = Path(path)
        self.keep = check_regions(keep)
        self._kept = [REGIONS[name] for name in self.keep]
        self._others = [index for index in REGIONS.values() if index not in self._kept]
        model = load_checked(self.path, [TensorRule("input", (BATCH_DIM, 3, SIZE, SIZE))],
                             [TensorRule(None, (BATCH_DIM, len(REGIONS), SIZE, SIZE))], extra_outputs=True)
        self.model = BatchedModel(self.path, model, make_runner, **batching)
        self._template = template(FFHQ_512, SIZE)

    def feed_crop(self, crop: np.ndarray) -> dict[str, np.ndarray]:
        scaled = crop.astype(np.float32) / np.float32(255.0)
        return {"input": np.ascontiguousarray(((scaled - MEAN) / STD).transpose(2, 0, 1))}

    def keep_of(self, row: np.ndarray) -> np.ndarray:
        # "argmax is a kept region" as two running maxima: 10x faster than argmax over 19 planes
        swapped = _plane_max(row, self._others) > _plane_max(row, self._kept)
        return 1.0 - soften(swapped, SIZE)


def _plane_max(scores: np.ndarray, classes: Sequence[int]) -> np.ndarray:
    if not classes:
        return np.full(scores.shape[1:], -np.inf, np.float32)
    best = scores[classes[0]].copy()
    for index in classes[1:]:
        np.maximum(best, scores[index], out=best)
    return best
