"""Glasses out of a source face's UV albedo, once at registration.

A source photo with glasses bakes the frames (and the lenses' glare) into the albedo, so
every swap would draw the source's glasses onto the target, bent with the target's face
and lit as skin. Neither the lighting model nor the mirrored side explains them (frames
are dark or coloured thin lines, and they are symmetric), so they are found by shape in
UV space, where every face's eyes lie in the same place:

- **line map**: thin structures darker than their surroundings (a black top-hat of the
  luminance) and thin structures that are yellower than their surroundings (a black
  top-hat of the blue channel beyond the luminance's: gold and tortoiseshell rims);
- **found** when such lines ring both eyes: along most rays from each eye's centre through
  the band a frame runs in. Brows, lids and wrinkles cover some rays, never most of the ring;
- **removed**: the line texels inside the lens and temple region are filled from their
  neighbourhood (push-pull), then that region is median-smoothed (what the lenses did to
  the skin behind them: glare, tint, refraction edges) and levelled with the skin around
  it, the eyes and their lids excluded. (Filling the glare as well left a smooth, pale
  patch that read less as the source and took dlib's HOG detector further off turned faces.)
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, canonical_mesh
from gpu.swappers.mesh3d_geometry import push_pull_fill, uv_polygon_mask

LINE_RADIUS = 1 / 40  # of the texture: the top-hat's radius, thicker than a frame, thinner than a brow's length
DARK_LINE = 0.35  # albedo units (skin = 1): a frame's depth below its surroundings
YELLOW_LINE = 0.12  # the blue channel's extra depth on a gold rim
RING_RAYS = 24  # rays around each eye
RING_COVERAGE = 0.5  # of the rays, on both eyes, that must cross a line for glasses to count as found (the
# sample faces: Grace Hopper 0.83-0.92, blurred or JPEG-blurred 0.5-0.58; the astronaut, no glasses, 0.04-0.25)
LENS_SIZE = (1.2, 0.8)  # the lens region's half-axes in eye widths (a frame's rim lies inside)
LID_MARGIN = 0.15  # eye widths around the eye opening left alone (lids, lashes)
LENS_DROP = 0.12  # the lens centre sits this many eye widths below the eye's centre
MEDIAN_KERNEL = 5  # texels: smooths what the lenses did to the skin behind them
LEVEL_SIGMA = 8 / 384  # of the texture: the scale on which the lens region's brightness is levelled with the skin's


def remove_eyewear(albedo: np.ndarray) -> tuple[np.ndarray, bool]:
    """(T, T, 3) albedo -> (albedo without glasses, whether glasses were found). An albedo
    without glasses comes back unchanged."""
    size = albedo.shape[0]
    lines = _line_map(albedo)
    if _ring_coverage(lines, size) < RING_COVERAGE:
        return albedo, False
    lens, band, openings = _regions(size)
    found = (lines > 1.0).astype(np.float32)
    region = np.maximum(lens, band * cv2.dilate(found, np.ones((5, 5), np.uint8)))
    margin = max(1, int(round(LID_MARGIN * _eyes(size)[0][1])))  # the lids and lashes are the face's, not the frame's
    region = region * (1.0 - cv2.dilate(openings, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * margin + 1,) * 2)))
    region = cv2.GaussianBlur(cv2.dilate(region, np.ones((5, 5), np.uint8)), (0, 0), 1.5)
    frames = region * cv2.dilate(found, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (5, 5)))
    frames = np.clip(1.5 * cv2.GaussianBlur(frames, (0, 0), 1.0), 0.0, 1.0)[..., None]
    filled = push_pull_fill(albedo, 1.0 - frames[..., 0]) * frames + albedo * (1.0 - frames)
    scale = 255.0 / 2.0  # the median filter wants 8 bits; the albedo is within [0, 2]
    quantised = np.clip(filled * scale + 0.5, 0, 255).astype(np.uint8)
    smooth = cv2.medianBlur(cv2.medianBlur(quantised, MEDIAN_KERNEL), MEDIAN_KERNEL).astype(np.float32) / scale
    cleaned = filled + region[..., None] * (smooth - filled)
    # the lenses brighten or tint the skin behind them: level the region's low frequencies
    # with the skin around it (its texture stays)
    around = push_pull_fill(cleaned, 1.0 - np.clip(2.0 * region, 0.0, 1.0))
    inside = cv2.GaussianBlur(cleaned, (0, 0), LEVEL_SIGMA * size)
    gain = np.clip(cv2.GaussianBlur(around, (0, 0), LEVEL_SIGMA * size) / np.maximum(inside, 1e-3), 0.5, 2.0)
    levelled = cleaned * (1.0 + region[..., None] * (gain - 1.0))
    return levelled.astype(np.float32), True


def _line_map(albedo: np.ndarray) -> np.ndarray:
    """(T, T) how much each texel looks like a frame: > 1 on one."""
    radius = max(3, int(round(albedo.shape[0] * LINE_RADIUS)))
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1,) * 2)
    dark = cv2.morphologyEx(np.ascontiguousarray(albedo.mean(2)), cv2.MORPH_BLACKHAT, kernel)
    blue = cv2.morphologyEx(np.ascontiguousarray(albedo[..., 2]), cv2.MORPH_BLACKHAT, kernel)
    return np.maximum(dark / DARK_LINE, np.clip(blue - dark, 0.0, None) / YELLOW_LINE)


@lru_cache(maxsize=2)
def _eyes(size: int) -> tuple[tuple[np.ndarray, float], ...]:
    """Each eye's centre (texels) and width in a ``size`` UV texture."""
    uv = canonical_mesh().uv
    eyes = []
    for contour in (RIGHT_EYE_CONTOUR, LEFT_EYE_CONTOUR):
        points = uv[list(contour)] * size - 0.5
        eyes.append((points.mean(0), float(np.ptp(points[:, 0]))))
    return tuple(eyes)


def _ring_coverage(lines: np.ndarray, size: int) -> float:
    """The smaller, over the two eyes, of the share of rays from the eye's centre that cross a
    line in the band where a frame's rim runs."""
    coverage = []
    angles = np.linspace(0.0, 2.0 * np.pi, RING_RAYS, endpoint=False)
    for centre, width in _eyes(size):
        radii = np.linspace(0.55, LENS_SIZE[0] + 0.05, 20) * width
        xs = centre[0] + radii[None] * np.cos(angles)[:, None]
        ys = centre[1] + LENS_DROP * width + radii[None] * np.sin(angles)[:, None] * (LENS_SIZE[1] / LENS_SIZE[0])
        cols = np.clip(np.round(xs).astype(int), 0, size - 1)
        rows = np.clip(np.round(ys).astype(int), 0, size - 1)
        coverage.append(float((lines[rows, cols].max(1) > 1.0).mean()))
    return min(coverage)


@lru_cache(maxsize=2)
def _regions(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lens, temple band, eye openings) masks in a ``size`` UV texture."""
    lens = np.zeros((size, size), np.float32)
    (right, width), (left, _) = _eyes(size)
    for centre, eye_width in _eyes(size):
        axes = (int(LENS_SIZE[0] * eye_width), int(LENS_SIZE[1] * eye_width))
        cv2.ellipse(lens, (int(round(centre[0])), int(round(centre[1] + LENS_DROP * eye_width))), axes, 0, 0, 360, 1.0, -1)
    band = np.zeros((size, size), np.float32)  # the temples: the frame's top bar runs on to the ears
    row = int(round((right[1] + left[1]) / 2 - 0.35 * width))
    band[max(0, row - int(0.35 * width)): row + int(0.35 * width)] = 1.0
    openings = np.maximum(uv_polygon_mask(size, LEFT_EYE_CONTOUR), uv_polygon_mask(size, RIGHT_EYE_CONTOUR))
    return lens, band * (1.0 - lens), openings
