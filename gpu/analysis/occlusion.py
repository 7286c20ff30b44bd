"""Built-in occlusion estimate: what is in front of a face (a hand, a cup, a microphone,
glasses frames) stays the target's. No model: a ``KeepMask`` (see ``gpu.swappers.base``)
learnt from the face itself.

Per tracked face it keeps a running appearance model in the canonical mesh's UV space (the
same texel on the face every frame, whatever the pose): per texel a mean colour and its
spread, updated from frames where that texel is seen and not judged occluded. Colours are
taken relative to the face's own skin (its robust median this frame), so a change of light
or white balance over the whole face is not an occluder. A texel is an occluder when its
colour disagrees strongly with its own model AND with the face's skin; the verdict is
smoothed in UV space (rising fast, falling slower), so the edge does not crawl while the
face moves; only connected regions of a sizeable part of the face are kept (a hand, a cup:
the specks where a bare face's wrinkles or glasses misfit their model would make the swap
patchy), drawn back into the crop through the posed mesh with a soft edge.

A still has no history: there a texel must be far from the skin and from its mirror
image on the other side of the face -- conservative, so a still's own glasses, beard or
make-up stay swapped and only a one-sided object (a hand, a cup) is kept. A track's first frames (a fifth of a
second) only teach its model: what the face wears from the start is part of it.

Everything runs on the host at a low resolution (``GRID`` texels, the crop at ``RASTER``
pixels): a few milliseconds per face.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import cv2
import numpy as np

from gpu.device import to_host
from gpu.models.canonical_mesh import canonical_mesh
from gpu.swappers.mesh3d_geometry import (
    FACE_OUTLINE,
    UvAtlas,
    facing as facing_camera,
    posed,
    uv_atlas,
    uv_face_regions,
    uv_polygon_mask,
)
from gpu.types import Face

GRID = 96  # UV texels a side of the appearance model
RASTER = 128  # crop pixels a side the estimate works at
DEPTH_TOLERANCE = 0.05  # of the face's width: a texel this far behind the nearest surface there is hidden
CONFIDENT_FRAMES = 6.0  # a texel's model counts fully after this many seen frames
MODEL_FRAMES = 30.0  # the model follows about this many recent frames
SPREAD_FLOOR = 0.09  # colour spread a texel model never goes under (noise, small moves)
MODEL_DEVIATION = (2.2, 3.5)  # texel vs its model, in spreads: evidence rises across this range
LEARN_DEVIATION = (1.5, 2.5)  # ... and the model's mean stops learning a texel across this one
SPREAD_LEARN_DEVIATION = (2.5, 3.5)  # ... its spread across this one
LUMA_WEIGHT = 0.7  # brightness counts this much in colour distances (against the chroma's 1)
SKIN_DEVIATION = (0.12, 0.25)  # texel vs the skin median, relative colour distance: same
STILL_SKIN_DEVIATION = (0.30, 0.45)  # stills: a texel this far from the skin ...
STILL_MIRROR_DEVIATION = (0.20, 0.35)  # ... and this far from its mirror image
RISE, FALL = 0.75, 0.35  # per-frame smoothing of the verdict in UV space: a noisy texel flagged once is not kept
KEEP_RANGE = (0.3, 0.55)  # smoothed verdict -> keep mask (the soft edge)
MARGIN = 2  # RASTER pixels the keep mask reaches past an occluder's edge (the soft edge lies outside it)
MAX_OCCLUDED_TO_LEARN = 0.4  # a frame with more of the face occluded than this teaches the model nothing
MAX_OCCLUDED = 0.6  # ... and one with more than this is a mesh off the face: its evidence is dropped
MIN_SKIN_TEXELS = 40
MIN_REGION = 0.015  # of the face's seen, judged texels: a smaller connected patch of evidence is noise (a wrinkle, a frame's glint)
# colours -> (brightness x LUMA_WEIGHT, chroma) coordinates, where ``_distance`` is Euclidean
_FEATURES = (LUMA_WEIGHT / np.sqrt(3.0) / 3.0 * np.ones((3, 3)) + np.eye(3) - np.ones((3, 3)) / 3.0).astype(np.float32)
UNSEEN_COLOUR = 1e3  # the model's colour off the atlas: matches nothing
REGISTRATION = 2  # texels: how far off the mesh may sit before a feature's edge counts as a change
GRAZING = 0.2  # texels on triangles seen at cos^2 under this (stretched, half hair) are not judged
MAX_TRACKS = 16


@dataclass(frozen=True)
class _UvLayout:
    """What is painted once in UV space at ``GRID``."""

    atlas: UvAtlas
    skin: np.ndarray  # (P,) bool: plain skin (no eyes, brows, lips), where the skin median is taken
    judged: np.ndarray  # (P,) bool: texels judged at all (not the eye and mouth closures: they stay the target's)
    mirror_corners: np.ndarray  # (P, 3) the mirrored side's vertex ids of each texel's corners


@lru_cache(maxsize=1)
def _layout() -> _UvLayout:
    mesh = canonical_mesh()
    atlas = uv_atlas(GRID)
    inner, features = uv_face_regions(GRID)
    skin = ((inner > 0.5) & (features < 0.5))[atlas.texels]
    # the outline's texels see hair and background as the mesh jitters: not judged (the
    # keep mask still reaches past the outline where an occluder inside it goes on)
    judged = ~mesh.closure[atlas.triangle] & (cv2.erode(uv_polygon_mask(GRID, FACE_OUTLINE), np.ones((5, 5), np.uint8)) > 0.5)[atlas.texels]
    return _UvLayout(atlas, skin & judged, judged, mesh.mirror[atlas.corners])


@dataclass
class _Track:
    """One face's appearance model and verdict, per texel."""

    mean: np.ndarray  # (P, 3) colour relative to the skin median
    spread: np.ndarray  # (P,) RMS deviation from the mean
    seen: np.ndarray  # (P,) frames of evidence (capped at MODEL_FRAMES)
    verdict: np.ndarray  # (P,) smoothed occluder probability

    @classmethod
    def empty(cls, texels: int) -> _Track:
        return cls(np.ones((texels, 3), np.float32), np.full(texels, SPREAD_FLOOR, np.float32),
                   np.zeros(texels, np.float32), np.zeros(texels, np.float32))


@dataclass(frozen=True)
class _Observation:
    """One face in one crop, seen through its posed mesh at ``RASTER`` pixels."""

    colours: np.ndarray  # (P, 3) texel colours relative to the skin median
    mirrored: np.ndarray  # (P, 3) the colours at the mirrored texels' positions
    visible: np.ndarray  # (P,) bool: the texel faces the camera and nothing of the face hides it
    mirror_visible: np.ndarray  # (P,) bool: same for its mirror image
    pixels: np.ndarray  # (P,) flat index of the pixel each seen texel shows on, -1 for unseen texels


class OcclusionEstimator:
    """A ``KeepMask`` for one stream: call it as ``keep(crop, face, matrix)``.

    Tracked faces (``track_id`` >= 0) learn; a still or an untracked face is judged on its
    own (symmetry and skin). One instance per stream, used by one thread at a time."""

    def __init__(self) -> None:
        self._tracks: OrderedDict[int, _Track] = OrderedDict()

    def __call__(self, crop: Any, face: Face, matrix: np.ndarray) -> np.ndarray | None:
        if face.mesh is None or face.depth is None:
            return None
        observation = _observe(to_host(crop), face, matrix)
        if observation is None:
            return None
        layout = _layout()
        tracked = face.track_id is not None and face.track_id >= 0
        track = self._track(face.track_id, len(layout.skin)) if tracked else None
        if track is None:
            verdict = _smooth_in_uv(_still_evidence(observation, layout) * observation.visible, layout.atlas)
        else:
            # a track's first frames teach its model what the face looks like, whatever it
            # wears (its own glasses are part of it); from then on what comes in front is kept
            deviation = _deviation(observation.colours, track, layout.atlas)
            confidence = np.clip(track.seen / CONFIDENT_FRAMES, 0.0, 1.0)
            from_model = _ramp(deviation, MODEL_DEVIATION) * _ramp(_skin_distance(observation), SKIN_DEVIATION) * layout.judged
            evidence = _smooth_in_uv(confidence * from_model * observation.visible, layout.atlas)
            judged = observation.visible & layout.judged
            if float((evidence[judged] > 0.5).mean()) > MAX_OCCLUDED:
                evidence = np.zeros_like(evidence)  # the mesh is off the face (a lost or misplaced track), not an occluder
            rate = np.where(evidence > track.verdict, RISE, FALL).astype(np.float32)
            verdict = track.verdict = track.verdict + rate * (evidence - track.verdict)
            # learning asks the texel's own model, not its neighbours' (or a thin occluder
            # would creep in along itself, one learnt texel forgiving the next)
            own = _distance(observation.colours, track.mean) / np.maximum(track.spread, SPREAD_FLOOR)
            _learn(track, observation, layout, own, deviation)
        if float(verdict.max(initial=0.0)) < KEEP_RANGE[0]:
            return None
        # every texel that looks changed stays out of the model, but only sizeable regions are kept
        verdict = _regions(verdict, observation.visible & layout.judged, layout.atlas)
        if float(verdict.max(initial=0.0)) < KEEP_RANGE[0]:
            return None
        return _to_crop(verdict, observation, crop.shape[0])

    def forget(self, live_track_ids: set[int]) -> None:
        """Drop the models of tracks that ended."""
        for track_id in [key for key in self._tracks if key not in live_track_ids]:
            del self._tracks[track_id]

    def _track(self, track_id: int, texels: int) -> _Track:
        track = self._tracks.pop(track_id, None) or _Track.empty(texels)
        self._tracks[track_id] = track
        while len(self._tracks) > MAX_TRACKS:
            self._tracks.popitem(last=False)
        return track


def _observe(crop: np.ndarray, face: Face, matrix: np.ndarray) -> _Observation | None:
    """Sample the crop at every texel of the posed mesh (and at its mirror image), at
    ``RASTER`` pixels; None when too little skin shows to take the skin's colour from.

    Which texels are seen comes from a z-buffer of the texels themselves (splatted at
    their pixels, the nearest kept, then the minimum over each pixel's neighbours so the
    gaps between splats do not let a hidden cheek show through the nose): no rasteriser."""
    layout = _layout()
    atlas = layout.atlas
    mesh = canonical_mesh()
    factor = RASTER / crop.shape[0]
    scale = float(np.sqrt(abs(np.linalg.det(matrix[:, :2]))))
    points = posed(face.mesh, face.depth)
    points[:, :2] = (points[:, :2] @ matrix[:, :2].T + matrix[:, 2] + 0.5) * factor - 0.5
    points[:, 2] *= scale * factor
    facing = facing_camera(points, mesh.triangles)[atlas.triangle]
    front = facing > 0
    texels = _interpolate(atlas.weights, points[atlas.corners])
    mirrored_texels = _interpolate(atlas.weights, points[layout.mirror_corners])
    pixels = _pixel_index(texels)
    depth = np.full(RASTER * RASTER, np.inf, np.float32)
    splatted = front & (pixels >= 0)
    np.minimum.at(depth, pixels[splatted], texels[splatted, 2].astype(np.float32))
    nearest = cv2.erode(np.minimum(depth, 1e9).reshape(RASTER, RASTER), np.ones((3, 3), np.uint8)).reshape(-1)
    tolerance = DEPTH_TOLERANCE * float(np.ptp(points[:, 0]))

    def seen(at: np.ndarray, index: np.ndarray) -> np.ndarray:
        return (index >= 0) & (at[:, 2] <= nearest[np.maximum(index, 0)] + tolerance)

    visible = splatted & seen(texels, pixels) & (facing**2 > GRAZING)
    mirror_visible = seen(mirrored_texels, _pixel_index(mirrored_texels))
    small = cv2.resize(crop, (RASTER, RASTER), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0
    colours, mirrored = _sample(small, texels[:, :2]), _sample(small, mirrored_texels[:, :2])
    skin = layout.skin & visible
    if skin.sum() < MIN_SKIN_TEXELS:
        return None
    gain = 1.0 / np.maximum(np.median(colours[skin], axis=0), 1e-3)
    colours, mirrored = colours * gain, mirrored * gain
    return _Observation(colours, mirrored, visible, mirror_visible, np.where(visible, pixels, -1))


def _interpolate(weights: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """(P, C) per-texel values from their triangle corners' (P, 3, C) and barycentric weights."""
    return weights[:, 0, None] * corners[:, 0] + weights[:, 1, None] * corners[:, 1] + weights[:, 2, None] * corners[:, 2]


def _pixel_index(texels: np.ndarray) -> np.ndarray:
    """(P,) flat index of the ``RASTER`` pixel each texel falls on, -1 outside."""
    cols = np.round(texels[:, 0]).astype(np.int64)
    rows = np.round(texels[:, 1]).astype(np.int64)
    inside = (cols >= 0) & (cols < RASTER) & (rows >= 0) & (rows < RASTER)
    return np.where(inside, rows * RASTER + cols, -1)


def _sample(image: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """(P, 3) bilinear colours of ``image`` at (P, 2) pixel positions."""
    maps = positions.astype(np.float32).reshape(1, -1, 2)
    return cv2.remap(image, maps[..., 0], maps[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE).reshape(-1, 3)


def _ramp(values: np.ndarray, low_high: tuple[float, float]) -> np.ndarray:
    low, high = low_high
    return np.clip((values - low) / (high - low), 0.0, 1.0).astype(np.float32)


def _distance(colours: np.ndarray, other) -> np.ndarray:
    """(P,) colour distance with brightness weighted down (shadows and shading move it most)."""
    difference = (colours - other) @ _FEATURES.T
    return np.sqrt(np.einsum("pk,pk->p", difference, difference))


def _skin_distance(observation: _Observation) -> np.ndarray:
    """How far each texel's colour is from the skin median."""
    return _distance(observation.colours, 1.0)


def _still_evidence(observation: _Observation, layout: _UvLayout) -> np.ndarray:
    """No history: far from the skin and from the mirrored texel (what is the same on both
    sides -- the face's own glasses, make-up -- is its own); judged on plain skin only
    (eyes, brows and lips differ from skin by nature)."""
    skin = _skin_distance(observation)
    mirror = _distance(observation.colours, observation.mirrored)
    asymmetric = np.where(observation.mirror_visible, _ramp(mirror, STILL_MIRROR_DEVIATION), 0.0)
    return _ramp(skin, STILL_SKIN_DEVIATION) * asymmetric * layout.skin


def _deviation(colours: np.ndarray, track: _Track, atlas: UvAtlas) -> np.ndarray:
    """(P,) how far each texel's colour is from its model, in model spreads: the least
    over the models within ``REGISTRATION`` texels, so a mesh that sits a pixel or two off
    (tracking jitter, an occluder pulling the landmarks) does not make every edge of the
    face -- lids, brows, nostrils, lips -- an occluder, while a colour the neighbourhood
    never had (a thin dark frame on skin) still is. Worked on UV images (shifted views,
    no gathers, OpenCV on all three channels at once): under a millisecond."""
    reach = REGISTRATION
    observed = atlas.scatter(colours @ _FEATURES.T)
    learnt = np.where((track.seen > 0)[:, None], track.mean @ _FEATURES.T, UNSEEN_COLOUR)  # a texel never seen forgives nothing
    model = cv2.copyMakeBorder(atlas.scatter(learnt, fill=UNSEEN_COLOUR), reach, reach, reach, reach,
                               cv2.BORDER_CONSTANT, value=(UNSEEN_COLOUR,) * 3)
    best = np.full((GRID, GRID), np.inf, np.float32)
    channels = np.ones((1, 3), np.float32)  # sums the squared difference's channels
    for dy in range(2 * reach + 1):
        for dx in range(2 * reach + 1):
            difference = cv2.subtract(observed, model[dy:dy + GRID, dx:dx + GRID])
            np.minimum(best, cv2.transform(cv2.multiply(difference, difference), channels), out=best)
    # in the texel's own spread: a neighbour whose spread grew (an edge) forgives nothing
    return np.sqrt(best[atlas.texels]) / np.maximum(track.spread, SPREAD_FLOOR)


def _smooth_in_uv(evidence: np.ndarray, atlas: UvAtlas) -> np.ndarray:
    """A closing in UV space: a texel missed between occluded ones (a thin frame sampled
    between texels) is occluded too."""
    image = atlas.scatter(evidence[:, None])[..., 0]
    return cv2.morphologyEx(image, cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))[atlas.texels]


def _regions(evidence: np.ndarray, judged: np.ndarray, atlas: UvAtlas) -> np.ndarray:
    """Only the evidence of connected regions of at least ``MIN_REGION`` of the face: what
    comes in front of a face (a hand, a cup) is one sizeable piece, while a bare face's
    misfits (wrinkles, a glint on its glasses, shading) are scattered specks -- kept,
    they make the swap patchy. The region's soft shoulder (a texel round it) stays."""
    image = atlas.scatter(evidence[:, None])[..., 0]
    _, labels, stats, _ = cv2.connectedComponentsWithStats((image > 0.5).astype(np.uint8), connectivity=8)
    large = stats[:, cv2.CC_STAT_AREA] >= max(MIN_REGION * float(judged.sum()), 1.0)
    large[0] = False
    region = cv2.dilate(large[labels].astype(np.uint8), np.ones((3, 3), np.uint8))
    return evidence * region[atlas.texels]


def _learn(track: _Track, observation: _Observation, layout: _UvLayout, own: np.ndarray, deviation: np.ndarray) -> None:
    """Fold this frame into the texel models where the texel is seen and not occluded. The
    mean learns only where the colour agrees with the texel's ``own`` model (in spreads: a
    sudden change -- something coming in front -- is not learnt, the slow ones of a turning,
    moving face are); the spread also where it disagrees moderately (a grainy, wrinkled
    face's texels vary more than a smooth one's), following the registration-tolerant
    ``deviation`` so a feature's edge sliding under the mesh does not widen it."""
    seen_now = observation.visible & layout.judged
    if not seen_now.any() or float(track.verdict[seen_now].mean()) > MAX_OCCLUDED_TO_LEARN:
        return
    free = seen_now * (1.0 - np.clip(track.verdict / KEEP_RANGE[0], 0.0, 1.0))
    new = track.seen == 0
    weight = (free * np.where(new, 1.0, 1.0 - _ramp(own, LEARN_DEVIATION))).astype(np.float32)
    spread_weight = free * np.where(new, 1.0, 1.0 - _ramp(own, SPREAD_LEARN_DEVIATION))
    count = np.minimum(track.seen + weight, MODEL_FRAMES)
    rate = np.where(count > 0, weight / np.maximum(count, 1e-6), 0.0)
    spread_rate = np.where(count > 0, spread_weight / np.maximum(count, 1.0), 0.0)
    track.mean += rate[:, None] * (observation.colours - track.mean)
    registered = np.minimum(deviation, MODEL_DEVIATION[1]) * np.maximum(track.spread, SPREAD_FLOOR)
    spread_sq = track.spread**2 + spread_rate * (registered**2 - track.spread**2)
    track.spread = np.where(new, SPREAD_FLOOR, np.sqrt(np.maximum(spread_sq, SPREAD_FLOOR**2))).astype(np.float32)
    track.seen = count.astype(np.float32)


def _to_crop(verdict: np.ndarray, observation: _Observation, size: int) -> np.ndarray:
    """The verdict splatted back through the seen texels into the crop: (size, size) keep
    mask, grown a little past the occluder's edge (and past the face's outline, where the
    occluder goes on) and softened."""
    shown = observation.pixels >= 0
    splat = np.zeros(RASTER * RASTER, np.float32)
    np.maximum.at(splat, observation.pixels[shown], _ramp(verdict[shown], KEEP_RANGE))
    drawn = np.zeros(RASTER * RASTER, np.uint8)
    drawn[observation.pixels[shown]] = 1
    square = np.ones((3, 3), np.uint8)
    splat, drawn = splat.reshape(RASTER, RASTER), drawn.reshape(RASTER, RASTER)
    drawn = cv2.morphologyEx(drawn, cv2.MORPH_CLOSE, square).astype(bool)
    keep = cv2.dilate(cv2.morphologyEx(splat, cv2.MORPH_CLOSE, square), np.ones((2 * MARGIN + 1,) * 2, np.uint8))  # the gaps between splats, then a margin
    beyond = cv2.dilate(keep, np.ones((5, 5), np.uint8))
    keep = np.where(drawn, keep, beyond)
    keep = cv2.GaussianBlur(keep, (0, 0), 0.8)
    return cv2.resize(keep, (size, size), interpolation=cv2.INTER_LINEAR)
