"""YUV 4:2:0 (I420 and NV12) -> RGB: the CPU twins of the device kernels in ``cuda.py``.

Conventions (both implementations keep them, so the GPU tests can compare them):
- input is the packed buffer PyAV's ``VideoFrame.to_ndarray()`` and OpenCV use: a
  ``(H*3/2, W)`` uint8 array (``(B, H*3/2, W)`` for a batch of equal-sized frames), Y plane
  first; I420 then holds the U plane and the V plane (each ``H/2 x W/2``), NV12 one plane of
  interleaved U,V pairs (``H/2`` rows of ``W`` bytes). H and W are even.
- chroma is upsampled nearest-neighbour (each 2x2 block shares one U,V), as OpenCV does;
- ``matrix`` is ``"bt601"`` or ``"bt709"``; ``full_range=False`` is limited ("MPEG",
  Y 16..235, C 16..240) range, ``True`` full ("JPEG") range;
- limited range clamps ``Y - 16`` at 0 before scaling, as OpenCV does (it only matters for
  the illegal codes Y < 16);
- the arithmetic is float32, rounded to nearest (ties to even) and saturated to 0..255.

``bt601`` + limited range equals ``cv2.cvtColor(buffer, cv2.COLOR_YUV2RGB_I420 / _NV12)``
within 1 code value.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

YuvMatrix = Literal["bt601", "bt709"]

_KR_KB = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}


def yuv_coefficients(matrix: YuvMatrix = "bt601", full_range: bool = False) -> dict[str, float]:
    """The constants both implementations use (float32-rounded by the callers):
    ``y = max(Y - y_offset, 0) * y_scale``, ``u = (U - 128) * c_scale``, ``v = ...``,
    ``R = y + rv*v``, ``G = y + gu*u + gv*v``, ``B = y + bu*u``."""
    if matrix not in _KR_KB:
        raise ValueError(f"matrix must be bt601 or bt709 (got {matrix!r})")
    kr, kb = _KR_KB[matrix]
    kg = 1.0 - kr - kb
    return {
        "y_offset": 0.0 if full_range else 16.0,
        "y_scale": 1.0 if full_range else 255.0 / 219.0,
        "c_scale": 1.0 if full_range else 255.0 / 224.0,
        "rv": 2.0 * (1.0 - kr),
        "gu": -2.0 * (1.0 - kb) * kb / kg,
        "gv": -2.0 * (1.0 - kr) * kr / kg,
        "bu": 2.0 * (1.0 - kb),
    }


def _check(buffer: np.ndarray) -> tuple[int, int]:
    if buffer.dtype != np.uint8 or buffer.ndim not in (2, 3):
        raise ValueError(f"expected a (H*3/2, W) or (B, H*3/2, W) uint8 buffer, got {buffer.dtype} {buffer.shape}")
    rows, width = buffer.shape[-2:]
    if rows % 3 or width % 2 or (rows // 3 * 2) % 2:
        raise ValueError(f"a 4:2:0 buffer has H*3/2 rows with H and W even (got {rows}x{width})")
    return rows * 2 // 3, width


def _to_rgb(y: np.ndarray, u: np.ndarray, v: np.ndarray, matrix: YuvMatrix, full_range: bool) -> np.ndarray:
    """``y`` (..., H, W), ``u``/``v`` (..., H/2, W/2) uint8 -> (..., H, W, 3) uint8."""
    k = {name: np.float32(value) for name, value in yuv_coefficients(matrix, full_range).items()}
    luma = np.maximum(y.astype(np.float32) - k["y_offset"], np.float32(0)) * k["y_scale"]
    cu = (u.astype(np.float32) - np.float32(128)) * k["c_scale"]
    cv = (v.astype(np.float32) - np.float32(128)) * k["c_scale"]
    cu = cu.repeat(2, axis=-2).repeat(2, axis=-1)
    cv = cv.repeat(2, axis=-2).repeat(2, axis=-1)
    rgb = np.stack([luma + k["rv"] * cv, luma + k["gu"] * cu + k["gv"] * cv, luma + k["bu"] * cu], axis=-1)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def yuv_to_rgb_i420(buffer: np.ndarray, *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> np.ndarray:
    """I420 (yuv420p) buffer ``(H*3/2, W)`` or ``(B, H*3/2, W)`` -> RGB ``(H, W, 3)`` / ``(B, H, W, 3)``."""
    height, width = _check(buffer)
    lead = buffer.shape[:-2]
    y = buffer[..., :height, :]
    chroma = buffer[..., height:, :].reshape(*lead, 2, height // 2, width // 2)
    return _to_rgb(y, chroma[..., 0, :, :], chroma[..., 1, :, :], matrix, full_range)


def yuv_to_rgb_nv12(buffer: np.ndarray, *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> np.ndarray:
    """NV12 buffer ``(H*3/2, W)`` or ``(B, H*3/2, W)`` -> RGB ``(H, W, 3)`` / ``(B, H, W, 3)``."""
    height, width = _check(buffer)
    y = buffer[..., :height, :]
    uv = buffer[..., height:, :]
    return _to_rgb(y, uv[..., 0::2], uv[..., 1::2], matrix, full_range)
