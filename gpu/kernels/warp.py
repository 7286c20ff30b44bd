"""Batched face crop and paste-back: the CPU twins of the device kernels.

The GPU plane runs these as one launch over every face of every session; on CPU they loop
over OpenCV calls. Their signatures are the contract both implementations keep.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from gpu.kernels.grain import GrainTile, grain_noise


def crop_faces(frames: Sequence[np.ndarray], matrices: np.ndarray, size: int) -> np.ndarray:
    """Warp one aligned ``size``x``size`` crop per face.

    ``frames[i]`` is the (H, W, 3) uint8 frame face ``i`` comes from (the same array may be
    repeated); ``matrices`` is (N, 2, 3), frame pixels -> crop pixels. Returns (N, S, S, 3) uint8.
    """
    out = np.empty((len(matrices), size, size, 3), dtype=np.uint8)
    for i, (frame, matrix) in enumerate(zip(frames, matrices, strict=True)):
        cv2.warpAffine(
            frame, matrix, (size, size), dst=out[i], flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )
    return out


def paste_back(frame: np.ndarray, crop: np.ndarray, mask: np.ndarray, matrix: np.ndarray,
               bounds: tuple[int, int, int, int] | None = None) -> None:
    """Blend ``crop`` (S, S, 3) into ``frame`` in place through ``mask`` (S, S) in [0, 1].

    ``matrix`` maps frame pixels to crop pixels. Only the frame region the mask can reach is
    touched, so the cost follows the face size, not the frame size. ``bounds``: the mask's
    ``mask_bounds`` when the caller knows them (a fixed mask), saving the search.
    """
    roi = paste_region(mask if bounds is None else bounds, matrix, frame.shape[:2])
    if roi is None:
        return
    (x0, y0, x1, y1), roi_to_crop = roi
    size = (x1 - x0, y1 - y0)
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    face = cv2.warpAffine(crop, roi_to_crop, size, flags=flags, borderMode=cv2.BORDER_REPLICATE)
    alpha = cv2.warpAffine(np.asarray(mask, dtype=np.float32), roi_to_crop, size, flags=flags, borderValue=0.0)
    region = frame[y0:y1, x0:x1]
    region[...] = cv2.blendLinear(face, region, alpha, 1.0 - alpha)


def paste_back_keeping_detail(frame: np.ndarray, crop: np.ndarray, target_crop: np.ndarray, mask: np.ndarray,
                              face: np.ndarray, matrix: np.ndarray, grain: GrainTile | None = None) -> None:
    """``paste_back``, and the frame's own detail that its round trip through the crop lost
    (the frame minus its crop warped back: each bilinear resampling softens) put back
    where the crop is the target's own (``face`` (S, S) in [0, 1]: 0 there, 1 where the
    face was replaced): the frame around the swap comes back unchanged, not softened in a
    band round the face, while the face itself is the crop's (the swapper gave it the
    target's grain at the crop's resolution). ``grain``: the face also gets the noise its
    finest band lacks against the frame's (see ``gpu.kernels.grain``)."""
    roi = paste_region(mask, matrix, frame.shape[:2])
    if roi is None:
        return
    (x0, y0, x1, y1), roi_to_crop = roi
    size = (x1 - x0, y1 - y0)
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    region = frame[y0:y1, x0:x1]
    face_pixels = cv2.warpAffine(crop, roi_to_crop, size, flags=flags, borderMode=cv2.BORDER_REPLICATE)
    target = cv2.warpAffine(target_crop, roi_to_crop, size, flags=flags, borderMode=cv2.BORDER_REPLICATE)
    mask = np.asarray(mask, np.float32)
    alpha = cv2.warpAffine(mask, roi_to_crop, size, flags=flags, borderValue=0.0)
    back = cv2.warpAffine(mask * (1.0 - np.asarray(face, np.float32)), roi_to_crop, size, flags=flags, borderValue=0.0)
    # the plain paste, plus mask x (1 - face) x (frame - its crop warped back): where the crop is the
    # target's own the frame comes back as it was (OpenCV's saturating uint8 and int16 arithmetic: a third
    # of the time of the same in float32 NumPy)
    blended = cv2.blendLinear(face_pixels, region, alpha, 1.0 - alpha)
    lost = cv2.subtract(region, target, dtype=cv2.CV_16S)
    change = cv2.multiply(lost, cv2.merge([back, back, back]), dtype=cv2.CV_32F)
    if grain is not None:
        replaced = mask * np.asarray(face, np.float32)
        noise = grain_noise(lost, alpha - back, alpha, roi_to_crop, (crop, target_crop), replaced, grain)
        if noise is not None:
            cv2.add(change, cv2.merge([noise, noise, noise]), dst=change)
    region[...] = cv2.add(blended, change, dtype=cv2.CV_8U)


def paste_faces(
    frames: Sequence[np.ndarray], frame_index: Sequence[int], crops: np.ndarray, masks: np.ndarray, matrices: np.ndarray
) -> None:
    """Batched ``paste_back``: face ``i`` goes into ``frames[frame_index[i]]``, in order (a
    later face of the same frame is blended over an earlier one), in place."""
    for i, index in enumerate(frame_index):
        paste_back(frames[index], crops[i], masks[i], matrices[i])


def mask_bounds(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    """``(xmin, ymin, xmax + 1, ymax + 1)`` of the mask's pixels above 1e-3, or None (from
    the occupied rows and columns: a fifth of the CPU of listing every pixel)."""
    above = mask > 1e-3
    rows, cols = np.flatnonzero(above.any(axis=1)), np.flatnonzero(above.any(axis=0))
    if len(cols) == 0:
        return None
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def paste_region(
    mask: np.ndarray | tuple[int, int, int, int] | None, matrix: np.ndarray, frame_shape: tuple[int, int]
) -> tuple[tuple[int, int, int, int], np.ndarray] | None:
    """The frame region a paste touches and the map from its pixels to crop pixels.

    ``mask`` is the (S, S) mask or its ``mask_bounds``. Returns ``((x0, y0, x1, y1),
    roi_to_crop)`` with ``roi_to_crop`` (2, 3) float64, or None when nothing is touched.
    The device kernel uses this same function, so both touch the same pixels."""
    bounds = mask if mask is None or isinstance(mask, tuple) else mask_bounds(mask)
    if bounds is None:
        return None
    bx0, by0, bx1, by1 = bounds
    corners = np.array([[bx0, by0], [bx1, by0], [bx0, by1], [bx1, by1]], dtype=np.float32)
    inverse = cv2.invertAffineTransform(matrix)
    spots = corners @ inverse[:, :2].T + inverse[:, 2]
    height, width = frame_shape
    x0 = int(max(0, np.floor(spots[:, 0].min()) - 1))
    y0 = int(max(0, np.floor(spots[:, 1].min()) - 1))
    x1 = int(min(width, np.ceil(spots[:, 0].max()) + 2))
    y1 = int(min(height, np.ceil(spots[:, 1].max()) + 2))
    if x1 <= x0 or y1 <= y0:
        return None
    roi_to_crop = matrix.astype(np.float64).copy()
    roi_to_crop[:, 2] += roi_to_crop[:, :2] @ np.array([x0, y0], dtype=np.float64)
    return (x0, y0, x1, y1), roi_to_crop
