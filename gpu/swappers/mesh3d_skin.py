"""What of a source face's UV albedo is its skin, once at registration.

A photo's face is not all face: hair falls over the forehead and a cheek, the background
shows past the outline, a hat's brim or the dark side of a hard side light lies on it.
Unwrapped, all of that is albedo like any other, and every swap would draw it onto the
target (streaks on a cheek, dark patches on a turned target's near cheek). Each texel gets
a confidence in [0, 1] that it is the face's own skin or one of its features, from
statistics of this face alone (no fixed colours):

- **colour**: far from the skin's colour (log chromaticity, beyond several times the skin's
  own spread): brown or grey hair on skin, a blue or green background. A grey or sepia
  photo has no colour to tell by; that test then finds nothing;
- **broad light**: the albedo low-passed over ~1.5 % of the texture far darker or brighter
  than the skin: the dark background, a hat, the deep shadow the light model did not
  explain; thin lines (wrinkles, folds) average out at that scale and stay;
- **dark lines**: far darker than the skin, finer: strands of dark hair;
- **asymmetry**: much darker than the same texel on the other side of the face, which is
  seen well: a strand or a shadow over one side (a face's wrinkles come in pairs). The
  other side is read near the mirrored place, not only at it (its darkest there): a fold
  or a dark line the other side has within ``MIRROR_REACH`` pairs this one (a face's folds
  are not at exactly mirrored places), and below the brows so does an off colour (a
  fold's red shadow);
- **strands**: a thin dark line running up and down (darker than what lies beside it
  across) that the other side of the face does not have: hair falls down, while brows,
  lids, lips and wrinkles run across and folds come in pairs. Judged over the brows too
  (strands cross them), never in the eye openings.

The eyes, brows, lips and nostrils are the face's own whatever their colour: only the
strand test looks there (not in the eyes). The swapper multiplies the confidence into the unwrap's visibility, so the
mirrored side fills in first and a smooth fill of the skin around what neither side has.
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, canonical_mesh
from gpu.swappers.mesh3d_geometry import LEFT_BROW, OUTER_LIP_CONTOUR, RIGHT_BROW, uv_face_regions, uv_polygon_mask

NOSE_BOTTOM = (64, 98, 97, 2, 326, 327, 294, 278, 48)  # the alae, nostrils and columella: dark by nature
FEATURE_MARGIN = 0.02  # of the texture: the protected features grown by this much
CORE_EROSION = 0.06  # of the texture: the skin the statistics are taken on lies this far inside the outline
MIN_CORE_TEXELS = 200
COLOUR_SPREADS = (3.0, 5.0)  # chroma this many of the skin's spreads away starts to / is fully not skin ...
COLOUR_FLOOR = (0.12, 0.25)  # ... but never less than these log-chroma distances (a grey photo's spread is ~0)
BROAD_SIGMA = 0.015  # of the texture: the low pass of the broad light test
BROAD_DARK = (0.6, 1.0)  # |log lightness| of the low pass below the skin's from which it starts to / is fully not skin
BROAD_BRIGHT = (0.45, 0.8)  # ... above the skin's
LINE_SPREADS = (3.5, 6.0)  # a fine texel this many of the skin's lightness spreads below it: a dark strand ...
LINE_FLOOR = (0.5, 0.9)  # ... but never nearer (log) than these
ASYMMETRY = (0.35, 0.7)  # this much darker (log) than its mirror texel
MIRROR_SEEN = 0.3  # the mirror texel must be seen at least this well to be compared with
MIRROR_REACH = 0.02  # of the texture: a fold or line the other side has within this of the mirrored place pairs it
# (at 0: a fold half a centimetre off its mirror image was taken for a strand and smoothed away -- Grace Hopper's
# nasolabial folds and crow's feet: a third of the face's fine detail)
JUDGED_SEEN = (0.1, 0.3)
STRAND_REACH = 0.012  # of the texture: a strand is a dark line narrower than twice this across ...
STRAND_DEPTH = (0.2, 0.45)  # ... this much darker (log) than what lies beside it  # texels seen (cos^2) below the first are not judged, above the second fully


def skin_confidence(albedo: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """(T, T) in [0, 1]: how much each texel of a (T, T, 3) albedo (skin ~ 1, relative to
    the face's light) is the face's own, given how well the photo saw it (``seen``, (T, T)
    in [0, 1], 0 where it did not). Texels not seen come back 1 (nothing to judge)."""
    size = albedo.shape[0]
    protected, core = _regions(size)
    openings = _openings(size)
    logs = np.log(np.maximum(albedo, 1e-3))
    lightness = logs.mean(2)
    chroma = logs - lightness[..., None]
    trusted = (core > 0.5) & (seen > 0.5)
    if trusted.sum() < MIN_CORE_TEXELS:
        return np.ones((size, size), np.float32)
    skin_light = float(np.median(lightness[trusted]))
    skin_chroma = np.median(chroma[trusted], axis=0)
    distance = np.linalg.norm(chroma - skin_chroma, axis=2)
    spread = 1.4826 * float(np.median(distance[trusted]))
    low = COLOUR_SPREADS[0] * spread
    colour = _ramp(distance, max(low, COLOUR_FLOOR[0]), max(COLOUR_SPREADS[1] * spread, COLOUR_FLOOR[1]))

    weight = (seen > 0.05).astype(np.float32)
    sigma = BROAD_SIGMA * size
    broad = cv2.GaussianBlur(lightness * weight, (0, 0), sigma) / np.maximum(cv2.GaussianBlur(weight, (0, 0), sigma), 1e-6)
    broad_light = np.maximum(_ramp(skin_light - broad, *BROAD_DARK), _ramp(broad - skin_light, *BROAD_BRIGHT))
    light_spread = 1.4826 * float(np.median(np.abs(lightness[trusted] - skin_light)))
    dark_line = _ramp(skin_light - lightness, max(LINE_SPREADS[0] * light_spread, LINE_FLOOR[0]),
                      max(LINE_SPREADS[1] * light_spread, LINE_FLOOR[1]))

    mirrored, mirror_seen = lightness[:, ::-1], seen[:, ::-1]
    compared = mirror_seen > MIRROR_SEEN
    # the other side is compared with what lies near the mirrored texel: a face's folds and
    # wrinkles come in pairs, but not at exactly mirrored places (the pose, the expression)
    near = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * max(1, int(round(MIRROR_REACH * size))) + 1,) * 2)
    mirror_dark = cv2.erode(mirrored, near)  # the darkest the other side is near there
    asymmetry = _ramp(mirror_dark - lightness, *ASYMMETRY) * compared
    # a colour or a dark line the other side has near the same place too is the face's own (a fold's red
    # shadow); colour only below the brows: a fringe over the forehead is the same colour on both sides
    colour *= 1.0 - cv2.dilate(colour[:, ::-1], near) * compared * _below_brows(size)
    dark_line *= 1.0 - _ramp(skin_light - mirror_dark, max(LINE_SPREADS[0] * light_spread, LINE_FLOOR[0]),
                             max(LINE_SPREADS[1] * light_spread, LINE_FLOOR[1])) * compared
    # a thin dark line running up and down that the other side of the face does not have:
    # a strand of hair (brows, lids, lips and wrinkles run across; folds come in pairs)
    across = cv2.getStructuringElement(cv2.MORPH_RECT, (2 * max(1, int(round(STRAND_REACH * size))) + 1, 1))
    upright = cv2.morphologyEx(lightness, cv2.MORPH_CLOSE, across) - lightness
    strand = _ramp(upright, *STRAND_DEPTH) * (1.0 - _ramp(cv2.dilate(upright[:, ::-1], near), *STRAND_DEPTH)) * compared
    strand *= 1.0 - openings

    # only what the photo sees well is judged: at grazing angles the light model is least sure of
    # the skin (the swapper's grazing test takes hair and background there)
    judged = _ramp(seen, *JUDGED_SEEN) * (1.0 - protected)
    outlier = np.maximum(np.maximum.reduce([colour, broad_light, dark_line, asymmetry]) * judged, strand * _ramp(seen, *JUDGED_SEEN))
    confidence = np.where(seen > 0.0, 1.0 - outlier, 1.0).astype(np.float32)
    # an outlier's neighbours go with it (a strand's soft edges, a shadow's rim)
    return cv2.erode(confidence, np.ones((3, 3), np.uint8))


def _ramp(values: np.ndarray, start: float, stop: float) -> np.ndarray:
    return np.clip((values - start) / max(stop - start, 1e-6), 0.0, 1.0).astype(np.float32)


@lru_cache(maxsize=2)
def _below_brows(size: int) -> np.ndarray:
    """(T, 1) float32: 1 on the rows below the brows' lowest point, 0 above."""
    brows = canonical_mesh().uv[list(LEFT_BROW + RIGHT_BROW), 1].max() * size
    return (np.arange(size, dtype=np.float32) > brows).astype(np.float32)[:, None]


@lru_cache(maxsize=2)
def _openings(size: int) -> np.ndarray:
    """(T, T) float32: the eye openings, grown a little (lashes): never taken for strands."""
    openings = np.maximum(uv_polygon_mask(size, LEFT_EYE_CONTOUR), uv_polygon_mask(size, RIGHT_EYE_CONTOUR))
    return cv2.dilate(openings, np.ones((5, 5), np.uint8))


@lru_cache(maxsize=2)
def _regions(size: int) -> tuple[np.ndarray, np.ndarray]:
    """(protected, core) (T, T) float32: the features never judged (eyes, brows, lips,
    nostrils, grown), and the plain skin well inside the outline the statistics come from."""
    protected = np.zeros((size, size), np.float32)
    for contour in (LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, LEFT_BROW, RIGHT_BROW, OUTER_LIP_CONTOUR, NOSE_BOTTOM):
        protected = np.maximum(protected, uv_polygon_mask(size, contour))
    margin = max(1, int(round(FEATURE_MARGIN * size)))
    grow = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * margin + 1,) * 2)
    protected = cv2.GaussianBlur(cv2.dilate(protected, grow), (0, 0), margin / 2)
    inner, _ = uv_face_regions(size)
    erosion = max(1, int(round(CORE_EROSION * size)))
    core = cv2.erode(inner, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * erosion + 1,) * 2))
    # not above the brows: the forehead's top is where hair most often lies
    brows_top = float(canonical_mesh().uv[list(LEFT_BROW + RIGHT_BROW), 1].min()) * size
    core[: int(np.ceil(brows_top))] = 0.0
    return np.clip(protected, 0.0, 1.0), core * (protected < 0.05)
