"""The detection benchmark: how many faces are found, and what finding them costs.

The set is built from the two real faces that ship offline (scikit-image's astronaut,
matplotlib's Grace Hopper): composite "group photos" (1280x886, 6-8 heads 40-200 px wide,
rolled up to +-45 degrees, mirrored, dimmed or in coloured light, on a real photo as
background, JPEG-compressed), rolled single faces (640x480, 0-90 degrees), single faces
40 px wide in a 1280x720 frame up to one filling a 640x480 frame and, where
``pose_set`` is there, turned heads (yaw +-30/45/60), alone and in group photos. Every
face's box is known from where it was pasted. The old detector (one BlazeFace full-range pass) and the new one (the
engine's ``analyse_image``: tiles, HOG, mesh-verified) run on the same images; the live
tracker is measured on 640x480 clips, old (whole-frame pass only) and new (the sweep
spread over frames): one face for the per-frame cost, four small ones for recall, and the
pose set's roll wobble and yaw sweep clips. Live "found" counts faces over all frames."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from gpu.analysis.blazeface import BlazeFaceDetector
from gpu.analysis.detection import box_iou
from gpu.analysis.face_mesh import FaceTracker
from gpu.engine import FaceEngine
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


@dataclass
class Scene:
    """An image with its true face boxes (and each face's description)."""

    name: str
    image: np.ndarray  # RGB uint8
    boxes: list[np.ndarray] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Head:
    """A photo of one head and its face's box in it (the bounds of its 468 mesh points)."""

    photo: np.ndarray  # RGB uint8
    box: tuple[float, float, float, float]


def sample_heads(turned: bool = False) -> dict[str, Head]:
    """The two sample faces, frontal; with ``turned``, also turned by ``YAWS`` (rendered by
    ``pose_set``, where that module is there)."""
    heads = {"astronaut": Head(astronaut(), FACE_BOXES["astronaut"]),
             "grace_hopper": Head(grace_hopper(), FACE_BOXES["grace_hopper"])}
    if turned:
        for label, image, mesh in _yaw_renders():
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
    scene.image = _jpeg(canvas)
    return scene


def rolled_face(person: str, roll: float, width: float = 120.0, size: tuple[int, int] = LIVE_SIZE,
                heads: dict[str, Head] | None = None) -> Scene:
    """One face turned ``roll`` degrees, centred in a frame over a real-photo background."""
    heads = heads or sample_heads()
    canvas = _background(0, size)
    box = paste_face(canvas, heads[person], width, (size[0] / 2, size[1] / 2), roll)
    label = f"{person} {width:.0f}px roll {roll:+.0f} in {size[0]}x{size[1]}"
    return Scene(label.replace(" ", "/"), canvas, [box], [label])


def _yaw_renders() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, image, (468, 2) mesh) of each sample face turned by each of ``YAWS``, rendered
    by ``pose_set``; none where that module is not there."""
    try:
        from swapcast.benchmarks.pose_set import person_image, render_pose_with_mesh
    except ImportError:
        return []
    renders = []
    for person in FACE_BOXES:
        for yaw in YAWS:
            image, mesh = render_pose_with_mesh(person_image(person), yaw)
            renders.append((f"{person} yaw{yaw:+d}", np.ascontiguousarray(image), mesh))
    return renders


def yawed_faces() -> list[Scene]:
    """Turned heads as rendered, with true boxes."""
    return [Scene(label.replace(" ", "/"), image, [np.concatenate([mesh.min(0), mesh.max(0)]).astype(np.float32)], [label])
            for label, image, mesh in _yaw_renders()]


def matched(truth: Sequence[np.ndarray], found: Sequence[np.ndarray]) -> tuple[list[bool], int]:
    """Which true faces a found box matches (each found box used once), and how many found
    boxes match none (false detections)."""
    free = list(found)
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

    def add(self, scene: Scene, boxes: Sequence[np.ndarray], ms: float, cpu_ms: float) -> None:
        hits, false = matched(scene.boxes, boxes)
        self.faces += len(hits)
        self.found += sum(hits)
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


def _live(trackers: dict[str, FaceTracker], clip: Sequence[np.ndarray], truth: Sequence[Sequence[np.ndarray]]) -> dict[str, dict]:
    """Each tracker on every frame, in turn on the same frame (so load on the machine hits
    them alike); ``truth``: the true boxes of each frame. Found: true faces matched, summed
    over frames. Times: per frame once the tracks have settled (the second half of the
    clip, what a frame costs while swapping), and the worst of the first 8 frames."""
    rows = {}
    runs: dict[str, list[tuple[list[np.ndarray], float, float]]] = {name: [] for name in trackers}
    for index, frame in enumerate(clip):
        for name, tracker in trackers.items():
            runs[name].append(_timed(lambda: [f.box for f in tracker.process(frame, index / 30)]))
    for name, frames in runs.items():
        trackers[name].close()
        scored = [matched(boxes, found) for boxes, (found, _, _) in zip(truth, frames)]
        steady = frames[len(frames) // 2:]
        rows[name] = {"found": sum(sum(hits) for hits, _ in scored), "faces": sum(len(hits) for hits, _ in scored),
                      "false": sum(false for _, false in scored),
                      "all_found_at_frame": next((i for i, (hits, _) in enumerate(scored) if all(hits)), None),
                      **_times([ms for _, ms, _ in steady], [cpu for _, _, cpu in steady]),
                      "ms_first_frames_max": max(ms for _, ms, _ in frames[:8])}
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


def run_detection_benchmark(config: Config, groups: int = 8, live_frames: int = 48, as_json: bool = False,
                            progress: bool = True) -> int:
    from swapcast.progress import ProgressBar

    engine = FaceEngine(config.engine.settings())
    old = BlazeFaceDetector(config.engine.detector_range)
    heads = sample_heads(turned=True)
    frontal = {name: heads[name] for name in FACE_BOXES}
    sets = {
        "group photos": [group_photo(seed, heads=frontal) for seed in range(groups)],
        "group photos, turned": [group_photo(1000 + seed, heads=heads) for seed in range(groups)] if len(heads) > 2 else [],
        "rolled faces": [rolled_face(p, sign * roll, heads=frontal) for p in FACE_BOXES for roll in ROLLS for sign in (1, -1) if roll or sign > 0],
        "scaled faces": [rolled_face(p, 0.0, width, size, frontal) for p in FACE_BOXES for width, size in SCALES],
        "turned heads (yaw)": yawed_faces(),
    }
    report: dict[str, dict[str, dict]] = {}
    total = sum(len(scenes) for scenes in sets.values())
    with ProgressBar("detect", enabled=progress) as bar:
        done = 0
        for set_name, scenes in sets.items():
            if not scenes:
                continue
            tallies = {"old": Tally(), "new": Tally()}
            for scene in scenes:
                tallies["old"].add(scene, *_timed(lambda: [f.box for f in old.detect(scene.image)]))
                tallies["new"].add(scene, *_timed(lambda: [f.box for f in engine.analyse_image(scene.image)]))
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
    for set_name, clip, truth in [*live_clips, *_pose_clips()]:
        trackers = {name: FaceTracker(max_faces=4, detector_range=config.engine.detector_range, sweep=sweep)
                    for name, sweep in (("old", False), ("new", True))}
        report[set_name] = _live(trackers, clip, truth)
    _print(report)
    if as_json:
        print(json.dumps(report, indent=2, default=float))
    return 0


def _print(report: dict[str, dict[str, dict]]) -> None:
    print("old = one BlazeFace pass (stills: the detector alone; live: the tracker with its whole-frame pass only)")
    print("new = tile sweep + HOG + mesh check (stills: analyse_image; live: the tracker, its sweep spread over frames)")
    print("times per image (live: per frame, tracks settled); cpu = this process's CPU time, steadier on a busy machine")
    print(f"{'set':32} {'':4} {'found':>11} {'recall':>7} {'false':>6} {'ms median':>10} {'ms max':>8} "
          f"{'cpu median':>11} {'cpu mean':>9}")
    for set_name, rows in report.items():
        for name, row in rows.items():
            print(f"{set_name:32} {name:4} {row['found']:>5}/{row['faces']:<5} {row['found'] / max(row['faces'], 1):>7.0%} "
                  f"{row['false']:>6} {row['ms_median']:>10.1f} {row['ms_max']:>8.1f} "
                  f"{row['cpu_ms_median']:>11.1f} {row['cpu_ms_mean']:>9.1f}")
        if "all_found_at_frame" in rows.get("new", {}):
            print(f"{'':32} all faces tracked from frame: old {rows['old']['all_found_at_frame']}, "
                  f"new {rows['new']['all_found_at_frame']}; worst of the first 8 frames: "
                  f"old {rows['old']['ms_first_frames_max']:.1f} ms, new {rows['new']['ms_first_frames_max']:.1f} ms")
    for set_name, rows in report.items():
        for label in rows["new"].get("missed", []):
            print(f"missed by new ({set_name}): {label}")
