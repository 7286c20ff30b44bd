"""Keep masks: where a face's own (target) pixels must stay after the swap.

A processor computes its mask in the crop it aligned the face to; consumers (a swapper's
paste mask, the enhancer) live in crops of their own. So a mask carries its crop's matrix
and is warped once into whichever crop asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

# FaceFusion's normalised 5-point templates (facefusion/face_helper.py WARP_TEMPLATE_SET):
# arcface_128 is the inswapper crop FaceFusion runs its occluder on, ffhq_512 the crop of
# GFPGAN/CodeFormer/GPEN-512 (and of CelebAMask-HQ-like whole-head crops the parser knows).
ARCFACE_128 = np.array([[0.36167656, 0.40387734], [0.63696719, 0.40235469], [0.50019687, 0.56044219],
                        [0.38710391, 0.72160547], [0.61507734, 0.72034453]], dtype=np.float32)
FFHQ_512 = np.array([[0.37691676, 0.46864664], [0.62285697, 0.46912813], [0.50123859, 0.61331904],
                     [0.39308822, 0.72541100], [0.61150205, 0.72490465]], dtype=np.float32)


@dataclass(frozen=True)
class KeepMask:
    """(S, S) float32 in [0, 1], 1 = keep the target's pixel; ``matrix`` maps frame pixels
    into that crop."""

    mask: np.ndarray
    matrix: np.ndarray

    def in_crop(self, matrix: np.ndarray, size: int) -> np.ndarray:
        """This mask in another crop (``matrix``: frame -> that crop), (size, size) float32."""
        to_frame = cv2.invertAffineTransform(np.asarray(matrix, np.float64))
        # that crop's pixel -> frame -> this crop: the map warpAffine samples through
        own = np.asarray(self.matrix, np.float64)
        sample = own[:, :2] @ to_frame
        sample[:, 2] += own[:, 2]
        return cv2.warpAffine(self.mask, sample, (size, size), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                              borderMode=cv2.BORDER_CONSTANT, borderValue=0.0)

    def in_frame(self, shape: tuple[int, ...]) -> np.ndarray:
        """This mask over a whole (H, W) frame."""
        height, width = shape[:2]
        return cv2.warpAffine(self.mask, np.asarray(self.matrix, np.float64), (width, height),
                              flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderValue=0.0)


def union(first: KeepMask | None, second: KeepMask | None) -> KeepMask | None:
    """Keep what either keeps (in ``first``'s crop)."""
    if first is None or second is None:
        return first or second
    other = second.in_crop(first.matrix, first.mask.shape[0])
    return KeepMask(np.maximum(first.mask, other), first.matrix)


def soften(face: np.ndarray, size: int) -> np.ndarray:
    """FaceFusion's mask finish (face_masker.py): resize to the crop, blur (sigma 5), then
    ``(clip(m, 0.5, 1) - 0.5) * 2``, which pulls the edge inwards by the blur's reach. Applied
    to the *swap* side, so what is kept grows a little and no occluder pixel's edge is swapped."""
    resized = cv2.resize(np.asarray(face, np.float32), (size, size), interpolation=cv2.INTER_LINEAR)
    blurred = cv2.GaussianBlur(resized.clip(0, 1), (0, 0), 5)
    return ((blurred.clip(0.5, 1.0) - 0.5) * 2.0).astype(np.float32)


def template(points: np.ndarray, size: int) -> np.ndarray:
    return points * np.float32(size)
