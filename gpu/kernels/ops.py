"""The kernels by where their data lives: CuPy arrays go to the device kernels
(``gpu.kernels.cuda``), NumPy arrays to their CPU twins. Callers use these and never branch
on the device themselves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpu.device import is_device_array
from gpu.kernels import colour, warp
from gpu.kernels.colour import YuvMatrix


def crop_faces(frames: Sequence[Any], matrices: np.ndarray, size: int) -> Any:
    if len(frames) and is_device_array(frames[0]):
        from gpu.kernels import cuda

        return cuda.crop_faces(frames, matrices, size)
    return warp.crop_faces(frames, np.asarray(matrices), size)


def paste_faces(frames: Sequence[Any], frame_index: Sequence[int], crops: Any, masks: Any, matrices: np.ndarray) -> None:
    if len(frames) and is_device_array(frames[0]):
        from gpu.kernels import cuda

        cuda.paste_faces(frames, frame_index, crops, masks, matrices)
    else:
        warp.paste_faces(frames, frame_index, crops, masks, np.asarray(matrices))


def yuv_to_rgb(buffer: Any, layout: str = "i420", *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> Any:
    """``layout`` is ``"i420"`` (yuv420p) or ``"nv12"``."""
    return _colour_kernel(buffer, layout, "yuv_to_rgb")(buffer, matrix=matrix, full_range=full_range)


def rgb_to_yuv(rgb: Any, layout: str = "i420", *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> Any:
    """RGB ``(H, W, 3)`` / ``(B, H, W, 3)`` uint8 -> the packed 4:2:0 buffer an encoder takes;
    ``layout`` is ``"i420"`` (yuv420p) or ``"nv12"``."""
    return _colour_kernel(rgb, layout, "rgb_to_yuv")(rgb, matrix=matrix, full_range=full_range)


def _colour_kernel(array: Any, layout: str, direction: str):
    """``<direction>_<layout>`` of the device kernels for a CuPy array, of the twins otherwise."""
    if layout not in ("i420", "nv12"):
        raise ValueError(f"layout must be i420 or nv12 (got {layout!r})")
    if is_device_array(array):
        from gpu.kernels import cuda as module
    else:
        module = colour
    return getattr(module, f"{direction}_{layout}")
