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
- **strands**: a long thin line, darker or brighter than what lies beside it across,
  running down, straight, slanted or curving (looked for in 12 directions, with a
  minimum length), that the other side of the face does not have at the mirrored place
  and direction: hair falls down, while brows, lids, lips and forehead wrinkles run
  across, folds come in pairs and a pore or a short wrinkle is not long enough (above the
  brows only frown lines pair: near the middle, about as deep as their mirror). Judged
  over the brows too (strands cross them), never in the eye openings; grown by two
  texels (a strand's soft sides would draw its outline).

Then the verdicts are tidied, so that the fill takes no hair colour from what is left
half-judged: a texel seen too poorly to judge takes the verdict beside it (a fringe's
grazing top), what is judged not skin but lies wholly beside the nose and mouth is a
fold after all (a smile's, deeper on one side, dark and red in its shadow: hair runs in
from further out), a partial verdict joined to a sure one above the brows or along a strand
counts fully (hysteresis; not on the cheeks, where it is mostly a fold deeper on one
side), specks of skin inside what is not go with it, and above the brows the band
beside hair that is darker than the clean skin around would have it (the hair's shadow,
its thin tips) goes with the hair.

The eyes, brows, lips and nostrils are the face's own whatever their colour: only the
strand test looks there (not in the eyes). The swapper multiplies the confidence into the unwrap's visibility, so the
mirrored side fills in first and a smooth fill of the skin around what neither side has.
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, canonical_mesh
from gpu.swappers.mesh3d_geometry import (
    LEFT_BROW,
    OUTER_LIP_CONTOUR,
    RIGHT_BROW,
    uv_face_regions,
    uv_polygon_mask,
)

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
JUDGED_SEEN = (0.1, 0.3)  # texels seen (cos^2) below the first are not judged, above the second fully
STRAND_REACH = 0.012  # of the texture: a strand is a line narrower than twice this across ...
STRAND_LENGTH = 0.055  # ... at least this long (straight, or a curve's locally straight run) ...
STRAND_ANGLES = 12  # ... in one of this many directions ...
STRAND_STEEPNESS = (0.45, 0.7)  # ... running down at least this much (sine of its angle from across) ...
STRAND_DEPTH = (0.12, 0.3)  # ... and this much darker or brighter (log) than what lies beside it
STRAND_FOLD_MARGIN = 0.06  # of the texture: the fold zone reaches this far round the nose and mouth ...
STRAND_FOLD_REACH = 0.05  # ... where a line the other side has this near the mirrored place pairs it ...
STRAND_FOLD_SHARE = (0.25, 0.5)  # ... from / fully at this share of the line's depth
FOLD_TRACE = 0.1  # texels judged not skin above this are traced as one shape: one that lies wholly within
FOLD_LINE_MARGIN = 0.1  # ... this of the texture round the nose and mouth is a fold, whatever the other side has (a
# smile deeper on one side: the astronaut's left fold, dark, red in its shadow and unpaired, was filled as a pale bar
# with hard edges, a scar beside every swap's mouth; it runs ~0.08 out from the mouth); hair runs in from further out
VERDICT_REACH = 0.03  # of the texture: a texel seen too poorly to judge takes the worst verdict this near
HYSTERESIS = (0.35, 0.8)  # an outlier above the first joined to one above the second counts fully
ISLAND_RADIUS = 0.01  # of the texture: skin narrower than twice this between texels that are not skin is taken with them
UNDER_HAIR_REACH = 0.05  # of the texture: above the brows, skin this near hair that is not skin ...
UNDER_HAIR_DARK = (0.05, 0.15)  # ... and darker (log, low-passed) than the clean skin around would have it, from /
# fully: the hair's shadow and its thin tips (the astronaut's fringe left a band ~12 texels deep, 0.2-0.4 darker than
# the forehead below it, that every swap drew as a wavy grey line across the forehead)
UNDER_HAIR_SIGMA = 0.005  # of the texture: the low pass it is judged on (a shadow is smooth; the skin's grain is not)
NEAREST_LEVEL_SIGMA = 0.01  # of the texture: the low pass of the clean skin's level carried into the band
HAIR_VERDICT = 0.2  # confidence below this is hair (or another thing over the face) for the band under it
STRAND_FOREHEAD_REACH = 0.004  # of the texture: above the brows a line the other side has pairs it only this near
# the mirrored place (at MIRROR_REACH a fringe's strands on both sides paired each other and stayed) ...
FROWN_REACH = (0.06, 0.08)  # ... and only this near the face's middle line (fully / not at all): frown lines; a
# fringe's strands further out that happen to mirror each other stayed, and each was copied into the other's hole
STRAND_PAIR_SHARE = (0.4, 0.7)  # ... and only by one at least this share of its depth (a brow's own texture is
# faint beside a strand over the other brow)


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
    near = _disc(MIRROR_REACH, size)
    mirror_dark = cv2.erode(mirrored, near)  # the darkest the other side is near there
    asymmetry = _ramp(mirror_dark - lightness, *ASYMMETRY) * compared
    # a colour or a dark line the other side has near the same place too is the face's own (a fold's red
    # shadow); colour only below the brows: a fringe over the forehead is the same colour on both sides
    colour *= 1.0 - cv2.dilate(colour[:, ::-1], near) * compared * _below_brows(size)
    dark_line *= 1.0 - _ramp(skin_light - mirror_dark, max(LINE_SPREADS[0] * light_spread, LINE_FLOOR[0]),
                             max(LINE_SPREADS[1] * light_spread, LINE_FLOOR[1])) * compared
    strand = _strands(lightness, near, _below_brows(size)) * compared * (1.0 - openings)

    # only what the photo sees well is judged: at grazing angles the light model is least sure of
    # the skin (the swapper's grazing test takes hair and background there)
    judged = _ramp(seen, *JUDGED_SEEN) * (1.0 - protected)
    outlier = np.maximum(np.maximum.reduce([colour, broad_light, dark_line, asymmetry]) * judged, strand * _ramp(seen, *JUDGED_SEEN))
    # what is seen too poorly to judge takes the verdict of the judged texels beside it: the
    # grazing top of a fringe is hair too (kept, the fill spread its colour over the forehead
    # a target shows above the source's as blotches)
    outlier = np.maximum(outlier, cv2.dilate(outlier, _disc(VERDICT_REACH, size)) * (1.0 - _ramp(seen, *JUDGED_SEEN)))
    # what lies wholly beside the nose and mouth is a fold, however unlike the other side (a smile's)
    outlier *= 1.0 - _within(outlier > FOLD_TRACE, _fold_zone(size, FOLD_LINE_MARGIN) > 0.5)
    # hysteresis: above the brows and along strands, a texel partly judged not skin, joined
    # to texels surely not skin, is not skin either (a fringe's paler top, a strand's faint
    # end: half kept, the fill spread them as blotches). Not on the cheeks, where a partial
    # verdict is mostly a fold deeper on one side than the other: made whole, it was filled
    # as a flat patch with a hard edge
    hair_like = (_below_brows(size) < 0.5) | (strand > HYSTERESIS[0])
    count, labels = cv2.connectedComponents(((outlier > HYSTERESIS[0]) & hair_like).astype(np.uint8), connectivity=8)
    sure = np.zeros(count, bool)
    sure[np.unique(labels[outlier > HYSTERESIS[1]])] = True
    sure[0] = False
    outlier = np.where(sure[labels], 1.0, outlier)
    confidence = np.where(seen > 0.0, 1.0 - outlier, 1.0).astype(np.float32)
    # specks of "skin" inside what is not (a fringe's lighter strands, the gaps between
    # strands) go with it: kept, the fill spreads their hair colour as blotches
    confidence = cv2.morphologyEx(confidence, cv2.MORPH_OPEN, _disc(ISLAND_RADIUS, size))
    confidence = np.minimum(confidence, 1.0 - _under_hair(lightness, confidence, seen) * (1.0 - protected))
    # an outlier's neighbours go with it (a strand's soft edges, a shadow's rim)
    return cv2.erode(confidence, np.ones((3, 3), np.uint8))


def _under_hair(lightness: np.ndarray, confidence: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """(T, T) in [0, 1]: above the brows, the band of skin just beside hair judged not skin
    that is darker than the clean skin around would have it there: the hair's cast shadow
    and its thin, half-seen tips. Neither is far enough from the skin to be judged on its
    own, and the fill above it made its edge a line. (The brows are dark by nature: the
    caller leaves them out.)"""
    size = lightness.shape[0]
    forehead = 1.0 - _below_brows(size)
    hair = (confidence < HAIR_VERDICT) & (seen > 0.05) & (forehead > 0.5)
    if not hair.any():
        return np.zeros_like(lightness)
    reach = max(1, int(round(UNDER_HAIR_REACH * size)))
    distance = cv2.distanceTransform((~hair).astype(np.uint8), cv2.DIST_L2, 5)
    clean = confidence * (distance > reach) * (seen > JUDGED_SEEN[1]) > 0.5
    smooth = cv2.GaussianBlur(lightness, (0, 0), UNDER_HAIR_SIGMA * size)
    expected = _nearest_level(smooth, clean, NEAREST_LEVEL_SIGMA * size)
    near = (distance > 0) & (distance <= reach)
    return _ramp(expected - smooth, *UNDER_HAIR_DARK) * near * forehead


def _nearest_level(values: np.ndarray, known: np.ndarray, sigma: float) -> np.ndarray:
    """(T, T) each texel's value at the nearest ``known`` texel, low-passed: the level the
    clean skin beside a band has there. (A push-pull fill of the band tended to the face's
    mean away from the clean skin, below a brighter forehead's level, so the hair's shadow
    under a fringe read as no darker than expected and stayed, its ragged edge a line.)"""
    if not known.any():
        return values
    _, labels = cv2.distanceTransformWithLabels((~known).astype(np.uint8), cv2.DIST_L2, 5,
                                                labelType=cv2.DIST_LABEL_PIXEL)
    levels = values.ravel()[np.flatnonzero(known)]  # the labels number the known texels in scan order, from 1
    return cv2.GaussianBlur(levels[labels - 1].astype(np.float32), (0, 0), sigma)


def _strands(lightness: np.ndarray, near: np.ndarray, below_brows: np.ndarray) -> np.ndarray:
    """(T, T) in [0, 1]: long thin lines, darker or brighter than what lies beside them
    across, that run more down than across and that the other side of the face does not
    have at the mirrored place and direction: strands of hair, straight or curved (brows,
    lids, lips and forehead wrinkles run across; folds and the nose's sides come in pairs;
    short wrinkles are not long enough). Above the brows a line is paired only near the
    face's middle, by one at nearly the mirrored place and about as deep: the forehead's
    lines that run down are frown lines, close to the middle and to their mirror images,
    and a fringe's strands lie on both sides (two that happened to mirror each other stayed,
    and each was copied into the other's hole; a brow's faint texture paired a strand over
    the other brow).
    Beside the nose and mouth, where the smile's folds run, a line is paired by one
    farther from the mirrored place and half as deep: a smile is seldom symmetric (a fold
    taken for a strand was filled as a flat patch beside the mouth)."""
    size = lightness.shape[0]
    forehead_near = np.ones((2 * max(1, int(round(STRAND_FOREHEAD_REACH * size))) + 1,) * 2, np.uint8)
    fold_near = np.ones((2 * max(1, int(round(STRAND_FOLD_REACH * size))) + 1,) * 2, np.uint8)
    folds = _fold_zone(size)
    half = max(1, int(round(STRAND_REACH * size)))
    length = 2 * max(1, int(round(STRAND_LENGTH * size / 2))) + 1
    responses = []
    for step in range(STRAND_ANGLES):
        angle = np.pi * step / STRAND_ANGLES  # the line's direction (0: across, pi/2: down)
        across = _segment(2 * half + 1, angle + np.pi / 2)
        along = _segment(length, angle)
        dark = cv2.morphologyEx(lightness, cv2.MORPH_CLOSE, across) - lightness
        bright = lightness - cv2.morphologyEx(lightness, cv2.MORPH_OPEN, across)
        # the depth must hold along the line's length: a pore or a short wrinkle does not
        responses.append(cv2.morphologyEx(np.maximum(dark, bright), cv2.MORPH_OPEN, along))
    strand = np.zeros_like(lightness)
    for step, response in enumerate(responses):
        steep = _ramp(np.float32(abs(np.sin(np.pi * step / STRAND_ANGLES))), *STRAND_STEEPNESS)
        if steep <= 0.0:
            continue
        # the mirror image of a line at this angle runs at the mirrored angle (one step either way allowed)
        mirrored = (STRAND_ANGLES - step) % STRAND_ANGLES
        paired = np.maximum.reduce([responses[(mirrored + d) % STRAND_ANGLES] for d in (-1, 0, 1)])[:, ::-1]
        below = below_brows * _ramp(cv2.dilate(paired, near), *STRAND_DEPTH)
        mirrored_here = cv2.dilate(paired, forehead_near)
        above = _ramp(mirrored_here, *STRAND_DEPTH) * _ramp(mirrored_here / np.maximum(response, 1e-3), *STRAND_PAIR_SHARE)
        unpaired = 1.0 - below - (1.0 - below_brows) * above * _middle(size)
        # beside the nose and mouth a fold fainter on the other side still pairs it
        relative = cv2.dilate(paired, fold_near) / np.maximum(response, 1e-3)
        unpaired = np.minimum(unpaired, 1.0 - folds * _ramp(relative, *STRAND_FOLD_SHARE))
        strand = np.maximum(strand, _ramp(response, *STRAND_DEPTH) * unpaired * steep)
    # a strand's soft, anti-aliased sides go with it: left in, they draw its outline
    return cv2.dilate(strand, np.ones((5, 5), np.uint8))


def _within(lines: np.ndarray, zone: np.ndarray) -> np.ndarray:
    """(T, T) float32: 1 on the connected parts of ``lines`` (bool) that lie wholly inside
    ``zone`` (bool)."""
    count, labels = cv2.connectedComponents(lines.astype(np.uint8), connectivity=8)
    outside = np.zeros(count, bool)
    outside[np.unique(labels[lines & ~zone])] = True
    inside = ~outside
    inside[0] = False
    return inside[labels].astype(np.float32)


@lru_cache(maxsize=2)
def _middle(size: int) -> np.ndarray:
    """(1, T) float32: 1 near the face's middle line, where frown lines run (``FROWN_REACH``)."""
    off_centre = np.abs(np.arange(size, dtype=np.float32) - (size - 1) / 2) / size
    return _ramp(FROWN_REACH[1] - off_centre, 0.0, FROWN_REACH[1] - FROWN_REACH[0])[None, :]


@lru_cache(maxsize=4)
def _fold_zone(size: int, margin: float = STRAND_FOLD_MARGIN) -> np.ndarray:
    """(T, T) float32: the cheeks beside the nose and mouth (``margin`` of the texture
    round them), where the nasolabial folds run."""
    uv = canonical_mesh().uv
    points = uv[list(NOSE_BOTTOM + OUTER_LIP_CONTOUR)] * size - 0.5
    zone = np.zeros((size, size), np.uint8)
    cv2.fillConvexPoly(zone, cv2.convexHull(np.round(points).astype(np.int32)), 1)
    zone = cv2.dilate(zone, _disc(margin, size))
    return zone.astype(np.float32)


def _disc(reach: float, size: int) -> np.ndarray:
    """A disc-shaped morphology kernel reaching ``reach`` of a ``size`` texture (at least a
    texel) from its centre."""
    radius = max(1, int(round(reach * size)))
    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1,) * 2)


@lru_cache(maxsize=32)
def _segment(length: int, angle: float) -> np.ndarray:
    """A one-texel line ``length`` texels long at ``angle`` (radians from across), as a
    morphology kernel."""
    kernel = np.zeros((length, length), np.uint8)
    centre = (length - 1) / 2
    for t in np.linspace(-centre, centre, 4 * length):
        x, y = np.round(centre + t * np.array([np.cos(angle), np.sin(angle)])).astype(int)
        kernel[y, x] = 1
    return kernel


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
    protected = cv2.GaussianBlur(cv2.dilate(protected, _disc(FEATURE_MARGIN, size)), (0, 0), margin / 2)
    inner, _ = uv_face_regions(size)
    core = cv2.erode(inner, _disc(CORE_EROSION, size))
    # not above the brows: the forehead's top is where hair most often lies
    brows_top = float(canonical_mesh().uv[list(LEFT_BROW + RIGHT_BROW), 1].min()) * size
    core[: int(np.ceil(brows_top))] = 0.0
    return np.clip(protected, 0.0, 1.0), core * (protected < 0.05)
