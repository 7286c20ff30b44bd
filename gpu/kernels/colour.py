"""YUV 4:2:0 (I420 and NV12) <-> RGB: the CPU twins of the device kernels in ``cuda.py``.

Conventions (both implementations keep them, so the GPU tests can compare them):
- the YUV side is the packed buffer PyAV's ``VideoFrame.to_ndarray()`` and OpenCV use: a
  ``(H*3/2, W)`` uint8 array (``(B, H*3/2, W)`` for a batch of equal-sized frames), Y plane
  first; I420 then holds the U plane and the V plane (each ``H/2 x W/2``), NV12 one plane of
  interleaved U,V pairs (``H/2`` rows of ``W`` bytes). H and W are even.
- YUV -> RGB upsamples chroma nearest-neighbour (each 2x2 block shares one U,V), as OpenCV
  does; RGB -> YUV downsamples it with a 2x2 box average, i.e. chroma sited at the block
  centre (JPEG/MPEG-1 siting, swscale's ``AREA``): the block's mean RGB is converted once,
  which equals the mean of the four pixels' chroma. The box is the least-squares partner of
  the nearest upsampling and does not alias; H.264's default siting (co-sited with the even
  column) is half a pixel off, which no one sees at 4:2:0. OpenCV's ``COLOR_RGB2YUV_I420``
  takes the top-left pixel of each block instead, and swscale's default (bilinear) averages
  column pairs and filters rows [1,3,3,1]/8: both differ from the box on detail, not on flat
  2x2 blocks;
- ``matrix`` is ``"bt601"`` or ``"bt709"``; ``full_range=False`` is limited ("MPEG",
  Y 16..235, C 16..240) range, ``True`` full ("JPEG") range;
- limited range clamps ``Y - 16`` at 0 before scaling, as OpenCV does (it only matters for
  the illegal codes Y < 16);
- the arithmetic is float32, rounded to nearest (ties to even) and saturated to 0..255; RGB
  -> YUV in limited range lands in Y 16..235, C 16..240 without clamping (full-range chroma
  tops out at 255.5 and saturates to 255).

``bt601`` + limited range equals ``cv2.cvtColor(buffer, cv2.COLOR_YUV2RGB_I420 / _NV12)``
within 1 code value; RGB -> YUV equals ``swscale`` (``AREA``) within 1.
"""

from __future__ import annotations

from typing import Any, Literal

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


def rgb_coefficients(matrix: YuvMatrix = "bt601", full_range: bool = False) -> dict[str, float]:
    """The RGB -> YUV constants both implementations use (float32-rounded by the callers),
    with the range scaling folded in: ``Y = yr*R + yg*G + yb*B + y_offset``,
    ``U = ur*R + ug*G + ub*B + 128``, ``V = vr*R + vg*G + vb*B + 128``."""
    if matrix not in _KR_KB:
        raise ValueError(f"matrix must be bt601 or bt709 (got {matrix!r})")
    kr, kb = _KR_KB[matrix]
    kg = 1.0 - kr - kb
    y_scale = 1.0 if full_range else 219.0 / 255.0
    c_scale = 1.0 if full_range else 224.0 / 255.0
    u_scale = c_scale / (2.0 * (1.0 - kb))  # Cb = (B - Y') / (2 (1 - Kb))
    v_scale = c_scale / (2.0 * (1.0 - kr))
    return {
        "y_offset": 0.0 if full_range else 16.0,
        "yr": y_scale * kr,
        "yg": y_scale * kg,
        "yb": y_scale * kb,
        "ur": -u_scale * kr,
        "ug": -u_scale * kg,
        "ub": u_scale * (1.0 - kb),
        "vr": v_scale * (1.0 - kr),
        "vg": -v_scale * kg,
        "vb": -v_scale * kb,
    }


def check_rgb(rgb: Any) -> tuple[int, int]:
    """(H, W) of an (H, W, 3) / (B, H, W, 3) uint8 RGB array (NumPy or CuPy), H and W even."""
    if rgb.dtype != np.uint8 or rgb.ndim not in (3, 4) or rgb.shape[-1] != 3:
        raise ValueError(f"expected an (H, W, 3) or (B, H, W, 3) uint8 RGB array, got {rgb.dtype} {rgb.shape}")
    height, width = rgb.shape[-3:-1]
    if height % 2 or width % 2:
        raise ValueError(f"4:2:0 needs an even height and width (got {height}x{width})")
    return height, width


def _to_yuv(rgb: np.ndarray, matrix: YuvMatrix, full_range: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(..., H, W, 3) uint8 -> Y (..., H, W), U and V (..., H/2, W/2) uint8.

    The order of the float32 operations is the CUDA kernel's (``rgb_to_yuv420``), so the
    two agree exactly: Y per pixel, then the block's RGB sum (exact) times 0.25 (exact)."""
    k = {name: np.float32(value) for name, value in rgb_coefficients(matrix, full_range).items()}
    r, g, b = (rgb[..., c].astype(np.float32) for c in range(3))
    luma = k["yr"] * r + k["yg"] * g + k["yb"] * b + k["y_offset"]
    r, g, b = _block_mean(r), _block_mean(g), _block_mean(b)
    cu = k["ur"] * r + k["ug"] * g + k["ub"] * b + np.float32(128)
    cv = k["vr"] * r + k["vg"] * g + k["vb"] * b + np.float32(128)
    y, u, v = (np.clip(np.rint(plane), 0, 255).astype(np.uint8) for plane in (luma, cu, cv))
    return y, u, v


def _block_mean(plane: np.ndarray) -> np.ndarray:
    """The mean of each 2x2 block of a float32 (..., H, W) plane of integers (exact)."""
    total = plane[..., 0::2, 0::2] + plane[..., 0::2, 1::2] + plane[..., 1::2, 0::2] + plane[..., 1::2, 1::2]
    return total * np.float32(0.25)


def rgb_to_yuv_i420(rgb: np.ndarray, *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> np.ndarray:
    """RGB ``(H, W, 3)`` / ``(B, H, W, 3)`` -> I420 (yuv420p) buffer ``(H*3/2, W)`` / ``(B, H*3/2, W)``."""
    height, width = check_rgb(rgb)
    lead = rgb.shape[:-3]
    y, u, v = _to_yuv(rgb, matrix, full_range)
    flat = [plane.reshape(*lead, plane.shape[-2] * plane.shape[-1]) for plane in (y, u, v)]
    return np.concatenate(flat, axis=-1).reshape(*lead, height * 3 // 2, width)


def rgb_to_yuv_nv12(rgb: np.ndarray, *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> np.ndarray:
    """RGB ``(H, W, 3)`` / ``(B, H, W, 3)`` -> NV12 buffer ``(H*3/2, W)`` / ``(B, H*3/2, W)``."""
    height, width = check_rgb(rgb)
    lead = rgb.shape[:-3]
    y, u, v = _to_yuv(rgb, matrix, full_range)
    uv = np.stack([u, v], axis=-1).reshape(*lead, height // 2, width)
    return np.concatenate([y, uv], axis=-2)
