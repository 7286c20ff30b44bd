"""The pose set: turned, tilted, scaled, relit and moving views of the two sample faces.

Only two real faces ship offline (scikit-image's astronaut, matplotlib's Grace Hopper),
both frontal, so the poses the swap must survive are rendered from them:

- **yaw** (-60..60 degrees): the photo is lifted to a 3D head -- the face mesh's own depth
  (mediapipe's 468 points, interpolated over the face), a head-shaped surface around it for
  the forehead, hair and the sides, and a back of the head -- then the head turns about its
  vertical axis (through the ears) and is drawn again with culling and a z-buffer over the
  photo with the head inpainted away (the body and the room stay put, as when a person
  turns their head). What the photo never showed (past ~66 degrees around the head) is
  filled smoothly from the visible head around it. Rows of pixels stay rows under a turn
  about a vertical axis (orthographic view), so the render works row by row: fast and exact;
- **roll**: a 2D rotation about the face;
- **scale**: the face 40 px wide in a 1280x720 frame up to filling a 640x480 frame;
- **light**: dim with sensor noise, warm, cool, and a hard side light;
- **motion** clips: pan, zoom, wobble (roll) and a yaw sweep, 30 fps.

Each sample carries the ground truth: the 468 points of the face moved with the render,
so its box and five keypoints are known without a detector. Renders are deterministic and
cached per source image (the 3D head is built once, ~1-3 s; a turn costs ~20-100 ms).

Sign convention: positive yaw turns the face toward the image's right (+x; the nose tip
moves right), positive roll turns it counter-clockwise as seen in the image.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import cv2
import numpy as np

from gpu.analysis.landmarks import FACE_OVAL, five_points

PEOPLE = ("astronaut", "grace_hopper")
YAWS = (-60, -45, -30, -15, 0, 15, 30, 45, 60)
ROLLS = (-45, -30, -15, 15, 30, 45)
FACE_WIDTHS = (40, 64, 100, 160, 256)  # plus one sample where the face fills the frame
LIGHTS = ("dim", "warm", "cool", "side")
MOTIONS = ("pan", "zoom", "wobble", "yaw_sweep")

SMALL_CANVAS = (640, 480)
LARGE_CANVAS = (1280, 720)  # faces under 100 px wide are placed in a 720p frame

# 3D head model: how far the back of the head reaches behind the ears, per unit of the
# row's half-width (the front is the face mesh's own depth).
_BACK_DEPTH = 1.0
# Beyond this angle around the head the photo shows the surface too obliquely to use: that
# part (and the back of the head) is filled from the visible head around it.
_RIM_ANGLE = math.radians(66.0)
_SAMPLES_PER_PX = 2.0  # samples per pixel at the front of the head, per row


@dataclass(frozen=True)
class PoseSample:
    """One still target with its ground truth."""

    name: str  # unique, e.g. "astronaut/yaw+30"
    person: str
    kind: str  # "yaw", "roll", "scale" or "light"
    image: np.ndarray  # RGB uint8
    mesh: np.ndarray  # (468, 2) float32: where the face's mesh points are in ``image``
    yaw: float = 0.0
    roll: float = 0.0
    light: str = "normal"

    @property
    def face_box(self) -> np.ndarray:
        """(4,) x0, y0, x1, y1 of the face (the mesh's bounds)."""
        return np.concatenate([self.mesh.min(0), self.mesh.max(0)]).astype(np.float32)

    @property
    def kps(self) -> np.ndarray:
        """(5, 2) ArcFace-order keypoints: eyes, nose tip, mouth corners."""
        return five_points(self.mesh)

    @property
    def face_width(self) -> float:
        box = self.face_box
        return float(box[2] - box[0])


@dataclass(frozen=True)
class PoseClip:
    """A moving target: frames and the face's ground-truth mesh in each."""

    name: str  # e.g. "grace_hopper/yaw_sweep"
    person: str
    motion: str  # one of MOTIONS
    frames: list[np.ndarray]  # RGB uint8, all the same size
    meshes: list[np.ndarray]  # (468, 2) per frame
    fps: float = 30.0
    yaws: list[float] = field(default_factory=list)  # per frame

    def face_box(self, index: int) -> np.ndarray:
        mesh = self.meshes[index]
        return np.concatenate([mesh.min(0), mesh.max(0)]).astype(np.float32)


def person_image(person: str) -> np.ndarray:
    """The frontal photo of one of ``PEOPLE`` (RGB uint8)."""
    from streamer.samples import SAMPLE_FACES

    if person not in SAMPLE_FACES:
        raise ValueError(f"unknown person {person!r}; the pose set has {', '.join(PEOPLE)}")
    return SAMPLE_FACES[person]()


def render_pose(image: np.ndarray, yaw_deg: float, roll_deg: float = 0.0) -> np.ndarray:
    """``image`` (a photo of one frontal face, RGB uint8) with the head turned by
    ``yaw_deg`` and tilted by ``roll_deg``; same size."""
    return render_pose_with_mesh(image, yaw_deg, roll_deg)[0]


def render_pose_with_mesh(image: np.ndarray, yaw_deg: float, roll_deg: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``render_pose`` and where the face's 468 mesh points went: (image, (468, 2))."""
    model = head_model(image)
    rendered, mesh = model.render(yaw_deg)
    if roll_deg:
        rendered, mesh = _rotate(rendered, mesh, roll_deg)
    return rendered, mesh


def source_images(person: str, quick: bool = False) -> dict[str, np.ndarray]:
    """Source photos of ``person`` for swapping onto the *other* person's targets: the
    photo, its mirror image, a slightly turned view and a poor webcam still (the face
    ~48 px wide scaled back up, dim): the same identity in other pixels, so a swap is not
    scored only on pasting back the very photo its identity was measured on. ``quick``:
    the photo alone."""
    photo = person_image(person)
    sources = {person: photo}
    if not quick:
        sources[f"{person}/mirrored"] = np.ascontiguousarray(photo[:, ::-1])
        sources[f"{person}/yaw+20"] = render_pose(photo, 20.0)
        sources[f"{person}/blurry_dim"] = _poor_still(photo)
    return sources


def _poor_still(photo: np.ndarray) -> np.ndarray:
    mesh = head_model(photo).points[:, :2]
    scale = 48.0 / float(mesh[:, 0].max() - mesh[:, 0].min())
    height, width = photo.shape[:2]
    small = cv2.resize(photo, (max(1, int(width * scale)), max(1, int(height * scale))), interpolation=cv2.INTER_AREA)
    blurry = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    dim = 255.0 * (blurry.astype(np.float32) / 255.0 * 0.45) ** 1.1
    return np.clip(dim + 0.5, 0, 255).astype(np.uint8)


def pose_set(people: Sequence[str] = PEOPLE, quick: bool = False) -> Iterator[PoseSample]:
    """Still targets for each of ``people``: every yaw in ``YAWS``, every roll in ``ROLLS``
    (plus 30 degrees of roll on a 30 degree turn), every width in ``FACE_WIDTHS`` plus a
    face filling a 640x480 frame, and every light in ``LIGHTS`` (frontal and turned 30
    degrees). ``quick``: a handful of each kind, for tests and smoke runs."""
    for person in people:
        photo = person_image(person)
        renders: dict[float, tuple[np.ndarray, np.ndarray]] = {}

        def turned(yaw: float, photo: np.ndarray = photo, renders: dict = renders) -> tuple[np.ndarray, np.ndarray]:
            if yaw not in renders:
                renders[yaw] = render_pose_with_mesh(photo, yaw)
            return renders[yaw]

        for yaw in (-45, 0, 30) if quick else YAWS:
            image, mesh = turned(yaw)
            yield PoseSample(f"{person}/yaw{yaw:+d}", person, "yaw", image, mesh, yaw=yaw)
        for yaw, roll in ((0, 30),) if quick else [*((0, r) for r in ROLLS), (30, 30)]:
            image, mesh = _rotate(*turned(yaw), roll)
            yield PoseSample(f"{person}/yaw{yaw:+d}/roll{roll:+d}", person, "roll", image, mesh, yaw=yaw, roll=roll)
        for width in (64,) if quick else (*FACE_WIDTHS, None):
            image, mesh = _scaled(*turned(0), width, seed=len(person) + (width or 0))
            label = f"width{width}" if width else "full_frame"
            yield PoseSample(f"{person}/{label}", person, "scale", image, mesh)
        for yaw, light in ((0, "warm"),) if quick else [(y, light) for light in LIGHTS for y in (0, 30)]:
            image, mesh = turned(yaw)
            yield PoseSample(f"{person}/yaw{yaw:+d}/{light}", person, "light", relight(image, mesh, light), mesh,
                             yaw=yaw, light=light)


def pose_clips(people: Sequence[str] = PEOPLE, quick: bool = False, frames: int = 48) -> Iterator[PoseClip]:
    """Moving targets, 640x480 at 30 fps, for each of ``people``: a pan, a zoom, a roll
    wobble and a yaw sweep (-45 to 45 degrees and back). ``quick``: the yaw sweep alone,
    12 frames."""
    motions = ("yaw_sweep",) if quick else MOTIONS
    count = 12 if quick else frames
    width, height = SMALL_CANVAS
    for person in people:
        photo = person_image(person)
        background = _background(SMALL_CANVAS, seed=len(person))
        for motion in motions:
            images, meshes, yaws = [], [], []
            rng = np.random.default_rng(len(person) * 31 + len(motion))
            for index in range(count):
                phase = 2 * math.pi * index / count
                yaw, roll, face_width = 0.0, 0.0, 150.0
                centre = np.array([width / 2, height * 0.45])
                if motion == "pan":
                    centre = centre + [0.22 * width * math.sin(phase), 0.05 * height * math.sin(2 * phase)]
                elif motion == "zoom":
                    face_width = 150.0 * (1.0 + 0.5 * math.sin(phase))
                elif motion == "wobble":
                    roll = 25.0 * math.sin(phase)
                else:  # yaw_sweep
                    yaw = round(45.0 * math.sin(phase), 1)
                image, mesh = render_pose_with_mesh(photo, yaw)
                frame, mesh = _place(image, mesh, background, face_width, centre, roll)
                noise = rng.normal(0.0, 1.5, frame.shape)  # a camera's noise: every frame differs a little
                images.append(np.clip(frame + noise, 0, 255).astype(np.uint8))
                meshes.append(mesh)
                yaws.append(yaw)
            yield PoseClip(f"{person}/{motion}", person, motion, images, meshes, yaws=yaws)


def relight(image: np.ndarray, mesh: np.ndarray, light: str) -> np.ndarray:
    """``image`` under one of ``LIGHTS``: dim (a quarter of the light, with the sensor
    noise that brings), warm (tungsten), cool (daylight shade), side (lit from one side,
    the other in shadow)."""
    pixels = image.astype(np.float32)
    if light == "dim":
        dark = 255.0 * (pixels / 255.0 * 0.3) ** 1.15
        noise = np.random.default_rng(3).normal(0.0, 2.5, image.shape)
        out = dark + noise
    elif light == "warm":
        out = pixels * np.array([1.12, 0.92, 0.66], np.float32)
    elif light == "cool":
        out = pixels * np.array([0.74, 0.9, 1.18], np.float32)
    elif light == "side":
        left, right = float(mesh[:, 0].min()), float(mesh[:, 0].max())
        x = (np.arange(image.shape[1], dtype=np.float32) - (left + right) / 2) / (right - left)
        ramp = 1.0 / (1.0 + np.exp(-6.0 * x))  # dark on the left, bright on the right
        out = pixels * (0.25 + 1.0 * ramp)[None, :, None]
    else:
        raise ValueError(f"unknown light {light!r}; choose from {', '.join(LIGHTS)}")
    return np.clip(out, 0, 255).astype(np.uint8)


_models: dict[str, HeadModel] = {}
_models_lock = threading.Lock()


def head_model(image: np.ndarray) -> HeadModel:
    """The 3D head lifted from ``image``, built once per distinct image."""
    key = hashlib.sha1(np.ascontiguousarray(image).data).hexdigest() + str(image.shape)
    with _models_lock:
        model = _models.get(key)
    if model is None:
        model = HeadModel.from_image(image)
        with _models_lock:
            _models[key] = model
    return model


class HeadModel:
    """A head lifted from one frontal photo, turnable about its vertical axis.

    Per image row the head is a closed curve around the vertical axis, sampled at angles
    ``psi`` (0 = facing the camera): x from the row's silhouette, depth from the face mesh
    in front (an ellipse elsewhere), and the photo column each sample is textured from."""

    def __init__(self, image: np.ndarray, points: np.ndarray) -> None:
        self.image = np.ascontiguousarray(image)
        self.points = points.astype(np.float32)  # (468, 3): x, y, z in pixels (z on the x scale, smaller = nearer)
        height, width = image.shape[:2]
        self.size = (width, height)
        mesh, depth = self.points[:, :2], self.points[:, 2]
        self.axis_x = float((mesh[234, 0] + mesh[454, 0]) / 2)  # the ears: the head turns about them
        self.axis_z = float((depth[234] + depth[454]) / 2)
        self.chin_y = float(mesh[:, 1].max())
        rows, left, right = _head_rows(self.image, mesh)
        self.rows, self.left, self.right = rows, left, right
        head_mask = np.zeros((height, width), np.uint8)
        for y, x0, x1 in zip(rows, left, right, strict=True):
            head_mask[y, max(0, int(math.floor(x0))) : min(width, int(math.ceil(x1)) + 1)] = 255
        self.plate = _inpaint(self.image, cv2.dilate(head_mask, np.ones((5, 5), np.uint8)))
        self._build_samples(_front_depth(self.points, rows, left, right, self.axis_z, (width, height)))

    @classmethod
    def from_image(cls, image: np.ndarray) -> HeadModel:
        """Find the face (BlazeFace full range + the 468-point mesh with depth) and lift it."""
        points = _face_points(image)
        return cls(image, points)

    def _build_samples(self, front: list[np.ndarray]) -> None:
        """Samples of every head row's closed curve, flattened: row, x, z, texture column,
        and whether the photo shows that part of the head well enough to texture it."""
        ear_y = float(self.points[[234, 454], 1].mean())
        rows, xs, zs, src, known = [], [], [], [], []
        for y, x0, x1, row_depth in zip(self.rows, self.left, self.right, front, strict=True):
            centre, half = (x0 + x1) / 2, max((x1 - x0) / 2, 0.5)
            count = max(16, int(math.ceil(2 * math.pi * half * _SAMPLES_PER_PX)))
            psi = np.linspace(-math.pi, math.pi, count, endpoint=False) + math.pi / count
            x = centre + half * np.sin(psi)
            columns = np.arange(len(row_depth), dtype=np.float32) + int(math.floor(x0))
            z_front = np.interp(x, columns, row_depth)
            # below the ears the jaw has the neck behind it, not the back of the skull
            taper = np.clip((y - ear_y) / max(self.chin_y - ear_y, 1.0), 0.0, 1.0)
            z_back = self.axis_z - _BACK_DEPTH * (1.0 - 0.45 * taper) * half * np.cos(psi)
            rows.append(np.full(count, y, np.int32))
            xs.append(x)
            zs.append(np.where(np.abs(psi) <= math.pi / 2, z_front, z_back))
            src.append(x)
            known.append(np.abs(psi) <= _RIM_ANGLE)
        self._row = np.concatenate(rows)
        self._x = np.concatenate(xs).astype(np.float32)
        self._z = np.concatenate(zs).astype(np.float32)
        self._src = np.concatenate(src).astype(np.float32)
        self._known = np.concatenate(known)
        # index of the next sample along the same row's curve (wrapping around)
        lengths = np.array([len(r) for r in rows])
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        local = np.arange(len(self._row)) - starts
        self._next = (starts + (local + 1) % np.repeat(lengths, lengths)).astype(np.int64)

    def render(self, yaw_deg: float) -> tuple[np.ndarray, np.ndarray]:
        """The photo with the head turned by ``yaw_deg``: (RGB uint8 image, (468, 2) mesh)."""
        if abs(yaw_deg) < 1e-6:
            return self.image.copy(), self.points[:, :2].copy()
        width, height = self.size
        c, s = math.cos(math.radians(yaw_deg)), math.sin(math.radians(yaw_deg))
        x = self.axis_x + (self._x - self.axis_x) * c - (self._z - self.axis_z) * s
        z = self.axis_z + (self._x - self.axis_x) * s + (self._z - self.axis_z) * c
        nxt = self._next
        xa, xb = x, x[nxt]
        facing = xb > xa  # the curve runs left to right where it faces the camera
        first = np.ceil(xa).astype(np.int64)
        count = np.where(facing, np.clip(np.ceil(xb).astype(np.int64) - first, 0, None), 0)  # pixels xa <= p < xb
        seg = np.repeat(np.arange(len(x)), count)
        p = first[seg] + np.arange(len(seg)) - np.repeat(np.cumsum(count) - count, count)
        inside = (p >= 0) & (p < width)
        p, seg = p[inside], seg[inside]
        t = (p - xa[seg]) / (xb[seg] - xa[seg])
        depth = z[seg] + t * (z[nxt[seg]] - z[seg])
        key = self._row[seg].astype(np.int64) * width + p
        order = np.lexsort((depth, key))
        key, seg, t = key[order], seg[order], t[order]
        nearest = np.ones(len(key), bool)
        nearest[1:] = key[1:] != key[:-1]  # z-buffer: the nearest surface per pixel
        key, seg, t = key[nearest], seg[nearest], t[nearest]
        map_x = np.zeros((height, width), np.float32)
        map_x.flat[key] = self._src[seg] + t * (self._src[nxt[seg]] - self._src[seg])
        covered = np.zeros((height, width), np.float32)
        covered.flat[key] = 1.0
        known = np.zeros((height, width), np.float32)
        known.flat[key] = (self._known[seg] & self._known[nxt[seg]]).astype(np.float32)
        map_y = np.repeat(np.arange(height, dtype=np.float32)[:, None], width, axis=1)
        head = cv2.remap(self.image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE).astype(np.float32)
        # what the photo never showed (the side and back of the head) is filled smoothly
        # from the visible head around it, never from the room behind
        fill = _push_pull(head, known)
        unseen = cv2.GaussianBlur(covered * (1 - known), (0, 0), 1.5)[..., None]
        head = head * (1 - unseen) + fill * unseen
        alpha = cv2.GaussianBlur(covered, (3, 3), 0.7)[..., None]
        out = head * alpha + self.plate * (1 - alpha)
        return np.clip(out + 0.5, 0, 255).astype(np.uint8), self._turn_mesh(c, s)

    def _turn_mesh(self, c: float, s: float) -> np.ndarray:
        mesh, depth = self.points[:, :2], self.points[:, 2]
        x = self.axis_x + (mesh[:, 0] - self.axis_x) * c - (depth - self.axis_z) * s
        return np.stack([x, mesh[:, 1]], axis=1).astype(np.float32)


def _face_points(image: np.ndarray) -> np.ndarray:
    """(468, 3) mesh points of the largest face in ``image``; a clear error when none."""
    from gpu.analysis.blazeface import BlazeFaceDetector
    from gpu.analysis.face_mesh import FaceMesh
    from gpu.errors import NoFaceError

    detector, landmarker = BlazeFaceDetector("full"), FaceMesh()
    try:
        faces = sorted(detector.detect(image), key=lambda f: f.area, reverse=True)
        face = landmarker.landmarks(image, faces[0]) if faces else None
    finally:
        detector.close()
        landmarker.close()
    if face is None or face.mesh is None or face.depth is None:
        raise NoFaceError("pose set: no face with landmarks in the photo to lift to 3D")
    return np.concatenate([face.mesh, face.depth[:, None]], axis=1)


def _head_rows(image: np.ndarray, mesh: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per image row of the head (hair top to chin): the head's left and right edge.

    GrabCut separates hair (and hat) from the background above the ears, seeded with the
    face as certain and a head-sized ellipse as likely; below the ears the jaw line of the
    mesh is the edge (GrabCut would take the neck and collar)."""
    height, width = image.shape[:2]
    x0, y0 = mesh.min(0)
    x1, y1 = mesh.max(0)
    face_w, face_h = x1 - x0, y1 - y0
    centre = np.array([(x0 + x1) / 2, y0 + 0.35 * face_h])
    hull = np.zeros((height, width), np.uint8)
    cv2.fillConvexPoly(hull, cv2.convexHull(np.round(mesh[list(FACE_OVAL)]).astype(np.int32)), 1)
    seed = np.full((height, width), cv2.GC_BGD, np.uint8)
    axes = (int(0.85 * face_w), int(0.95 * face_h))
    cv2.ellipse(seed, (int(centre[0]), int(centre[1])), (int(axes[0] * 1.35), int(axes[1] * 1.3)), 0, 0, 360, cv2.GC_PR_BGD, -1)
    cv2.ellipse(seed, (int(centre[0]), int(centre[1])), axes, 0, 0, 360, cv2.GC_PR_FGD, -1)
    seed[hull > 0] = cv2.GC_FGD
    ear_y = float(mesh[[234, 454], 1].mean())
    seed[int(ear_y) :, :] = np.where(hull[int(ear_y) :, :] > 0, cv2.GC_FGD, cv2.GC_BGD)
    cv2.setRNGSeed(0)
    bgd, fgd = np.zeros((1, 65)), np.zeros((1, 65))
    cv2.grabCut(image[..., ::-1].copy(), seed, None, bgd, fgd, 4, cv2.GC_INIT_WITH_MASK)
    head = ((seed == cv2.GC_FGD) | (seed == cv2.GC_PR_FGD)).astype(np.uint8)
    head = cv2.morphologyEx(head, cv2.MORPH_OPEN, np.ones((5, 5), np.uint8))
    head |= hull
    rows, left, right = [], [], []
    chin = int(math.floor(y1))
    centre_x = int(round(mesh[[234, 454], 0].mean()))
    for y in range(min(chin + 1, height)):
        line = head[y]
        if not line[centre_x]:
            continue
        # the run of head pixels through the face's centre line
        zeros_left = np.flatnonzero(line[:centre_x] == 0)
        zeros_right = np.flatnonzero(line[centre_x:] == 0)
        lo = zeros_left[-1] + 1 if len(zeros_left) else 0
        hi = centre_x + zeros_right[0] - 1 if len(zeros_right) else width - 1
        rows.append(y)
        left.append(float(lo))
        right.append(float(hi) + 1.0)
    rows_a = np.array(rows, np.int32)
    left_a, right_a = np.array(left), np.array(right)
    # a ragged edge would tear when turned: smooth it along the rows
    left_a = cv2.GaussianBlur(left_a[:, None], (1, 0), 2.0)[:, 0] if len(left_a) > 4 else left_a
    right_a = cv2.GaussianBlur(right_a[:, None], (1, 0), 2.0)[:, 0] if len(right_a) > 4 else right_a
    return rows_a, left_a, right_a


def _front_depth(points: np.ndarray, rows: np.ndarray, left: np.ndarray, right: np.ndarray, axis_z: float,
                 size: tuple[int, int]) -> list[np.ndarray]:
    """Depth of the head's front surface per row (one value per pixel from floor(left)).

    An ellipse per row (reaching the axis depth at the silhouette) carries the head; inside
    the face the mesh's own depth replaces it, and the difference fades out smoothly past
    the face's edge so the two surfaces meet without a step."""
    from scipy.interpolate import LinearNDInterpolator

    width, height = size
    mesh, depth = points[:, :2], points[:, 2]
    face_w = float(mesh[:, 0].max() - mesh[:, 0].min())
    ys = rows.astype(np.float32)
    x_lo = int(max(0, math.floor(left.min())))
    x_hi = int(min(width, math.ceil(right.max()) + 1))
    grid_x = np.arange(x_lo, x_hi, dtype=np.float32)
    gx, gy = np.meshgrid(grid_x, ys)
    centre = ((left + right) / 2)[:, None]
    half = np.maximum((right - left) / 2, 0.5)[:, None]
    u = np.clip((gx - centre) / half, -1, 1)
    bulge = np.sqrt(1 - u**2)
    # front half-depth per unit half-width, from the forehead (mesh point 10)
    forehead = int(np.argmin(np.abs(ys - mesh[10, 1])))
    u10 = (mesh[10, 0] - centre[forehead, 0]) / half[forehead, 0]
    front_ratio = (axis_z - depth[10]) / (half[forehead, 0] * math.sqrt(max(1 - u10**2, 0.2)))
    ellipse = axis_z - front_ratio * half * bulge
    mesh_depth = LinearNDInterpolator(mesh, depth)(gx, gy)
    inside = ~np.isnan(mesh_depth)
    residual = np.where(inside, mesh_depth - ellipse, 0.0).astype(np.float32)
    weight = inside.astype(np.float32)
    sigma = 0.12 * face_w
    spread = cv2.GaussianBlur(residual, (0, 0), sigma) / np.maximum(cv2.GaussianBlur(weight, (0, 0), sigma), 1e-3)
    distance = cv2.distanceTransform((~inside).astype(np.uint8), cv2.DIST_L2, 5)
    fade = np.exp(-((distance / sigma) ** 2)) * np.sqrt(bulge)
    surface = ellipse + np.where(inside, residual, spread * fade)
    surface = np.minimum(surface, axis_z)
    result = []
    for index, x0 in enumerate(left):
        start = int(math.floor(x0)) - x_lo
        result.append(surface[index, max(start, 0) :].astype(np.float32))
    return result


def _push_pull(image: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Fill where ``weight`` is 0 with a smooth blend of the weighted pixels around it
    (pull down a pyramid of weighted sums, push the averages back up)."""
    levels = [(image * weight[..., None], weight)]
    while min(levels[-1][1].shape) > 4:
        colour, count = levels[-1]
        levels.append((cv2.pyrDown(colour), cv2.pyrDown(count)))
    colour, count = levels[-1]
    fill = colour / np.maximum(count, 1e-6)[..., None]
    for colour, count in reversed(levels[:-1]):
        up = cv2.resize(fill, (count.shape[1], count.shape[0]), interpolation=cv2.INTER_LINEAR)
        confidence = np.clip(count * 4.0, 0.0, 1.0)[..., None]
        fill = colour / np.maximum(count, 1e-6)[..., None] * confidence + up * (1 - confidence)
    return fill


def _inpaint(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """What is behind the head: the masked region filled from its surroundings (at half
    size: inpainting is slow and the fill is smooth anyway)."""
    small = cv2.resize(image, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
    small_mask = cv2.resize(mask, (small.shape[1], small.shape[0]), interpolation=cv2.INTER_NEAREST)
    filled = cv2.inpaint(small, small_mask, 5, cv2.INPAINT_TELEA)
    filled = cv2.resize(filled, (image.shape[1], image.shape[0]), interpolation=cv2.INTER_LINEAR)
    return np.where(mask[..., None] > 0, filled, image)


def _rotate(image: np.ndarray, mesh: np.ndarray, roll_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Roll: rotate the frame about the face's centre (the frame keeps its size)."""
    centre = (mesh.min(0) + mesh.max(0)) / 2
    matrix = cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), roll_deg, 1.0)
    out = cv2.warpAffine(image, matrix, (image.shape[1], image.shape[0]), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return out, _apply(matrix, mesh)


def _scaled(image: np.ndarray, mesh: np.ndarray, face_width: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The photo in a frame with its face ``face_width`` px wide (under 100 px in a 720p
    frame, else 640x480), somewhere near the middle; ``None``: the face fills a 640x480
    frame."""
    if face_width is None:
        width, height = SMALL_CANVAS
        box_h = float(mesh[:, 1].max() - mesh[:, 1].min())
        face_w = float(mesh[:, 0].max() - mesh[:, 0].min())
        scale = 0.8 * height / box_h
        centre = np.array([width / 2, height / 2])
        return _place(image, mesh, _background(SMALL_CANVAS, seed), face_w * scale, centre, 0.0)
    canvas = LARGE_CANVAS if face_width < 100 else SMALL_CANVAS
    rng = np.random.default_rng(seed)
    centre = np.array(canvas, np.float64) * rng.uniform(0.35, 0.65, 2)
    return _place(image, mesh, _background(canvas, seed), float(face_width), centre, 0.0)


def _place(image: np.ndarray, mesh: np.ndarray, background: np.ndarray, face_width: float, centre: np.ndarray,
           roll_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """``image`` scaled so its face is ``face_width`` px wide, turned by ``roll_deg`` about
    the face and moved to ``centre`` of ``background``, its edges feathered in."""
    face_centre = (mesh.min(0) + mesh.max(0)) / 2
    scale = face_width / float(mesh[:, 0].max() - mesh[:, 0].min())
    matrix = cv2.getRotationMatrix2D((float(face_centre[0]), float(face_centre[1])), roll_deg, scale)
    matrix[:, 2] += np.asarray(centre, np.float64) - face_centre
    height, width = background.shape[:2]
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    warped = cv2.warpAffine(image, matrix, (width, height), flags=interpolation, borderMode=cv2.BORDER_REPLICATE)
    edge = max(2, int(8 * scale))
    inner = np.zeros(image.shape[:2], np.float32)
    inner[edge:-edge, edge:-edge] = 1.0
    inner = cv2.GaussianBlur(inner, (0, 0), edge / 2)
    alpha = cv2.warpAffine(inner, matrix, (width, height), flags=cv2.INTER_LINEAR, borderValue=0.0)[..., None]
    out = warped * alpha + background * (1 - alpha)
    return np.clip(out + 0.5, 0, 255).astype(np.uint8), _apply(matrix, mesh)


@lru_cache(maxsize=8)
def _background_cached(size: tuple[int, int], seed: int) -> np.ndarray:
    from skimage import data

    scene = data.rocket()  # a photo without faces, shipped with scikit-image
    width, height = size
    scale = max(width / scene.shape[1], height / scene.shape[0]) * 1.3
    scene = cv2.resize(scene, (int(scene.shape[1] * scale) + 1, int(scene.shape[0] * scale) + 1), interpolation=cv2.INTER_LINEAR)
    rng = np.random.default_rng(seed)
    x0 = int(rng.integers(0, scene.shape[1] - width + 1))
    y0 = int(rng.integers(0, scene.shape[0] - height + 1))
    return np.ascontiguousarray(scene[y0 : y0 + height, x0 : x0 + width])


def _background(size: tuple[int, int], seed: int) -> np.ndarray:
    """A room-like scene to put a scaled photo in (a crop of scikit-image's rocket photo)."""
    return _background_cached(tuple(size), seed % 8)


def _apply(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    return (points @ matrix[:, :2].T + matrix[:, 2]).astype(np.float32)
