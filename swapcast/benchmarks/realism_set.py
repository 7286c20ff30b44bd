"""The realism set: the sources a real user uploads and the targets a real camera sees,
derived from the two sample faces and split in two halves (tune on one, report on the other).

Sources (each person's photo, degraded the ways uploads hurt a swap most):
grey and sepia prints, colour casts (mild, and strong enough to crush a channel to black or
clip it white: sodium street light, a red stage light), a face cut small out of a group photo (80-90 px wide,
JPEG), hair strands drawn over the forehead and a cheek, a dark background with a hard side
light, lowered lids (looking down, half closed), a darker skin, the photo and its mirror image.

Targets: the other person frontal (as is or mirrored), with a darker skin, under warm, cool and side light,
in a hard cast shadow (a hat brim's over the upper face, a window frame's down one side),
soft as a webcam's picture (blurred and JPEG-compressed, or half resolution blown up),
turned 30 degrees, a composited group photo (three heads, small, turned and lit warm or
cool) and a clip of a small 3/4-view face moving (pan or zoom).

The halves share no variant: ``tune`` has the photo, grey, a warm cast, sodium light, 90 px,
one set of strands, light from the left, gaze down, a deep brown skin; ``held`` the mirror
image, sepia, a cool cast, a red stage light, 80 px, other strands on the other side, light
from the right, half-closed lids, a dark skin of another tone and exposure -- and the
targets likewise (a brim's shadow to tune on, a window's to report on; see ``SOURCE_VARIANTS``
and ``TARGET_VARIANTS``). Everything is deterministic: the same set every run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from gpu.models.canonical_mesh import INNER_LIP_CONTOUR, LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR
from swapcast.benchmarks.pose_set import (
    LARGE_CANVAS,
    PEOPLE,
    SMALL_CANVAS,
    _background,
    _place,
    head_model,
    person_image,
    relight,
    render_pose_with_mesh,
)

HALVES = ("tune", "held")
SOURCE_VARIANTS = {
    "tune": ("photo", "grey", "warm_cast", "sodium", "small90", "hair_a", "dark_side_left", "gaze_down", "brown_skin"),
    "held": ("mirrored", "sepia", "cool_cast", "stage_red", "small80", "hair_b", "dark_side_right", "lids_half", "dark_skin"),
}
TARGET_VARIANTS = {
    "tune": ("frontal", "warm", "side_left", "soft", "yaw+30", "group_a", "brown_skin", "brim_shadow"),
    "held": ("mirrored", "cool", "side_right", "webcam", "yaw-30", "group_b", "dark_skin", "window_shadow"),
}
FRONTAL_TARGETS = ("frontal", "mirrored", "warm", "cool", "side_left", "side_right", "soft", "webcam", "brown_skin",
                   "dark_skin", "brim_shadow", "window_shadow")
# a hard cast shadow: (the direction from its edge into the light, degrees with 90 down; a point of the edge as
# fractions of the face's box; the light left in the shadow, linear; the edge's width, of the face's width)
CAST_SHADOWS = {"brim_shadow": (90.0, (0.5, 0.38), 0.3, 0.03), "window_shadow": (-20.0, (0.45, 0.5), 0.25, 0.02)}
# a darker skin's albedo per channel (linear light, of the photo's) and the camera's exposure for it
SKIN_TONES = {"brown_skin": ((0.15, 0.1, 0.07), 1.6), "dark_skin": ((0.22, 0.13, 0.09), 1.2)}
CLIP_FRAMES = 24


@dataclass(frozen=True)
class RealismSource:
    """One source photo: a person's photo, degraded one way."""

    name: str  # e.g. "astronaut/grey"
    person: str
    variant: str
    half: str
    image: np.ndarray  # RGB uint8


@dataclass(frozen=True)
class TargetFace:
    """One face in a target image, with its ground truth."""

    mesh: np.ndarray  # (468, 2) float32
    yaw: float

    @property
    def box(self) -> np.ndarray:
        return np.concatenate([self.mesh.min(0), self.mesh.max(0)]).astype(np.float32)

    @property
    def width(self) -> float:
        return float(np.ptp(self.mesh[:, 0]))


@dataclass(frozen=True)
class RealismTarget:
    """A still target: one image, one or more faces of one person."""

    name: str  # e.g. "grace_hopper/warm"
    person: str
    variant: str
    half: str
    image: np.ndarray
    faces: tuple[TargetFace, ...]

    @property
    def frontal(self) -> bool:
        return self.variant in FRONTAL_TARGETS


@dataclass(frozen=True)
class RealismClip:
    """A moving target: a small 3/4-view face, one ground-truth face per frame."""

    name: str
    person: str
    half: str
    frames: list[np.ndarray]
    faces: list[TargetFace]
    fps: float = 30.0


def realism_sources(half: str, people: tuple[str, ...] = PEOPLE) -> Iterator[RealismSource]:
    _check_half(half)
    for person in people:
        photo = person_image(person)
        for variant in SOURCE_VARIANTS[half]:
            yield RealismSource(f"{person}/{variant}", person, variant, half, _SOURCE_MAKERS[variant](photo))


def realism_targets(half: str, people: tuple[str, ...] = PEOPLE) -> Iterator[RealismTarget]:
    _check_half(half)
    for person in people:
        photo = person_image(person)
        for variant in TARGET_VARIANTS[half]:
            image, faces = _target(photo, variant, seed=len(person))
            yield RealismTarget(f"{person}/{variant}", person, variant, half, image, faces)


def realism_clips(half: str, people: tuple[str, ...] = PEOPLE, frames: int = CLIP_FRAMES) -> Iterator[RealismClip]:
    """A small 3/4-view face moving: ``tune`` turned -30 degrees (+-5), ~100 px wide,
    panning; ``held`` turned +35 (+-5), 80-100 px wide, zooming."""
    _check_half(half)
    width, height = SMALL_CANVAS
    for person in people:
        photo = person_image(person)
        background = _background(SMALL_CANVAS, seed=3 + len(person))
        rng = np.random.default_rng(7 + len(person))
        images, faces = [], []
        for index in range(frames):
            phase = 2 * math.pi * index / frames
            centre = np.array([width / 2, height * 0.45])
            if half == "tune":
                yaw, face_width = -30.0 + 5.0 * math.sin(phase), 100.0
                centre = centre + [0.2 * width * math.sin(phase), 0.0]
            else:
                yaw, face_width = 35.0 + 5.0 * math.sin(2 * phase), 90.0 + 10.0 * math.sin(phase)
            image, mesh = render_pose_with_mesh(photo, round(yaw, 1))
            frame, mesh = _place(image, mesh, background, face_width, centre, 0.0)
            noise = rng.normal(0.0, 1.5, frame.shape)
            images.append(np.clip(frame + noise, 0, 255).astype(np.uint8))
            faces.append(TargetFace(mesh, yaw))
        yield RealismClip(f"{person}/clip_{half}", person, half, images, faces)


def _check_half(half: str) -> None:
    if half not in HALVES:
        raise ValueError(f"unknown half {half!r}; choose from {', '.join(HALVES)}")


# -- sources ---------------------------------------------------------------------------------------


def _photo_mesh(photo: np.ndarray) -> np.ndarray:
    return head_model(photo).points[:, :2]


def _grey(photo: np.ndarray) -> np.ndarray:
    return np.repeat(cv2.cvtColor(photo, cv2.COLOR_RGB2GRAY)[..., None], 3, axis=2)


def _sepia(photo: np.ndarray) -> np.ndarray:
    grey = cv2.cvtColor(photo, cv2.COLOR_RGB2GRAY).astype(np.float32)
    tint = np.array([1.07, 0.88, 0.66], np.float32)  # an old print's brown
    faded = 30.0 + 0.8 * grey  # and its lifted blacks
    return np.clip(faded[..., None] * tint + 0.5, 0, 255).astype(np.uint8)


def _cast(gains: tuple[float, float, float]) -> Callable[[np.ndarray], np.ndarray]:
    def make(photo: np.ndarray) -> np.ndarray:
        return np.clip(photo.astype(np.float32) * np.array(gains, np.float32) + 0.5, 0, 255).astype(np.uint8)

    return make


def _coloured_light(gains: tuple[float, float, float]) -> Callable[[np.ndarray], np.ndarray]:
    """The photo under light of another colour and strength: ``gains`` on linear RGB,
    re-encoded to sRGB and clipped (a weak channel crushed to black, a strong one clipped)."""

    def make(photo: np.ndarray) -> np.ndarray:
        return _to_srgb(_to_linear(photo) * np.array(gains, np.float32))

    return make


def _small(face_width: float) -> Callable[[np.ndarray], np.ndarray]:
    """The photo scaled so its face is ``face_width`` px wide, saved as a middling JPEG:
    a face cut out of a group photo."""

    def make(photo: np.ndarray) -> np.ndarray:
        scale = face_width / float(np.ptp(_photo_mesh(photo)[:, 0]))
        small = cv2.resize(photo, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        return _jpeg(small, 70)

    return make


def _jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    """``image`` (RGB) saved as a JPEG of ``quality`` and read back."""
    _, data = cv2.imencode(".jpg", image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    return np.ascontiguousarray(cv2.imdecode(data, cv2.IMREAD_COLOR)[..., ::-1])


def _hair(seed: int, right_side: bool) -> Callable[[np.ndarray], np.ndarray]:
    """Strands of the person's own hair colour falling from the hairline over the forehead
    and down over one cheek (the image's right one with ``right_side``)."""

    def make(photo: np.ndarray) -> np.ndarray:
        mesh = _photo_mesh(photo)
        rng = np.random.default_rng(seed)
        width = float(np.ptp(mesh[:, 0]))
        top = mesh[10]
        chin = mesh[152]
        up = (top - chin) / max(float(np.linalg.norm(top - chin)), 1.0)
        temple = mesh[162] + np.array([-0.06 * width, 0.0])  # beside the upper temple: the hair's colour
        hair = photo[int(np.clip(temple[1], 0, photo.shape[0] - 1)), int(np.clip(temple[0], 0, photo.shape[1] - 1))].astype(np.float32)
        out = photo.copy()
        side = 1.0 if right_side else -1.0
        for strand in range(16):
            over_cheek = strand >= 9
            start_x = top[0] + side * width * (rng.uniform(0.05, 0.45) if over_cheek else rng.uniform(-0.35, 0.35))
            start = np.array([start_x, top[1] - rng.uniform(0.0, 0.1) * width]) - up * 0.05 * width
            reach = rng.uniform(0.55, 0.9) * width if over_cheek else rng.uniform(0.2, 0.4) * width
            sway = side * rng.uniform(0.05, 0.2) * width
            t = np.linspace(0.0, 1.0, 24)[:, None]
            path = start + (-up) * reach * t + np.array([sway, 0.0]) * np.sin(np.pi * t * rng.uniform(0.5, 1.2))
            colour = np.clip(hair * rng.uniform(0.6, 1.2), 0, 255)
            thickness = max(1, int(round(width / 250 * rng.uniform(1.0, 2.5))))
            cv2.polylines(out, [np.round(path * 16).astype(np.int32)], False, tuple(float(c) for c in colour),
                          thickness, cv2.LINE_AA, shift=4)
        return out

    return make


def _head_mask(photo: np.ndarray) -> np.ndarray:
    """(H, W) float32 in [0, 1]: the head (hair to chin) as the pose set lifts it, soft-edged."""
    model = head_model(photo)
    mask = np.zeros(photo.shape[:2], np.float32)
    for y, x0, x1 in zip(model.rows, model.left, model.right, strict=True):
        mask[y, max(0, int(x0)):int(math.ceil(x1))] = 1.0
    return cv2.GaussianBlur(mask, (0, 0), 2.0)


def _dark_side(from_right: bool) -> Callable[[np.ndarray], np.ndarray]:
    """The head against a near-black background, lit hard from one side (the other side of
    the face in shadow)."""

    def make(photo: np.ndarray) -> np.ndarray:
        mesh = _photo_mesh(photo)
        lit = _side_light(photo, mesh, from_right, dark=0.22, bright=1.25)
        head = _head_mask(photo)[..., None]
        return np.clip(lit * head + photo.astype(np.float32) * 0.1 * (1.0 - head) + 0.5, 0, 255).astype(np.uint8)

    return make


def _darker_skin(variant: str) -> Callable[[np.ndarray], np.ndarray]:
    """The person with a darker skin: the skin's albedo (face, ears, neck; also the hair, not the
    eyes or teeth) scaled per channel in linear light by ``SKIN_TONES``, so its shading and
    detail stay, and the picture exposed for it (a light background may clip)."""
    albedo, exposure = SKIN_TONES[variant]

    def make(photo: np.ndarray) -> np.ndarray:
        mesh = _photo_mesh(photo)
        skin = _skin_mask(photo, mesh)[..., None]
        linear = _to_linear(photo) * (1.0 - skin + skin * np.array(albedo, np.float32)) * exposure
        return _to_srgb(linear)

    return make


def _skin_mask(photo: np.ndarray, mesh: np.ndarray) -> np.ndarray:
    """(H, W) float32 in [0, 1]: the face (its mesh's outline, grown a little), the head as the
    pose set lifts it and, near it, what has the face's colour (the neck, the ears); not the
    lighter half of each eye opening and of the mouth's inside (the whites, the teeth)."""
    lab = cv2.cvtColor(photo, cv2.COLOR_RGB2LAB).astype(np.float32)
    width, height = float(np.ptp(mesh[:, 0])), float(np.ptp(mesh[:, 1]))
    face = np.zeros(photo.shape[:2], np.uint8)
    cv2.fillConvexPoly(face, cv2.convexHull(np.round(mesh).astype(np.int32)), 1)
    skin_ab = np.median(lab[face > 0][:, 1:], axis=0)
    grow = max(3, int(0.06 * width)) | 1
    face = cv2.dilate(face, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (grow, grow))).astype(np.float32)
    near = np.zeros(photo.shape[:2], np.float32)
    top, left = max(0, int(mesh[:, 1].min() - 0.3 * height)), max(0, int(mesh[:, 0].min() - 0.6 * width))
    near[top:int(mesh[:, 1].max() + 0.8 * height), left:int(mesh[:, 0].max() + 0.6 * width)] = 1.0
    coloured = (np.linalg.norm(lab[..., 1:] - skin_ab, axis=-1) < 14.0) & (lab[..., 0] > 60.0)
    coloured = cv2.morphologyEx(coloured.astype(np.uint8), cv2.MORPH_OPEN, np.ones((5, 5), np.uint8)).astype(np.float32)
    mask = np.maximum(np.maximum(_head_mask(photo), cv2.GaussianBlur(face, (0, 0), 2.0)), cv2.GaussianBlur(coloured * near, (0, 0), 1.5))
    kept = np.zeros(photo.shape[:2], np.float32)
    for contour in (LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, INNER_LIP_CONTOUR):
        inside = np.zeros(photo.shape[:2], np.uint8)
        cv2.fillPoly(inside, [np.round(mesh[list(contour)]).astype(np.int32)], 1)
        if inside.any():
            lightness = lab[..., 0]
            kept[(inside > 0) & (lightness > np.median(lightness[inside > 0]))] = 1.0
    return mask * (1.0 - cv2.GaussianBlur(kept, (0, 0), 0.7))


def _to_linear(image: np.ndarray) -> np.ndarray:
    values = image.astype(np.float32) / 255.0
    return np.where(values <= 0.04045, values / 12.92, ((values + 0.055) / 1.055) ** 2.4)


def _to_srgb(linear: np.ndarray) -> np.ndarray:
    linear = np.clip(linear, 0.0, 1.0)
    encoded = np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055)
    return (encoded * 255.0 + 0.5).astype(np.uint8)


def _side_light(image: np.ndarray, mesh: np.ndarray, from_right: bool, dark: float, bright: float) -> np.ndarray:
    """(H, W, 3) float32: ``image`` lit from one side across the face (a soft ramp over its width)."""
    left, right = float(mesh[:, 0].min()), float(mesh[:, 0].max())
    x = (np.arange(image.shape[1], dtype=np.float32) - (left + right) / 2) / (right - left)
    ramp = 1.0 / (1.0 + np.exp(-6.0 * (x if from_right else -x)))
    return image.astype(np.float32) * (dark + (bright - dark) * ramp)[None, :, None]


def _lowered_lids(amount: float, iris_drop: float) -> Callable[[np.ndarray], np.ndarray]:
    """Upper lids pulled down by ``amount`` of the eye opening, the eye's inside pushed
    down by ``iris_drop`` of it: eyes looking down or half closed."""

    def make(photo: np.ndarray) -> np.ndarray:
        mesh = _photo_mesh(photo)
        height, width = photo.shape[:2]
        ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
        shift = np.zeros((height, width), np.float32)
        for contour, upper, lower in ((RIGHT_EYE_CONTOUR, 159, 145), (LEFT_EYE_CONTOUR, 386, 374)):
            eye = mesh[list(contour)]
            x0, x1 = float(eye[:, 0].min()), float(eye[:, 0].max())
            top, bottom = float(mesh[upper, 1]), float(mesh[lower, 1])
            opening = max(bottom - top, 2.0)
            margin = 0.35 * (x1 - x0)
            across = np.clip(np.minimum(xs - (x0 - margin), (x1 + margin) - xs) / margin, 0.0, 1.0)
            above = np.clip((ys - (top - 2.5 * opening)) / (2.5 * opening), 0.0, 1.0) * (ys <= top)
            inside = np.clip(1.0 - (ys - top) / opening, 0.0, 1.0) * (ys > top)
            lid = amount * opening * (above + inside)
            drop = iris_drop * opening * np.clip(1.0 - np.abs(ys - (top + bottom) / 2) / opening, 0.0, 1.0)
            shift = np.maximum(shift, (lid + drop) * across * across)
        return cv2.remap(photo, xs, ys - shift, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)

    return make


_SOURCE_MAKERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "photo": lambda photo: photo.copy(),
    "mirrored": lambda photo: np.ascontiguousarray(photo[:, ::-1]),
    "grey": _grey,
    "sepia": _sepia,
    "warm_cast": _cast((1.12, 0.94, 0.66)),
    "cool_cast": _cast((0.78, 0.97, 1.2)),
    "sodium": _coloured_light((1.0, 0.6, 0.02)),  # the blue crushed to black
    "stage_red": _coloured_light((1.6, 0.3, 0.15)),  # the red clipped on the lit skin, green and blue dim
    "small90": _small(90.0),
    "small80": _small(80.0),
    "hair_a": _hair(seed=11, right_side=False),
    "hair_b": _hair(seed=23, right_side=True),
    "dark_side_left": _dark_side(from_right=False),
    "dark_side_right": _dark_side(from_right=True),
    "gaze_down": _lowered_lids(0.35, 0.25),
    "lids_half": _lowered_lids(0.5, 0.0),
    "brown_skin": _darker_skin("brown_skin"),
    "dark_skin": _darker_skin("dark_skin"),
}


# -- targets ---------------------------------------------------------------------------------------


def _target(photo: np.ndarray, variant: str, seed: int) -> tuple[np.ndarray, tuple[TargetFace, ...]]:
    mesh = _photo_mesh(photo)
    if variant == "frontal":
        return photo.copy(), (TargetFace(mesh.copy(), 0.0),)
    if variant == "mirrored":
        mirrored = np.ascontiguousarray(photo[:, ::-1])
        return mirrored, (TargetFace(_photo_mesh(mirrored).copy(), 0.0),)
    if variant in ("warm", "cool"):
        return relight(photo, mesh, variant), (TargetFace(mesh.copy(), 0.0),)
    if variant in ("side_left", "side_right"):
        lit = _side_light(photo, mesh, variant == "side_right", dark=0.3, bright=1.15)
        return np.clip(lit + 0.5, 0, 255).astype(np.uint8), (TargetFace(mesh.copy(), 0.0),)
    if variant in ("soft", "webcam"):
        return _softened(photo, variant), (TargetFace(mesh.copy(), 0.0),)
    if variant in SKIN_TONES:
        return _darker_skin(variant)(photo), (TargetFace(mesh.copy(), 0.0),)
    if variant in CAST_SHADOWS:
        return _cast_shadow(photo, mesh, *CAST_SHADOWS[variant]), (TargetFace(mesh.copy(), 0.0),)
    if variant.startswith("yaw"):
        yaw = float(variant[3:])
        image, turned = render_pose_with_mesh(photo, yaw)
        return image, (TargetFace(turned, yaw),)
    if variant in ("group_a", "group_b"):
        return _group(photo, variant, seed)
    raise ValueError(f"unknown target variant {variant!r}")


def _cast_shadow(photo: np.ndarray, mesh: np.ndarray, towards_light: float, through: tuple[float, float], left: float,
                 softness: float) -> np.ndarray:
    """The photo with a hard shadow over part of the head and what is round it (a hat brim's
    over the upper face, a window frame's down one side): beyond a straight edge through
    ``through`` (fractions of the face's box) the light is scaled by ``left`` in linear
    light, so the skin keeps its colour in the shadow; ``towards_light`` is the direction
    (degrees, image axes: 90 is down) from the edge into the light."""
    x0, y0 = mesh[:, :2].min(0)
    width, height = float(np.ptp(mesh[:, 0])), float(np.ptp(mesh[:, 1]))
    rows, cols = np.mgrid[: photo.shape[0], : photo.shape[1]].astype(np.float32)
    theta = math.radians(towards_light)
    cols, rows = cols - x0 - through[0] * width, rows - y0 - through[1] * height
    into_light = cols * math.cos(theta) + rows * math.sin(theta)
    light = left + (1.0 - left) * np.clip(0.5 + into_light / (2.0 * softness * width), 0.0, 1.0)
    return _to_srgb(_to_linear(photo) * light[..., None])


def _softened(photo: np.ndarray, variant: str) -> np.ndarray:
    """A webcam's soft picture: ``soft`` blurred (sigma 1.5 px) and JPEG-compressed at quality
    70; ``webcam`` taken at half resolution, blown back up and compressed at quality 60."""
    if variant == "soft":
        soft, quality = cv2.GaussianBlur(photo, (0, 0), 1.5), 70
    else:
        height, width = photo.shape[:2]
        half = cv2.resize(photo, (width // 2, height // 2), interpolation=cv2.INTER_AREA)
        soft, quality = cv2.resize(half, (width, height), interpolation=cv2.INTER_LINEAR), 60
    return _jpeg(soft, quality)


# (yaw, face width, centre as fractions of the canvas) per head of a group photo, and its light
_GROUPS = {
    "group_a": (((-20.0, 120.0, (0.25, 0.45)), (10.0, 90.0, (0.52, 0.38)), (0.0, 150.0, (0.78, 0.5))), "warm"),
    "group_b": (((25.0, 110.0, (0.22, 0.5)), (-10.0, 85.0, (0.5, 0.36)), (0.0, 140.0, (0.77, 0.46))), "cool"),
}


def _group(photo: np.ndarray, variant: str, seed: int) -> tuple[np.ndarray, tuple[TargetFace, ...]]:
    """Three heads of the person, turned and sized differently, cut out (a soft ellipse
    around each head) onto one 1280x720 room: a group photo with one person's faces."""
    heads, light = _GROUPS[variant]
    width, height = LARGE_CANVAS
    canvas = _background(LARGE_CANVAS, seed).astype(np.float32)
    faces = []
    for yaw, face_width, (cx, cy) in heads:
        image, mesh = render_pose_with_mesh(photo, yaw)
        centre = np.array([cx * width, cy * height])
        placed, placed_mesh = _place(image, mesh, canvas.astype(np.uint8), face_width, centre, 0.0)
        alpha = np.zeros((height, width), np.float32)
        box_centre = (placed_mesh.min(0) + placed_mesh.max(0)) / 2
        axes = (int(0.85 * face_width), int(1.25 * face_width))
        cv2.ellipse(alpha, (int(box_centre[0]), int(box_centre[1] - 0.1 * face_width)), axes, 0, 0, 360, 1.0, -1)
        alpha = cv2.GaussianBlur(alpha, (0, 0), 0.08 * face_width)[..., None]
        canvas = placed.astype(np.float32) * alpha + canvas * (1.0 - alpha)
        faces.append(TargetFace(placed_mesh, yaw))
    image = np.clip(canvas + 0.5, 0, 255).astype(np.uint8)
    lit = relight(image, np.concatenate([f.mesh for f in faces]), light)
    return lit, tuple(faces)
