"""The people set: clips with two and three people who cross, leave and come back, and
turn away -- what ``bench quality``'s mapping part and the map-faces tests run.

Only two real faces ship offline (the astronaut, Grace Hopper). The third person is
derived from them and checked to be someone else (``third_person``): the astronaut's face
texture warped onto Grace Hopper's face shape (a landmark-driven warp, colour matched to
her skin), then reshaped (a longer face and nose, a narrower jaw and mouth, brows raised)
and mirrored. Its dlib distance to both real people must be over ``DISTINCT`` (measured
0.67 to the astronaut, 0.75 to Grace Hopper) and to its own turned views under 0.6, or
the set refuses to build.

Each person is a head cut from a photo turned by the pose set's 3D head
(``pose_set.render_pose_with_mesh``), with a feathered oval around the head, placed and
moved over a room; people nearer the camera are drawn over the others. Every frame
carries the ground truth per person: the face's 468 points, how much of the face is in the
frame and not hidden by someone in front, and its turn.

Clips come in two halves: ``tuning`` (what the identity thresholds were tuned on) and
``held-out`` (other roles, speeds, sizes and rooms, never used for tuning)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

from gpu.analysis.landmarks import FACE_OVAL, five_points
from gpu.types import Face
from swapcast.benchmarks.pose_set import _background, head_model, person_image, render_pose_with_mesh

PEOPLE = ("astronaut", "grace_hopper", "third")
DISTINCT = 0.6  # dlib distance the derived person must keep from both real ones
FPS = 30.0
CANVAS = (640, 480)
YAW_STEP = 5.0  # renders are cached per this many degrees of turn
SPLITS = ("tuning", "held-out")
PRESENT_VISIBLE = 0.7  # a face this much in view (in the frame, not hidden) ...
PRESENT_YAW = 45.0  # ... and turned at most this far is one the swap is expected on


@dataclass(frozen=True)
class Appearance:
    """One person in one frame, as the ground truth has it."""

    person: str
    mesh: np.ndarray  # (468, 2) where the face's points are in the frame
    visible: float  # share of the face inside the frame and not behind someone nearer
    yaw: float

    @property
    def box(self) -> np.ndarray:
        return np.concatenate([self.mesh.min(0), self.mesh.max(0)]).astype(np.float32)

    @property
    def present(self) -> bool:
        """A face the swap is expected on: mostly in view, not turned away."""
        return self.visible >= PRESENT_VISIBLE and abs(self.yaw) <= PRESENT_YAW

    def face(self) -> Face:
        return Face(box=self.box, kps=five_points(self.mesh), mesh=self.mesh)


@dataclass(frozen=True)
class PeopleClip:
    name: str
    split: str  # "tuning" or "held-out"
    people: tuple[str, ...]
    frames: list[np.ndarray]  # RGB uint8, CANVAS sized
    truth: list[list[Appearance]]  # per frame, the people drawn in it
    fps: float = FPS


@dataclass(frozen=True)
class Actor:
    """A person's path through a clip: keyframes (frame, x, y, yaw, depth) interpolated
    linearly; x and y are the face centre in canvas fractions (outside 0..1: out of the
    frame), depth orders who is drawn in front (larger = nearer)."""

    person: str
    keys: tuple[tuple[float, float, float, float, float], ...]
    face_width: float = 110.0

    def at(self, frame: int) -> tuple[float, float, float, float]:
        keys = np.array(self.keys, np.float64)
        return tuple(float(np.interp(frame, keys[:, 0], keys[:, k])) for k in range(1, 5))  # type: ignore[return-value]


# -- the derived third person ---------------------------------------------------------------------

_third_lock = threading.Lock()
RESHAPE = {"eyes": -0.084, "jaw": -0.168, "long": 0.42, "mouth": -0.21, "nose": 0.35, "brow": 0.14}  # eye distances


def third_person(check: Callable[[np.ndarray, np.ndarray], float] | None = None) -> np.ndarray:
    """The derived third person's photo (RGB uint8, Grace Hopper's size). ``check`` is a
    distance between two photos' faces (dlib's): given, the photo is refused unless it is
    over ``DISTINCT`` from both real people."""
    with _third_lock:
        photo = _third_photo()
    if check is not None:
        for real in PEOPLE[:2]:
            distance = check(photo, person_image(real))
            if distance <= DISTINCT:
                raise ValueError(f"the derived third person is only {distance:.2f} from {real}: not someone else")
    return photo


@lru_cache(maxsize=1)
def _third_photo() -> np.ndarray:
    donor, base = person_image("astronaut"), person_image("grace_hopper")
    base_points = head_model(base).points[:, :2]
    moved = _warp_points(donor, head_model(donor).points[:, :2], base_points, base.shape)
    blended = _blend_face(moved, base, base_points)
    reshaped = _reshape(blended, head_model(blended).points[:, :2], RESHAPE)
    return np.ascontiguousarray(reshaped[:, ::-1])


def _dense_warp(image: np.ndarray, at: np.ndarray, offsets: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``image`` resampled so that the output pixel at ``at[i]`` reads ``at[i] + offsets[i]``
    (a thin-plate spline between the points, evaluated on an 8 px grid)."""
    from scipy.interpolate import RBFInterpolator

    height, width = shape[:2]
    spline = RBFInterpolator(at.astype(np.float64), offsets.astype(np.float64), kernel="thin_plate_spline", smoothing=1.0)
    gy, gx = np.mgrid[0:height:8, 0:width:8]
    grid = spline(np.stack([gx.ravel(), gy.ravel()], 1).astype(np.float64)).reshape(*gy.shape, 2)
    field = cv2.resize(grid.astype(np.float32), (width, height), interpolation=cv2.INTER_LINEAR)
    map_x = np.arange(width, dtype=np.float32)[None, :] + field[..., 0]
    map_y = np.arange(height, dtype=np.float32)[:, None] + field[..., 1]
    return cv2.remap(image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def _warp_points(image: np.ndarray, points: np.ndarray, to: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``image`` warped so that its ``points`` land on ``to``."""
    return _dense_warp(image, to, points - to, shape)


def _blend_face(face: np.ndarray, onto: np.ndarray, mesh: np.ndarray) -> np.ndarray:
    """The face oval of ``face`` over ``onto``, its colour statistics (LAB) matched to
    ``onto``'s face, with a feathered edge."""
    width = float(np.ptp(mesh[:, 0]))
    mask = np.zeros(onto.shape[:2], np.float32)
    cv2.fillConvexPoly(mask, cv2.convexHull(mesh[list(FACE_OVAL)].astype(np.int32)), 1.0)
    edge = max(3, int(0.06 * width))
    mask = cv2.GaussianBlur(cv2.erode(mask, np.ones((edge, edge), np.uint8)), (0, 0), edge / 2)
    inside = mask > 0.5
    lab_face = cv2.cvtColor(face, cv2.COLOR_RGB2LAB).astype(np.float32)
    lab_onto = cv2.cvtColor(onto, cv2.COLOR_RGB2LAB).astype(np.float32)
    for channel in range(3):
        mine, theirs = lab_face[..., channel][inside], lab_onto[..., channel][inside]
        lab_face[..., channel] = (lab_face[..., channel] - mine.mean()) * (theirs.std() + 1e-3) / (mine.std() + 1e-3) + theirs.mean()
    recoloured = cv2.cvtColor(np.clip(lab_face, 0, 255).astype(np.uint8), cv2.COLOR_LAB2RGB).astype(np.float32)
    out = recoloured * mask[..., None] + onto.astype(np.float32) * (1 - mask[..., None])
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def _reshape(image: np.ndarray, mesh: np.ndarray, amounts: dict[str, float]) -> np.ndarray:
    """The face's shape changed by ``amounts`` (in eye distances): eyes apart, jaw wider,
    face longer below the nose, mouth wider, nose longer, brows up (negative: the other way)."""
    points = mesh.astype(np.float64)
    left, right = points[[33, 133]].mean(0), points[[362, 263]].mean(0)
    eye = float(np.linalg.norm(right - left))
    centre = (left + right) / 2
    across = (right - left) / eye
    down = np.array([-across[1], across[0]]) * (1 if across[0] >= 0 else -1)
    x, y = (points - centre) @ across / eye, (points - centre) @ down / eye
    dx = np.where((y < 0.25) & (y > -0.4) & (np.abs(x) > 0.2) & (np.abs(x) < 0.85), np.sign(x) * amounts["eyes"], 0.0)
    dx = dx + x * amounts["jaw"] * np.clip((y - 0.3) / 1.2, 0, 1)
    dx = dx + np.where((y > 0.9) & (y < 1.4) & (np.abs(x) < 0.6), x * amounts["mouth"], 0.0)
    dy = np.clip(y - 0.4, 0, None) * amounts["long"]
    dy = dy + np.where((y > 0.2) & (y < 0.95) & (np.abs(x) < 0.3), (y - 0.2) * amounts["nose"], 0.0)
    dy = dy - np.where((y < -0.15) & (y > -0.6), amounts["brow"], 0.0)
    moved = (np.stack([dx, dy], 1) * eye) @ np.stack([across, down])
    height, width = image.shape[:2]
    ring_angles = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    ring = centre + 2.6 * eye * np.stack([np.cos(ring_angles), 1.3 * np.sin(ring_angles)], 1)
    corners = np.array([[0, 0], [width - 1, 0], [0, height - 1], [width - 1, height - 1]], np.float64)
    fixed = np.concatenate([ring, corners])
    return _dense_warp(image, np.concatenate([points + moved, fixed]),
                       np.concatenate([-moved, np.zeros_like(fixed)]), image.shape)


def photo_of(person: str) -> np.ndarray:
    return third_person() if person == "third" else person_image(person)


# -- drawing --------------------------------------------------------------------------------------

_renders: dict[tuple[str, float], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
_renders_lock = threading.Lock()


def _sprite(person: str, yaw: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(image, alpha, mesh) of ``person``'s head turned ``yaw`` degrees (rounded to
    ``YAW_STEP``), cut out with a feathered oval around the head."""
    yaw = float(np.clip(round(yaw / YAW_STEP) * YAW_STEP, -90, 90))
    key = (person, yaw)
    with _renders_lock:
        cached = _renders.get(key)
    if cached is not None:
        return cached
    photo = photo_of(person)
    image, mesh = render_pose_with_mesh(photo, yaw)
    front = head_model(photo).points[:, :2]  # the oval keeps the frontal head's size when it turns
    width, height = float(np.ptp(front[:, 0])), float(np.ptp(front[:, 1]))
    centre = (front.min(0) + front.max(0)) / 2 - [0, 0.12 * height]
    alpha = np.zeros(image.shape[:2], np.float32)
    cv2.ellipse(alpha, (int(centre[0]), int(centre[1])), (int(0.8 * width), int(0.85 * height)), 0, 0, 360, 1.0, -1)
    neck = np.array([[centre[0] - 0.4 * width, centre[1]], [centre[0] + 0.4 * width, centre[1]],
                     [centre[0] + 0.45 * width, centre[1] + 1.3 * height], [centre[0] - 0.45 * width, centre[1] + 1.3 * height]])
    cv2.fillConvexPoly(alpha, neck.astype(np.int32), 1.0)
    alpha = cv2.GaussianBlur(alpha, (0, 0), 0.06 * width)
    entry = (image, alpha, mesh)
    with _renders_lock:
        _renders[key] = entry
    return entry


def render_clip(name: str, split: str, actors: Sequence[Actor], frames: int, seed: int) -> PeopleClip:
    """Draw ``actors`` over a room, nearest last, with a camera's noise."""
    width, height = CANVAS
    background = _background(CANVAS, seed).astype(np.float32)
    rng = np.random.default_rng(seed)
    images, truth = [], []
    for index in range(frames):
        canvas = background.copy()
        placed = []
        for actor in sorted(actors, key=lambda a: a.at(index)[3]):
            x, y, yaw, _ = actor.at(index)
            image, alpha, mesh = _sprite(actor.person, yaw)
            front = head_model(photo_of(actor.person)).points[:, :2]
            scale = actor.face_width / float(np.ptp(front[:, 0]))
            centre = (front.min(0) + front.max(0)) / 2
            matrix = np.float32([[scale, 0, x * width - scale * centre[0]], [0, scale, y * height - scale * centre[1]]])
            warped_alpha = cv2.warpAffine(alpha, matrix, CANVAS, flags=cv2.INTER_LINEAR, borderValue=0.0)
            if warped_alpha.max() <= 0:
                continue
            warped = cv2.warpAffine(image, matrix, CANVAS, flags=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
            canvas = warped * warped_alpha[..., None] + canvas * (1 - warped_alpha[..., None])
            moved = (mesh @ matrix[:, :2].T + matrix[:, 2]).astype(np.float32)
            placed.append((actor.person, moved, yaw, warped_alpha))
        noise = rng.normal(0.0, 1.5, canvas.shape)
        images.append(np.clip(canvas + noise + 0.5, 0, 255).astype(np.uint8))
        truth.append(_appearances(placed))
    return PeopleClip(name, split, tuple(a.person for a in actors), images, truth)


def _appearances(placed: list[tuple[str, np.ndarray, float, np.ndarray]]) -> list[Appearance]:
    """Who is in the frame and how much of each face shows (drawn back to front)."""
    width, height = CANVAS
    out = []
    for depth, (person, mesh, yaw, _) in enumerate(placed):
        face = np.zeros((height + 200, width + 200), np.uint8)  # a margin: faces partly out of the frame
        cv2.fillConvexPoly(face, cv2.convexHull((mesh[list(FACE_OVAL)] + 100).astype(np.int32)), 1)
        total = int(face.sum())
        if total == 0:
            continue
        seen = face[100:100 + height, 100:100 + width].astype(bool)
        for _, _, _, nearer in placed[depth + 1:]:
            seen &= nearer < 0.5
        visible = float(seen.sum()) / total
        if visible > 0.02:
            out.append(Appearance(person, mesh, visible, yaw))
    return out


# -- the clips ------------------------------------------------------------------------------------


def _cross(name: str, split: str, front: str, back: str, frames: int, width: float, seed: int) -> PeopleClip:
    """Two people walk past each other; ``front`` passes in front of ``back``'s face."""
    end = frames - 1
    actors = [
        Actor(back, ((0, 0.22, 0.45, 15, 0), (end, 0.78, 0.45, 15, 0)), width),
        Actor(front, ((0, 0.78, 0.47, -15, 1), (end, 0.22, 0.47, -15, 1)), width),
    ]
    return render_clip(name, split, actors, frames, seed)


def _leave_return(name: str, split: str, stays: str, leaves: str, frames: int, width: float, seed: int,
                  side: float = 1.0) -> PeopleClip:
    """``stays`` turns away (to 85 degrees) and back; ``leaves`` walks out of the frame on
    ``side`` (1 right, -1 left), stays out, comes back."""
    f = frames / 180.0
    out = 0.5 + side * 0.8
    home = 0.5 + side * 0.22
    actors = [
        Actor(stays, ((0, 0.5 - side * 0.22, 0.45, 0, 0), (50 * f, 0.5 - side * 0.22, 0.45, 0, 0),
                      (70 * f, 0.5 - side * 0.2, 0.45, 85, 0), (95 * f, 0.5 - side * 0.2, 0.45, 85, 0),
                      (115 * f, 0.5 - side * 0.22, 0.45, 0, 0), (frames, 0.5 - side * 0.22, 0.45, 0, 0)), width),
        Actor(leaves, ((0, home, 0.47, 0, 1), (30 * f, home, 0.47, 0, 1), (60 * f, out, 0.5, side * 20, 1),
                       (110 * f, out, 0.5, side * 20, 1), (140 * f, home, 0.47, 0, 1), (frames, home, 0.47, 0, 1)), width),
    ]
    return render_clip(name, split, actors, frames, seed)


def _three(name: str, split: str, left: str, right: str, walker: str, frames: int, width: float, seed: int) -> PeopleClip:
    """``left`` stays; ``right`` turns away (-85 degrees) and back; ``walker`` comes in from
    the left edge, stops in the middle, then passes in front of ``left``'s face and stops past it."""
    f = frames / 210.0
    actors = [
        Actor(left, ((0, 0.22, 0.42, 10, 0), (frames, 0.22, 0.42, 10, 0)), width),
        Actor(right, ((0, 0.8, 0.45, 0, 0), (80 * f, 0.8, 0.45, 0, 0), (100 * f, 0.8, 0.45, -85, 0),
                      (125 * f, 0.8, 0.45, -85, 0), (145 * f, 0.8, 0.45, 0, 0), (frames, 0.8, 0.45, 0, 0)), width),
        Actor(walker, ((0, -0.3, 0.5, 20, 1), (30 * f, -0.3, 0.5, 20, 1), (80 * f, 0.5, 0.5, 0, 1),
                       (120 * f, 0.5, 0.5, 0, 1), (175 * f, 0.05, 0.52, -15, 1), (frames, 0.05, 0.52, 0, 1)), width),
    ]
    return render_clip(name, split, actors, frames, seed)


def _steady(name: str, split: str, left: str, right: str, frames: int, seed: int) -> PeopleClip:
    """Two people talking: each sways a little and turns a little, nobody leaves or crosses
    (what the cost of knowing who is who is measured on)."""
    keys_left, keys_right = [], []
    for second in range(0, frames // 30 + 2):
        frame = second * 30
        phase = second * 0.9
        keys_left.append((frame, 0.28 + 0.015 * np.sin(phase), 0.45, 12 * np.sin(phase * 0.7), 0))
        keys_right.append((frame, 0.72 + 0.015 * np.cos(phase), 0.46, -12 * np.cos(phase * 0.6), 0))
    return render_clip(name, split, [Actor(left, tuple(keys_left), 110.0), Actor(right, tuple(keys_right), 110.0)],
                       frames, seed)


def steady_clip(quick: bool = False) -> PeopleClip:
    """The cost clip: two people for 20 s (quick: 4 s)."""
    return _steady("steady", "cost", PEOPLE[0], PEOPLE[1], 120 if quick else 600, seed=7)


def _recipes(split: str, quick: bool) -> dict[str, Callable[[], PeopleClip]]:
    """Each clip of a half by name, drawn when called."""
    short = 0.6 if quick else 1.0
    a, g, t = PEOPLE
    if split == "tuning":
        return {
            "cross": lambda: _cross("cross", split, g, a, int(150 * short), 110.0, seed=1),
            "leave_return": lambda: _leave_return("leave_return", split, a, g, int(180 * short), 110.0, seed=2),
            "three": lambda: _three("three", split, a, g, t, int(210 * short), 100.0, seed=3),
        }
    return {
        "cross_fast": lambda: _cross("cross_fast", split, t, a, int(100 * short), 95.0, seed=4),
        "leave_return_left": lambda: _leave_return("leave_return_left", split, t, g, int(200 * short), 130.0, seed=5,
                                                   side=-1.0),
        "three_reordered": lambda: _three("three_reordered", split, g, t, a, int(240 * short), 105.0, seed=6),
    }


def people_clips(split: str = "tuning", quick: bool = False) -> list[PeopleClip]:
    """The clips of one half (``SPLITS``); ``quick``: shorter ones (tests, smoke runs)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    return [draw() for draw in _recipes(split, quick).values()]


def clip_by_name(name: str, quick: bool = False) -> PeopleClip:
    """One clip of either half, drawn alone."""
    for split in SPLITS:
        recipes = _recipes(split, quick)
        if name in recipes:
            return recipes[name]()
    raise ValueError(f"no people clip {name!r}")


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    low, high = np.maximum(a[:2], b[:2]), np.minimum(a[2:], b[2:])
    inter = float(np.prod(np.clip(high - low, 0, None)))
    union = float(np.prod(a[2:] - a[:2]) + np.prod(b[2:] - b[:2])) - inter
    return inter / union if union > 0 else 0.0


def who_is(box: np.ndarray, truth: list[Appearance], min_iou: float = 0.3) -> Appearance | None:
    """The ground-truth person whose face ``box`` is (the best overlap over ``min_iou``)."""
    best = max(truth, key=lambda a: box_iou(box, a.box), default=None)
    return best if best is not None and box_iou(box, best.box) >= min_iou else None
