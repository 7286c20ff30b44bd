"""The detection benchmark: how many faces are found, and what finding them costs.

The set is built from the two real faces that ship offline (scikit-image's astronaut,
matplotlib's Grace Hopper): "crowd photos" built as people take group photos, harder
(``crowd_photo``: 1280x886, 6-12 heads 60-140 px in two rows, shoulder to shoulder with
overlapping bodies, turned +-15/30/45 degrees by ``pose_set``, rolled +-30, darker skin
tones, casts, blur, JPEG 60, cut by the frame's edge, cluttered background); composite
"group photos" (1280x886, 6-8 heads 40-200 px wide, rolled up to +-45 degrees, mirrored,
dimmed or in coloured light, JPEG-compressed), rolled single faces (640x480, 0-90
degrees), single faces 40 px wide in a 1280x720 frame up to one filling a 640x480 frame
and, where ``pose_set`` is there, turned heads (yaw +-30/45/60), alone and in group
photos. Every face's box is known from where it was pasted. On the same images: one
BlazeFace full-range pass ("old"), the still path before this change ("before"), the
engine's ``analyse_image`` ("new") and dlib's HOG detector alone ("hog"). The live tracker
(the engine's backend) is measured on clips, old (whole-frame pass only) and new (the sweep
spread over frames): one face for the per-frame cost, four small ones for recall, the
pose set's roll wobble and yaw sweep clips, and a 1280x720 crowd a sixth head walks into
(frames until it is tracked). Live "found" counts faces over all frames."""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from gpu.analysis.blazeface import BlazeFaceDetector
from gpu.analysis.detection import box_iou
from gpu.analysis.face_mesh import FaceTracker
from gpu.analysis.still_faces import MediapipeStillFaces, StillFaces, analyse_still
from gpu.analysis.still_graphs import GraphStillFaces
from gpu.engine import FaceEngine
from gpu.tracking.graph_tracker import GraphFaceTracker
from streamer.samples import astronaut, grace_hopper
from swapcast.config import Config

GROUP_SIZE = (1280, 886)
LIVE_SIZE = (640, 480)
MATCH_IOU = 0.3  # a found box matches a true face at this overlap or more
# Each sample face's box (x0, y0, x1, y1): the bounds of its 468-point mesh in the photo.
FACE_BOXES = {"astronaut": (179.0, 70.0, 272.0, 176.0), "grace_hopper": (170.0, 131.0, 357.0, 334.0)}
LIGHTS = {"normal": (1.0, 1.0, 1.0), "dim": (0.45, 0.45, 0.45), "warm": (1.15, 0.85, 0.6), "cool": (0.7, 0.8, 1.15)}
ROLLS = (0, 15, 30, 45, 60, 90)
SCALES = ((40, (1280, 720)), (64, (1280, 720)), (100, (1280, 720)), (160, (1280, 720)), (256, (1280, 720)),
          (420, (640, 480)))  # face width, frame: 40 px in 720p up to a face filling a webcam frame
YAWS = (-60, -45, -30, 30, 45, 60)
# Crowd photos, built like the group photos people take (issue 13: 6 people, faces 90-130 px
# in 1280x886, yaw 0-45, a few tilted), made harder: 6-12 faces 60-140 px in two rows with
# overlapping shoulders, yaw +-15/30/45, roll +-30, darker skin tones, casts, cut by the edge.
CROWD_YAWS = (-45, -30, -15, 15, 30, 45)
CROWD_WIDTHS = (60.0, 140.0)
CROWD_FACES = (6, 12)
CROWD_ROLL = 30.0
CROWD_JPEG_QUALITY = 60
# Skin tones as a colour transform of the pasted head: per-channel gain after a gamma
# (darker skin absorbs blue and green more than red); "as shot" keeps the photo.
SKIN_TONES = {"as shot": ((1.0, 1.0, 1.0), 1.0), "tan": ((0.9, 0.76, 0.62), 1.1),
              "brown": ((0.68, 0.5, 0.38), 1.25), "dark": ((0.46, 0.33, 0.25), 1.4)}
# The recall per kind: (largest width, kind), (largest roll, kind).
WIDTH_KINDS = ((59, "width 40-59 px"), (99, "width 60-99 px"), (199, "width 100-199 px"), (np.inf, "width 200 px+"))
ROLL_KINDS = ((14, "roll 0-14"), (29, "roll 15-29"), (45, "roll 30-45"), (np.inf, "roll 46-90"))
CUT_SHARE = 0.4  # a head with more of its width outside the frame is left out
CROWD_GAP = (1.3, 1.9)  # neighbours' centres, in face widths


@dataclass
class Scene:
    """An image with its true face boxes (and each face's description)."""

    name: str
    image: np.ndarray  # RGB uint8
    boxes: list[np.ndarray] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    kinds: list[tuple[str, ...]] = field(default_factory=list)  # each face's kinds (``face_kinds``)


def face_kinds(head: str, width: float, roll: float = 0.0, tone: str = "as shot", light: str = "normal",
               cut: bool = False) -> tuple[str, ...]:
    """The kinds a face counts under in the recall per kind: its width, roll and yaw (from
    the head's name, ``sample_heads``'), and whether it is dark-skinned, dimly lit or cut."""
    yaw = abs(int(match.group(1))) if (match := re.search(r"yaw([+-]\d+)", head)) else 0
    kinds = [next(kind for largest, kind in WIDTH_KINDS if round(width) <= largest),
             next(kind for largest, kind in ROLL_KINDS if round(abs(roll)) <= largest), f"yaw {yaw}"]
    kinds += ["dark/brown skin"] * (tone in ("brown", "dark")) + ["dim light"] * (light == "dim")
    kinds += ["cut by edge"] * bool(cut)
    return tuple(kinds)


@dataclass(frozen=True)
class Head:
    """A photo of one head and its face's box in it (the bounds of its 468 mesh points)."""

    photo: np.ndarray  # RGB uint8
    box: tuple[float, float, float, float]


def sample_heads(turned: bool = False, yaws: Sequence[int] = YAWS) -> dict[str, Head]:
    """The two sample faces, frontal; with ``turned``, also turned by ``yaws`` (rendered by
    ``pose_set``, where that module is there)."""
    heads = {"astronaut": Head(astronaut(), FACE_BOXES["astronaut"]),
             "grace_hopper": Head(grace_hopper(), FACE_BOXES["grace_hopper"])}
    if turned:
        for label, image, mesh in _yaw_renders(yaws):
            heads[label] = Head(image, tuple(float(v) for v in (*mesh.min(0), *mesh.max(0))))
    return heads


def placement(box: Sequence[float], photo_width: int, width: float, centre: Sequence[float], roll: float = 0.0,
              mirror: bool = False) -> np.ndarray:
    """The 2x3 affine from a photo (mirrored first if asked) with a face at ``box`` to the
    canvas that puts the face ``width`` px wide at ``centre``, turned ``roll`` degrees
    counter-clockwise."""
    x0, y0, x1, y1 = box
    if mirror:
        x0, x1 = photo_width - x1, photo_width - x0
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    matrix = cv2.getRotationMatrix2D((cx, cy), roll, width / (x1 - x0))
    matrix[:, 2] += np.asarray(centre, dtype=np.float64) - (cx, cy)
    return matrix


def paste_face(canvas: np.ndarray, head: Head, width: float, centre: Sequence[float], roll: float = 0.0,
               mirror: bool = False, light: str = "normal") -> np.ndarray:
    """Paste ``head`` (an ellipse around the face, soft edge) onto ``canvas`` in place (see
    ``placement``). Returns the face's true box: the bounds of its turned box."""
    photo = head.photo[:, ::-1] if mirror else head.photo
    x0, y0, x1, y1 = head.box
    if mirror:
        x0, x1 = photo.shape[1] - x1, photo.shape[1] - x0
    matrix = placement(head.box, photo.shape[1], width, centre, roll, mirror)
    head_size = max(x1 - x0, 0.88 * (y1 - y0))  # a turned face is narrower than its head
    alpha = np.zeros(photo.shape[:2], np.float32)
    centre_px = (round((x0 + x1) / 2), round((y0 + y1) / 2))
    cv2.ellipse(alpha, centre_px, (round(head_size * 0.95), round(head_size * 1.15)), 0, 0, 360, 1.0, -1)
    alpha = cv2.GaussianBlur(alpha, (0, 0), head_size * 0.08)
    height, width_px = canvas.shape[:2]
    lit = np.ascontiguousarray(photo, dtype=np.float32) * np.array(LIGHTS[light], dtype=np.float32)
    warped = cv2.warpAffine(lit, matrix, (width_px, height))
    weight = cv2.warpAffine(alpha, matrix, (width_px, height))[..., None]
    canvas[:] = np.clip(canvas * (1 - weight) + warped * weight, 0, 255).astype(np.uint8)
    corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float64) @ matrix[:, :2].T + matrix[:, 2]
    return np.concatenate([corners.min(0), corners.max(0)]).astype(np.float32)


def _background(seed: int, size: tuple[int, int]) -> np.ndarray:
    from skimage import data

    photos = (data.rocket, data.coffee, lambda: np.repeat(data.brick()[..., None], 3, axis=2), data.hubble_deep_field)
    image = cv2.resize(photos[seed % len(photos)](), size).astype(np.float32)
    noise = np.random.default_rng(seed).normal(0, 6, image.shape)
    return np.clip(image * 0.8 + noise, 0, 255).astype(np.uint8)


def _jpeg(image: np.ndarray, quality: int = 80) -> np.ndarray:
    _, encoded = cv2.imencode(".jpg", image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    return np.ascontiguousarray(cv2.imdecode(encoded, cv2.IMREAD_COLOR)[..., ::-1])


def group_photo(seed: int, size: tuple[int, int] = GROUP_SIZE, faces: tuple[int, int] = (6, 8),
                widths: tuple[float, float] = (40.0, 200.0), heads: dict[str, Head] | None = None) -> Scene:
    """A composite group photo: ``faces`` (min, max) of ``heads`` (default: the frontal
    sample faces), faces ``widths`` px wide that do not overlap, each rolled 0/15/30/45
    degrees either way, maybe mirrored, in one of the lights."""
    heads = heads or sample_heads()
    rng = np.random.default_rng(seed)
    width, height = size
    canvas = _background(seed, size)
    scene = Scene(f"group-{seed}", canvas)
    placed: list[tuple[np.ndarray, float]] = []
    for face_width in np.sort(rng.uniform(*widths, rng.integers(faces[0], faces[1] + 1)))[::-1]:
        for _ in range(200):
            centre = rng.uniform([face_width * 1.2, face_width * 1.3], [width - face_width * 1.2, height - face_width * 1.3])
            if all(np.hypot(*(centre - other)) > 1.25 * (face_width + other_width) for other, other_width in placed):
                break
        else:
            continue
        placed.append((centre, face_width))
        name = str(rng.choice(list(heads)))
        roll = float(rng.choice([0, 0, 15, -15, 30, -30, 45, -45]) + rng.uniform(-4, 4))
        mirror, light = bool(rng.integers(0, 2)), str(rng.choice(list(LIGHTS)))
        scene.boxes.append(paste_face(canvas, heads[name], face_width, centre, roll, mirror, light))
        scene.labels.append(f"{name} {face_width:.0f}px roll {roll:+.0f} {light}{' mirrored' if mirror else ''}")
        scene.kinds.append(face_kinds(name, face_width, roll, light=light))
    scene.image = _jpeg(canvas)
    return scene


def crowd_photo(seed: int, heads: dict[str, Head], size: tuple[int, int] = GROUP_SIZE,
                faces: tuple[int, int] = CROWD_FACES, widths: tuple[float, float] = CROWD_WIDTHS) -> Scene:
    """A group photo as people take them, harder: ``faces`` (min, max) heads ``widths`` px
    wide in two rows (the back row smaller), each on a body whose shoulders overlap its
    neighbours', over a cluttered real-photo background; heads turned (``heads``), rolled up
    to +-``CROWD_ROLL``, mirrored, in a skin tone of ``SKIN_TONES`` and one of the lights;
    the row's outer heads may be cut by the frame's edge (their true box is the part inside).
    Neighbours stand close (``CROWD_GAP``): a face's region for the mesh holds parts of theirs.
    Then a brightness and colour cast over the whole photo, a mild blur, JPEG at quality
    ``CROWD_JPEG_QUALITY``."""
    rng = np.random.default_rng(seed)
    width, height = size
    canvas = _clutter(_background(seed, size), rng)
    scene = Scene(f"crowd-{seed}", canvas)
    count = int(rng.integers(faces[0], faces[1] + 1))
    for row, (in_row, row_y) in enumerate(zip((count // 2, count - count // 2), (0.3, 0.64), strict=True)):
        low, high = (widths[0], float(np.mean(widths))) if row == 0 else (float(np.mean(widths)) * 0.85, widths[1])
        face_widths = rng.uniform(low, high, in_row)
        # shoulder to shoulder: neighbours' centres CROWD_GAP face widths apart, the row
        # centred near the middle; the outer heads may overhang the edge (cut, or left out)
        steps = (face_widths[1:] + face_widths[:-1]) / 2 * rng.uniform(*CROWD_GAP, in_row - 1)
        xs = np.concatenate([[0.0], np.cumsum(steps)])
        xs += width * rng.uniform(0.42, 0.58) - xs.mean()
        if rng.random() < 0.5:  # the row stands against one edge: its outer head is cut
            overhang = (0.5 - rng.uniform(0.1, CUT_SHARE)) * face_widths
            xs += overhang[0] - xs[0] if rng.random() < 0.5 else width - overhang[-1] - xs[-1]
        for face_width, x in zip(face_widths, xs, strict=True):
            centre = np.array([x, row_y * height + rng.uniform(-0.05, 0.05) * height])
            inside = (min(width, x + face_width / 2) - max(0.0, x - face_width / 2)) / face_width
            if inside < 1 - CUT_SHARE:
                continue
            name = str(rng.choice(list(heads)))
            roll = float(rng.uniform(-CROWD_ROLL, CROWD_ROLL))
            mirror, light, tone = bool(rng.integers(0, 2)), str(rng.choice(list(LIGHTS))), str(rng.choice(list(SKIN_TONES)))
            _paste_body(canvas, centre, float(face_width), roll, rng)
            box = paste_face(canvas, _toned(heads[name], tone), float(face_width), centre, roll, mirror, light)
            scene.boxes.append(np.clip(box, 0, [width, height, width, height]).astype(np.float32))
            scene.labels.append(f"{name} {face_width:.0f}px roll {roll:+.0f} {tone} {light}"
                                f"{' mirrored' if mirror else ''}{' cut' if inside < 0.999 else ''}")
            scene.kinds.append(face_kinds(name, float(face_width), roll, tone, light, inside < 0.999))
    cast = rng.uniform(0.8, 1.15, 3) * rng.uniform(0.6, 1.15)
    blurred = cv2.GaussianBlur(canvas.astype(np.float32) * cast, (0, 0), float(rng.uniform(0.5, 1.1)))
    scene.image = _jpeg(np.clip(blurred, 0, 255).astype(np.uint8), CROWD_JPEG_QUALITY)
    return scene


def _toned(head: Head, tone: str) -> Head:
    gain, gamma = SKIN_TONES[tone]
    if gamma == 1.0 and gain == (1.0, 1.0, 1.0):
        return head
    photo = 255.0 * (head.photo.astype(np.float32) / 255.0) ** gamma * np.array(gain, dtype=np.float32)
    return Head(np.clip(photo, 0, 255).astype(np.uint8), head.box)


def _paste_body(canvas: np.ndarray, centre: np.ndarray, face_width: float, roll: float, rng: np.random.Generator) -> None:
    """Neck and shoulders under a head (clothes of one colour with some weave), wider than
    the head, so neighbours' shoulders overlap and a body meets the chin as in a photo."""
    colour = rng.uniform(20, 235, 3)
    body = np.zeros(canvas.shape[:2], np.float32)
    shoulders = (round(centre[0]), round(centre[1] + 1.55 * face_width))
    cv2.ellipse(body, shoulders, (round(1.45 * face_width), round(0.8 * face_width)), -roll * 0.3, 0, 360, 1.0, -1)
    neck = (round(centre[0] - 0.22 * face_width), round(centre[1] + 0.4 * face_width),
            round(0.44 * face_width), round(0.8 * face_width))
    cv2.rectangle(body, neck[:2], (neck[0] + neck[2], neck[1] + neck[3]), 1.0, -1)
    weave = rng.normal(0, 10, canvas.shape).astype(np.float32)
    cloth = np.clip(colour + weave, 0, 255)
    mask = body[..., None] > 0
    canvas[:] = np.where(mask, cloth, canvas).astype(np.uint8)


def _clutter(canvas: np.ndarray, rng: np.random.Generator, shapes: int = 40) -> np.ndarray:
    """Background clutter: lines, boxes and blobs of random colours (furniture, posters,
    foliage) over the background photo, where a detector may see faces that are not there."""
    height, width = canvas.shape[:2]
    out = canvas.copy()
    for _ in range(shapes):
        colour = tuple(float(v) for v in rng.uniform(0, 255, 3))
        x, y = int(rng.uniform(0, width)), int(rng.uniform(0, height))
        kind = rng.integers(0, 3)
        if kind == 0:
            cv2.line(out, (x, y), (x + int(rng.normal(0, 200)), y + int(rng.normal(0, 200))), colour, int(rng.integers(1, 8)))
        elif kind == 1:
            cv2.rectangle(out, (x, y), (x + int(rng.uniform(20, 180)), y + int(rng.uniform(20, 180))), colour, -1)
        else:
            cv2.ellipse(out, (x, y), (int(rng.uniform(8, 60)), int(rng.uniform(8, 60))), float(rng.uniform(0, 180)), 0, 360, colour, -1)
    return cv2.addWeighted(canvas, 0.45, out, 0.55, 0)


def rolled_face(person: str, roll: float, width: float = 120.0, size: tuple[int, int] = LIVE_SIZE,
                heads: dict[str, Head] | None = None) -> Scene:
    """One face turned ``roll`` degrees, centred in a frame over a real-photo background."""
    heads = heads or sample_heads()
    canvas = _background(0, size)
    box = paste_face(canvas, heads[person], width, (size[0] / 2, size[1] / 2), roll)
    label = f"{person} {width:.0f}px roll {roll:+.0f} in {size[0]}x{size[1]}"
    return Scene(label.replace(" ", "/"), canvas, [box], [label], [face_kinds(person, width, roll)])


def _yaw_renders(yaws: Sequence[int] = YAWS) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, image, (468, 2) mesh) of each sample face turned by each of ``yaws``, rendered
    by ``pose_set``; none where that module is not there."""
    try:
        from swapcast.benchmarks.pose_set import person_image, render_pose_with_mesh
    except ImportError:
        return []
    renders = []
    for person in FACE_BOXES:
        for yaw in yaws:
            image, mesh = render_pose_with_mesh(person_image(person), yaw)
            renders.append((f"{person} yaw{yaw:+d}", np.ascontiguousarray(image), mesh))
    return renders


def cluttered_photos(count: int, size: tuple[int, int] = GROUP_SIZE) -> list[Scene]:
    """Photos without a face: the crowd photos' cluttered backgrounds (one in four is the
    rocket with a smiley painted on its nose), for false detections."""
    return [Scene(f"clutter-{seed}", _clutter(_background(seed, size), np.random.default_rng(seed))) for seed in range(count)]


def noisy_copies(scenes: Sequence[Scene], copies: int, seed: int = 5) -> list[Scene]:
    """``copies`` of each scene with sensor noise (sigma 2) of its own: which copies a
    borderline false face is kept in moves with the noise."""
    rng = np.random.default_rng(seed)
    return [Scene(f"{scene.name}/noise-{k}", np.clip(scene.image + rng.normal(0, 2, scene.image.shape), 0, 255).astype(np.uint8),
                  scene.boxes, scene.labels, scene.kinds)
            for scene in scenes for k in range(copies)]


def yawed_faces() -> list[Scene]:
    """Turned heads as rendered, with true boxes."""
    return [Scene(label.replace(" ", "/"), image, [np.concatenate([mesh.min(0), mesh.max(0)]).astype(np.float32)],
                  [label], [face_kinds(label, float(np.ptp(mesh[:, 0])))])
            for label, image, mesh in _yaw_renders()]


def matched(truth: Sequence[np.ndarray], found: Sequence[np.ndarray],
            frame: tuple[int, int] | None = None) -> tuple[list[bool], int]:
    """Which true faces a found box matches (each found box used once), and how many found
    boxes match none (false detections). ``frame`` (width, height): found boxes are cut to
    it first, as the truth of a face cut by the edge is (a mesh goes on past the edge)."""
    free = [np.clip(box, 0, [*frame, *frame]) if frame else box for box in found]
    hits = []
    for box in truth:
        overlaps = [box_iou(box, other) for other in free]
        best = int(np.argmax(overlaps)) if overlaps else -1
        hit = best >= 0 and overlaps[best] >= MATCH_IOU
        if hit:
            free.pop(best)
        hits.append(hit)
    return hits, len(free)


@dataclass
class Tally:
    """Recall, false detections and time of one detector over a set of scenes. Times are
    wall and CPU (this process) per image: on a busy machine the CPU time is the steadier."""

    faces: int = 0
    found: int = 0
    false: int = 0
    ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [found, faces]

    def add(self, scene: Scene, boxes: Sequence[np.ndarray], ms: float, cpu_ms: float) -> None:
        hits, false = matched(scene.boxes, boxes, scene.image.shape[1::-1])
        self.faces += len(hits)
        self.found += sum(hits)
        for kinds, hit in zip(scene.kinds, hits, strict=True):
            for kind in kinds:
                counts = self.by_kind.setdefault(kind, [0, 0])
                counts[0] += hit
                counts[1] += 1
        self.false += false
        self.ms.append(ms)
        self.cpu_ms.append(cpu_ms)
        self.missed.extend(f"{scene.name}: {label}" for label, hit in zip(scene.labels, hits) if not hit)

    def row(self) -> dict[str, float]:
        return {"found": self.found, "faces": self.faces, "recall": self.found / max(self.faces, 1),
                "false": self.false, **_times(self.ms, self.cpu_ms)}


def _times(ms: Sequence[float], cpu_ms: Sequence[float]) -> dict[str, float]:
    return {"ms_median": float(np.median(ms)), "ms_mean": float(np.mean(ms)), "ms_max": float(max(ms)),
            "cpu_ms_median": float(np.median(cpu_ms)), "cpu_ms_mean": float(np.mean(cpu_ms))}


def _timed(detect: Callable[[], list[np.ndarray]]) -> tuple[list[np.ndarray], float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    boxes = detect()
    return boxes, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def live_clip(frames: int, scene: Scene, seed: int = 100) -> list[np.ndarray]:
    """A 'webcam' clip of a still scene: sensor noise per frame, so the scene's boxes hold
    for every frame."""
    rng = np.random.default_rng(seed)
    return [np.clip(scene.image + rng.normal(0, 2, scene.image.shape), 0, 255).astype(np.uint8) for _ in range(frames)]


def _live(trackers: dict[str, FaceTracker | GraphFaceTracker], clip: Sequence[np.ndarray], truth: Sequence[Sequence[np.ndarray]]) -> dict[str, dict]:
    """Each tracker on every frame, in turn on the same frame (so load on the machine hits
    them alike); ``truth``: the true boxes of each frame (a face that enters is the last,
    from the first frame with more faces than the first: frames until it is tracked). Found:
    true faces matched, summed over frames. Times: per frame once the tracks have settled (the second half of the
    clip, what a frame costs while swapping), and the worst of the first 8 frames."""
    rows = {}
    runs: dict[str, list[tuple[list[np.ndarray], float, float]]] = {name: [] for name in trackers}
    for index, frame in enumerate(clip):
        for name, tracker in trackers.items():
            runs[name].append(_timed(lambda: [f.box for f in tracker.process(frame, index / 30)]))
    for name, frames in runs.items():
        trackers[name].close()
        scored = [matched(boxes, found, frame.shape[1::-1]) for boxes, (found, _, _), frame in zip(truth, frames, clip)]
        steady = frames[len(frames) // 2:]
        present_at = next((i for i, boxes in enumerate(truth) if len(boxes) > len(truth[0])), None)
        found_at = None if present_at is None else next(
            (i for i in range(present_at, len(scored)) if len(scored[i][0]) > len(truth[0]) and scored[i][0][-1]), None)
        rows[name] = {"found": sum(sum(hits) for hits, _ in scored), "faces": sum(len(hits) for hits, _ in scored),
                      "false": sum(false for _, false in scored),
                      "all_found_at_frame": next((i for i, (hits, _) in enumerate(scored) if all(hits)), None),
                      **_times([ms for _, ms, _ in steady], [cpu for _, _, cpu in steady]),
                      "ms_first_frames_max": max(ms for _, ms, _ in frames[:8]),
                      "newcomer_present_at": present_at,
                      "newcomer_found_after": None if found_at is None else found_at - present_at}
    return rows


def _pose_clips() -> list[tuple[str, list[np.ndarray], list[list[np.ndarray]]]]:
    """(name, frames, true boxes per frame) of ``pose_set``'s roll wobble and yaw sweep
    clips (640x480, +-25 degrees of roll, -45..45 of yaw); none without that module."""
    try:
        from swapcast.benchmarks.pose_set import pose_clips
    except ImportError:
        return []
    return [(f"live {clip.name}", clip.frames, [[clip.face_box(i)] for i in range(len(clip.frames))])
            for clip in pose_clips() if clip.motion in ("wobble", "yaw_sweep")]


def entering_clip(frames: int, heads: dict[str, Head], size: tuple[int, int] = (1280, 720), seed: int = 300,
                  enter_at: int = 8, speed: float = 14.0) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """A group clip: a crowd photo of 4-5 people (``size``) that a sixth head, 100 px wide
    and turned 15 degrees, walks into from the right edge from frame ``enter_at`` on, ``speed``
    px a frame, then stays. Truth per frame: the crowd's boxes, the newcomer's (last) once at
    least ``1 - CUT_SHARE`` of its width is inside."""
    scene = crowd_photo(seed, heads, size, faces=(4, 5))
    name = "grace_hopper yaw+15" if "grace_hopper yaw+15" in heads else "grace_hopper"
    rng = np.random.default_rng(seed)
    width, height = size
    clip, truth = [], []
    for index in range(frames):
        frame = scene.image.copy()
        boxes = list(scene.boxes)
        if index >= enter_at:
            x = max(width + 60 - speed * (index - enter_at), width - 180)
            box = paste_face(frame, heads[name], 100.0, (x, height * 0.45), roll=8.0)
            inside = (min(width, box[2]) - box[0]) / (box[2] - box[0])
            if inside >= 1 - CUT_SHARE:
                boxes.append(np.clip(box, 0, [width, height, width, height]).astype(np.float32))
        clip.append(np.clip(frame + rng.normal(0, 2, frame.shape), 0, 255).astype(np.uint8))
        truth.append(boxes)
    return clip, truth


def hog_boxes(image: np.ndarray, upsample: int = 1) -> list[np.ndarray]:
    """dlib's HOG face detector alone (face_recognition's default: upsampled once)."""
    rects, _, _ = _hog().run(np.ascontiguousarray(image), upsample, 0.0)
    return [np.array([r.left(), r.top(), r.right(), r.bottom()], dtype=np.float32) for r in rects]


@functools.cache
def _hog():
    import dlib

    return dlib.get_frontal_face_detector()


def run_detection_benchmark(config: Config, groups: int = 8, live_frames: int = 48, as_json: bool = False,
                            progress: bool = True) -> int:
    from swapcast.progress import ProgressBar

    engine = FaceEngine(config.engine.settings())
    settings = engine.settings
    one_pass = BlazeFaceDetector(settings.detector_range)
    before = _previous_still_path(engine)
    heads = sample_heads(turned=True)
    crowd_heads = sample_heads(turned=True, yaws=CROWD_YAWS)
    frontal = {name: heads[name] for name in FACE_BOXES}
    sets = {
        "crowd photos": [crowd_photo(2000 + seed, crowd_heads) for seed in range(groups)],
        "group photos": [group_photo(seed, heads=frontal) for seed in range(groups)],
        "group photos, turned": [group_photo(1000 + seed, heads=heads) for seed in range(groups)] if len(heads) > 2 else [],
        "rolled faces": [rolled_face(p, sign * roll, heads=frontal) for p in FACE_BOXES for roll in ROLLS for sign in (1, -1) if roll or sign > 0],
        "scaled faces": [rolled_face(p, 0.0, width, size, frontal) for p in FACE_BOXES for width, size in SCALES],
        "turned heads (yaw)": yawed_faces(),
        # the rocket's smiley is behind these small faces (rolled_face's background)
        "small faces, noisy copies": noisy_copies([rolled_face(p, 0.0, width, size, frontal) for p in FACE_BOXES
                                                   for width, size in SCALES[:3]], max(1, groups // 2)),
        "cluttered photos, no face": cluttered_photos(2 * groups),
    }
    detectors: dict[str, Callable[[np.ndarray], list[np.ndarray]]] = {
        "old": lambda image: [f.box for f in one_pass.detect(image)],
        "before": lambda image: [f.box for f in analyse_still(before, image)],
        "new": lambda image: [f.box for f in engine.analyse_image(image)],
        "hog": hog_boxes,
    }
    report: dict[str, dict[str, dict]] = {}
    kinds = {name: Tally() for name in detectors}  # every still set together, per kind of face
    total = sum(len(scenes) for scenes in sets.values())
    with ProgressBar("detect", enabled=progress) as bar:
        done = 0
        for set_name, scenes in sets.items():
            if not scenes:
                continue
            tallies = {name: Tally() for name in detectors}
            for scene in scenes:
                for name, detect in detectors.items():
                    result = _timed(lambda detect=detect: detect(scene.image))
                    tallies[name].add(scene, *result)
                    kinds[name].add(scene, *result)
                done += 1
                bar.update(done, total)
            report[set_name] = {name: {**t.row(), "missed": t.missed} for name, t in tallies.items()}
    live_scenes = {
        # what a frame costs: one webcam face, as in ``bench engine``
        "live 640x480, 1 face": rolled_face("grace_hopper", 0.0, width=200.0, heads=frontal),
        # recall: four heads 40-110 px wide, rolled and lit as in the group photos
        "live 640x480, 4 faces": group_photo(100, LIVE_SIZE, faces=(4, 4), widths=(40.0, 110.0), heads=frontal),
    }
    live_clips = [(name, live_clip(live_frames, scene), [scene.boxes] * live_frames) for name, scene in live_scenes.items()]
    entering = entering_clip(max(live_frames, 48), crowd_heads)
    for set_name, clip, truth in [*live_clips, *_pose_clips(), ("live 1280x720 crowd, a 6th enters", *entering)]:
        trackers = {name: _tracker(engine, sweep) for name, sweep in (("old", False), ("new", True))}
        report[set_name] = _live(trackers, clip, truth)
    report["recall per kind (all still sets)"] = {name: tally.by_kind for name, tally in kinds.items()}
    _print(report)
    if as_json:
        print(json.dumps(report, indent=2, default=float))
    return 0


def _previous_still_path(engine: FaceEngine) -> StillFaces:
    """The engine's still path as it was before doubtful faces needed dlib's CNN detector's
    second opinion."""
    settings = engine.settings
    if settings.tracker == "graphs":
        return GraphStillFaces(engine.tracking_graphs, settings.detector_range, second_opinion=False)
    return MediapipeStillFaces(settings.detector_range, second_opinion=False)


def _tracker(engine: FaceEngine, sweep: bool) -> FaceTracker | GraphFaceTracker:
    """A live tracker on the engine's backend, up to 8 faces (the crowd clip has 6)."""
    settings = engine.settings
    if settings.tracker == "graphs":
        return GraphFaceTracker(engine.tracking_graphs, max_faces=8, detector_range=settings.detector_range, sweep=sweep)
    return FaceTracker(max_faces=8, detector_range=settings.detector_range, sweep=sweep)


def _print(report: dict[str, dict[str, dict]]) -> None:
    report = dict(report)
    per_kind = report.pop("recall per kind (all still sets)")
    print("stills: old = one BlazeFace pass; before = the still path before this change (sweep, equalised sweep in dim")
    print("  views, HOG, mesh check; turned heads judged on their mesh's ROI, cut faces meshed on a black border);")
    print("  new = analyse_image: the same, and a face whose mesh presence is under 0.99 and does not hold on its ROI")
    print("  scaled 0.85x and 1.2x is kept only if dlib's CNN detector (MMOD) finds it; both on the engine's tracker backend;")
    print("  hog = dlib's HOG detector alone, upsampled once")
    print("live: the engine's tracker, old = whole-frame pass only, new = the sweep spread over frames")
    print("times per image (live: per frame, tracks settled); cpu = this process's CPU time, steadier on a busy machine")
    print(f"{'set':34} {'':6} {'found':>11} {'recall':>7} {'false':>6} {'ms median':>10} {'ms max':>8} "
          f"{'cpu median':>11} {'cpu mean':>9}")
    for set_name, rows in report.items():
        for name, row in rows.items():
            print(f"{set_name:34} {name:6} {row['found']:>5}/{row['faces']:<5} {row['found'] / max(row['faces'], 1):>7.0%} "
                  f"{row['false']:>6} {row['ms_median']:>10.1f} {row['ms_max']:>8.1f} "
                  f"{row['cpu_ms_median']:>11.1f} {row['cpu_ms_mean']:>9.1f}")
        if "all_found_at_frame" in rows.get("new", {}):
            print(f"{'':34} all faces tracked from frame: old {rows['old']['all_found_at_frame']}, "
                  f"new {rows['new']['all_found_at_frame']}; worst of the first 8 frames: "
                  f"old {rows['old']['ms_first_frames_max']:.1f} ms, new {rows['new']['ms_first_frames_max']:.1f} ms")
        if rows.get("new", {}).get("newcomer_present_at") is not None:
            print(f"{'':34} newcomer in frame from {rows['new']['newcomer_present_at']}, tracked after: "
                  f"old {_frames(rows['old']['newcomer_found_after'])}, new {_frames(rows['new']['newcomer_found_after'])}")
    print(f"recall per kind, every still set together: {'':10}" + "".join(f"{name:>14}" for name in per_kind))
    for kind in sorted({kind for counts in per_kind.values() for kind in counts}, key=_kind_order):
        print(f"  {kind:50}" + "".join(f"{_share(counts.get(kind)):>14}" for counts in per_kind.values()))
    for set_name, rows in report.items():
        for label in rows.get("new", {}).get("missed", []):
            print(f"missed by new ({set_name}): {label}")


def _share(counts: list[int] | None) -> str:
    return "-" if not counts else f"{counts[0]}/{counts[1]} {counts[0] / counts[1]:.0%}"


def _kind_order(kind: str) -> tuple[str, int]:
    """Kinds by family, then by the number in them (width 40-59 before width 100-199)."""
    number = re.search(r"\d+", kind)
    return (kind.split()[0], int(number.group()) if number else 0)


def _frames(count: int | None) -> str:
    return "never" if count is None else f"{count} frames ({count * 1000 / 30:.0f} ms at 30 fps)"
