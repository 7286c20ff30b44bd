"""The arrivals set: things that come in front of a turning, zooming head and stay.

``bench occlusion``'s first set pastes each object onto the face (it moves with the head)
a quarter of the way into a pan or a zoom of a frontal face. What users film is harder: a
face at about three-quarter view, turning a little and coming closer, and a cup lifted
over the mouth and chin, held there while the head moves behind it, then taken away; or a
hand over the mouth, of the face's own skin tone. Here each clip is that:

- the head (a pose-set person, ``pose_set.render_pose_with_mesh``) turns ``yaw`` +- 15
  degrees and zooms up to +35 % and back, drifting sideways;
- the thing slides up into place over ``SLIDE`` frames from frame ``enters`` (where the
  face's mouth and chin were then), stays ``hold`` frames where it was put -- or, ``held``
  by the head, moves with it -- and slides away;
- hands are drawn by ``hand_render`` in a skin tone, over a face recoloured to that tone
  (the whole frame scaled so the face's skin median is the tone: a darker or lighter
  person), so colour cannot tell hand from face;
- half the cases are for tuning (``TUNING``), the other half (``HELD_OUT``) are kept out
  of it: different things (a phone, a face mask, a skin-coloured bottle), hands of other
  tones from other directions, arrivals early (the track young) and late, long holds.

Every case is scored like the first set (``occlusion.score_clip``: kept, identity whole
and outside the object, edge flicker), plus the share of the thing's frames in which the
face was swapped at all (a face the tracker lost behind a cup keeps the cup by not being
swapped: that is not keeping it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

from gpu.analysis.landmarks import FACE_OVAL
from swapcast.benchmarks import hand_render, pose_set
from swapcast.benchmarks.occlusion import OccludedClip, Occluder, face_region, occluders, worn_masks

FRAMES = 96
SLIDE = 8  # frames the thing takes to come in (and to go)
FPS = 30.0


@dataclass(frozen=True)
class Arrival:
    """One case: who, what (an object of ``objects()`` or ``hand:<tone>:<pose>``), from
    where, when, for how long."""

    name: str
    person: str
    thing: str
    enters: int
    hold: int  # frames it stays in place
    yaw: float = 35.0  # the head's mean turn (degrees)
    direction: float = 90.0  # where it comes from: degrees, 90 = from below, 0 = from the right
    anchor: tuple[float, float] = (0.0, 0.0)  # where it is put: face widths (across, down) from between the mouth and the chin
    width: float = 0.9  # face widths
    angle: float = 0.0  # the thing turned by this (degrees; hands: 90 = fingers pointing left)
    held: bool = False  # moves with the head (held against it) rather than staying where it was put


TUNING = (
    Arrival("cup", "astronaut", "cup", 30, 45, width=0.85),
    Arrival("cup_large", "grace_hopper", "cup", 30, 45, width=1.0),
    Arrival("cup_young", "astronaut", "cup", 4, 50, yaw=-30.0),
    Arrival("hand_own_side", "astronaut", "hand:own:flat", 24, 50, direction=0.0, anchor=(0.35, 0.0), width=1.1, angle=90.0),
    Arrival("hand_medium_below", "grace_hopper", "hand:medium:back", 24, 50, anchor=(0.0, 0.3), width=0.9),
    Arrival("hand_tan_side", "astronaut", "hand:tan:flat", 30, 45, yaw=-35.0, direction=180.0, anchor=(-0.35, 0.0), width=1.1,
            angle=-90.0),
    Arrival("gift_held", "astronaut", "gift", 50, 40, yaw=-40.0, width=0.85, held=True),
)
HELD_OUT = (
    Arrival("phone", "astronaut", "phone", 28, 50, direction=0.0, anchor=(0.1, -0.1), width=1.0, angle=-12.0),
    Arrival("face_mask", "grace_hopper", "face_mask", 20, 60, anchor=(0.0, -0.2), width=0.95),
    Arrival("bottle_cream", "grace_hopper", "bottle", 40, 40, yaw=-30.0, anchor=(0.05, 0.05), width=1.0),
    Arrival("cup_held_late", "astronaut", "cup", 60, 30, yaw=-40.0, width=0.8, held=True),
    Arrival("hand_dark_below", "grace_hopper", "hand:dark:open", 24, 50, anchor=(0.0, 0.35), width=1.0),
    Arrival("hand_brown_long", "astronaut", "hand:brown:flat", 10, 78, direction=180.0, anchor=(-0.35, 0.0), width=1.1,
            angle=-90.0),
    Arrival("hand_light_back", "grace_hopper", "hand:light:back", 36, 40, yaw=-35.0, direction=0.0, anchor=(0.3, 0.05),
            width=1.0, angle=70.0),
    Arrival("hand_own_young", "grace_hopper", "hand:own:flat", 3, 60, direction=0.0, anchor=(0.35, 0.0), width=1.1, angle=90.0),
)
HALVES = {"tuning": TUNING, "held-out": HELD_OUT}


@lru_cache(maxsize=1)
def objects() -> dict[str, Occluder]:
    """The first set's objects plus three drawn ones: a phone (dark case, lit screen), a
    surgical face mask (pale blue, pleated, with ear loops) and a cream bottle (skin-like)."""
    found = dict(occluders())
    phone_alpha = np.zeros((360, 180), np.float32)
    cv2.rectangle(phone_alpha, (10, 10), (170, 350), 1.0, -1, cv2.LINE_AA)
    phone_alpha = cv2.GaussianBlur(phone_alpha, (0, 0), 3.0)
    phone = np.full((360, 180, 3), 24, np.float32)
    screen = np.linspace(0, 1, 300, dtype=np.float32)[:, None, None] * np.array([40, 60, 90], np.float32) + [60, 90, 160]
    phone[30:330, 18:162] = screen
    phone = phone.clip(0, 255).astype(np.uint8)
    cv2.putText(phone, "12:04", (30, 110), cv2.FONT_HERSHEY_SIMPLEX, 1.3, (235, 240, 250), 3, cv2.LINE_AA)
    found["phone"] = Occluder("phone", phone, phone_alpha, 0.55, (0.0, 0.0))

    mask_alpha = np.zeros((220, 400), np.float32)
    body = np.array([[40, 40], [360, 40], [380, 110], [330, 200], [200, 215], [70, 200], [20, 110]], np.int32)
    cv2.fillPoly(mask_alpha, [body], 1.0, cv2.LINE_AA)
    mask = np.empty((220, 400, 3), np.float32)
    mask[...] = (168, 200, 222)
    for row in (80, 120, 160):  # the pleats
        mask[row - 4:row + 4] *= 0.86
    mask *= np.linspace(0.85, 1.05, 400, dtype=np.float32)[None, :, None]
    found["face_mask"] = Occluder("face_mask", mask.clip(0, 255).astype(np.uint8), mask_alpha, 0.95, (0.0, 0.0))

    bottle_alpha = np.zeros((400, 160), np.float32)
    cv2.rectangle(bottle_alpha, (20, 120), (140, 395), 1.0, -1, cv2.LINE_AA)
    cv2.ellipse(bottle_alpha, (80, 120), (60, 50), 0, 180, 360, 1.0, -1, cv2.LINE_AA)
    cv2.rectangle(bottle_alpha, (58, 10), (102, 80), 1.0, -1, cv2.LINE_AA)
    shade = 0.75 + 0.3 * np.sin(np.linspace(0, math.pi, 160, dtype=np.float32))
    bottle = np.array([232, 206, 170], np.float32)[None, None] * shade[None, :, None] * np.ones((400, 1, 1), np.float32)
    bottle[10:80] = bottle[10:80] * 0.5  # the cap
    found["bottle"] = Occluder("bottle", bottle.clip(0, 255).astype(np.uint8), bottle_alpha, 0.5, (0.0, 0.0))
    return found


def arrival_clip(case: Arrival, frames: int = FRAMES) -> OccludedClip:
    """``case`` rendered: the turning, zooming head with the thing sliding in and out."""
    background = pose_set._background(pose_set.SMALL_CANVAS, seed=len(case.person) + 3)
    width, height = pose_set.SMALL_CANVAS
    rng = np.random.default_rng(len(case.name))
    gain = None
    patch = None
    images, meshes, masks, placements = [], [], [], []
    put: tuple[np.ndarray, float] | None = None
    for index in range(frames):
        phase = index / frames
        yaw = round(case.yaw + 15.0 * math.sin(2 * math.pi * phase), 0)
        face_width = 165.0 * (1.0 + 0.35 * math.sin(math.pi * phase))
        centre = np.array([width * 0.5 + 25.0 * math.sin(2 * math.pi * 0.7 * phase), height * 0.45])
        image, mesh = _turned(case.person, yaw)
        frame, mesh = pose_set._place(image, mesh, background, face_width, centre, 0.0)
        if gain is None:
            gain, patch = _thing(case, frame, mesh)
        frame = np.clip(frame.astype(np.float32) * gain + rng.normal(0.0, 1.5, frame.shape), 0, 255).astype(np.uint8)
        alpha = np.zeros((height, width), np.float32)
        matrix = np.zeros((2, 3), np.float32)
        settled = index - case.enters
        if 0 <= settled < case.hold + 2 * SLIDE:
            if put is None or case.held:
                put = _anchor(case, mesh)
            out = max(0.0, 1.0 - settled / SLIDE) if settled < SLIDE + case.hold else (settled - SLIDE - case.hold) / SLIDE
            matrix = _placed(case, patch, *put, out)
            alpha = cv2.warpAffine(patch.alpha, matrix, (width, height), flags=cv2.INTER_LINEAR)
            rgb = cv2.warpAffine(patch.rgb, matrix, (width, height), flags=cv2.INTER_LINEAR).astype(np.float32)
            frame = (frame * (1.0 - alpha[..., None]) + rgb * alpha[..., None] + 0.5).astype(np.uint8)
        images.append(frame)
        meshes.append(mesh)
        masks.append(alpha)
        placements.append(matrix)
    clip = OccludedClip(f"{case.person}/{case.name}", case.person, images, meshes, masks, placements, patch.alpha, case.enters, FPS,
                        worn_masks(case.person, meshes, images[0].shape))
    return clip


@lru_cache(maxsize=256)
def _turned(person: str, yaw: float) -> tuple[np.ndarray, np.ndarray]:
    return pose_set.render_pose_with_mesh(pose_set.person_image(person), yaw)


def _thing(case: Arrival, frame: np.ndarray, mesh: np.ndarray) -> tuple[np.ndarray, Occluder]:
    """(the frame's colour gain, the thing): a hand's tone is the face's own ("own") or
    one of ``hand_render.TONES``, and the face is recoloured to it."""
    if not case.thing.startswith("hand:"):
        return np.ones(3, np.float32), objects()[case.thing]
    _, tone, pose = case.thing.split(":")
    skin = _skin_median(frame, mesh)
    target = skin if tone == "own" else np.array(hand_render.TONES[tone], np.float32)
    hand = hand_render.render_hand("light", pose)
    # the hand drawn in the face's tone: its shading over the tone the face shows
    rgb = hand.rgb.astype(np.float32) * (target / np.array(hand_render.TONES["light"], np.float32))
    return (target / skin).astype(np.float32), Occluder(case.thing, rgb.clip(0, 255).astype(np.uint8), hand.alpha, case.width,
                                                        (0.0, 0.0))


def _skin_median(frame: np.ndarray, mesh: np.ndarray) -> np.ndarray:
    """The median colour of the cheeks and forehead (inside the face, away from eyes and mouth)."""
    region = face_region(mesh, frame.shape)
    oval = mesh[list(FACE_OVAL)]
    top, bottom = float(oval[:, 1].min()), float(oval[:, 1].max())
    rows = np.arange(frame.shape[0])[:, None]
    band = (rows > top + 0.15 * (bottom - top)) & (rows < top + 0.3 * (bottom - top))  # the forehead
    return np.median(frame[region & band].reshape(-1, 3), axis=0).astype(np.float32)


def _anchor(case: Arrival, mesh: np.ndarray) -> tuple[np.ndarray, float]:
    """Where the thing goes in this frame (its centre) and the face's width."""
    oval = mesh[list(FACE_OVAL)]
    face_width = float(np.ptp(oval[:, 0]))
    mouth_and_chin = (mesh[13] + mesh[152]) / 2
    return mouth_and_chin + face_width * np.array(case.anchor, np.float32), face_width


def _placed(case: Arrival, patch: Occluder, centre: np.ndarray, face_width: float, out: float) -> np.ndarray:
    """(2, 3) patch -> frame: ``case.width`` face widths wide, turned by ``case.angle``,
    centred at ``centre`` moved ``out`` (0..1) of a face width and a half toward its direction."""
    height, width = patch.alpha.shape
    scale = case.width * face_width / max(width, height)
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), case.angle, scale)
    away = np.array([math.cos(math.radians(case.direction)), math.sin(math.radians(case.direction))], np.float32)
    target = centre + away * out * 1.5 * face_width
    matrix[:, 2] += target - np.array([width / 2, height / 2])
    return matrix.astype(np.float32)
