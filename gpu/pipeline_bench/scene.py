"""The sessions' decoded frames: real sample faces moving over 1280x720 frames, as the
I420 buffers a software decoder hands the node.

The faces come from ``faces.npz`` in the carried folder (``scripts/fetch-gpu-wheels.sh``
writes it from the two sample photos the test suite uses; the GPU image has no media
stack to make them). Each scene variant moves one head along a closed path (so its ring of
frames loops without a jump), about 15 px per frame, rolling up to +-12 degrees, at its own
face width; session ``s`` plays variant ``s % variants`` from its own phase."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

FRAME_SIZE = (1280, 720)  # width, height
FACE_WIDTHS = (200, 150, 240, 120)  # px, one per variant in turn
HEAD_SIDE = 2.6  # the head cut from the photo is this many face boxes wide
ROLL_DEGREES = 12.0
SPEED_PX = 12.0  # the head's fastest move per frame (a person shifting in front of a camera)


@dataclass(frozen=True)
class Head:
    """A photo of one head and its face's box in it (x0, y0, x1, y1)."""

    name: str
    photo: np.ndarray  # RGB uint8
    box: tuple[float, float, float, float]


@dataclass(frozen=True)
class SceneRing:
    """One variant's looping frames and where its face truly is in each."""

    i420: np.ndarray  # (F, H*3/2, W) uint8
    boxes: np.ndarray  # (F, 4) float32 true face boxes


def save_heads(path: Path, heads: list[Head]) -> None:
    """Write ``faces.npz`` (what the GPU machine reads)."""
    arrays = {"names": np.array([h.name for h in heads])}
    for head in heads:
        arrays[f"photo_{head.name}"] = head.photo
        arrays[f"box_{head.name}"] = np.asarray(head.box, dtype=np.float32)
    np.savez_compressed(path, **arrays)


def load_heads(path: Path) -> list[Head]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: scripts/fetch-gpu-wheels.sh writes it (carry its folder)")
    with np.load(path) as data:
        return [Head(str(name), data[f"photo_{name}"], tuple(float(v) for v in data[f"box_{name}"]))
                for name in data["names"]]


def render_rings(heads: list[Head], variants: int, frames: int, seed: int = 0) -> list[SceneRing]:
    """``variants`` rings of ``frames`` frames each (heads and face widths taken in turn)."""
    rng = np.random.default_rng(seed)
    return [_ring(heads[v % len(heads)], FACE_WIDTHS[v % len(FACE_WIDTHS)], frames, rng) for v in range(variants)]


def _background(rng: np.random.Generator) -> np.ndarray:
    """Smooth coloured texture with fine grain: a room, not a flat colour, and no face."""
    width, height = FRAME_SIZE
    coarse = rng.uniform(40, 200, (height // 40, width // 40, 3)).astype(np.float32)
    smooth = cv2.resize(cv2.GaussianBlur(coarse, (0, 0), 1.5), (width, height), interpolation=cv2.INTER_CUBIC)
    grain = rng.normal(0, 4, (height, width, 1)).astype(np.float32)
    return np.clip(smooth + grain, 0, 255).astype(np.float32)


def _ring(head: Head, face_width: int, count: int, rng: np.random.Generator) -> SceneRing:
    width, height = FRAME_SIZE
    background = _background(rng)
    x0, y0, x1, y1 = head.box
    centre = np.array([(x0 + x1) / 2, (y0 + y1) / 2])
    box_w, box_h = x1 - x0, y1 - y0
    alpha = np.zeros(head.photo.shape[:2], dtype=np.float32)
    axes = (int(box_w * HEAD_SIDE / 2.4), int(box_h * HEAD_SIDE / 2.0))
    cv2.ellipse(alpha, (int(centre[0]), int(centre[1] - 0.1 * box_h)), axes, 0, 0, 360, 1.0, thickness=-1)
    alpha = cv2.GaussianBlur(alpha, (0, 0), max(2.0, 0.08 * box_w))
    scale = face_width / box_w
    reach = SPEED_PX * count / (2 * np.pi)  # the path's fastest point moves SPEED_PX a frame
    amplitude = np.array([min(reach, 0.3 * width), min(reach / 2, 0.25 * height)])
    phase = rng.uniform(0, 2 * np.pi)
    corners = np.array([[x0, y0, 1], [x1, y0, 1], [x0, y1, 1], [x1, y1, 1]], dtype=np.float64)
    i420 = np.empty((count, height * 3 // 2, width), dtype=np.uint8)
    boxes = np.empty((count, 4), dtype=np.float32)
    for i in range(count):
        t = 2 * np.pi * i / count + phase
        where = np.array([width / 2, height / 2]) + amplitude * np.array([np.sin(t), np.sin(2 * t)])
        matrix = cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), ROLL_DEGREES * np.sin(t), scale)
        matrix[:, 2] += where - centre
        face = cv2.warpAffine(head.photo, matrix, FRAME_SIZE, flags=cv2.INTER_LINEAR).astype(np.float32)
        weight = cv2.warpAffine(alpha, matrix, FRAME_SIZE, flags=cv2.INTER_LINEAR)[..., None]
        frame = np.clip(background * (1 - weight) + face * weight + 0.5, 0, 255).astype(np.uint8)
        i420[i] = cv2.cvtColor(frame, cv2.COLOR_RGB2YUV_I420)
        spots = corners @ matrix.T
        boxes[i] = (*spots.min(0), *spots.max(0))
    return SceneRing(i420, boxes)
