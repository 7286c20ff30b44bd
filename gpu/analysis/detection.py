"""Find every face: BlazeFace over a pyramid of overlapping tiles and (on stills) dlib's
HOG detector, merged by non-maximum suppression.

One BlazeFace pass sees the frame letterboxed to 128 px (short range) or 192 px (full
range), so in a 1280 px group photo a 90 px face is ~13 px to the model and is often
missed (measured: one full-range pass finds 31 of 57 faces of 40-200 px in the composite
group photos of ``swapcast bench detect``, the sweep all 57). Tiles fix that: each tile is
a "view" of the frame that BlazeFace sees at its own resolution. Stills can afford the
whole sweep plus HOG; video spreads it over frames (``SweepSchedule``). Candidates are
only proposals: a face is what the mesh confirms (see ``face_mesh``).

No rotated passes: BlazeFace finds heads rolled up to 90 degrees (70 px and up) and 60
(45 px) on its own, and whole-frame rotated passes found nothing the tiles missed; what a
tilt does break is the mesh, which ``face_mesh`` runs on a region turned upright."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from gpu.analysis.blazeface import BlazeFaceDetector, BlazeFaceRange, WindowDetector
from gpu.types import Face

# Short range finds faces from ~0.13-0.16 of its view's side upward (measured on the
# sample faces, rolled and relit): the smallest tile is about this many times the
# smallest face it must find.
TILE_PER_FACE = 7.0
# Tiles overlap by a third of their side: every face up to a third of a tile lies whole in
# one, and larger ones (over 1/TILE_PER_FACE of the next level's tile) are found there.
TILE_STRIDE = 2 / 3
# Large photos: the smallest face looked for grows to this fraction of the longest side
# (40 px up to 1280 px), so a 12 MP photo costs ~30 views, not ~530 (~2.6 s of CPU).
SIDE_PER_SMALLEST_FACE = 32
# HOG's window is 80 px: upsampled once it finds 40 px faces, at 4x the cost; only done
# while the image is at most this many pixels (a 640x480 still). Larger than HOG_MAX_SIDE,
# it runs on a copy scaled down to that (the tiles find the smaller faces).
HOG_UPSAMPLE_MAX_PIXELS = 640 * 480
HOG_MAX_SIDE = 1280
HOG_SCORE = 0.5  # HOG has no calibrated probability: its boxes rank as a middling BlazeFace one
# Stills: the sweep runs once more on the photo with its lightness equalised (CLAHE): a
# small dark face in dim light (dark skin, a cast) that BlazeFace scores under 0.2 as shot
# stands out there. Tiles of this many pixels per side.
CLAHE_TILE = 128
CLAHE_CLIP = 2.0
STRIP_ROWS = 256  # rows converted to Lab at a time for the lightness plane
# ... but only in dim views: those whose mean lightness (Lab L, 0-255) is under this. The
# faces only the equalised sweep finds are dark ones in dim light; in a well-lit view
# BlazeFace already sees what there is. Measured on bench detect's crowd and group photos
# and 40 more of each kind (80 photos, 2480 views): the median view's lightness is 65-68;
# the nine faces only the equalised sweep found were in views of 3 (the test's dim face)
# to 61, and one of 81 (half hidden, which the mesh check then rejects). On 32 of those
# photos: 247 of 253 faces at 486 ms of CPU per photo (median), 246 at 570 ms under 90,
# 244 at 598 ms equalising every view.
DIM_LIGHTNESS = 64.0
NMS_IOU = 0.3
# Video: while tracking, the whole sweep runs within this many frames (3.2 s at 30 fps).
# Measured on a 1280x720 crowd clip (bench detect's, 96 frames, graphs tracker, loaded
# machine): all faces tracked from frame 30 (48: 24; one tile every 8 frames: 60), for
# ~5 ms more CPU per 720p frame with one face (48: ~10); 640x480 keeps one tile every 8.
SWEEP_FRAMES = 96


@dataclass(frozen=True)
class View:
    """One detector pass: ``window`` (x0, y0, x1, y1 in frame pixels) run through ``model``."""

    window: tuple[int, int, int, int]
    model: BlazeFaceRange


def roll_of(kps: np.ndarray) -> float:
    """Head roll in degrees from five keypoints: the eye line's angle (y down), 0 = upright."""
    dx, dy = kps[1] - kps[0]
    return float(np.degrees(np.arctan2(dy, dx)))


def box_contains(box: np.ndarray, point: np.ndarray) -> bool:
    return bool(box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3])


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def weighted_nms(candidates: Sequence[Face], iou: float = NMS_IOU) -> list[Face]:
    """One face per cluster of overlapping candidates, best score first: the box is the
    score-weighted mean of the cluster (views disagree by a few pixels; the mean is
    steadier than any one), keypoints and score are the best member's. A member without
    real keypoints (HOG) only ever contributes its box."""
    order = sorted(candidates, key=lambda face: face.score, reverse=True)
    merged: list[Face] = []
    used = [False] * len(order)
    for i, best in enumerate(order):
        if used[i]:
            continue
        cluster = [best]
        for j in range(i + 1, len(order)):
            if not used[j] and box_iou(best.box, order[j].box) > iou:
                used[j] = True
                cluster.append(order[j])
        weights = np.array([face.score for face in cluster], dtype=np.float32)
        box = (np.stack([face.box for face in cluster]) * weights[:, None]).sum(0) / weights.sum()
        merged.append(Face(box=box.astype(np.float32), kps=best.kps, score=best.score))
    return merged


def suppress(faces: Sequence[Face], overlap: float = 0.5) -> list[Face]:
    """Meshed faces, largest first, without those that share more than ``overlap`` of the
    smaller one's box with a face kept: two candidates whose meshes landed on one face, or
    a mesh fitted to part of a larger face (a tile that saw only an eye and an ear)."""
    kept: list[Face] = []
    for face in sorted(faces, key=lambda f: f.area, reverse=True):
        if all(box_overlap(face.box, other.box) <= overlap for other in kept):
            kept.append(face)
    return kept


def box_overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over the smaller box's area."""
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return float(inter / smaller) if smaller > 0 else 0.0


def tile_windows(width: int, height: int, side: int) -> list[tuple[int, int, int, int]]:
    """Square windows of ``side`` px covering the frame, overlapping by ``1 - TILE_STRIDE``."""
    side = min(side, width, height)
    stride = side * TILE_STRIDE

    def starts(extent: int) -> np.ndarray:
        count = int(np.ceil((extent - side) / stride)) + 1 if extent > side else 1
        return np.linspace(0, extent - side, count).round().astype(int)

    return [(int(x), int(y), int(x) + side, int(y) + side) for y in starts(height) for x in starts(width)]


def sweep_views(width: int, height: int, whole_frame: BlazeFaceRange, min_face: int,
                finest: BlazeFaceRange = "short") -> list[View]:
    """The full sweep for one frame size, the whole-frame pass first, then tiles halving in
    side from half the frame down to ~``TILE_PER_FACE`` x ``min_face``: short range, but
    ``finest`` for the smallest tiles. Computed once per frame size (video asks every frame)."""
    return list(_sweep(width, height, whole_frame, min_face, finest))


@functools.lru_cache(maxsize=64)
def _sweep(width: int, height: int, whole_frame: BlazeFaceRange, min_face: int, finest: BlazeFaceRange) -> tuple[View, ...]:
    views = [View((0, 0, width, height), whole_frame)]
    sides = []
    side = max(width, height) / 2
    while side >= TILE_PER_FACE * min_face * 0.75 and side >= 64:
        sides.append(round(side))
        side /= 2
    for side in sides:
        model = finest if side == sides[-1] else "short"
        views.extend(View(window, model) for window in tile_windows(width, height, side))
    return tuple(views)


class FaceFinder:
    """Face candidates (box, five keypoints, score) from BlazeFace views and, on stills,
    dlib's HOG detector. ``whole_frame`` picks the BlazeFace model of the whole-frame pass
    (the engine's ``detector_range``); tiles use short range, whose domain is a face filling
    a good part of its view, except the smallest tiles, which use ``finest``. Measured
    (``swapcast bench detect``): full range there finds the last 51 px face of 32 in live
    640x480 clips at no cost per frame worth measuring, but on stills (where HOG backs the
    tiles up) it costs ~85 ms of CPU more per 1280x886 photo and found one face fewer."""

    def __init__(self, whole_frame: BlazeFaceRange = "full", min_face: int = 40, hog: bool = False,
                 min_score: float = 0.5, finest: BlazeFaceRange = "short",
                 detectors: Mapping[BlazeFaceRange, WindowDetector] | None = None, equalise: bool = False,
                 equalise_below: float = DIM_LIGHTNESS) -> None:
        """``detectors``: the BlazeFace models by range (default: mediapipe's own graphs);
        ``equalise``: ``find`` sweeps the equalised photo too (stills), in the views whose
        mean lightness is under ``equalise_below`` (over 255: in every view)."""
        self.whole_frame = whole_frame
        self.min_face = min_face
        self.finest = finest
        self.equalise = equalise
        self.equalise_below = equalise_below
        self._models = dict(detectors) if detectors is not None else {
            name: BlazeFaceDetector(name, min_score) for name in ("short", "full")
        }
        self._hog = _hog_detector() if hog else None

    def views(self, width: int, height: int) -> list[View]:
        min_face = max(self.min_face, round(max(width, height) / SIDE_PER_SMALLEST_FACE))
        return sweep_views(width, height, self.whole_frame, min_face, self.finest)

    def find(self, image: np.ndarray) -> list[Face]:
        """Every candidate of the whole sweep (and HOG when on), merged: for stills."""
        height, width = image.shape[:2]
        views = self.views(width, height)
        candidates = self.run(image, views)
        if self.equalise:
            lifted = Equalised(image)
            dim = [view for view in views if lifted.lightness(view.window) < self.equalise_below]
            if dim:
                candidates.extend(self.run(lifted.image(), dim))
        if self._hog is not None:
            candidates.extend(self._hog_faces(image))
        return weighted_nms(candidates)

    def run(self, image: np.ndarray, views: Iterable[View]) -> list[Face]:
        """Unmerged candidates from ``views``, in frame coordinates; the views of one model
        go to it together (the converted graphs run them as one batch)."""
        views = list(views)
        found = []
        for model, detector in self._models.items():
            windows = [view.window for view in views if view.model == model]
            if windows:
                found.extend(face for faces in detector.detect_windows(image, windows) for face in faces)
        return found

    def _hog_faces(self, image: np.ndarray) -> list[Face]:
        height, width = image.shape[:2]
        upsample = 1 if height * width <= HOG_UPSAMPLE_MAX_PIXELS else 0
        scale = min(1.0, HOG_MAX_SIDE / max(height, width))
        if scale < 1.0:
            image = cv2.resize(image, (round(width * scale), round(height * scale)), interpolation=cv2.INTER_AREA)
        rects, _, _ = self._hog.run(np.ascontiguousarray(image), upsample, 0.0)
        faces = []
        for rect in rects:
            box = np.array([rect.left(), rect.top(), rect.right(), rect.bottom()], dtype=np.float32) / scale
            faces.append(Face(box=box, kps=upright_keypoints(box), score=HOG_SCORE))
        return faces

    def close(self) -> None:
        for model in self._models.values():
            model.close()


class SweepSchedule:
    """Spreads the sweep over video frames so no frame pays it all: the whole-frame pass
    runs every ``every`` frames (as the single pass did before), the other views of the
    sweep round-robin on frames between, one a frame, often enough that the whole sweep
    takes at most ``sweep_frames`` frames (1280x720 has 24 tiles: one every 8 frames took
    192 frames, 6.4 s, to reach a face only a tile finds; now one every 4) and at least
    one every ``every`` frames; while nothing is tracked, both run on every frame
    (an empty frame has no swap to pay for). ``sweep=False`` keeps only the whole-frame
    pass (the single pass of old, for comparison)."""

    def __init__(self, finder: FaceFinder, every: int, sweep: bool = True, sweep_frames: int = SWEEP_FRAMES) -> None:
        self.finder = finder
        self.every = max(1, every)
        self.sweep = sweep
        self.sweep_frames = sweep_frames
        self._next = 0
        self._frames = 0

    def views_for(self, width: int, height: int, tracking: bool) -> list[View]:
        views = self.finder.views(width, height)
        frame = self._frames
        self._frames += 1
        tile_every = max(2, min(self.every, self.sweep_frames // max(1, len(views) - 1)))
        chosen = []
        if frame % self.every == 0 or not tracking:
            chosen.append(views[0])
        tile_due = frame % tile_every == tile_every // 2 and frame % self.every != 0
        if self.sweep and len(views) > 1 and (tile_due or not tracking):
            chosen.append(views[1 + self._next % (len(views) - 1)])
            self._next += 1
        return chosen


class Equalised:
    """An RGB uint8 photo with its lightness locally equalised (CLAHE on Lab's L, hue kept),
    and the photo's mean lightness in any window. Only the lightness plane is kept; the
    equalised RGB image is made when asked for (a dim view: rare), so a 16-megapixel upload
    costs its analysis 16 MB here rather than Lab and an integral table (59 MB measured)."""

    def __init__(self, image: np.ndarray) -> None:
        self._image = image
        self._lightness = np.empty(image.shape[:2], dtype=np.uint8)
        for top in range(0, image.shape[0], STRIP_ROWS):  # Lab a strip at a time: one plane kept
            self._lightness[top:top + STRIP_ROWS] = cv2.cvtColor(image[top:top + STRIP_ROWS], cv2.COLOR_RGB2LAB)[..., 0]

    def lightness(self, window: tuple[int, int, int, int]) -> float:
        """The photo's mean lightness (Lab L, 0-255) inside ``window`` (x0, y0, x1, y1), as shot."""
        x0, y0, x1, y1 = window
        if x1 <= x0 or y1 <= y0:
            return 0.0
        return float(cv2.mean(self._lightness[y0:y1, x0:x1])[0])

    def image(self) -> np.ndarray:
        height, width = self._lightness.shape
        grid = (max(1, round(width / CLAHE_TILE)), max(1, round(height / CLAHE_TILE)))
        lab = cv2.cvtColor(self._image, cv2.COLOR_RGB2LAB)
        lab[..., 0] = cv2.createCLAHE(CLAHE_CLIP, grid).apply(self._lightness)
        return cv2.cvtColor(lab, cv2.COLOR_LAB2RGB)


def upright_keypoints(box: np.ndarray) -> np.ndarray:
    """Five keypoints where an upright frontal face in ``box`` has them (ArcFace order)."""
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    rel = np.array([[0.3, 0.38], [0.7, 0.38], [0.5, 0.58], [0.35, 0.78], [0.65, 0.78]], dtype=np.float32)
    return (rel * [w, h] + [x0, y0]).astype(np.float32)


def _hog_detector():
    import dlib

    return dlib.get_frontal_face_detector()
