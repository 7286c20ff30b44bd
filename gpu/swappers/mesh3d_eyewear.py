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
- **removed**: the frame texels (those lines in the ring a rim runs in and on the temples,
  plus thin amber or bright lines there: a clear lower rim) are filled from their
  neighbourhood (push-pull) with the fine detail of the skin beside them; glare is brought
  down to the skin's brightness; the skin behind the lenses keeps its detail and its
  brightness (wrinkles, bags and the eye sockets' shading are who the face is) and only
  its low-passed colour is levelled with the skin around; the lid margins, reddened
  through the lenses, take the skin's colour. (Median-smoothing the lens region instead
  left a smooth pale patch with red rims round the eyes, which read less as the source and
  took dlib's HOG detector further off turned faces.)
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
LENS_SIZE = (1.2, 0.8)  # the lens region's half-axes in eye widths where the rings are looked for (a frame's rim lies inside)
LID_MARGIN = 0.15  # eye widths around the eye opening that are lids and lashes, not frames
LENS_DROP = 0.12  # the lens centre sits this many eye widths below the eye's centre
REMOVAL_LENS = (1.2, 0.865, 0.185)  # half-axes and drop of the region frames are removed from: lower, since lower
# rims run down to ~0.9 eye widths below the eyes' centres (Grace Hopper's: with the search ring's ellipse their
# arcs were left as pale ghost lines under the eyes)
THIN_RADIUS = 4 / 384  # of the texture: the amber-rim top-hat's radius (a rim is ~3 texels wide)
THIN_YELLOW = 0.07  # albedo units: how much yellower than its surroundings such a rim is ...
THIN_BRIGHT = 0.2  # ... or brighter, or darker (a clear rim's refracting edges)
THIN_DARK = 0.15
NOSE_BELOW = 0.1  # eye widths below the eyes' centres from where the nose is left alone (its sides' shadows look like
# frame lines; filling them, even only the thin ones, cost dlib's identity and HOG detector more than the rims cost)
DETAIL_SIGMA = 1.5 / 384  # of the texture: what counts as fine detail in the skin a frame's fill borrows ...
DETAIL_SHIFT = 10 / 384  # ... from this far above or below (past a frame's width)
RIM_INNER = 0.6  # of the lens region's half-axes: frame lines are looked for outside this (a wrinkle under an eye lies inside)
GLARE_RATIO = 1.25  # a texel behind a lens this much brighter than the skin around it is glare
GLARE_SIGMA = 4 / 384  # of the texture: what "around" means for glare
LID_CALMING = 0.8  # how much of the lid margins' colour gives way to the skin's
LEVEL_SIGMA = 8 / 384  # of the texture: the low pass of the skin's colour round the lenses (and half of it, the fade of the region taking it)


def remove_eyewear(albedo: np.ndarray) -> tuple[np.ndarray, bool]:
    """(T, T, 3) albedo -> (albedo without glasses, whether glasses were found). An albedo
    without glasses comes back unchanged."""
    size = albedo.shape[0]
    lines = _line_map(albedo)
    if _ring_coverage(lines, size) < RING_COVERAGE:
        return albedo, False
    lens, rims, nose, openings = _regions(size)
    lids = cv2.dilate(openings, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * _lid_margin(size) + 1,) * 2))
    found = (np.maximum(lines, _thin_rim_lines(albedo)) > 1.0) * rims * (1.0 - nose) * (1.0 - lids)
    frames = np.clip(1.5 * cv2.GaussianBlur(cv2.dilate(found, np.ones((3, 3), np.uint8)), (0, 0), 1.0), 0.0, 1.0)
    frames = frames * (1.0 - openings)
    filled = _fill_with_texture(albedo, frames)
    glasses = cv2.GaussianBlur(np.clip(np.maximum(lens, rims) - openings, 0.0, 1.0), (0, 0), 1.5)
    behind = cv2.GaussianBlur(cv2.dilate(lens, np.ones((5, 5), np.uint8)), (0, 0), LEVEL_SIGMA * size / 2) * (1.0 - openings)
    cleaned = _calm_lid_rims(_level_colour(_without_glare(filled, glasses), behind, openings), openings)
    eyes = np.clip(2.0 * openings, 0.0, 1.0)[..., None]  # the eyes themselves are the face's own
    return (cleaned * (1.0 - eyes) + albedo * eyes).astype(np.float32), True


def _fill_with_texture(albedo: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """The frames' texels filled from the skin around them: its smooth average (push-pull)
    plus the fine detail of the skin just above or below (a smooth strip where a rim was
    would read as a pale ghost of the frame)."""
    size = albedo.shape[0]
    smooth = push_pull_fill(albedo, 1.0 - frames)
    filled = smooth * frames[..., None] + albedo * (1.0 - frames[..., None])
    detail = filled - cv2.GaussianBlur(filled, (0, 0), DETAIL_SIGMA * size)
    clear = 1.0 - frames
    shift = max(1, int(round(DETAIL_SHIFT * size)))
    borrowed, counted = np.zeros_like(detail), np.zeros_like(clear)
    for step in (shift, -shift):
        borrowed += np.roll(detail * clear[..., None], step, axis=0)
        counted += np.roll(clear, step, axis=0)
    borrowed = borrowed / np.maximum(counted, 1.0)[..., None]
    return (filled + frames[..., None] * borrowed).astype(np.float32)


def _without_glare(albedo: np.ndarray, glasses: np.ndarray) -> np.ndarray:
    """The glare on lenses and frames (texels far brighter than the skin around them)
    brought down to that skin's brightness; the skin's own detail (wrinkles, lids) stays."""
    luminance = np.ascontiguousarray(albedo.mean(2))
    local = cv2.GaussianBlur(luminance, (0, 0), GLARE_SIGMA * albedo.shape[0])
    excess = np.clip(luminance / np.maximum(local * GLARE_RATIO, 1e-3), 1.0, None)
    return (albedo / (1.0 + glasses * (excess - 1.0))[..., None]).astype(np.float32)


def _level_colour(albedo: np.ndarray, behind: np.ndarray, openings: np.ndarray) -> np.ndarray:
    """The lenses tint the skin behind them: the low-passed colour of the region behind
    them is levelled with the skin's around them (its detail and its brightness stay: the
    wrinkles, lids and eye sockets' shading are the face's own)."""
    sigma = LEVEL_SIGMA * albedo.shape[0]
    weight = 1.0 - openings  # the eyes' own colour (iris, whites) says nothing of the skin's
    inside = _normalised_blur(albedo, weight, sigma)
    around = push_pull_fill(albedo, 1.0 - np.clip(2.0 * cv2.dilate(behind, np.ones((5, 5), np.uint8)), 0.0, 1.0))
    around = cv2.GaussianBlur(around, (0, 0), sigma)
    gain = np.clip(around / np.maximum(inside, 1e-3), 0.5, 2.0)
    return (albedo * (1.0 + behind[..., None] * (gain - 1.0))).astype(np.float32)


def _calm_lid_rims(albedo: np.ndarray, openings: np.ndarray) -> np.ndarray:
    """Seen through a lens, the lid margins come out redder than the skin (tint, refraction
    fringes); drawn round a target's own eyes that reads as a red rim. There their colour
    (chromaticity) mostly gives way to the low-passed colour of the skin around; their
    brightness (lashes, the lid's line) stays."""
    size = albedo.shape[0]
    margin = 2 * _lid_margin(size) + 1
    rims = cv2.dilate(openings, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * margin + 1,) * 2))
    rims = cv2.GaussianBlur(rims, (0, 0), _lid_margin(size)) * (1.0 - openings) * LID_CALMING
    luminance = albedo.mean(2, keepdims=True) + 1e-3
    chroma = albedo / luminance
    skin = _normalised_blur(chroma, 1.0 - np.clip(rims / LID_CALMING + openings, 0.0, 1.0), 2.0 * margin)
    return (luminance * (chroma + rims[..., None] * (skin - chroma))).astype(np.float32)


def _normalised_blur(image: np.ndarray, weight: np.ndarray, sigma: float) -> np.ndarray:
    """A Gaussian blur of ``image`` (T, T, C) counting each texel by ``weight`` (T, T)."""
    total = cv2.GaussianBlur(image * weight[..., None], (0, 0), sigma)
    return total / np.maximum(cv2.GaussianBlur(weight, (0, 0), sigma), 1e-3)[..., None]


def _line_map(albedo: np.ndarray) -> np.ndarray:
    """(T, T) how much each texel looks like a frame: > 1 on one."""
    radius = max(3, int(round(albedo.shape[0] * LINE_RADIUS)))
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1,) * 2)
    dark = cv2.morphologyEx(np.ascontiguousarray(albedo.mean(2)), cv2.MORPH_BLACKHAT, kernel)
    blue = cv2.morphologyEx(np.ascontiguousarray(albedo[..., 2]), cv2.MORPH_BLACKHAT, kernel)
    return np.maximum(dark / DARK_LINE, np.clip(blue - dark, 0.0, None) / YELLOW_LINE)


def _thin_rim_lines(albedo: np.ndarray) -> np.ndarray:
    """(T, T) > 1 on thin lines yellower, brighter or darker than their surroundings: clear
    amber or gold rims, the light a lens's edge catches and its refracting edges, which a
    lower rim often is (top-hats of R+G over B and of the luminance, narrow enough to
    leave the cheeks' broad shading out)."""
    radius = max(2, int(round(albedo.shape[0] * THIN_RADIUS)))
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1,) * 2)
    yellowness = np.ascontiguousarray((albedo[..., 0] + albedo[..., 1]) / 2 - albedo[..., 2])
    yellow = cv2.morphologyEx(yellowness, cv2.MORPH_TOPHAT, kernel) / THIN_YELLOW
    luminance = np.ascontiguousarray(albedo.mean(2))
    bright = cv2.morphologyEx(luminance, cv2.MORPH_TOPHAT, kernel) / THIN_BRIGHT
    dark = cv2.morphologyEx(luminance, cv2.MORPH_BLACKHAT, kernel) / THIN_DARK
    return np.maximum(np.maximum(yellow, bright), dark)


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
def _regions(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lens, rims, nose, eye openings) masks in a ``size`` UV texture: the lenses' region,
    where the frames run (the lenses' outer ring and the temples, where the top bar runs on
    to the ears), the nose below the frame's bridge and the eyes themselves."""
    lens, inner = np.zeros((size, size), np.float32), np.zeros((size, size), np.float32)
    (right, width), (left, _) = _eyes(size)
    for centre, eye_width in _eyes(size):
        at = (int(round(centre[0])), int(round(centre[1] + REMOVAL_LENS[2] * eye_width)))
        axes = (int(REMOVAL_LENS[0] * eye_width), int(REMOVAL_LENS[1] * eye_width))
        cv2.ellipse(lens, at, axes, 0, 0, 360, 1.0, -1)
        cv2.ellipse(inner, at, (int(RIM_INNER * axes[0]), int(RIM_INNER * axes[1])), 0, 0, 360, 1.0, -1)
    band = np.zeros((size, size), np.float32)  # the temples: the frame's top bar runs on to the ears
    row = int(round((right[1] + left[1]) / 2 - 0.35 * width))
    band[max(0, row - int(0.35 * width)): row + int(0.35 * width)] = 1.0
    nose = np.zeros((size, size), np.float32)  # below the frame's bridge, between the eyes' inner corners
    bottom = int(round(max(right[1], left[1]) + NOSE_BELOW * width))
    inner_corners = sorted((right[0] + width / 2, left[0] - width / 2))
    nose[bottom:, int(round(inner_corners[0])): int(round(inner_corners[1])) + 1] = 1.0
    openings = np.maximum(uv_polygon_mask(size, LEFT_EYE_CONTOUR), uv_polygon_mask(size, RIGHT_EYE_CONTOUR))
    return lens, np.maximum(lens - inner, band * (1.0 - lens)), nose, openings


def _lid_margin(size: int) -> int:
    """Texels round the eye openings that are lids and lashes, not frames."""
    return max(1, int(round(LID_MARGIN * _eyes(size)[0][1])))
