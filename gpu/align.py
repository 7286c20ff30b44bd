"""Face alignment: similarity transforms from landmarks to fixed crop templates."""

from __future__ import annotations

import numpy as np

# insightface/ArcFace 5-point template for a 112x112 crop (left eye, right eye, nose,
# left mouth corner, right mouth corner). For 128 px crops x is shifted by 8 (inswapper).
ARCFACE_TEMPLATE_112 = np.array(
    [
        [38.2946, 51.6963],
        [73.5318, 51.5014],
        [56.0252, 71.7366],
        [41.5493, 92.3655],
        [70.7299, 92.2041],
    ],
    dtype=np.float32,
)


def arcface_template(size: int) -> np.ndarray:
    """The ArcFace template for a ``size`` crop: 112 as is, 128 shifted by 8 (insightface rule),
    other sizes scaled from 112 (and from 128 for multiples of 128)."""
    if size % 112 == 0:
        return ARCFACE_TEMPLATE_112 * (size / 112)
    if size % 128 == 0:
        shifted = ARCFACE_TEMPLATE_112 + np.array([8.0, 0.0], dtype=np.float32)
        return shifted * (size / 128)
    raise ValueError(f"ArcFace crops are 112*k or 128*k pixels, not {size}")


def estimate_similarity(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity (rotation, uniform scale, translation) mapping ``src`` onto
    ``dst`` (Umeyama 1991). Returns a 2x3 float32 matrix for ``cv2.warpAffine``."""
    src = np.asarray(src, dtype=np.float64)
    dst = np.asarray(dst, dtype=np.float64)
    src_mean, dst_mean = src.mean(0), dst.mean(0)
    src_c, dst_c = src - src_mean, dst - dst_mean
    cov = dst_c.T @ src_c / len(src)
    u, s, vt = np.linalg.svd(cov)
    sign = np.ones(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[-1] = -1
    rotation = u @ np.diag(sign) @ vt
    variance = (src_c**2).sum() / len(src)
    scale = (s * sign).sum() / variance if variance > 0 else 1.0
    matrix = np.zeros((2, 3), dtype=np.float64)
    matrix[:, :2] = scale * rotation
    matrix[:, 2] = dst_mean - scale * rotation @ src_mean
    return matrix.astype(np.float32)


def transform_points(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Apply a 2x3 affine matrix to (K, 2) points."""
    points = np.asarray(points, dtype=np.float32)
    return points @ matrix[:, :2].T + matrix[:, 2]


def invert_affine(matrix: np.ndarray) -> np.ndarray:
    """Inverse of a 2x3 affine matrix."""
    full = np.vstack([matrix.astype(np.float64), [0.0, 0.0, 1.0]])
    return np.linalg.inv(full)[:2].astype(np.float32)
