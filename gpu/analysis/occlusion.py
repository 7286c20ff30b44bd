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

What makes it hold up on moving faces and thin or low-contrast objects:

- the tracker's mesh lags a fast move by several pixels: each frame the model drawn through
  the mesh is matched to the crop (``_misregistration``) and the texels are read where the
  face really is, so the face's own edges and the background past its outline do not look
  like occluders;
- besides colour, a texel's texture (local gradient strength, over the whole face's own
  change: a zoom sharpens all of it) against its model's: a thin frame, a grille, a hand's
  edge on smooth skin;
- a region kept the frame before stays kept while its evidence lasts (hysteresis), and
  pieces a couple of texels apart count as one (a thin frame's rims);
- the model never learns what is kept, nor a few pixels round it, where the colour's
  chromaticity changed (a model learnt at the object's edge would forgive the texels next
  to it, and a held microphone would be eaten away texel by texel), and the skin's colour
  is not taken there; a shadow or a light, which only scales the skin's colour, is learnt
  as before (kept at first, swapped again within seconds); the registration matches only
  the face, not what is kept;
- the regions are grown in crop space over the pixels nearer the occluder's colours than
  the face's around it (its low-contrast rim, its parts over the eye and mouth openings
  and the outline, which the UV verdict does not judge);
- on a tracked face, what lies between a kept region and an edge of the image, smooth and
  closed in on all sides, is kept too, whatever its colour: a cup's cream wall and rim
  between its coffee and its outer edge, as pale as the skin behind it (``_enclosed``);
- a texel seen much more obliquely than when it was learnt (the far side of a turning
  head) is neither judged nor learnt.

A still has no history: there a texel must be far from the skin and from its mirror
image on the other side of the face -- conservative, so a still's beard or make-up stay
swapped and only a one-sided object (a hand, a cup) is kept. A track's first frames (a
fifth of a second) only teach its model: what the face wears from the start is part of
it -- except glasses (``keep_worn``): their frames are found by shape in the model's UV
texture, as a source photo's are (``eyewear_frames``: dark or amber lines ringing both
eyes, each rim traced as one smooth curve), and kept in front where the crop shows them
as dark lines, at the crop's own resolution (a frame is a pixel wide at ``RASTER``); a
still's are found in its one observation.

Everything runs on the host at a low resolution (``GRID`` texels, the crop at ``RASTER``
pixels): about 5 ms of CPU per face (``swapcast bench occlusion``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import cv2
import numpy as np
import scipy.sparse

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
from gpu.swappers.mesh3d_eyewear import RING_COVERAGE, eyewear_frames
from gpu.swappers.base import KeepMask, keep_mask
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
RISE, FALL = 0.95, 0.35  # per-frame smoothing of the verdict in UV space: a noisy texel flagged once is not kept
KEEP_RANGE = (0.3, 0.55)  # smoothed verdict -> keep mask (the soft edge)
MARGIN = 1  # RASTER pixels the keep mask reaches past an occluder's edge (the soft edge lies outside it)
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
ORPHAN_FRAMES = 90  # frames an ended track's model waits for a new track of the same face to take it over
ADOPT_IOU = 0.3  # ... one whose box overlaps the ended track's last box this much
TEXTURE_EXCESS = (np.log(2.0), np.log(3.5))  # texel's texture over its model's (log ratio): evidence rises across this
TEXTURE_COLOUR_DEVIATION = (1.0, 2.0)  # ... where its colour is also off its model this much (in spreads)
TEXTURE_FLOOR = 0.03  # gradient strength of a smooth patch's noise
FORESHORTENING = (0.75, 0.92)  # texel's facing now over when learnt: judged fully above the range, not at all under it
INNER = 5  # texels inside the face outline a region's size is counted from
LINK = 2  # texels: evidence this close counts as one region
MIN_REGISTER_TEXELS = 400  # texels of a confident model the registration needs
REGISTER_TRUNCATION = 0.08  # luma difference a pixel counts for at most in the registration (an occluder's)
REGISTER_GAIN = 0.7  # a shift is taken only when it leaves at most this share of the unmoved mesh's cost
MAX_SHIFT = 12.0  # RASTER pixels: a larger one is a lost track, not lag
UNLEARNT = 3  # RASTER pixels past the keep mask the model does not learn either
UNLEARNT_CHROMA = (0.02, 0.05)  # ... where its chromaticity is off its model's across this (a shadow's is not)
GROW_REACH = 6  # RASTER pixels the crop-space growth reaches past the UV verdict's regions
GROW_RATIO = 0.6  # ... into pixels this much nearer the occluder's colours than the face's around it
GROW_DEVIATION = (1.0, 1.6)  # ... and, on a tracked face, whose texel is off its model this much (in spreads)
GROW_CENTRES = 6  # k-means centres summarising each side's colours
GROW_SAMPLES = 400  # pixels each side's centres are fitted to
GROW_MIN_SAMPLES = 12  # pixels each side needs before the growth trusts its colours
ENCLOSED_REACH = 12  # RASTER pixels the regions reach, past any colour, over smooth pixels the image's edges close in
EDGE_STRENGTH = 3.0  # ... an edge: a gradient this many times the skin's median ...
EDGE_FLOOR = 0.04  # ... and at least this (feature units: a flat skin's noise stays under it)
ENCLOSED_SHARE = 0.7  # ... of a stretch's border on an edge or the face's outline for it to count as closed in
SOLIDITY = 0.5  # a kept region filling this share of its convex hull is filled out to it
MIN_HULL_PIXELS = 30  # RASTER pixels: smaller regions are left as they are
WORN_EVERY = 15  # frames between looks for the glasses a tracked face wears (in its model)
WORN_REACH = 2  # RASTER pixels round the frames the model draws where the crop's own are looked for
WORN_LINE_WIDTH = 1 / 30  # of the face's width: the black top-hat finding them, wider than a frame
WORN_LINE = (0.16, 0.26)  # ... and how much darker than around them (relative to the skin) a frame's pixels are
WORN_FADE = 4  # frames found glasses fade in over (not a pop)
WORN_COVERAGE_KEPT = 0.35  # ring coverage (see mesh3d_eyewear) a track's glasses stay found above once found


@dataclass(frozen=True)
class _UvLayout:
    """What is painted once in UV space at ``GRID``."""

    atlas: UvAtlas
    skin: np.ndarray  # (P,) bool: plain skin (no eyes, brows, lips), where the skin median is taken
    judged: np.ndarray  # (P,) bool: texels judged at all (not the eye and mouth closures: they stay the target's)
    to_texels: scipy.sparse.csr_matrix  # (P, 468): per-vertex values -> per-texel (the atlas's barycentric gather)
    to_mirrored: scipy.sparse.csr_matrix  # (P, 468): ... at each texel's mirror image
    inner: np.ndarray  # (GRID, GRID) bool: at least ``INNER`` texels inside the face outline


@lru_cache(maxsize=1)
def _layout() -> _UvLayout:
    mesh = canonical_mesh()
    atlas = uv_atlas(GRID)
    inner, features = uv_face_regions(GRID)
    skin = ((inner > 0.5) & (features < 0.5))[atlas.texels]
    # the outline's texels see hair and background as the mesh jitters: not judged (the
    # keep mask still reaches past the outline where an occluder inside it goes on)
    judged = ~mesh.closure[atlas.triangle] & (cv2.erode(uv_polygon_mask(GRID, FACE_OUTLINE), np.ones((5, 5), np.uint8)) > 0.5)[atlas.texels]
    outline = uv_polygon_mask(GRID, FACE_OUTLINE)
    inner_face = cv2.distanceTransform((outline > 0.5).astype(np.uint8), cv2.DIST_L2, 5) >= INNER
    return _UvLayout(atlas, skin & judged, judged, _gather(atlas.weights, atlas.corners),
                     _gather(atlas.weights, mesh.mirror[atlas.corners]), inner_face)


def _gather(weights: np.ndarray, corners: np.ndarray) -> scipy.sparse.csr_matrix:
    """(P, 468) sparse barycentric interpolation: one product instead of a (P, 3, C) gather."""
    rows = np.arange(0, corners.size + 1, corners.shape[1])
    return scipy.sparse.csr_matrix((weights.reshape(-1).astype(np.float64), corners.reshape(-1), rows),
                                   shape=(len(corners), len(canonical_mesh().vertices)))


@dataclass
class _Track:
    """One face's appearance model and verdict, per texel."""

    mean: np.ndarray  # (P, 3) colour relative to the skin median
    texture: np.ndarray  # (P,) local gradient strength relative to the skin's brightness
    spread: np.ndarray  # (P,) RMS deviation from the mean
    seen: np.ndarray  # (P,) frames of evidence (capped at MODEL_FRAMES)
    verdict: np.ndarray  # (P,) smoothed occluder probability
    kept: np.ndarray  # (P,) bool: texels of the regions kept last frame
    facing: np.ndarray  # (P,) how squarely the texel faced the camera in the frames it was learnt from
    recoloured: np.ndarray  # (P,) bool: its chromaticity was off its model's last frame (an object's, not a shadow's)
    worn: np.ndarray | None = None  # (P,) how much each texel is the frame of glasses the face wears
    worn_due: int = 0  # frames until its model is looked at for them again
    worn_shown: int = 0  # frames they have been kept for (they fade in over ``WORN_FADE``)
    age: int = 0  # frames of this track
    box: np.ndarray | None = None  # the face's box when last seen (frame pixels)

    @classmethod
    def empty(cls, texels: int) -> _Track:
        return cls(np.ones((texels, 3), np.float32), np.zeros(texels, np.float32), np.full(texels, SPREAD_FLOOR, np.float32),
                   np.zeros(texels, np.float32), np.zeros(texels, np.float32), np.zeros(texels, bool),
                   np.zeros(texels, np.float32), np.zeros(texels, bool))


@dataclass(frozen=True)
class _Observation:
    """One face in one crop, seen through its posed mesh at ``RASTER`` pixels."""

    colours: np.ndarray  # (P, 3) texel colours relative to the skin median
    mirrored: np.ndarray | None  # (P, 3) the colours at the mirrored texels' positions (stills only)
    visible: np.ndarray  # (P,) bool: the texel faces the camera and nothing of the face hides it
    mirror_visible: np.ndarray | None  # (P,) bool: same for its mirror image (stills only)
    pixels: np.ndarray  # (P,) flat index of the pixel each seen texel shows on, -1 for unseen texels
    image: np.ndarray  # (RASTER, RASTER, 3) the crop at ``RASTER`` pixels, float in [0, 1]
    texture: np.ndarray  # (P,) local gradient strength at each texel, relative to the skin's brightness
    gain: np.ndarray  # (3,) 1 / the skin median: absolute colour -> relative
    positions: np.ndarray  # (P, 2) each texel's position at RASTER pixels
    mirror_positions: np.ndarray | None  # (P, 2) its mirror image's (stills only)
    skin: np.ndarray  # (P,) bool: the texels the skin median is taken over
    facing: np.ndarray  # (P,) cosine between the texel's triangle and the view


class OcclusionEstimator:
    """A ``KeepMask`` for one stream: call it as ``keep(crop, face, matrix)``.

    Tracked faces (``track_id`` >= 0) learn; a still or an untracked face is judged on its
    own (symmetry and skin). ``keep_worn``: the glasses a face wears are kept in front too.
    One instance per stream, used by one thread at a time."""

    def __init__(self, keep_worn: bool = True, hands: KeepMask | None = None) -> None:
        self._tracks: OrderedDict[int, _Track] = OrderedDict()
        self._orphans: OrderedDict[int, tuple[_Track, int]] = OrderedDict()  # ended tracks' models, with the frame they ended
        self._frame = 0
        self.keep_worn = keep_worn
        self.hands = hands  # a hand model's keep mask (``gpu.analysis.hands``): kept, and never learnt
        # whether a new track may take over an ended one's model (ended id, new id): not when
        # they are known to be different people (``gpu.analysis.people``); None: any may
        self.may_adopt: Callable[[int, int], bool] | None = None

    def __call__(self, crop: Any, face: Face, matrix: np.ndarray) -> np.ndarray | None:
        crop = to_host(crop)
        hand = keep_mask(self.hands, crop, face, matrix)
        estimate = self._estimate(crop, face, matrix, hand)
        if hand is None:
            return estimate
        return hand if estimate is None else np.maximum(estimate, hand)

    def _estimate(self, crop: np.ndarray, face: Face, matrix: np.ndarray, hand: np.ndarray | None) -> np.ndarray | None:
        """The appearance estimate's keep mask; ``hand``: what the hand model keeps (in the
        crop), which the face's model does not learn (a hand of the face's own tone would
        pass for skin, and the face would look changed once it left)."""
        if face.mesh is None or face.depth is None:
            return None
        tracked = face.track_id is not None and face.track_id >= 0
        layout = _layout()
        track = self._track(face, len(layout.skin)) if tracked else None
        # the skin's colour is not taken where something was in front last frame: a cup
        # over a quarter of the skin dragged its median, and every texel looked changed
        # (a shadow is: it scales the skin's colour, and the median follows the light)
        hidden = (track.kept | (track.verdict >= KEEP_RANGE[0])) & track.recoloured if track is not None else None
        observation = _observe(crop, face, matrix, mirror=not tracked, hidden=hidden)
        if observation is None:
            return None
        shift = np.zeros(2)
        if track is not None:
            shift = _misregistration(observation, track)
            if np.abs(shift).max() >= 0.5:
                observation = _shifted(observation, shift)
        changed = recoloured = None  # tracked: how much each texel differs from its model, and in chromaticity
        if track is None:
            verdict = _smooth_in_uv(_still_evidence(observation, layout) * observation.visible, layout.atlas)
        else:
            # a track's first frames teach its model what the face looks like, whatever it
            # wears (its own glasses are part of it); from then on what comes in front is kept
            deviation = _deviation(observation.colours, track, layout.atlas)
            changed = _ramp(deviation, GROW_DEVIATION) * (track.seen > 0)
            recoloured = _ramp(_chroma_change(observation.colours, track.mean), UNLEARNT_CHROMA)
            # a texel seen much more obliquely than when it was learnt (the far side of a
            # turning head: stretched, its edges crowded, hair and background at the rim)
            # is not judged: its change is the pose's
            foreshortened = _ramp(observation.facing / np.maximum(track.facing, 1e-3), FORESHORTENING)
            confidence = np.clip(track.seen / CONFIDENT_FRAMES, 0.0, 1.0) * foreshortened
            colour = _ramp(deviation, MODEL_DEVIATION) * _ramp(_skin_distance(observation), SKIN_DEVIATION)
            judged = observation.visible & layout.judged
            excess = _texture_excess(observation.texture, track, layout.atlas, judged & (track.seen > 0))
            texture = _ramp(excess, TEXTURE_EXCESS) * _ramp(deviation, TEXTURE_COLOUR_DEVIATION)
            from_model = np.maximum(colour, texture) * layout.judged
            evidence = _smooth_in_uv(confidence * from_model * observation.visible, layout.atlas)
            if float((evidence[judged] > 0.5).mean()) > MAX_OCCLUDED:
                evidence = np.zeros_like(evidence)  # the mesh is off the face (a lost or misplaced track), not an occluder
            rate = np.where(evidence > track.verdict, RISE, FALL).astype(np.float32)
            verdict = track.verdict = track.verdict + rate * (evidence - track.verdict)
        if float(verdict.max(initial=0.0)) >= KEEP_RANGE[0]:
            # every texel that looks changed stays out of the model, but only sizeable regions are kept
            before = track.kept if track is not None else None
            verdict = _regions(verdict, observation.visible & layout.judged, layout, before)
        else:
            verdict = np.zeros_like(verdict)
        keep = _keep_at_mesh(verdict, observation, changed, recoloured) if float(verdict.max(initial=0.0)) >= KEEP_RANGE[0] else None
        if track is not None:
            track.kept = verdict > 0.5
            # learning asks the texel's own model, not its neighbours' (or a thin occluder
            # would creep in along itself, one learnt texel forgiving the next), and never
            # learns what is kept: an object held for minutes stays in front
            own = _distance(observation.colours, track.mean) / np.maximum(track.spread, SPREAD_FLOOR)
            unlearnt = np.zeros(len(own), np.float32) if keep is None else \
                np.where(observation.pixels >= 0, _unlearnt(keep).reshape(-1)[np.maximum(observation.pixels, 0)], 0.0)
            # ... unless only its brightness changed: a shadow or a light over a cheek is
            # learnt (from its edge in, as before), an object brings colour of its own
            unlearnt = unlearnt * recoloured
            if hand is not None:
                at_raster = cv2.resize(hand, (RASTER, RASTER), interpolation=cv2.INTER_AREA)
                unlearnt = np.maximum(unlearnt, np.where(observation.pixels >= 0, _unlearnt(at_raster).reshape(-1)[
                    np.maximum(observation.pixels, 0)], 0.0))
            track.recoloured = recoloured > 0.5
            _learn(track, observation, layout, own, deviation, unlearnt)
        worn = None
        if self.keep_worn:
            worn = _worn_by_track(track, layout) if track is not None else _worn_frames(observation.colours, observation.visible, layout)
        if keep is None and worn is None:
            return None
        moved = np.float32([[1, 0, shift[0]], [0, 1, shift[1]]]) if np.abs(shift).max() >= 0.5 else None
        if keep is not None:
            if moved is not None:  # drawn at the mesh's texels: moved to where the face is
                keep = cv2.warpAffine(keep, moved, (RASTER, RASTER), flags=cv2.INTER_LINEAR)
            keep = cv2.resize(keep, (crop.shape[0],) * 2, interpolation=cv2.INTER_LINEAR)
        if worn is not None:
            frames = _worn_keep(worn, observation, crop, moved)
            keep = frames if keep is None else np.maximum(keep, frames)
        return keep

    def forget(self, live_track_ids: set[int]) -> None:
        """Set aside the models of tracks that ended (once a frame): a face the tracker lost
        and found again -- a cup over the mouth and chin can hide it from the tracker for a
        moment -- comes back as a new track, and a new model would learn the cup as the
        face. Its model is taken over by the new track (``_track``) for ``ORPHAN_FRAMES``."""
        self._frame += 1
        for track_id in [key for key in self._tracks if key not in live_track_ids]:
            self._orphans[track_id] = (self._tracks.pop(track_id), self._frame)
        for track_id in [key for key, (_, ended) in self._orphans.items() if self._frame - ended > ORPHAN_FRAMES]:
            del self._orphans[track_id]
        while len(self._orphans) > MAX_TRACKS:
            self._orphans.popitem(last=False)

    def _adopted(self, box: np.ndarray, track_id: int) -> _Track | None:
        """The model of an ended track whose last box overlaps ``box`` most (at least
        ``ADOPT_IOU``): the same face, found again (and, with ``may_adopt``, the same person)."""
        best, best_overlap = None, ADOPT_IOU
        for ended_id, (track, _) in self._orphans.items():
            if self.may_adopt is not None and not self.may_adopt(ended_id, track_id):
                continue
            overlap = _box_iou(track.box, box) if track.box is not None else 0.0
            if overlap >= best_overlap:
                best, best_overlap = ended_id, overlap
        return None if best is None else self._orphans.pop(best)[0]

    def _track(self, face: Face, texels: int) -> _Track:
        track = self._tracks.pop(face.track_id, None) or self._adopted(face.box, face.track_id) or _Track.empty(texels)
        track.box = np.asarray(face.box, np.float32)
        self._tracks[face.track_id] = track
        while len(self._tracks) > MAX_TRACKS:
            self._tracks.popitem(last=False)
        return track


def _box_iou(a: np.ndarray, b: np.ndarray) -> float:
    low, high = np.maximum(a[:2], b[:2]), np.minimum(a[2:], b[2:])
    inter = float(np.prod(np.clip(high - low, 0, None)))
    union = float(np.prod(a[2:] - a[:2]) + np.prod(b[2:] - b[:2])) - inter
    return inter / union if union > 0 else 0.0


def _observe(crop: np.ndarray, face: Face, matrix: np.ndarray, mirror: bool, hidden: np.ndarray | None = None
             ) -> _Observation | None:
    """Sample the crop at every texel of the posed mesh (and, for a still's symmetry, at
    its ``mirror`` image), at ``RASTER`` pixels; None when too little skin shows to take
    the skin's colour from (``hidden`` texels, something in front, not counted while
    enough of the rest shows).

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
    texels = layout.to_texels @ points
    pixels = _pixel_index(texels)
    depth = np.full(RASTER * RASTER, np.inf, np.float32)
    splatted = front & (pixels >= 0)
    np.minimum.at(depth, pixels[splatted], texels[splatted, 2].astype(np.float32))
    nearest = cv2.erode(np.minimum(depth, 1e9).reshape(RASTER, RASTER), np.ones((3, 3), np.uint8)).reshape(-1)
    tolerance = DEPTH_TOLERANCE * float(np.ptp(points[:, 0]))

    def seen(at: np.ndarray, index: np.ndarray) -> np.ndarray:
        return (index >= 0) & (at[:, 2] <= nearest[np.maximum(index, 0)] + tolerance)

    visible = splatted & seen(texels, pixels) & (facing**2 > GRAZING)
    mirrored_texels = mirror_visible = None
    if mirror:
        mirrored_texels = layout.to_mirrored @ points
        mirror_visible = seen(mirrored_texels, _pixel_index(mirrored_texels))
        mirrored_texels = mirrored_texels[:, :2]
    small = cv2.resize(crop, (RASTER, RASTER), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0
    skin = layout.skin & visible
    if hidden is not None and (skin & ~hidden).sum() >= MIN_SKIN_TEXELS:
        skin &= ~hidden
    sampled = _sample_texels(small, texels[:, :2], mirrored_texels, skin)
    if sampled is None:
        return None
    return _Observation(*sampled[:2], visible, mirror_visible, np.where(visible, pixels, -1), small, *sampled[2:],
                        texels[:, :2], mirrored_texels, skin, facing)


def _sample_texels(small: np.ndarray, positions: np.ndarray, mirror_positions: np.ndarray | None, skin: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray] | None:
    """Colours (and mirrored colours) relative to the skin median, texture, and the gain
    (1 / the skin median) at the texels' positions in ``small``; None when too little skin shows."""
    if skin.sum() < MIN_SKIN_TEXELS:
        return None
    colours = _sample(small, positions)
    texture = _sample(_gradient_strength(small), positions)[:, 0]
    gain = 1.0 / np.maximum(np.median(colours[skin], axis=0), 1e-3)
    mirrored = None if mirror_positions is None else _sample(small, mirror_positions) * gain
    return colours * gain, mirrored, texture / max(float(np.mean(1.0 / gain)), 1e-3), gain


def _shifted(observation: _Observation, shift: np.ndarray) -> _Observation:
    """The observation re-sampled where the face really is (``shift`` RASTER pixels off its
    mesh), drawn at the mesh's texels: the crop moved under the mesh."""
    small = cv2.warpAffine(observation.image, np.float32([[1, 0, shift[0]], [0, 1, shift[1]]]), (RASTER, RASTER),
                           flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REPLICATE)
    sampled = _sample_texels(small, observation.positions, observation.mirror_positions, observation.skin)
    if sampled is None:
        return observation
    colours, mirrored, texture, gain = sampled
    return replace(observation, colours=colours, mirrored=mirrored, image=small, texture=texture, gain=gain)


def _misregistration(observation: _Observation, track: _Track) -> np.ndarray:
    """(2,) RASTER pixels the face sits off its mesh: the tracker's mesh lags a fast move by
    several pixels, and then every feature's edge (and the background past the outline)
    looks changed while an occluder's texels drift. The track's model drawn through the
    mesh is matched to the crop by a coarse-to-fine search over shifts of a truncated
    squared difference (an occluder's pixels cost the same at every shift, so they do not
    pull the match); zero while the model is young, and when the best shift explains the
    crop hardly better than none (a zoom's or a turn's misfit, which no shift fits)."""
    # the face, not what is in front of it: an occluder's pixels would cost alike at every
    # shift and drown the gain the right one brings
    known = (observation.pixels >= 0) & (track.seen >= CONFIDENT_FRAMES) & ~track.kept & (track.verdict < KEEP_RANGE[0])
    if known.sum() < MIN_REGISTER_TEXELS:
        return np.zeros(2)
    luma = np.zeros(RASTER * RASTER, np.float32)
    weight = np.zeros(RASTER * RASTER, np.float32)
    luma[observation.pixels[known]] = (track.mean[known] / observation.gain).mean(axis=1)
    weight[observation.pixels[known]] = 1.0
    expected, weight = luma.reshape(RASTER, RASTER), weight.reshape(RASTER, RASTER)
    seen = observation.image.mean(axis=2)
    shift = np.zeros(2)
    for level, reach in ((4, 3), (2, 2)):
        size = RASTER // level
        model = cv2.resize(expected * weight, (size, size), interpolation=cv2.INTER_AREA)
        mass = cv2.resize(weight, (size, size), interpolation=cv2.INTER_AREA)
        model, mass = model / np.maximum(mass, 1e-6), (mass > 0.5).astype(np.float32)
        image = cv2.resize(seen, (size, size), interpolation=cv2.INTER_AREA)
        centre = np.round(shift / level).astype(np.int64)
        costs = _shifted_costs(image, model, mass, centre, reach)
        dy, dx = np.unravel_index(np.argmin(costs), costs.shape)
        offset = np.array([dx - reach, dy - reach], np.float64)
        if level == 2 and 0 < dx < 2 * reach and 0 < dy < 2 * reach:  # sub-pixel: a parabola each way
            offset += [_vertex(*costs[dy, dx - 1:dx + 2]), _vertex(*costs[dy - 1:dy + 2, dx])]
        shift = (centre + offset) * level
    unmoved = float(_shifted_costs(image, model, mass, np.zeros(2, np.int64), 0)[0, 0])
    if np.abs(shift).max() > MAX_SHIFT or float(costs.min()) > REGISTER_GAIN * unmoved:
        return np.zeros(2)
    return shift


def _shifted_costs(image: np.ndarray, model: np.ndarray, mass: np.ndarray, centre: np.ndarray, reach: int) -> np.ndarray:
    """(2 reach + 1, 2 reach + 1) mean truncated squared difference between ``model`` and
    ``image`` read (dx, dy) whole pixels from ``centre`` (rows dy, columns dx; the image's
    edge replicated), all shifts at once over the model's pixels."""
    pad = int(np.abs(centre).max()) + reach
    padded = cv2.copyMakeBorder(image, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
    rows, cols = np.nonzero(mass > 0)
    steps = np.arange(-reach, reach + 1)
    # padded[row + pad + dy, col + pad + dx] is image[row + dy, col + dx]
    moved = padded[(rows + pad + centre[1])[None, None, :] + steps[:, None, None],
                   (cols + pad + centre[0])[None, None, :] + steps[None, :, None]]
    error = np.minimum((moved - model[rows, cols]) ** 2, REGISTER_TRUNCATION**2)
    return error.sum(axis=2) / max(float(len(rows)), 1.0)


def _vertex(left: float, middle: float, right: float) -> float:
    curvature = left - 2.0 * middle + right
    return float(np.clip(0.5 * (left - right) / curvature, -0.5, 0.5)) if curvature > 1e-12 else 0.0


def _gradient_strength(image: np.ndarray) -> np.ndarray:
    """(RASTER, RASTER) RMS brightness gradient over a pixel's neighbourhood: a thin frame,
    a grille, a hand's edge on smooth skin."""
    luma = image.mean(axis=2)
    energy = cv2.Sobel(luma, cv2.CV_32F, 1, 0, ksize=3) ** 2 + cv2.Sobel(luma, cv2.CV_32F, 0, 1, ksize=3) ** 2
    return np.sqrt(cv2.GaussianBlur(energy, (0, 0), 1.0))


def _pixel_index(texels: np.ndarray) -> np.ndarray:
    """(P,) flat index of the ``RASTER`` pixel each texel falls on, -1 outside."""
    cols = np.round(texels[:, 0]).astype(np.int64)
    rows = np.round(texels[:, 1]).astype(np.int64)
    inside = (cols >= 0) & (cols < RASTER) & (rows >= 0) & (rows < RASTER)
    return np.where(inside, rows * RASTER + cols, -1)


def _sample(image: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """(P, C) bilinear values of an (H, W[, C]) ``image`` at (P, 2) pixel positions."""
    maps = positions.astype(np.float32).reshape(1, -1, 2)
    sampled = cv2.remap(image, maps[..., 0], maps[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return sampled.reshape(len(positions), -1)


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
    """(P,) how far each texel's colour is from its model, in model spreads: from the range
    (per colour coordinate) the models within ``REGISTRATION`` texels span, so a mesh that
    sits a pixel or two off (tracking lag, an occluder pulling the landmarks) and a face
    seen sharper or blurrier than it was learnt (a zoom) -- a feature's edge sliding or
    mixing with its neighbours -- do not make every lid, brow, nostril and lip an occluder,
    while a colour the neighbourhood never had (a thin dark frame on skin, a grey grille
    on the lips) still is. Two UV morphology passes: a fraction of a millisecond."""
    window = np.ones((2 * REGISTRATION + 1,) * 2, np.uint8)
    learnt = track.mean @ _FEATURES.T
    seen = (track.seen > 0)[:, None]  # a texel never seen forgives nothing
    low = cv2.erode(atlas.scatter(np.where(seen, learnt, UNSEEN_COLOUR), fill=UNSEEN_COLOUR), window)[atlas.texels]
    high = cv2.dilate(atlas.scatter(np.where(seen, learnt, -UNSEEN_COLOUR), fill=-UNSEEN_COLOUR), window)[atlas.texels]
    observed = colours @ _FEATURES.T
    outside = observed - np.minimum(np.maximum(observed, low), high)
    # in the texel's own spread: a neighbour whose spread grew (an edge) forgives nothing
    return np.sqrt(np.einsum("pk,pk->p", outside, outside)) / np.maximum(track.spread, SPREAD_FLOOR)


def _texture_excess(texture: np.ndarray, track: _Track, atlas: UvAtlas, judged: np.ndarray) -> np.ndarray:
    """(P,) how much more texture (edges) a texel shows than its model had anywhere within
    ``REGISTRATION`` texels, as a log ratio: a lid's or a brow's own edges sliding under the
    mesh are forgiven, a frame or a grille on smooth skin is not."""
    reach = 2 * REGISTRATION + 1
    learnt = np.where(track.seen > 0, track.texture, 1e3).astype(np.float32)
    model = cv2.dilate(atlas.scatter(learnt[:, None])[..., 0], np.ones((reach, reach), np.uint8))[atlas.texels]
    excess = np.log((texture + TEXTURE_FLOOR) / (model + TEXTURE_FLOOR))
    # relative to the face's own change: a zoom or a focus change sharpens or blurs all of it
    return excess - float(np.median(excess[judged])) if judged.sum() >= MIN_SKIN_TEXELS else excess


def _smooth_in_uv(evidence: np.ndarray, atlas: UvAtlas) -> np.ndarray:
    """A closing in UV space: a texel missed between occluded ones (a thin frame sampled
    between texels) is occluded too."""
    image = atlas.scatter(evidence[:, None])[..., 0]
    return cv2.morphologyEx(image, cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))[atlas.texels]


def _regions(evidence: np.ndarray, judged: np.ndarray, layout: _UvLayout, kept_before: np.ndarray | None) -> np.ndarray:
    """Only the evidence of connected regions of at least ``MIN_REGION`` of the face: what
    comes in front of a face (a hand, a cup) is one sizeable piece, while a bare face's
    misfits (wrinkles, a glint on its glasses, shading) are scattered specks -- kept,
    they make the swap patchy. Pieces within ``LINK`` texels of each other count as one (a
    thin frame's rims break up between texels), and a region that was kept the frame
    before stays kept while any of its evidence does (hysteresis: a region flickering
    around the size limit would make its edge flicker). The region's soft shoulder (a
    texel round it) stays. The size counts only what lies ``INNER`` texels inside the face's
    outline: what comes in front reaches into the face, while a mesh that lags a zoom or a
    turn misfits along the outline (the collar under the jaw, the hair at a cheek)."""
    atlas = layout.atlas
    image = atlas.scatter(evidence[:, None])[..., 0]
    solid = (image > 0.5).astype(np.uint8)
    linked = cv2.dilate(solid, np.ones((2 * LINK + 1,) * 2, np.uint8))
    count, labels = cv2.connectedComponents(linked, connectivity=8)
    area = np.bincount(labels.reshape(-1), weights=(solid > 0).reshape(-1) & layout.inner.reshape(-1), minlength=count)
    large = area >= max(MIN_REGION * float(judged.sum()), 1.0)
    if kept_before is not None and kept_before.any():
        before = atlas.scatter(kept_before[:, None].astype(np.float32))[..., 0] > 0.5
        large |= np.bincount(labels[before & (solid > 0)], minlength=count) > 0
    large[0] = False
    region = cv2.dilate((large[labels] & (linked > 0)).astype(np.uint8), np.ones((3, 3), np.uint8))
    return evidence * region[atlas.texels]


def _learn(track: _Track, observation: _Observation, layout: _UvLayout, own: np.ndarray, deviation: np.ndarray,
           unlearnt: np.ndarray) -> None:
    """Fold this frame into the texel models where the texel is seen and not occluded
    (its verdict low, and not ``unlearnt``: under this frame's keep mask, the growth's
    pixels too, or just round it). The
    mean learns only where the colour agrees with the texel's ``own`` model (in spreads: a
    sudden change -- something coming in front -- is not learnt, the slow ones of a turning,
    moving face are); the spread also where it disagrees moderately (a grainy, wrinkled
    face's texels vary more than a smooth one's), following the registration-tolerant
    ``deviation`` so a feature's edge sliding under the mesh does not widen it."""
    seen_now = observation.visible & layout.judged
    if not seen_now.any() or float(track.verdict[seen_now].mean()) > MAX_OCCLUDED_TO_LEARN:
        return
    new = track.seen == 0
    # an obliquely seen texel teaches nothing (the model keeps its well-seen look)
    squarely = np.where(new, 1.0, _ramp(observation.facing / np.maximum(track.facing, 1e-3), FORESHORTENING))
    free = seen_now * (1.0 - np.clip(track.verdict / KEEP_RANGE[0], 0.0, 1.0)) * (1.0 - unlearnt) * squarely
    weight = (free * np.where(new, 1.0, 1.0 - _ramp(own, LEARN_DEVIATION))).astype(np.float32)
    spread_weight = free * np.where(new, 1.0, 1.0 - _ramp(own, SPREAD_LEARN_DEVIATION))
    count = np.minimum(track.seen + weight, MODEL_FRAMES)
    rate = np.where(count > 0, weight / np.maximum(count, 1e-6), 0.0)
    spread_rate = np.where(count > 0, spread_weight / np.maximum(count, 1.0), 0.0)
    track.mean += rate[:, None] * (observation.colours - track.mean)
    track.texture += rate * (observation.texture - track.texture)
    track.facing += rate * (observation.facing - track.facing)
    registered = np.minimum(deviation, MODEL_DEVIATION[1]) * np.maximum(track.spread, SPREAD_FLOOR)
    spread_sq = track.spread**2 + spread_rate * (registered**2 - track.spread**2)
    track.spread = np.where(new, SPREAD_FLOOR, np.sqrt(np.maximum(spread_sq, SPREAD_FLOOR**2))).astype(np.float32)
    track.seen = count.astype(np.float32)


def _worn_by_track(track: _Track, layout: _UvLayout) -> np.ndarray | None:
    """The frames of the glasses a tracked face wears, looked for in its model every
    ``WORN_EVERY`` frames from its ``CONFIDENT_FRAMES``-th on; found, they fade in over
    ``WORN_FADE`` frames and stay found down to ``WORN_COVERAGE_KEPT`` (a frame's glint
    or a turn must not make them blink)."""
    track.age += 1
    track.worn_due -= 1
    if track.worn_due <= 0 and track.age >= CONFIDENT_FRAMES:
        coverage = WORN_COVERAGE_KEPT if track.worn is not None else RING_COVERAGE
        track.worn = _worn_frames(track.mean, track.seen > 0, layout, coverage)
        track.worn_due = WORN_EVERY
    if track.worn is None:
        track.worn_shown = 0
        return None
    track.worn_shown = min(track.worn_shown + 1, WORN_FADE)
    return track.worn * (track.worn_shown / WORN_FADE)


def _worn_frames(colours: np.ndarray, seen: np.ndarray, layout: _UvLayout, coverage: float = RING_COVERAGE
                 ) -> np.ndarray | None:
    """(P,) how much each texel is a worn glasses frame, found by shape in the face's UV
    texture as a source photo's are (``eyewear_frames``); None when it wears none."""
    atlas = layout.atlas
    frames = eyewear_frames(atlas.scatter(np.where(seen[:, None], colours, 1.0), fill=1.0), coverage)
    return None if frames is None else frames[atlas.texels]


def _worn_keep(worn: np.ndarray, observation: _Observation, crop: np.ndarray, moved: np.ndarray | None) -> np.ndarray:
    """(S, S) keep mask, at the crop's own size, of the worn frames where the face shows
    them: the crop's pixels near the frames the model draws that are dark lines (the frame
    itself, not the skin, brows and wrinkles beside it, which are who the target is; at
    ``RASTER`` a frame is a pixel wide), with a pixel's margin and a soft edge."""
    size = crop.shape[0]
    factor = size / RASTER
    near = _splatted(worn, observation)
    if moved is not None:
        near = cv2.warpAffine(near, moved, (RASTER, RASTER), flags=cv2.INTER_LINEAR)
    reach = max(1, int(round(WORN_REACH * factor)))
    near = cv2.dilate(cv2.resize(near, (size, size), interpolation=cv2.INTER_LINEAR),
                      cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * reach + 1,) * 2))
    face_width = float(np.ptp(observation.positions[:, 0])) * factor
    radius = max(2, int(round(WORN_LINE_WIDTH * face_width)))
    luma = cv2.cvtColor(np.ascontiguousarray(crop), cv2.COLOR_RGB2GRAY).astype(np.float32) / 255.0
    lines = cv2.morphologyEx(luma, cv2.MORPH_BLACKHAT, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1,) * 2))
    core = near * _ramp(lines * float(np.mean(observation.gain)), WORN_LINE)
    keep = cv2.dilate(core, np.ones((3, 3), np.uint8))
    return cv2.GaussianBlur(keep, (0, 0), max(0.8, 0.5 * factor))


def _unlearnt(keep: np.ndarray) -> np.ndarray:
    """(RASTER, RASTER) where the model does not learn: the keep mask reaching ``UNLEARNT``
    pixels further. A model learnt at the object's edge would forgive the texels
    ``REGISTRATION`` texels inside it (``_deviation``), and the kept region would creep
    inwards, texel by texel, while the object is held."""
    return cv2.dilate((keep > 0.1).astype(np.float32), np.ones((2 * UNLEARNT + 1,) * 2, np.uint8))


def _chroma_change(colours: np.ndarray, model: np.ndarray) -> np.ndarray:
    """(P,) how far each texel's chromaticity (its colour over its sum) is from its
    model's: none for a shadow or a light, which scale all channels alike."""
    difference = colours / np.maximum(colours.sum(axis=1, keepdims=True), 1e-3) \
        - model / np.maximum(model.sum(axis=1, keepdims=True), 1e-3)
    return np.sqrt(np.einsum("pk,pk->p", difference, difference))


def _keep_at_mesh(verdict: np.ndarray, observation: _Observation, changed: np.ndarray | None,
                  recoloured: np.ndarray | None) -> np.ndarray:
    """The verdict splatted back through the seen texels into the crop, grown over the rest
    of the object in crop space (``_grow``): (RASTER, RASTER) keep mask where the mesh
    draws the face, reaching a little past the occluder's edge (and past the face's
    outline, where the occluder goes on), softened. On a tracked face the growth takes
    pixels that have not ``changed`` from the model only near the part of the regions whose
    chromaticity changed (``recoloured``: an object brings colour of its own, and its
    frame lying on dark brows or on the face's own frames looks unchanged there: kept 79 ->
    86 % of glasses frames on a zoom); a shadow's region, which only darkened the skin,
    grows only over what changed (once learnt, the darkened cheek is face again)."""
    drawn = _splatted(np.ones(len(verdict), np.float32), observation) > 0.5
    core = _splatted(_ramp(verdict, KEEP_RANGE), observation)
    if changed is not None and recoloured is not None:  # a tracked face
        changed = _splatted(changed, observation) > 0.5
        coloured = (core > 0.5) & (_splatted(recoloured, observation) > 0.5)
        changed |= cv2.dilate(coloured.astype(np.uint8), np.ones((2 * GROW_REACH + 1,) * 2, np.uint8)) > 0
    core = np.maximum(core, _grow(core, observation.image, drawn, changed))
    core = np.maximum(core, _filled_out(core))
    keep = cv2.dilate(core, np.ones((2 * MARGIN + 1,) * 2, np.uint8))  # a margin
    beyond = cv2.dilate(keep, np.ones((5, 5), np.uint8))
    keep = np.where(drawn, keep, beyond)
    return cv2.GaussianBlur(keep, (0, 0), 0.8)


def _splatted(values: np.ndarray, observation: _Observation) -> np.ndarray:
    """(RASTER, RASTER) per-texel ``values`` at the pixels the seen texels fall on (the
    largest where several do), closed over the gaps between them."""
    shown = observation.pixels >= 0
    image = np.zeros(RASTER * RASTER, np.float32)
    np.maximum.at(image, observation.pixels[shown], values[shown])
    return cv2.morphologyEx(image.reshape(RASTER, RASTER), cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))


def _grow(core: np.ndarray, image: np.ndarray, face: np.ndarray, changed: np.ndarray | None) -> np.ndarray:
    """The occluder's regions grown in crop space over the pixels that look like the
    occluder rather than the face around it: its low-contrast rim, and its parts the UV
    verdict does not judge (the mouth and eye openings, the face's outline, thin parts
    that fall between texels). Colours of the confident occluder (the regions' core) and of
    the face around it (a ring outside them) are each summarised by a few k-means centres;
    a pixel within ``GROW_REACH`` of the regions joins when it is clearly nearer the
    occluder's centres, and only connected to the regions (a geodesic dilation), so a
    face pixel of an occluder-like colour elsewhere is never kept. On a tracked face a pixel
    must also be in ``changed`` (see ``_keep_at_mesh``)."""
    seeds = (core > 0.5).astype(np.uint8)
    if not seeds.any():
        return core
    square = np.ones((3, 3), np.uint8)
    inner = cv2.erode(seeds, square)
    inner = inner if inner.sum() >= GROW_MIN_SAMPLES else seeds
    near = cv2.dilate(seeds, np.ones((2 * GROW_REACH + 1,) * 2, np.uint8)) > 0
    ring = near & (cv2.dilate(seeds, np.ones((5, 5), np.uint8)) == 0) & face
    if ring.sum() < GROW_MIN_SAMPLES:
        return core
    features = (image.reshape(-1, 3) @ _FEATURES.T).reshape(image.shape)
    occluder = _centres(features[inner > 0])
    skin = _centres(features[ring])
    candidates = near & (seeds == 0) & face  # past the outline the keep mask's own margin reaches on
    if changed is not None:
        candidates &= changed
    values = features[candidates]
    to_occluder = _nearest(values, occluder)
    to_face = _nearest(values, skin)
    like = np.zeros(seeds.shape, np.uint8)
    like[candidates] = to_occluder < GROW_RATIO * to_face
    grown = _geodesic_growth(seeds, like | seeds, GROW_REACH)
    if changed is None:  # a still: no model says what changed, and its estimate stays conservative
        return grown.astype(np.float32)
    solid, _ = _solid_regions(seeds)
    if not solid.any():  # only thin or small regions (a glasses frame's rims): nothing closes a stretch in
        return grown.astype(np.float32)
    pool = (cv2.dilate(solid, np.ones((2 * ENCLOSED_REACH + 1,) * 2, np.uint8)) > 0) & (seeds == 0) & face & changed
    return (grown | _enclosed(solid, features, pool, face)).astype(np.float32)


def _enclosed(seeds: np.ndarray, features: np.ndarray, pool: np.ndarray, face: np.ndarray) -> np.ndarray:
    """(RASTER, RASTER) uint8: the smooth stretches of ``pool`` that the solid regions
    (``seeds``, see ``_solid_regions``) and the image's edges close in -- a cup's cream wall
    or rim between its kept coffee and its outer edge, which is as pale as the skin behind
    it, so colour does not grow into it. From the regions, a flood over ``pool``'s pixels
    that are not on an edge (a gradient ``EDGE_STRENGTH`` times the skin's median,
    ``features`` as in ``_grow``) for ``ENCLOSED_REACH`` pixels; each stretch it floods
    counts only where ``ENCLOSED_SHARE`` of its border is an edge or the face's outline, and
    not inside a ring the regions draw (``_holes``: the skin seen through a mug's handle).
    Where the kept region ends at the object's own edge, the flood has nowhere to go; where
    it runs on into the face, its border is open skin and the stretch is dropped. Tracked
    faces only (``_grow``)."""
    gradient_x = cv2.Sobel(features, cv2.CV_32F, 1, 0, ksize=3) / 8.0
    gradient_y = cv2.Sobel(features, cv2.CV_32F, 0, 1, ksize=3) / 8.0
    strength = np.sqrt((gradient_x**2 + gradient_y**2).sum(2))
    skin = face & (seeds == 0)
    threshold = max(EDGE_FLOOR, EDGE_STRENGTH * float(np.median(strength[skin]))) if skin.any() else EDGE_FLOOR
    edge = strength >= threshold
    flooded = _geodesic_growth(seeds, (pool & ~edge).astype(np.uint8) | seeds, ENCLOSED_REACH)
    square = np.ones((3, 3), np.uint8)
    holes = _holes(seeds)
    count, labels = cv2.connectedComponents(((flooded > 0) & (seeds == 0)).astype(np.uint8), connectivity=8)
    enclosed = np.zeros(seeds.shape, np.uint8)
    for label in range(1, count):
        stretch = (labels == label).astype(np.uint8)
        border = (cv2.dilate(stretch, square) > 0) & (stretch == 0) & (seeds == 0)
        if border.any() and (edge[border] | ~face[border]).mean() >= ENCLOSED_SHARE and holes[stretch > 0].mean() < 0.5:
            enclosed |= stretch
    return enclosed


def _geodesic_growth(seeds: np.ndarray, allowed: np.ndarray, steps: int) -> np.ndarray:
    """``seeds`` (uint8) grown a pixel at a time, ``steps`` times at most, over ``allowed``
    (uint8) only: what joins is connected to them through allowed pixels."""
    square = np.ones((3, 3), np.uint8)
    grown = seeds
    for _ in range(steps):
        step = cv2.dilate(grown, square) & allowed
        if np.array_equal(step, grown):
            break
        grown = step
    return grown


def _holes(seeds: np.ndarray) -> np.ndarray:
    """(RASTER, RASTER) bool: what the regions ring round without covering -- the skin
    inside a mug's handle, which is closed in too, but is the face."""
    count, labels = cv2.connectedComponents((seeds == 0).astype(np.uint8), connectivity=4)
    outside = np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))
    return (seeds == 0) & ~np.isin(labels, outside)


def _filled_out(core: np.ndarray) -> np.ndarray:
    """Each solid region of the keep mask filled out to its convex hull: a cup, a fist or a
    phone is convex, and where part of it has the colour of the face behind it (a cup's
    cream inner wall over pale lips) the rest of its outline says it is there."""
    return _solid_regions(core)[1].astype(np.float32)


def _solid_regions(core: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the regions of the keep mask that fill ``SOLIDITY`` of their convex hull, their hulls
    filled), each (RASTER, RASTER) uint8: a cup, a hand, a phone -- not a glasses frame's
    rims, whose hull is the eyes and the skin round them, nor a speck."""
    mask = (core > 0.5).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    solid, hulls = np.zeros_like(mask), np.zeros_like(mask)
    for label in range(1, count):
        if stats[label, cv2.CC_STAT_AREA] < MIN_HULL_PIXELS:
            continue
        region = (labels == label).astype(np.uint8)
        hull = cv2.convexHull(cv2.findNonZero(region))
        if stats[label, cv2.CC_STAT_AREA] >= SOLIDITY * max(cv2.contourArea(hull), 1.0):
            solid |= region
            cv2.fillConvexPoly(hulls, hull, 1)
    return solid, hulls


def _centres(values: np.ndarray) -> np.ndarray:
    """(K, 3) k-means centres of up to ``GROW_SAMPLES`` of ``values``."""
    if len(values) > GROW_SAMPLES:
        values = values[np.linspace(0, len(values) - 1, GROW_SAMPLES).astype(np.int64)]
    count = min(GROW_CENTRES, len(values))
    criteria = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 10, 1e-3)
    _, _, centres = cv2.kmeans(np.ascontiguousarray(values, np.float32), count, None, criteria, 1, cv2.KMEANS_PP_CENTERS)
    return centres


def _nearest(values: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """(N,) distance from each value to its nearest centre."""
    difference = values[:, None, :] - centres[None]
    return np.sqrt(np.einsum("nkc,nkc->nk", difference, difference).min(axis=1))
