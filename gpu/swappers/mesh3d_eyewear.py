"""Glasses out of a source face's UV albedo, once at registration.

A source photo with glasses bakes the frames (and the lenses' glare) into the albedo, so
every swap would draw the source's glasses onto the target, bent with the target's face
and lit as skin. Neither the lighting model nor the mirrored side explains them (frames
are dark or coloured thin lines, and they are symmetric), so they are found by shape in
UV space, where every face's eyes lie in the same place:

- **line map**: thin structures darker than their surroundings (a black top-hat of the
  luminance) and thin structures that are yellower than their surroundings (a black
  top-hat of the blue channel beyond the luminance's: gold and tortoiseshell rims);
- **traced**: each rim as the smooth closed curve round its eye that runs along the most
  line evidence, thin bright, dark and yellow lines included (a threshold on the line map
  alone also takes the wrinkles and pores beside a frame: filling all those left a smooth
  grey band round a textured lens, ghost glasses on every swap);
- **found** when most of both traced rims run on line evidence: a frame rings the eye all
  round, brows, lids, wrinkles and strands of hair make arcs;
- **removed**: the texels joined to each traced rim that stand out from the skin as the
  rim does (its whole width, soft edges included), the dark or amber lines near it (a
  thick top bar), its glare and edges, and the lines on the temples are filled from their
  neighbourhood (push-pull) with the detail of the skin beside them; glare is brought
  down to the skin's brightness; the skin behind the lenses keeps its detail (wrinkles,
  bags and the eye sockets' shading are who the face is) and only its low-passed colour
  and brightness are levelled with the skin just outside the rim, so no step is left
  there; the lid margins, reddened through the lenses, take the skin's colour.
  (Median-smoothing the lens region instead left a smooth pale patch with red rims round
  the eyes, which read less as the source and took dlib's HOG detector further off
  turned faces.)
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, canonical_mesh
from gpu.swappers.mesh3d_geometry import LEFT_BROW, RIGHT_BROW, push_pull_fill, uv_polygon_mask

LINE_RADIUS = 1 / 40  # of the texture: the top-hat's radius, thicker than a frame, thinner than a brow's length
DARK_LINE = 0.35  # albedo units (skin = 1): a frame's depth below its surroundings
YELLOW_LINE = 0.12  # the blue channel's extra depth on a gold rim
RING_LINE = 0.75  # line evidence (see _line_map, _thin_rim_lines) a traced rim runs on where it runs on a frame
RING_COVERAGE = 0.5  # of each eye's traced rim that must run on a frame for glasses to count as found (drawn
# frames of five colours and three widths on the astronaut, full size to 90 px wide: 0.67-1.0; Grace Hopper's, 80 px
# to full size, grey and sepia: 0.70-0.98; the astronaut without glasses, fourteen variants: 0.11-0.31)
LID_MARGIN = 0.15  # eye widths around the eye opening that are lids and lashes, not frames
REMOVAL_LENS = (1.2, 0.865, 0.185)  # half-axes and drop of the region frames are removed from: lower, since lower
# rims run down to ~0.9 eye widths below the eyes' centres (Grace Hopper's: with the search ring's ellipse their
# arcs were left as pale ghost lines under the eyes)
THIN_RADIUS = 4 / 384  # of the texture: the amber-rim top-hat's radius (a rim is ~3 texels wide)
THIN_YELLOW = 0.07  # albedo units: how much yellower than its surroundings such a rim is ...
THIN_BRIGHT = 0.2  # ... or brighter, or darker (a clear rim's refracting edges)
THIN_DARK = 0.15
FILL_LEVELS = 4  # pyramid levels the frames' fill averages over: the skin within ~16 texels
DETAIL_SIGMA = 3 / 384  # of the texture: what counts as fine detail in the skin a frame's fill borrows ...
DETAIL_SHIFT = 12 / 384  # ... from this far above, below or to either side (past a frame's band)
RIM_INNER = 0.6  # of the lens region's half-axes: frame lines are looked for outside this (a wrinkle under an eye lies inside)
GLARE_RATIO = 1.25  # a texel behind a lens this much brighter than the skin around it is glare
GLARE_SIGMA = 4 / 384  # of the texture: what "around" means for glare
LID_CALMING = 0.8  # how much of the lid margins' colour gives way to the skin's
LEVEL_SIGMA = 8 / 384  # of the texture: the low pass of the skin's colour either side of a rim
LEVEL_RING = 14 / 384  # of the texture: how far inside and outside a rim that skin is taken
LEVEL_LIMIT = 0.5  # log units: the most a lens region's colour is moved
RIM_ANGLES = 96  # angles around each eye a rim is traced at ...
RIM_SEARCH = (0.45, 1.3, 64)  # ... between these radii of the removal lens's ellipse, in this many steps
RIM_MOVE = 2  # radius steps a traced rim may move from one angle to the next ...
RIM_BEND = 0.05  # ... each step costing this much line evidence (a rim is smooth)
FRAME_SKIN_WINDOW = 31 / 384  # of the texture: the median window the skin around a frame is taken in
FRAME_STANDOUT = 0.5  # of how far the rim's centre stands out from that skin: what still counts as frame ...
FRAME_STANDOUT_FLOOR = 0.08  # ... and at least this much (log units; skin texture stands out less)
FRAME_REACH = 6 / 384  # of the texture: how far from a traced rim a frame's texels are looked for
RIM_SCORE_CAP = 2.0  # line evidence counted per texel at most (one black bar does not outweigh a faint rim all round)
RIM_HALF_WIDTH = 3 / 384  # of the texture: the half-width of the band along a traced rim that is filled ...
RIM_REACH = (12 / 384, 8 / 384)  # ... and how far from it dark or amber lines (a thick top bar), and thin bright or dark
# ones (its glare, its edges), also count as frame


def remove_eyewear(albedo: np.ndarray) -> tuple[np.ndarray, bool]:
    """(T, T, 3) albedo -> (albedo without glasses, whether glasses were found). An albedo
    without glasses comes back unchanged."""
    traced = _traced(albedo, RING_COVERAGE)
    if traced is None:
        return albedo, False
    _, frames, distance = traced
    lens, rims, openings = _regions(albedo.shape[0])
    filled = _fill_with_texture(albedo, frames)
    glasses = cv2.GaussianBlur(np.clip(np.maximum(lens, rims) - openings, 0.0, 1.0), (0, 0), 1.5)
    levelled = _level_lenses(_without_glare(filled, glasses), distance, np.maximum(openings, frames))
    cleaned = _calm_lid_rims(levelled, openings)
    eyes = np.clip(2.0 * openings, 0.0, 1.0)[..., None]  # the eyes themselves are the face's own
    return (cleaned * (1.0 - eyes) + albedo * eyes).astype(np.float32), True


def eyewear_frames(texture: np.ndarray, coverage: float = RING_COVERAGE) -> np.ndarray | None:
    """(T, T) how much each texel of a face's UV texture (skin = 1) is a glasses frame, or
    None when frames do not ring both eyes on ``coverage`` of the rays: what the occlusion
    estimate keeps in front of a target's swapped face (its own glasses). Only the band
    along each traced rim and the dark lines just above it (a thick top bar): not the
    temples, nor the lines beside the lower rims -- a face's own wrinkles and bags, which
    its swap must not keep."""
    traced = _traced(texture, coverage)
    if traced is None:
        return None
    lines, frames, distance = traced
    size = texture.shape[0]
    rows = np.arange(size, dtype=np.float32)[:, None]
    above = rows < max(float(centre[1]) for centre, _ in _eyes(size))
    band = np.abs(distance) <= RIM_HALF_WIDTH * size + 1.5
    bar = (lines > 1.0) & (np.abs(distance) < RIM_REACH[0] * size) & above
    return frames * (band | bar)


def _traced(albedo: np.ndarray, coverage: float) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(line map, frames, signed distance from the traced rims) of a texture whose traced
    rims run on line evidence for ``coverage`` of their length round both eyes; None for
    one that wears no glasses."""
    lines = _line_map(albedo)
    size = albedo.shape[0]
    strength = np.maximum(lines, _thin_rim_lines(albedo)) * (1.0 - _lids(size))
    paths = _rim_paths(strength, size)
    if _ring_coverage(paths) < coverage:
        return None
    return (lines, *_frames(albedo, lines, strength, paths))


def _frames(albedo: np.ndarray, lines: np.ndarray, strength: np.ndarray,
            paths: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(T, T) how much each texel is frame, and the signed distance from the traced rims
    (``_rim_distance``): a band along each rim, the lines near it (a thick top bar) and
    those on the temples; never the eye openings or the lids."""
    size = albedo.shape[0]
    lens, rims, openings = _regions(size)
    lids = _lids(size)
    distance = _rim_distance(paths, size)
    traced = np.clip(RIM_HALF_WIDTH * size + 1.0 - np.abs(distance), 0.0, 1.0)
    traced = np.maximum(traced, _like_the_rim(albedo, distance, lids))
    near = np.abs(distance) < RIM_REACH[0] * size
    nearer = np.abs(distance) < RIM_REACH[1] * size
    temples = (rims * (1.0 - lens)) > 0.5
    lined = ((lines > 1.0) & near) | ((strength > 1.0) & (nearer | temples))
    found = np.maximum(traced, lined * rims) * (1.0 - lids)
    frames = np.clip(1.5 * cv2.GaussianBlur(cv2.dilate(found, np.ones((5, 5), np.uint8)), (0, 0), 1.0), 0.0, 1.0)
    return frames * (1.0 - openings), distance


def _like_the_rim(albedo: np.ndarray, distance: np.ndarray, lids: np.ndarray) -> np.ndarray:
    """(T, T) 1 on the texels joined to a traced rim that stand out from the skin around
    them as the rim does: a frame's whole width, its soft edges in a blurred or small photo
    and a thick frame, where a band of fixed width along the rim's centre left its two
    edges behind as a ghost outline."""
    size = albedo.shape[0]
    window = 2 * int(FRAME_SKIN_WINDOW * size / 2) + 1
    logs = np.log(np.clip(albedo, 1e-2, 4.0))
    coded = np.clip((logs + 2.0) * (255.0 / 4.0), 0, 255).astype(np.uint8)  # the median filter takes 8 bits
    skin = cv2.medianBlur(coded, window).astype(np.float32) * (4.0 / 255.0) - 2.0  # a frame is thinner than half of it
    difference = logs - skin
    centre = (np.abs(distance) < 1.0) & (lids < 0.5)
    if centre.sum() < 16:
        return np.zeros((size, size), np.float32)
    rim = np.median(difference[centre], axis=0)  # how the rim differs from skin: darker, yellower, brighter
    direction = rim / max(float(np.linalg.norm(rim)), 1e-6)
    along = difference @ direction
    across = np.linalg.norm(difference - along[..., None] * direction, axis=2)
    level = max(float(np.linalg.norm(rim)) * FRAME_STANDOUT, FRAME_STANDOUT_FLOOR)
    alike = (along > level) & (across < along)  # a brow beside a gold rim differs otherwise
    candidates = (alike & (np.abs(distance) < FRAME_REACH * size) & (lids < 0.5)) | centre
    _, labels = cv2.connectedComponents(candidates.astype(np.uint8), connectivity=8)
    joined = np.isin(labels, np.unique(labels[centre]))
    return (joined & candidates).astype(np.float32)


def _rim_distance(paths: list[tuple[np.ndarray, np.ndarray]], size: int) -> np.ndarray:
    """(T, T) signed distance in texels from each lens's rim (negative inside the lens, a
    large value far from either eye). Each rim is traced as the closed curve around its
    eye, within the removal lens, that runs along the most line evidence: a frame is one
    smooth line, where a threshold on the line map also takes the wrinkles and pores beside
    it (filled, those left a smooth grey ring round a textured lens)."""
    distance = np.full((size, size), np.inf, np.float32)
    angles = np.linspace(0.0, 2.0 * np.pi, RIM_ANGLES, endpoint=False)
    radii = np.linspace(RIM_SEARCH[0], RIM_SEARCH[1], RIM_SEARCH[2])
    for (centre, width), (_, path) in zip(_eyes(size), paths, strict=True):
        cx, cy = float(centre[0]), float(centre[1] + REMOVAL_LENS[2] * width)
        a, b = REMOVAL_LENS[0] * width, REMOVAL_LENS[1] * width
        curve = radii[path]
        top, bottom = int(max(0, cy - 1.6 * b)), int(min(size, cy + 1.6 * b + 1))
        left, right = int(max(0, cx - 1.6 * a)), int(min(size, cx + 1.6 * a + 1))
        rows, cols = np.mgrid[top:bottom, left:right].astype(np.float32)
        dx, dy = (cols - cx) / a, (rows - cy) / b
        theta = np.mod(np.arctan2(dy, dx), 2.0 * np.pi)
        rim = np.interp(theta, np.append(angles, 2.0 * np.pi), np.append(curve, curve[0]))
        texels_per_unit = np.hypot(a * np.cos(theta), b * np.sin(theta))
        signed = (np.hypot(dx, dy) - rim) * texels_per_unit
        window = distance[top:bottom, left:right]
        distance[top:bottom, left:right] = np.where(np.abs(signed) < np.abs(window), signed, window)
    return distance


def _rim_paths(strength: np.ndarray, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per eye: (A, R) the line evidence at each angle and radius of the removal lens's
    ellipse, and (A,) the radius indices of the best closed rim through it."""
    angles = np.linspace(0.0, 2.0 * np.pi, RIM_ANGLES, endpoint=False)
    radii = np.linspace(RIM_SEARCH[0], RIM_SEARCH[1], RIM_SEARCH[2])
    paths = []
    for centre, width in _eyes(size):
        cx, cy = float(centre[0]), float(centre[1] + REMOVAL_LENS[2] * width)
        a, b = REMOVAL_LENS[0] * width, REMOVAL_LENS[1] * width
        xs = (cx + a * radii[None] * np.cos(angles)[:, None]).astype(np.float32)
        ys = (cy + b * radii[None] * np.sin(angles)[:, None]).astype(np.float32)
        score = np.clip(cv2.remap(strength.astype(np.float32), xs, ys, cv2.INTER_LINEAR), 0.0, RIM_SCORE_CAP)
        paths.append((score, _best_closed_path(score)))
    return paths


def _best_closed_path(score: np.ndarray) -> np.ndarray:
    """(A, R) score per angle and radius -> (A,) radius indices of the closed path with the
    most score that moves at most ``RIM_MOVE`` radii per angle (Viterbi over three turns:
    the middle one is as good as closed)."""
    count, steps = score.shape
    turns = np.concatenate([score] * 3)
    total = turns[0].copy()
    back = np.zeros(turns.shape, np.int64)
    moves = range(-RIM_MOVE, RIM_MOVE + 1)
    for index in range(1, len(turns)):
        options = np.full((len(moves), steps), -np.inf)
        for row, move in enumerate(moves):
            source = slice(max(0, -move), steps - max(0, move))
            options[row, max(0, move): steps - max(0, -move)] = total[source] - RIM_BEND * abs(move)
        choice = options.argmax(0)
        back[index] = choice - RIM_MOVE
        total = options.max(0) + turns[index]
    path = np.zeros(len(turns), np.int64)
    path[-1] = int(total.argmax())
    for index in range(len(turns) - 1, 0, -1):
        path[index - 1] = path[index] - back[index, path[index]]
    return path[count: 2 * count]


def _fill_with_texture(albedo: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """The frames' texels filled from the skin around them: its smooth average (push-pull)
    plus the fine detail of the skin just above, below and to either side (a smooth strip
    where a rim was reads as a pale ghost of the frame; the sides of a ring run up and down,
    where the skin above and below is the strip itself; never the lids' lines). The average is the skin's near
    the frame, and takes nothing from a frame's soft edge (counted by how little frame it
    is, the edge's dark halo drew the rim again, faintly, as two lines along it) nor from
    the eyes and lids (an average over a wider area, eye whites included, left a pale band)."""
    size = albedo.shape[0]
    clear_skin = (frames < 0.02) * (1.0 - _lids(size))
    smooth = push_pull_fill(albedo, clear_skin, FILL_LEVELS)
    supported = push_pull_fill(np.ones_like(albedo), clear_skin, FILL_LEVELS)
    smooth = smooth + (1.0 - supported) * push_pull_fill(albedo, clear_skin)  # a hole wider than the levels reach
    filled = smooth * frames[..., None] + albedo * (1.0 - frames[..., None])
    detail = filled - cv2.GaussianBlur(filled, (0, 0), DETAIL_SIGMA * size)
    # borrowed from skin only: the lids' lines and lashes, copied a shift away, drew a second
    # crease above each eye (the lids grown by the reach of the detail's high pass)
    reach = int(np.ceil(DETAIL_SIGMA * size)) + 1
    clear = (1.0 - frames) * (1.0 - cv2.dilate(_lids(size), np.ones((2 * reach + 1,) * 2, np.uint8)))
    shift = max(1, int(round(DETAIL_SHIFT * size)))
    borrowed, counted = np.zeros_like(detail), np.zeros_like(clear)
    for step, axis in ((shift, 0), (-shift, 0), (shift, 1), (-shift, 1)):
        borrowed += np.roll(detail * clear[..., None], step, axis=axis)
        counted += np.roll(clear, step, axis=axis)
    borrowed = borrowed / np.sqrt(np.maximum(counted, 1.0))[..., None]  # a sum of n skins' detail over sqrt(n): as strong as one
    return (filled + frames[..., None] * borrowed).astype(np.float32)


def _without_glare(albedo: np.ndarray, glasses: np.ndarray) -> np.ndarray:
    """The glare on lenses and frames (texels far brighter than the skin around them)
    brought down to that skin's brightness; the skin's own detail (wrinkles, lids) stays."""
    luminance = np.ascontiguousarray(albedo.mean(2))
    local = cv2.GaussianBlur(luminance, (0, 0), GLARE_SIGMA * albedo.shape[0])
    excess = np.clip(luminance / np.maximum(local * GLARE_RATIO, 1e-3), 1.0, None)
    return (albedo / (1.0 + glasses * (excess - 1.0))[..., None]).astype(np.float32)


def _level_lenses(albedo: np.ndarray, distance: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    """A lens tints and darkens (or its glare brightens) the skin behind it: the region
    inside each rim is brought to the low-passed colour and brightness of the skin just
    outside it, by a smooth gain measured across the rim (the skin just inside against the
    skin just outside, below the brows) and spread over the lens. Its detail stays (the
    wrinkles, lids and bags are the face's own); with no step left at the rim, no ring."""
    size = albedo.shape[0]
    half, reach = RIM_HALF_WIDTH * size, LEVEL_RING * size
    brows = np.maximum(uv_polygon_mask(size, RIGHT_BROW), uv_polygon_mask(size, LEFT_BROW))
    brows = cv2.dilate(brows, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * int(reach) + 1,) * 2))
    usable = (1.0 - np.clip(excluded * 2.0, 0.0, 1.0)) * (1.0 - brows)
    inner = ((distance < -half - 1.0) & (distance > -half - 1.0 - reach)) * usable
    outer = ((distance > half + 1.0) & (distance < half + 1.0 + reach)) * usable
    logs = np.log(np.maximum(albedo, 1e-3))
    sigma = LEVEL_SIGMA * size
    step = _normalised_blur(logs, outer, sigma) - _normalised_blur(logs, inner, sigma)
    seen = np.minimum(cv2.GaussianBlur(inner, (0, 0), sigma), cv2.GaussianBlur(outer, (0, 0), sigma))
    measured = ((seen > 0.05) & (np.abs(distance) < half + reach)).astype(np.float32)
    step = cv2.GaussianBlur(push_pull_fill(step, measured), (0, 0), sigma)
    step = np.clip(step, -LEVEL_LIMIT, LEVEL_LIMIT)
    inside = np.clip(0.5 - distance / (2.0 * half + 2.0), 0.0, 1.0)  # 1 inside the rim, fading out across it
    return (albedo * np.exp(step * inside[..., None])).astype(np.float32)


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


def _ring_coverage(paths: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """The smaller, over the two eyes, of the share of the best closed rim round the eye
    that runs on line evidence: a frame rings the eye all round, where brows, lids,
    wrinkles and strands of hair make arcs (a count of rays crossing any line missed a
    thin steel or clear rim and a soft photo's, and counted a strand of hair as rim)."""
    return min(float((score[np.arange(len(path)), path] > RING_LINE).mean()) for score, path in paths)


@lru_cache(maxsize=2)
def _regions(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lens, rims, eye openings) masks in a ``size`` UV texture: the lenses' region,
    where the frames run (the lenses' outer ring and the temples, where the top bar runs on
    to the ears) and the eyes themselves."""
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
    openings = np.maximum(uv_polygon_mask(size, LEFT_EYE_CONTOUR), uv_polygon_mask(size, RIGHT_EYE_CONTOUR))
    return lens, np.maximum(lens - inner, band * (1.0 - lens)), openings


@lru_cache(maxsize=2)
def _lids(size: int) -> np.ndarray:
    """(T, T) the eye openings grown by the lids and lashes round them: never a frame."""
    openings = _regions(size)[2]
    return cv2.dilate(openings, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * _lid_margin(size) + 1,) * 2))


def _lid_margin(size: int) -> int:
    """Texels round the eye openings that are lids and lashes, not frames."""
    return max(1, int(round(LID_MARGIN * _eyes(size)[0][1])))
