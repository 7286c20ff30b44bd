"""The frame's grain on a pasted face, made anew rather than copied.

A face crop holds a large face at less than the frame's resolution, so the frame's finest
band (a camera's sensor noise, film grain, pores) cannot come back through it: the swapped
face reads airbrushed in a grainy frame, a mask. Copying that band from the frame brings
the target's own wrinkles with it (its identity showing through the source's), so the band
is measured instead (its typical energy, grain and not structure: the geometric mean of the
local energy) and noise of that energy is added, times the share of the target's finest
detail the swapped face lacks in the crop (none where the source brings grain enough of
its own: a wrinkled photo on a smooth face). The energy is the lower of the face's and the
frame's round it: the camera's grain, not the target's skin (an old face's fine texture,
which pulled the swap's identity towards the target: on the tune half the closest frontal
pair's margin 0.078 -> 0.067 with the face's level, 0.070 with the lower one). The noise
is a fixed high-passed tile laid on the face: it moves and turns with the face at the
frame's own pixel size (sampled nearest, so its strength does not change with the
sub-pixel phase), so a still face keeps still grain and a moving one does not sizzle
(fresh noise each frame, on the face alone, shimmered where the frame round it was calm).
The tile is the same for every face and read only, so one is built per process.
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

TILE_SIZE = 512  # pixels a side; larger regions repeat it
GRAIN_SIGMA = 1.0  # frame pixels: the finest band is the luma minus its Gaussian low pass of this sigma
LOCAL_AREA = 4  # every other pixel's, a side (~8 pixels): the neighbourhood whose energy tells grain (near the
# typical level) from structure. Every other pixel of every other row is read: the level is one number, and a
# quarter of the pixels gives it for a quarter of the time
ENERGY_FLOOR = 0.07  # 8-bit units squared: a flat, clipped patch counts as ~8-bit rounding's energy, not as nothing
MIN_WEIGHT = 64.0  # pixels of face the band's level needs, or no grain is added
MIN_AMPLITUDE = 0.25  # 8-bit levels: fainter grain would round away (mostly); none is added


def finest_band(image: np.ndarray) -> np.ndarray:
    """(H, W) float32: the luma of ``image`` (H, W, 3) uint8 RGB minus its low pass."""
    luma = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
    return luma - cv2.GaussianBlur(luma, (5, 5), GRAIN_SIGMA)


class GrainTile:
    """Noise that tiles seamlessly, its finest band of unit energy, laid on a face through its crop's matrix."""

    def __init__(self, seed: int = 0, size: int = TILE_SIZE) -> None:
        def band(image: np.ndarray) -> np.ndarray:  # the low pass wraps round, so the tile's edges join
            return image - cv2.GaussianBlur(np.tile(image, (3, 3)), (0, 0), GRAIN_SIGMA)[size : 2 * size, size : 2 * size]

        noise = band(np.random.default_rng(seed).standard_normal((size, size)).astype(np.float32))
        self._tile = noise / float(np.sqrt(np.mean(band(noise) ** 2)))

    def patch(self, height: int, width: int, to_crop: np.ndarray) -> np.ndarray:
        """(height, width) float32 noise for a frame region whose pixels ``to_crop`` (2, 3)
        maps to crop pixels: the tile follows the crop's rotation and shift, at frame scale."""
        scale = float(np.sqrt(abs(np.linalg.det(to_crop[:, :2]))))
        to_tile = np.asarray(to_crop, np.float64) / max(scale, 1e-6)
        return cv2.warpAffine(self._tile, to_tile, (width, height), flags=cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP,
                              borderMode=cv2.BORDER_WRAP)


@lru_cache(maxsize=1)
def shared_tile() -> GrainTile:
    """The process's one tile (building it takes ~60 ms)."""
    return GrainTile()


def band_level(band: np.ndarray, weight: np.ndarray) -> float | None:
    """The typical energy (8-bit units squared) of a finest ``band`` over the face
    (``weight`` (H, W) in [0, 1]), or None where too little face shows. ``band``: (H, W)
    float32, or (H, W, 3) int16 RGB whose luma is taken (on the pixels read alone)."""
    return _typical(_log_local_energy(band), _every_other(weight))


def _every_other(image: np.ndarray) -> np.ndarray:
    """Every other pixel of every other row (OpenCV's copy: fast)."""
    return cv2.resize(image, ((image.shape[1] + 1) // 2, (image.shape[0] + 1) // 2), interpolation=cv2.INTER_NEAREST)


def _log_local_energy(band: np.ndarray) -> np.ndarray:
    """The log of the local energy of ``band`` (see ``band_level``) on every other pixel."""
    every_other = _every_other(band)
    if every_other.ndim == 3:  # the channels' sum in int16 (exact), then their mean
        every_other = cv2.transform(every_other, np.ones((1, 3), np.float32)).astype(np.float32) * np.float32(1 / 3)
    local = cv2.blur(every_other * every_other, (LOCAL_AREA, LOCAL_AREA))
    local += ENERGY_FLOOR
    return cv2.log(local)


def _typical(log_local: np.ndarray, weight: np.ndarray) -> float | None:
    """The geometric mean of the local energy over ``weight`` (both on every other pixel)."""
    total = float(weight.sum())
    if total < MIN_WEIGHT / 4:
        return None
    return float(np.exp(float(log_local.ravel() @ weight.ravel()) / total))


def grain_noise(lost: np.ndarray, weight: np.ndarray, outline: np.ndarray, to_crop: np.ndarray,
                crops: tuple[np.ndarray, np.ndarray], crop_weight: np.ndarray, tile: GrainTile) -> np.ndarray | None:
    """(H, W) float32 noise to add to a pasted region's channels, or None for none: the
    energy of the frame's ``lost`` band (H, W, 3) int16 (what the crop could not hold) over
    the face or round it (outside ``outline`` (H, W), the paste's reach), the lower, times
    the share of the target's finest band the swapped face lacks, both measured in the
    crops (``crops``: swapped and target (S, S, 3) uint8, ``crop_weight`` (S, S) the face
    there), through ``weight`` (H, W) float32 (the face's share of each frame pixel);
    ``to_crop`` maps the region's pixels to the crop. The crops are read first: where the
    face lacks nothing, nothing of the frame's size is read."""
    swapped, target = crops
    wanted = band_level(finest_band(target), crop_weight)
    if wanted is None:
        return None
    lacking = 1.0 - band_level(finest_band(swapped), crop_weight) / wanted
    if lacking <= 0.0:
        return None
    log_local = _log_local_energy(lost)  # read once for the face and for the frame round it
    level = _typical(log_local, _every_other(weight))
    if level is None:
        return None
    around = _typical(log_local, _every_other(1.0 - outline))  # the camera's grain, where the target's skin is not
    if around is not None:
        level = min(level, around)
    if (amplitude := float(np.sqrt(lacking * level))) < MIN_AMPLITUDE:
        return None
    noise = tile.patch(*weight.shape, to_crop)
    noise *= weight
    noise *= amplitude
    return noise
