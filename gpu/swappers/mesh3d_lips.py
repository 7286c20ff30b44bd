"""An open-mouthed source's lips, closed, once at registration.

The mouth carries much of who a face is (on the realism set's tune half, drawing the
target's own lips instead of the source's moved dlib's distance to the source from 0.43
to 0.50), so the source's lips are drawn, whatever its expression. A smiling, open
mouth's inner-lip landmarks sit on its teeth, not on its lips' inner edge: unwrapped, each
lip's UV band (from the outer lip line to the canonical inner one) holds the real lip
next to the outer line and the teeth or the dark gap towards the inner one. Painted over
in the lips' colour that band read as a pale slab with a grey blob on a closed target
mouth. Here each column of each lip is **stretched** instead: the real lip (from the outer
line to where, going inwards, the teeth or the gap begin) is resampled over the whole
band, so the lip keeps its own colour and texture and meets the other lip at the
canonical inner line, where closed lips meet (a thin shade is drawn there, which
``mesh3d_mouth_line`` lays where the target's lips meet).

Each column is stretched by its own amount, so neighbouring columns sample different
rows of the photo: the stretched lips are low-passed along the mouth (not across it,
where their profile is), or they showed vertical stripes and the teeth's last specks as
notches. A smile stretches the lower lip thin and pale over the lower teeth; stretched,
it stayed skin-coloured, and a closed mouth read as an upper lip alone. So each lip's
colour (its median chromaticity) is moved to that of the lips' reddest texels, faded in
from its outer line, its lightness left as the photo has it.

Teeth are told from lip by redness (lips are redder than skin, teeth are not) and
lightness; a grey photo (no redness to tell by) by lightness alone.
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

from gpu.models.canonical_mesh import INNER_LIP_CONTOUR, canonical_mesh
from gpu.swappers.mesh3d_geometry import OUTER_LIP_CONTOUR, uv_polygon_mask

TEETH_LIGHTER = 1.12  # a texel this much lighter than the lip's own (outer) part and ...
TEETH_LESS_RED = 0.5  # ... whose red over the skin's (1) is below this share of the lip's is teeth
GAP_DARKER = 0.6  # a texel darker than this share of the lips' lightness is the mouth's gap
GREY_REDNESS = 0.03  # lips no redder than the skin by this much: a grey photo (lightness alone)
LIP_RED_PERCENTILE = 80  # the lips' red: this percentile of the redness over their band
MIN_LIP = 0.15  # of a lip's band: a lip found thinner than this is taken as this thick
SMOOTH_COLUMNS = 0.06  # of the lips' width: the found lip edges are median-smoothed over this many columns
MEET_SHADE = (0.35, 0.004)  # where the lips meet: this much darker, this wide (of the texture): thin, since a closed
# target mouth reads it at the crop's own scale (``mesh3d_mouth_line``); drawn wide (0.012) it was a soft smear
ALONG_SIGMA = 0.01  # of the texture: the stretched lips' low pass along the mouth
COLOUR_FADE = 0.35  # of a lip's band from its outer line: its colour move fades in over this (the border stays soft)


def closed_lips(albedo: np.ndarray) -> np.ndarray:
    """(T, T, 3) albedo -> the same with each lip's real part stretched over its band."""
    size = albedo.shape[0]
    layout = lip_layout(size)
    lips = layout.lips
    if not lips.any():
        return albedo
    colours = albedo[lips]
    light = colours.mean(1)
    redness = colours[:, 0] / np.maximum(colours[:, 1:].mean(1), 1e-3)
    # the lips' own colour: their reddest texels (the band also holds teeth, the gap and, along the
    # outer line, some skin)
    lip_red = float(np.percentile(redness, LIP_RED_PERCENTILE))
    own = redness >= 1.0 + 0.5 * (lip_red - 1.0)
    lip_light = float(np.median(light[own])) if own.any() else float(np.median(light))
    odd_lips = light < GAP_DARKER * lip_light
    if lip_red - 1.0 > GREY_REDNESS:
        odd_lips |= (light > TEETH_LIGHTER * lip_light) & (redness - 1.0 < TEETH_LESS_RED * (lip_red - 1.0))
    else:
        odd_lips |= light > TEETH_LIGHTER * lip_light
    odd = np.zeros((size, size), bool)
    odd[lips] = odd_lips
    map_y = np.broadcast_to(np.arange(size, dtype=np.float32)[:, None], (size, size)).copy()
    map_x = np.broadcast_to(np.arange(size, dtype=np.float32)[None, :], (size, size)).copy()
    columns = layout.columns
    reach = max(1, int(round(SMOOTH_COLUMNS * len(columns)))) | 1
    for outer_line, upper in ((layout.top, True), (layout.bottom, False)):
        edge = _median(_lip_edges(odd, columns, outer_line, layout.meet, upper), reach)
        band = layout.meet - outer_line  # signed: down for the upper lip, up for the lower one
        edge = np.where(np.abs(edge - outer_line) < MIN_LIP * np.abs(band), outer_line + MIN_LIP * band, edge)
        scale = (edge - outer_line) / np.where(np.abs(band) > 1e-3, band, 1.0)
        for index, column in enumerate(columns):
            lo, hi = sorted((outer_line[index], layout.meet[index]))
            span = np.arange(int(np.ceil(lo)), int(np.floor(hi)) + 1)
            span = span[(span >= 0) & (span < size)]
            map_y[span, column] = outer_line[index] + (span - outer_line[index]) * scale[index]
    stretched = cv2.remap(albedo, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    stretched = _along_the_mouth(stretched, lips, ALONG_SIGMA * size)
    stretched = _in_the_lips_colour(stretched, _log_chroma(colours[own]).mean(0) if own.any() else None, layout)
    weight = layout.soft_lips[..., None]
    closed = albedo * (1.0 - weight) + stretched * layout.meet_shade * weight
    return closed.astype(np.float32)


def _along_the_mouth(image: np.ndarray, lips: np.ndarray, sigma: float) -> np.ndarray:
    """``image`` (T, T, 3) low-passed along the rows inside ``lips`` (T, T) bool, from the
    lips' texels alone (the skin beside them does not bleed in)."""
    weight = lips.astype(np.float32)
    blurred = cv2.GaussianBlur(image * weight[..., None], (0, 0), sigmaX=sigma, sigmaY=1e-3)
    support = cv2.GaussianBlur(weight, (0, 0), sigmaX=sigma, sigmaY=1e-3)[..., None]
    return np.where(lips[..., None], blurred / np.maximum(support, 1e-6), image).astype(np.float32)


def _log_chroma(colours: np.ndarray) -> np.ndarray:
    logs = np.log(np.maximum(colours, 1e-3))
    return logs - logs.mean(-1, keepdims=True)


def _in_the_lips_colour(image: np.ndarray, lip_chroma: np.ndarray | None, layout: "_LipLayout") -> np.ndarray:
    """``image`` (T, T, 3) with each lip's median log-chromaticity moved to ``lip_chroma``
    (3,), faded in over ``COLOUR_FADE`` of the lip's band from its outer line; unchanged
    without one (no texel read as lip)."""
    if lip_chroma is None:
        return image
    logs = np.log(np.maximum(image, 1e-3))
    chroma = _log_chroma(image)
    rows = np.arange(image.shape[0], dtype=np.float32)[:, None]
    for outer_line, upper in ((layout.top, True), (layout.bottom, False)):
        depth = np.zeros(image.shape[:2], np.float32)  # 0 at the outer line, 1 where the lips meet
        band = layout.meet - outer_line
        depth[:, layout.columns] = (rows - outer_line[None, :]) / np.where(np.abs(band) > 1e-3, band, 1.0)[None, :]
        part = layout.lips & (depth >= 0.0) & ((depth <= 1.0) if upper else (depth < 1.0))  # the meeting row: the upper lip's
        if part.sum() < 4:
            continue
        shift = lip_chroma - np.median(chroma[part], axis=0)
        fade = np.clip(depth / COLOUR_FADE, 0.0, 1.0) * part
        logs += fade[..., None] * shift
    return np.where(layout.lips[..., None], np.exp(logs), image).astype(np.float32)


def _lip_edges(odd: np.ndarray, columns: np.ndarray, outer_line: np.ndarray, meet: np.ndarray, upper: bool) -> np.ndarray:
    """Per column: the last lip row going from the lip's outer line towards ``meet``,
    before the first teeth or gap texel (``meet`` when there is none)."""
    edges = meet.copy()
    for index, column in enumerate(columns):
        start, stop = int(round(outer_line[index])), int(round(meet[index]))
        step = 1 if upper else -1
        span = np.arange(start, stop + step, step)
        span = span[(span >= 0) & (span < odd.shape[0])]
        hits = np.nonzero(odd[span, column])[0]
        if len(hits):
            edges[index] = float(span[hits[0]] - step)  # the last lip row: sampled up to it, not into the teeth
    return edges


def _median(values: np.ndarray, reach: int) -> np.ndarray:
    """``values`` median-filtered over ``reach`` (odd) neighbours, the ends repeated."""
    padded = np.pad(values, reach // 2, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, reach)
    return np.median(windows, axis=1)


class _LipLayout:
    """Where the lips lie in a ``size`` texture: per column of the mouth, its outer lines
    (top, bottom) and the canonical inner line where closed lips meet."""

    def __init__(self, size: int) -> None:
        uv = canonical_mesh().uv * size - 0.5
        outer = uv[list(OUTER_LIP_CONTOUR)]
        self.lips = uv_polygon_mask(size, OUTER_LIP_CONTOUR) > 0.5
        cols = np.nonzero(self.lips.any(0))[0]
        rows_of = [np.nonzero(self.lips[:, c])[0] for c in cols]
        self.columns = cols
        self.top = np.array([r.min() for r in rows_of], np.float32)
        self.bottom = np.array([r.max() for r in rows_of], np.float32)
        # closed lips meet halfway between the canonical upper and lower inner lines (a texel apart)
        upper_inner, lower_inner = (np.interp(cols, *uv[line].T) for line in inner_lip_lines())
        self.meet = np.clip((upper_inner + lower_inner) / 2, self.top + 1, self.bottom - 1).astype(np.float32)
        self.soft_lips = cv2.GaussianBlur(self.lips.astype(np.float32), (0, 0), 1.0)
        rows = np.arange(size, dtype=np.float32)[:, None]
        middle = np.full(size, -1e6, np.float32)
        middle[cols] = self.meet
        gap = np.zeros(size, np.float32)  # the shade is whole between the two inner lines
        gap[cols] = np.abs(lower_inner - upper_inner) / 2
        left, right = float(outer[:, 0].min()), float(outer[:, 0].max())
        along = np.clip(1.0 - np.abs(np.arange(size) - (left + right) / 2) / max((right - left) / 2, 1.0), 0.0, 1.0) ** 0.5
        beyond_gap = np.maximum(np.abs(rows - middle[None, :]) - gap[None, :], 0.0)
        across = np.exp(-((beyond_gap / (MEET_SHADE[1] * size)) ** 2))
        self.meet_shade = (1.0 - MEET_SHADE[0] * along[None, :] * across)[..., None].astype(np.float32)


@lru_cache(maxsize=1)
def inner_lip_lines() -> tuple[np.ndarray, np.ndarray]:
    """Indices of the inner lip contour's points, corner to corner: the upper lip's line
    and the lower lip's, opposite point for opposite point (the corners in both)."""
    ring = list(INNER_LIP_CONTOUR)
    half = len(ring) // 2  # the contour runs from one corner along the lower lip to the other, back along the upper
    return np.array([ring[0]] + ring[half:][::-1]), np.array(ring[: half + 1])


@lru_cache(maxsize=2)
def lip_layout(size: int) -> _LipLayout:
    return _LipLayout(size)
