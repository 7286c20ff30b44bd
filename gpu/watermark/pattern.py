"""The keyed tile: 32x32 cells of a synchronisation layer (known to whoever holds the key)
plus a data layer (a keyed carrier whose sign each cell's coded payload bit flips), rendered
smoothly at a cell size tied to the frame height so the tile scales with the picture.

Low and mid frequencies on purpose: a cell spans H/80 pixels (9 at 720p, 6 at 480p), which
H.264 at low bitrates (x264 ultrafast too), downscaling and browser streams keep; the tile repeats over the
frame, so a detector folds every tile (and every frame) onto one and the picture behind it
averages away."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import cv2
import numpy as np

from gpu.watermark import ecc

CELLS = 32  # cells per tile side
CELLS_PER_HEIGHT = 80  # a frame H pixels high gets cells of H / 80 pixels
MIN_CELL_PX = 2.0
MESSAGE_BITS = 72
SYNC_SHARE = 0.35  # of the pattern's energy in the synchronisation layer


@dataclass(frozen=True)
class WatermarkKey:
    """Everything the key decides: the sync layer, the data carrier and which cell carries
    which coded bit. Two keys give unrelated patterns, so a wrong key detects nothing."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not self.secret:
            raise ValueError("the watermark key must not be empty")

    def _rng(self, purpose: str) -> np.random.Generator:
        digest = hashlib.sha256(b"swapcast-watermark-v1\0" + purpose.encode() + b"\0" + self.secret).digest()
        return np.random.default_rng(np.frombuffer(digest, dtype=np.uint64))

    @property
    def sync(self) -> np.ndarray:
        return self._rng("sync").choice(np.array([-1.0, 1.0], dtype=np.float32), (CELLS, CELLS))

    @property
    def carrier(self) -> np.ndarray:
        return self._rng("carrier").choice(np.array([-1.0, 1.0], dtype=np.float32), (CELLS, CELLS))

    @property
    def assignment(self) -> np.ndarray:
        """Coded-bit index of every cell: each coded bit gets ~4 cells spread over the tile."""
        coded = ecc.coded_length(MESSAGE_BITS)
        return (self._rng("assignment").permutation(CELLS * CELLS) % coded).reshape(CELLS, CELLS)


def message_tile(key: WatermarkKey, message: np.ndarray) -> np.ndarray:
    """The 32x32 cell values carrying ``message`` (MESSAGE_BITS bits), unit RMS."""
    message = np.asarray(message, dtype=np.uint8)
    if message.shape != (MESSAGE_BITS,):
        raise ValueError(f"a watermark message has {MESSAGE_BITS} bits (got {message.shape})")
    signs = 1.0 - 2.0 * ecc.encode(message).astype(np.float32)
    data = key.carrier * signs[key.assignment]
    tile = np.sqrt(SYNC_SHARE) * key.sync + np.sqrt(1.0 - SYNC_SHARE) * data
    return (tile / np.sqrt(np.mean(tile**2))).astype(np.float32)


def cell_size(height: int) -> float:
    return max(MIN_CELL_PX, height / CELLS_PER_HEIGHT)


def render(tile: np.ndarray, height: int, width: int, cell_px: float) -> np.ndarray:
    """The periodic tile drawn over an ``height`` x ``width`` picture, bilinear between cell
    centres (a smooth pattern: little energy where encoders quantise hardest). Pixel
    (y, x) sits at cell ((y + 0.5) / cell_px - 0.5, (x + 0.5) / cell_px - 0.5), so at 4 px a
    cell is exactly a 4x4 block."""
    xs = ((np.arange(width, dtype=np.float32) + 0.5) / cell_px - 0.5) % CELLS
    ys = ((np.arange(height, dtype=np.float32) + 0.5) / cell_px - 0.5) % CELLS
    map_x = np.broadcast_to(xs[None, :], (height, width))
    map_y = np.broadcast_to(ys[:, None], (height, width))
    return cv2.remap(tile, np.ascontiguousarray(map_x), np.ascontiguousarray(map_y), cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_WRAP)
