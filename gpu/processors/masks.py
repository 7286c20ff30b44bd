"""Keep masks: where a face's own (target) pixels must stay after the swap.

A processor computes its mask in the crop it aligned the face to; consumers (a swapper's
paste mask, the enhancer) live in crops of their own. So a mask carries its crop's matrix
(``CropMask``) and is warped once into whichever crop asks for it. ``MaskProcessor`` is
what the occluder and the parser share, including the swappers' ``KeepMask`` hook
(``gpu.swappers.base``): given a swapper's crop, re-cut it into the processor's own crop,
run the model, answer in the swapper's crop.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from gpu.align import estimate_similarity
from gpu.device import to_host
from gpu.kernels.warp import crop_faces
from gpu.processors.model import BatchedModel
from gpu.types import Face

# FaceFusion's normalised 5-point templates (facefusion/face_helper.py WARP_TEMPLATE_SET):
# arcface_128 is the inswapper crop FaceFusion runs its occluder on, ffhq_512 the crop of
# GFPGAN/CodeFormer/GPEN-512 (and of CelebAMask-HQ-like whole-head crops the parser knows).
ARCFACE_128 = np.array([[0.36167656, 0.40387734], [0.63696719, 0.40235469], [0.50019687, 0.56044219],
                        [0.38710391, 0.72160547], [0.61507734, 0.72034453]], dtype=np.float32)
FFHQ_512 = np.array([[0.37691676, 0.46864664], [0.62285697, 0.46912813], [0.50123859, 0.61331904],
                     [0.39308822, 0.72541100], [0.61150205, 0.72490465]], dtype=np.float32)


@dataclass(frozen=True)
class CropMask:
    """(S, S) float32 in [0, 1], 1 = keep the target's pixel; ``matrix`` maps frame pixels
    into that crop."""

    mask: np.ndarray
    matrix: np.ndarray

    def in_crop(self, matrix: np.ndarray, size: int) -> np.ndarray:
        """This mask in another crop (``matrix``: frame -> that crop), (size, size) float32."""
        return cv2.warpAffine(self.mask, _compose(self.matrix, matrix), (size, size), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                              borderMode=cv2.BORDER_CONSTANT, borderValue=0.0)

    def in_frame(self, shape: tuple[int, ...]) -> np.ndarray:
        """This mask over a whole (H, W) frame."""
        height, width = shape[:2]
        return cv2.warpAffine(self.mask, np.asarray(self.matrix, np.float64), (width, height),
                              flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderValue=0.0)


def recrop(crop: np.ndarray, matrix: np.ndarray, own: np.ndarray, size: int) -> np.ndarray:
    """A crop made for another template (``matrix``: frame -> it) re-cut into this
    processor's crop (``own``: frame -> it, ``size`` px); what the given crop does not show
    is its edge repeated (a keep mask is only read back inside the given crop)."""
    return cv2.warpAffine(crop, _compose(matrix, own), (size, size), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_REPLICATE)


def _compose(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """``outer`` after the inverse of ``inner`` (both 2x3): ``inner``'s crop -> frame -> ``outer``'s
    crop, the sampling map ``warpAffine(..., WARP_INVERSE_MAP)`` takes to fill ``inner``'s crop."""
    to_frame = cv2.invertAffineTransform(np.asarray(inner, np.float64))
    outer = np.asarray(outer, np.float64)
    sample = outer[:, :2] @ to_frame
    sample[:, 2] += outer[:, 2]
    return sample


def union(first: CropMask | None, second: CropMask | None) -> CropMask | None:
    """Keep what either keeps (in ``first``'s crop)."""
    if first is None or second is None:
        return first or second
    other = second.in_crop(first.matrix, first.mask.shape[0])
    return CropMask(np.maximum(first.mask, other), first.matrix)


def soften(face: np.ndarray, size: int) -> np.ndarray:
    """FaceFusion's mask finish (face_masker.py): resize to the crop, blur (sigma 5), then
    ``(clip(m, 0.5, 1) - 0.5) * 2``, which pulls the edge inwards by the blur's reach. Applied
    to the *swap* side, so what is kept grows a little and no occluder pixel's edge is swapped."""
    resized = cv2.resize(np.asarray(face, np.float32), (size, size), interpolation=cv2.INTER_LINEAR)
    blurred = cv2.GaussianBlur(resized.clip(0, 1), (0, 0), 5)
    return ((blurred.clip(0.5, 1.0) - 0.5) * 2.0).astype(np.float32)


def template(points: np.ndarray, size: int) -> np.ndarray:
    return points * np.float32(size)


class MaskProcessor:
    """A model answering a keep mask per face crop; subclasses say how to feed a crop and
    read a row."""

    kind: str
    size: int
    model: BatchedModel
    _template: np.ndarray  # 5 points in crop pixels

    def feed_crop(self, crop: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def keep_of(self, row: np.ndarray) -> np.ndarray:
        """A model row -> (size, size) keep mask."""
        raise NotImplementedError

    def feed(self, frame: np.ndarray, face: Face) -> tuple[dict[str, np.ndarray], np.ndarray]:
        matrix = estimate_similarity(face.kps, self._template)
        return self.feed_crop(crop_faces([frame], matrix[None], self.size)[0]), matrix

    def frame_keep_masks(self, frame: np.ndarray, faces: Sequence[Face], session_id: Hashable) -> list[CropMask]:
        """Masks for several faces of a host frame, in one batch."""
        prepared = [self.feed(frame, face) for face in faces]
        rows = self.model.run(session_id, [feed for feed, _ in prepared])
        return [CropMask(self.keep_of(row), matrix) for row, (_, matrix) in zip(rows, prepared, strict=True)]

    def __call__(self, crop: Any, face: Face, matrix: np.ndarray) -> np.ndarray:
        """The swappers' ``KeepMask`` hook: the keep mask in the swapper's own crop. Rows are
        batched per calling thread (each stream swaps on its own thread)."""
        crop = np.asarray(to_host(crop))
        own = estimate_similarity(face.kps, self._template)
        row = self.model.run(threading.get_ident(), [self.feed_crop(recrop(crop, matrix, own, self.size))])[0]
        return CropMask(self.keep_of(row), own).in_crop(matrix, crop.shape[0])

    def close(self) -> None:
        self.model.close()
