"""Where a closed mouth's lips meet, the crop samples the texture's meeting line at the
place the target's lips meet, to the sub-pixel.

Closed lips meet in a thin dark line. In the texture it runs between the canonical upper
and lower inner lip rows, but a closed target mouth squeezes the lips' inner texels into
less than a pixel, and the mesh is rasterised at half resolution: the UV jumps from a few
texels above the line to a few below it along a staircase of two-pixel steps. The crop
caught the line's shade here and there (a dashed, stepped line), or, drawn wide enough to
be caught everywhere, as a soft smear (a blurred mouth). Here the pixels within
``LINE_REACH`` of the target's meeting line (halfway between its upper and lower inner lip
lines, moved with the face's shape) read the texture across the line by their own signed
distance to it, ``TEXELS_PER_PIXEL`` texels a pixel: the line is drawn where the lips meet,
as thin as a closed mouth's, along the landmarks' curve. An open target mouth is left as it
is (its opening is the target's own).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from gpu.swappers.mesh3d_lips import inner_lip_lines, lip_layout

LAYOUT_SIZE = 384  # texels a side of the lip layout the meeting row is read from (any size: it is used in grid units)
LINE_REACH = 2.5  # crop pixels either side of the meeting line that read across it by their distance (the staircase lies within)
TEXELS_PER_PIXEL = 2.5  # how fast they read across it: the line's profile in the texture (~3.5 texels) over ~1.5 pixels


@lru_cache(maxsize=1)
def _meeting_rows() -> np.ndarray:
    """(T,) the meeting row in grid units per texel column (NaN off the mouth)."""
    layout = lip_layout(LAYOUT_SIZE)
    meet = np.full(LAYOUT_SIZE, np.nan, np.float32)
    meet[layout.columns] = 2.0 * (layout.meet + 0.5) / LAYOUT_SIZE - 1.0  # GridSample, align_corners=0
    return meet


def meeting_line(points: np.ndarray) -> np.ndarray:
    """(K, 2) crop pixels: the polyline halfway between the upper and lower inner lip lines
    of ``points`` (the posed mesh in crop pixels), corner to corner."""
    upper, lower = inner_lip_lines()
    return (points[upper, :2] + points[lower, :2]) / 2.0


def on_the_meeting_line(grid: np.ndarray, line: np.ndarray, crop_per_frame_pixel: float = 1.0) -> np.ndarray:
    """``grid`` (S, S, 2) with the pixels within ``LINE_REACH`` of ``line`` (K, 2; crop
    pixel centres) reading across the texture's meeting line by their signed distance to
    it (their UV column kept). A copy; the input when no pixel is that near. Where a frame
    pixel spans more than one crop pixel (a small face), the line is widened to span as
    many frame pixels as it spans crop pixels on a large face: thinner, it averaged away
    in the paste (a small 3/4-view face's: contrast 24 against its own line's 70)."""
    widening = max(1.0, float(crop_per_frame_pixel))
    reach = LINE_REACH * widening
    size = grid.shape[0]
    x0, y0 = np.floor(line.min(0) - reach).astype(int)
    x1, y1 = np.ceil(line.max(0) + reach).astype(int) + 1
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, size), min(y1, size)
    if x0 >= x1 or y0 >= y1:
        return grid
    ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float32)
    distance, between_corners = _signed_distance(np.stack([xs, ys], -1), line)
    near = np.abs(distance) <= reach
    part = grid[y0:y1, x0:x1]
    meet = _meeting_rows()
    column = np.clip(np.rint(((part[..., 0] + 1.0) * LAYOUT_SIZE - 1.0) / 2.0), 0, LAYOUT_SIZE - 1).astype(np.int64)
    row = meet[column]
    near &= between_corners & np.isfinite(row)
    if not near.any():
        return grid
    moved = grid.copy()
    across = distance * np.float32(2.0 * TEXELS_PER_PIXEL / widening / LAYOUT_SIZE)
    moved[y0:y1, x0:x1, 1] = np.where(near, row + across, part[..., 1])
    return moved


def _signed_distance(pixels: np.ndarray, line: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pixel (H, W, 2): its distance to the polyline ``line`` (K, 2), positive below it
    (towards the chin: the crop is upright), and whether its nearest point lies between the
    line's ends (past the mouth's corners nothing is moved)."""
    starts, ends = line[:-1], line[1:]
    along = ends - starts
    lengths = np.maximum((along**2).sum(1), 1e-9)
    offset = pixels[..., None, :] - starts  # (H, W, K-1, 2)
    t = np.clip((offset * along).sum(-1) / lengths, 0.0, 1.0)
    nearest = starts + t[..., None] * along
    gaps = np.linalg.norm(pixels[..., None, :] - nearest, axis=-1)
    best = np.argmin(gaps, axis=-1)
    pick = lambda values: np.take_along_axis(values, best[..., None], axis=-1)[..., 0]
    segment_t = pick(t)
    cross = along[best, 0] * (pixels[..., 1] - starts[best, 1]) - along[best, 1] * (pixels[..., 0] - starts[best, 0])
    sign = np.where(cross >= 0.0, 1.0, -1.0)  # left to right along the mouth: below is positive
    inside = ~(((best == 0) & (segment_t <= 0.0)) | ((best == len(starts) - 1) & (segment_t >= 1.0)))
    return (pick(gaps) * sign).astype(np.float32), inside
