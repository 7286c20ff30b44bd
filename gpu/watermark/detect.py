"""Find the watermark in frames that were re-encoded, rescaled or cropped.

1. Whiten each luma frame (subtract a blur: the picture is mostly low frequencies, the
   pattern is not) and clip outliers (edges).
2. The tile's period (it changes with any rescale) comes from the autocorrelation of the
   whitened frames: peaks at one tile along x and along y; a few candidates are kept.
3. For each candidate, resample so a tile is exactly 32 cells of 4 px and fold every tile of
   every frame onto one 128x128 tile (the picture averages away, the pattern adds up).
4. Circular cross-correlation with the key's sync layer gives the crop offset; its peak
   against the rest of the surface (a z-score) says whether the mark is there.
5. The aligned fold's cells, times the key's carrier, are the coded bits' soft values
   (each cell weighted by the inverse variance of its tile copies). A list Viterbi gives
   the LIST_SIZE most likely messages; the first whose CRC-16 matches is the payload.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from gpu.watermark import ecc
from gpu.watermark.pattern import CELLS, CELLS_PER_HEIGHT, MESSAGE_BITS, MIN_CELL_PX, WatermarkKey, cell_size, render

FOLD_CELL_PX = 4
TILE_PX = CELLS * FOLD_CELL_PX
SYNC_Z_MIN = 7.0  # the sync peak must stand this many deviations above the surface
MAX_FRAMES = 150
PERIOD_FRAMES = 8  # frames whose spectra estimate the tile period
CANDIDATES = 3
# messages the list Viterbi hands the CRC, most likely first. With the most likely alone, a
# single 640x480 JPEG still (q85-95) lost 12 of 4800 payloads (one photo and key: 9 of 400),
# each time with a sync peak of z 8.7-10.8, chip agreement 0.83-0.89, and the sent message
# second to fourth on the list: 3 to 12 bits from the first, its path metric a hair lower
# (the picture left behind is the same for every mark, so which messages lose is fixed
# by their bits). Noise passes the CRC-16 with odds of ~LIST_SIZE / 65536 where 1 / 65536
# before, and only counts once the sync peak stands out (SYNC_Z_MIN): unmarked pictures
# never get that far
LIST_SIZE = 8
MIN_SIDE = 64  # a smaller picture cannot hold the tile grid twice: nothing to find
WORK_HEIGHT = 320  # taller frames are analysed downscaled to this (cells of ~4 px, what the fold uses)
# whitening, in cells of an unscaled frame: subtract a blur this wide, divide by the local
# contrast over this wide (edges and texture weigh no more than flat areas); the floor keeps
# noise in flat areas from being amplified. A contrast taken over 2 cells let an edge's
# energy swamp the cells beside it: a single JPEG still (the astronaut at 640x480, q85-95)
# lost its payload for 1 in 5 to 1 in 3 payloads, none with these
WHITEN_SIGMA = 0.5
LOCAL_SIGMA = 1.0
LOCAL_FLOOR = 1.0


@dataclass(frozen=True)
class Detection:
    found: bool  # sync peak above SYNC_Z_MIN and the payload's CRC matched
    sync_z: float  # height of the sync peak in deviations of the correlation surface
    message: np.ndarray | None  # MESSAGE_BITS bits when the CRC matched
    chip_agreement: float  # share of coded bits whose raw sign agrees with the decoded message (the CRC-valid one if any)
    frames: int
    tile_px: tuple[float, float]  # (x, y) tile period found, in pixels of the analysed (<= 480p) picture
    offset: tuple[int, int]  # (x, y) of the tile grid in the analysed picture, modulo one tile


class Detector:
    """Feed luma frames of one picture size (others are ignored; taller than WORK_HEIGHT are
    downscaled first), then ask ``result()``."""

    def __init__(self, key: WatermarkKey, *, max_frames: int = MAX_FRAMES) -> None:
        self.key = key
        self.max_frames = max_frames
        self._frames: list[np.ndarray] = []
        self._shape: tuple[int, int] | None = None
        self._sync = render(key.sync, TILE_PX, TILE_PX, FOLD_CELL_PX)

    @property
    def frames(self) -> int:
        return len(self._frames)

    def add(self, luma: np.ndarray) -> bool:
        """One (H, W) luma frame (uint8 or float); False once enough frames are in."""
        if len(self._frames) >= self.max_frames:
            return False
        if self._shape is None:
            self._shape = luma.shape
        elif luma.shape != self._shape:
            return True
        height, width = luma.shape
        if height > WORK_HEIGHT:
            luma = cv2.resize(luma, (round(width * WORK_HEIGHT / height), WORK_HEIGHT), interpolation=cv2.INTER_AREA)
        self._frames.append(np.ascontiguousarray(luma, dtype=np.uint8))
        return len(self._frames) < self.max_frames

    def result(self) -> Detection:
        if not self._frames or min(self._frames[0].shape) < MIN_SIDE:
            return Detection(False, 0.0, None, 0.0, len(self._frames), (0.0, 0.0), (0, 0))
        height, width = self._frames[0].shape
        whitened = [_whiten(f) for f in self._frames]
        best: Detection | None = None
        for period_x, period_y in _periods(whitened, height, width):
            detection = self._try(whitened, period_x, period_y)
            if best is None or detection.sync_z > best.sync_z:
                best = detection
            if detection.found:
                break
        return best

    def _try(self, whitened: list[np.ndarray], period_x: float, period_y: float) -> Detection:
        fold = _Fold()
        for frame in whitened:
            fold.add(frame, period_x, period_y)
        correlation = _circular_correlation(fold.total, self._sync)
        dy, dx = np.unravel_index(int(np.argmax(correlation)), correlation.shape)
        sync_z = _peak_z(correlation, dy, dx)
        cells, reliability = fold.cells(dy, dx)
        cells -= self.key.sync * np.sum(cells * self.key.sync) / np.sum(self.key.sync**2)
        chips = np.bincount(self.key.assignment.ravel(), weights=(reliability * cells * self.key.carrier).ravel(),
                            minlength=ecc.coded_length(MESSAGE_BITS))
        chips /= np.std(chips) + 1e-12
        candidates = ecc.decode_list(chips, MESSAGE_BITS, LIST_SIZE)
        valid = [m for m in candidates if np.array_equal(ecc.crc16(m[:-16]), m[-16:])]
        crc_ok = bool(valid)
        decoded = valid[0] if valid else candidates[0]
        agreement = float(np.mean((chips < 0) == ecc.encode(decoded).astype(bool)))
        found = sync_z >= SYNC_Z_MIN and crc_ok
        offset = (int(round(dx * period_x / TILE_PX)), int(round(dy * period_y / TILE_PX)))
        return Detection(found, float(sync_z), decoded if found else None, agreement, len(whitened),
                         (float(period_x), float(period_y)), offset)


def _whiten(luma: np.ndarray) -> np.ndarray:
    frame = luma.astype(np.float32)
    cell = max(MIN_CELL_PX, frame.shape[0] / CELLS_PER_HEIGHT)
    residual = frame - cv2.GaussianBlur(frame, (0, 0), WHITEN_SIGMA * cell)
    local = np.sqrt(cv2.GaussianBlur(residual * residual, (0, 0), LOCAL_SIGMA * cell)) + LOCAL_FLOOR
    return residual / local


def _periods(whitened: list[np.ndarray], height: int, width: int) -> list[tuple[float, float]]:
    """Candidate tile periods (x, y) in pixels: the strongest autocorrelation peaks along x
    (with y's matching peak), along y, then the period an unscaled picture of this height
    would have."""
    power = np.zeros((height, width), dtype=np.float64)
    step = max(1, len(whitened) // PERIOD_FRAMES)
    for frame in whitened[::step][:PERIOD_FRAMES]:
        spectrum = cv2.dft(frame - frame.mean(), flags=cv2.DFT_COMPLEX_OUTPUT)
        power += spectrum[..., 0] ** 2 + spectrum[..., 1] ** 2
    auto = np.real(np.fft.ifft2(power))
    auto /= auto[0, 0] + 1e-12
    lowest = int(CELLS * 1.8)
    along_x = _peaks(auto[0, :] + auto[1, :] + auto[-1, :], lowest, width // 2)
    along_y = _peaks(auto[:, 0] + auto[:, 1] + auto[:, -1], lowest, height // 2)
    candidates: list[tuple[float, float]] = []
    for px in along_x[:2]:  # a tile stays square under rescaling and cropping: take y's matching peak if any
        matching = [py for py in along_y if abs(px / py - 1.0) < 0.03]
        candidates.append((px, matching[0]) if matching else (px, px))
    candidates += [(py, py) for py in along_y[:1]]
    nominal = CELLS * cell_size(height)
    candidates.append((nominal, nominal))
    unique: list[tuple[float, float]] = []
    for candidate in candidates:
        if all(abs(candidate[0] - u[0]) > 0.5 or abs(candidate[1] - u[1]) > 0.5 for u in unique):
            unique.append(candidate)
    return unique


def _peaks(profile: np.ndarray, lowest: int, highest: int) -> list[float]:
    """Lags of the most prominent narrow peaks in [lowest, highest), refined to sub-pixel.
    The tile's peak is a few pixels wide and comes back at twice the lag; what is left of
    the picture correlates broadly, so each lag is scored against its surroundings."""
    if highest <= lowest + 2:
        return []
    baseline = np.array([np.median(profile[max(0, i - 12): i + 13]) for i in range(len(profile))])
    spread = 1.4826 * np.median(np.abs(profile - baseline)[lowest:]) + 1e-12
    prominence = (profile - baseline) / spread
    score = prominence.copy()
    doubled = np.arange(len(profile)) * 2
    inside = doubled < len(profile)
    score[inside] += np.maximum(prominence[doubled[inside]], prominence[np.minimum(doubled[inside] + 1, len(profile) - 1)])
    window = score[lowest:highest]
    inner = np.flatnonzero((window[1:-1] > window[:-2]) & (window[1:-1] >= window[2:])) + 1
    order = inner[np.argsort(window[inner])[::-1]][:CANDIDATES]
    lags = []
    for i in order:
        left, centre, right = profile[lowest + i - 1], profile[lowest + i], profile[lowest + i + 1]
        curvature = left - 2 * centre + right
        shift = 0.5 * (left - right) / curvature if curvature < 0 else 0.0
        lags.append(lowest + i + float(np.clip(shift, -0.5, 0.5)))
    return lags


class _Fold:
    """Every tile of every frame, resampled so one period is TILE_PX pixels, summed onto one
    tile, with the sums of squares and counts that give each cell's noise. A cell's soft
    value is weighted by the inverse variance of its mean: what is left of the picture is
    not equally strong everywhere on the tile, and equal weights let the noisiest cells
    flip coded bits (a single 640x480 JPEG still: its payload decoded for 64 of 72 marks
    with equal weights, 71 with these)."""

    def __init__(self) -> None:
        shape = (TILE_PX, TILE_PX)
        self.total = np.zeros(shape, dtype=np.float64)
        self._squares = np.zeros(shape, dtype=np.float64)
        self._counts = np.zeros(shape, dtype=np.float64)

    def add(self, frame: np.ndarray, period_x: float, period_y: float) -> None:
        height, width = frame.shape
        new_w, new_h = max(1, round(width * TILE_PX / period_x)), max(1, round(height * TILE_PX / period_y))
        scaled = cv2.resize(frame, (new_w, new_h), interpolation=cv2.INTER_AREA if new_w < width else cv2.INTER_LINEAR)
        padded = np.zeros((-(-new_h // TILE_PX) * TILE_PX, -(-new_w // TILE_PX) * TILE_PX), dtype=np.float32)
        present = np.zeros_like(padded)
        padded[:new_h, :new_w] = scaled
        present[:new_h, :new_w] = 1.0
        self.total += _tiles(padded).sum(axis=(0, 2))
        self._squares += _tiles(padded * padded).sum(axis=(0, 2))
        self._counts += _tiles(present).sum(axis=(0, 2))

    def cells(self, dy: int, dx: int) -> tuple[np.ndarray, np.ndarray]:
        """(CELLS, CELLS) means of the tile aligned to the sync offset, and their weights
        (inverse variance of each mean)."""
        def per_cell(values: np.ndarray) -> np.ndarray:
            aligned = np.roll(values, (-dy, -dx), axis=(0, 1))
            return aligned.reshape(CELLS, FOLD_CELL_PX, CELLS, FOLD_CELL_PX).sum(axis=(1, 3))

        counts = np.maximum(per_cell(self._counts), 1.0)
        means = per_cell(self.total) / counts
        variances = np.maximum(per_cell(self._squares) / counts - means**2, 1e-6)
        return means, counts / variances


def _tiles(padded: np.ndarray) -> np.ndarray:
    return padded.reshape(padded.shape[0] // TILE_PX, TILE_PX, padded.shape[1] // TILE_PX, TILE_PX)


def _circular_correlation(fold: np.ndarray, template: np.ndarray) -> np.ndarray:
    return np.real(np.fft.ifft2(np.fft.fft2(fold) * np.conj(np.fft.fft2(template))))


def _peak_z(surface: np.ndarray, dy: int, dx: int) -> float:
    """The peak against the surface away from it (the smooth pattern makes a peak a few
    pixels wide), in robust deviations."""
    mask = np.ones_like(surface, dtype=bool)
    ys = (np.arange(-6, 7) + dy) % surface.shape[0]
    xs = (np.arange(-6, 7) + dx) % surface.shape[1]
    mask[np.ix_(ys, xs)] = False
    rest = surface[mask]
    spread = 1.4826 * float(np.median(np.abs(rest - np.median(rest)))) + 1e-12
    return (float(surface[dy, dx]) - float(np.median(rest))) / spread
