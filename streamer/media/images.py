"""Still-image file I/O for ``swapcast swap``: every image becomes RGB uint8 (H, W, 3).

Decoding goes through bytes + ``cv2.imdecode`` rather than ``cv2.imread`` so that paths with
non-ASCII characters work and a missing file is told apart from an undecodable one.
"""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np

from gpu.errors import ImageError

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp"})
VIDEO_EXTENSIONS = frozenset({".mp4", ".mov", ".mkv", ".webm", ".avi", ".flv", ".m4v"})
# the formats whose size Pillow reads from the header ``cv2.imdecode`` decodes, for checking an
# upload's size before decoding it: both tell them by the same first bytes. OpenCV decodes
# others at any size they declare, Pillow knows some by a signature OpenCV ignores: a Radiance
# HDR with "PCD_" at byte 2048 was a 512x768 PhotoCD to Pillow and a 32000x4800 picture to
# OpenCV (a 9.7 MB file grew decoding by 2.2 GB)
HEADER_CHECKED_FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF")

# Encoder settings: near-transparent JPEG/WebP quality, because the output is a final product.
_ENCODE_PARAMS: dict[str, list[int]] = {
    ".jpg": [cv2.IMWRITE_JPEG_QUALITY, 95],
    ".jpeg": [cv2.IMWRITE_JPEG_QUALITY, 95],
    ".webp": [cv2.IMWRITE_WEBP_QUALITY, 95],
    ".png": [cv2.IMWRITE_PNG_COMPRESSION, 3],
    ".bmp": [],
}


def is_image_path(path: str | os.PathLike[str]) -> bool:
    """True when the extension names a still-image format ``read_image`` handles."""
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


def is_video_path(path: str | os.PathLike[str]) -> bool:
    """True when the extension names a video container."""
    return Path(path).suffix.lower() in VIDEO_EXTENSIONS


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Decode an image file to RGB uint8 (H, W, 3), EXIF orientation applied.

    Grayscale, 16-bit and RGBA inputs come out as 8-bit RGB (alpha dropped), because the
    swap works on opaque colour frames. Raises ``ImageError`` naming the file when it is
    missing, empty, not an image or truncated (OpenCV refuses truncated data).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImageError(f"{path}: no such file") from None
    except OSError as exc:
        raise ImageError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    if not data:
        raise ImageError(f"{path}: file is empty")
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ImageError(f"{path}: not a readable image (unknown format, damaged or truncated)")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def write_image(path: str | os.PathLike[str], rgb: np.ndarray) -> None:
    """Encode an RGB uint8 (H, W, 3) frame in the format the extension names.

    Raises ``ImageError`` for an unknown extension or a file that cannot be written.
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in _ENCODE_PARAMS:
        known = ", ".join(sorted(_ENCODE_PARAMS))
        raise ImageError(f"{path}: unknown image extension {ext or '(none)'!r}; use one of {known}")
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"write_image needs RGB uint8 (H, W, 3), got {rgb.dtype} {rgb.shape}")
    ok, encoded = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), _ENCODE_PARAMS[ext])
    if not ok:
        raise ImageError(f"{path}: OpenCV could not encode a {rgb.shape[1]}x{rgb.shape[0]} image as {ext}")
    try:
        path.write_bytes(encoded.tobytes())
    except OSError as exc:
        raise ImageError(f"{path}: cannot write file ({exc.strerror or exc})") from None


def jpeg_preview(rgb: np.ndarray, max_side: int = 320, quality: int = 80) -> bytes:
    """A small JPEG of a frame (operators' previews): at most ``max_side`` px per side."""
    height, width = rgb.shape[:2]
    scale = min(1.0, max_side / max(height, width))
    if scale < 1.0:
        rgb = cv2.resize(rgb, (max(1, round(width * scale)), max(1, round(height * scale))), interpolation=cv2.INTER_AREA)
    ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:  # pragma: no cover - OpenCV always encodes a non-empty RGB frame
        raise RuntimeError("preview encoding failed")
    return encoded.tobytes()
