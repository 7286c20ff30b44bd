"""The before/after pictures of docs/guides/options.md and occlusion.md, made by the real
engine on the sample faces, and what each picture claims, checked.

Grace Hopper's face goes onto the astronaut with each swap option in turn. Each test
checks that the option does what the guide says where it says it (blend halves the
change, the mouth mask keeps the target's lips, ...). With ``SWAPCAST_SCREENSHOTS=DIR``
the pictures are also written there (``docs/screenshots/`` for the docs):

    SWAPCAST_SCREENSHOTS=docs/screenshots scripts/test tests/test_docs_pictures.py
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

from gpu.analysis.landmarks import FACE_OVAL, LEFT_EYE, OUTER_LIPS, RIGHT_EYE
from gpu.options import SwapOptions
from streamer.pipeline.frame_swapper import FrameSwapper

PANEL = 256  # pixels: each picture is the face's square, this wide


@pytest.fixture(scope="module")
def grace_source(engine, grace_image):
    return engine.register_source(grace_image)


@pytest.fixture(scope="module")
def target(engine, astronaut_image):
    """The astronaut and her face's mesh."""
    faces = engine.analyse_image(astronaut_image)
    assert len(faces) == 1 and faces[0].mesh is not None
    return astronaut_image, faces[0].mesh


def swapped(engine, source, image: np.ndarray, options: SwapOptions) -> np.ndarray:
    out = image.copy()
    swapper = FrameSwapper(engine, source, session_id="docs-pictures", options=options)
    try:
        assert swapper.process_still(out).faces_swapped == 1
    finally:
        swapper.close()
    return out


def region(mesh: np.ndarray, indices: tuple[int, ...], shape: tuple[int, ...], grow: int = 0) -> np.ndarray:
    """A boolean mask of the polygon (convex hull) of these mesh points, grown by ``grow`` px."""
    mask = np.zeros(shape[:2], np.uint8)
    cv2.fillConvexPoly(mask, cv2.convexHull(mesh[list(indices)].astype(np.int32)), 1)
    if grow:
        mask = cv2.dilate(mask, np.ones((2 * grow + 1, 2 * grow + 1), np.uint8))
    return mask.astype(bool)


def change(a: np.ndarray, b: np.ndarray, where: np.ndarray) -> float:
    """Mean absolute difference of two pictures inside a mask (0..255)."""
    return float(np.abs(a.astype(np.float32) - b.astype(np.float32))[where].mean())


def face_square(mesh: np.ndarray, image: np.ndarray) -> np.ndarray:
    oval = mesh[list(FACE_OVAL)]
    centre = (oval.min(0) + oval.max(0)) / 2
    half = int(np.ptp(oval, axis=0).max() * 0.65)
    x0, y0 = (centre - half).astype(int).clip(0)
    crop = image[y0:y0 + 2 * half, x0:x0 + 2 * half]
    return cv2.resize(crop, (PANEL, PANEL), interpolation=cv2.INTER_AREA)


def save(name: str, panels: list[tuple[str, np.ndarray]], tmp_path: Path) -> Path:
    """Panels side by side, each captioned, as ``name`` in tmp_path (and SWAPCAST_SCREENSHOTS)."""
    captioned = []
    for caption, picture in panels:
        bar = np.full((28, PANEL, 3), 255, np.uint8)
        cv2.putText(bar, caption, (6, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (20, 20, 20), 1, cv2.LINE_AA)
        captioned.append(np.vstack([picture, bar]))
    sheet = np.hstack(captioned)
    path = tmp_path / name
    cv2.imwrite(str(path), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))
    extra = os.environ.get("SWAPCAST_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(Path(extra) / name), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))
    return path


def test_swap_options_pictures(engine, grace_source, grace_image, target, tmp_path):
    image, mesh = target
    face = region(mesh, FACE_OVAL, image.shape)
    lips = region(mesh, OUTER_LIPS, image.shape)
    eyes = region(mesh, LEFT_EYE, image.shape, grow=4) | region(mesh, RIGHT_EYE, image.shape, grow=4)
    default = SwapOptions()
    full = swapped(engine, grace_source, image, default)
    assert change(full, image, face) > 8, "the default swap changes the face"

    half = swapped(engine, grace_source, image, replace(default, blend=0.5))
    ratio = change(half, image, face) / change(full, image, face)
    assert 0.3 < ratio < 0.7, f"blend 0.5 moves the face about half way, not {ratio:.2f}"

    mouth = swapped(engine, grace_source, image, replace(default, mouth_mask=True))
    assert change(mouth, image, lips) < 0.5 * change(full, image, lips), "the mouth mask keeps the target's lips"

    own_eyes = swapped(engine, grace_source, image, replace(default, eyes="target"))
    assert change(own_eyes, full, eyes) > 2 * change(own_eyes, full, face & ~eyes), "eyes: target changes the eyes"

    no_colour = swapped(engine, grace_source, image, replace(default, colour_match=False))
    assert change(no_colour, full, face) > 1, "colour match off changes the skin's colour"

    square = lambda picture: face_square(mesh, picture)  # noqa: E731 - the same crop for every panel
    source_square = face_square(engine.analyse_image(grace_image)[0].mesh, grace_image)
    save("options-swap.png", [("source", source_square), ("target", square(image)), ("swapped (defaults)", square(full))],
         tmp_path)
    save("options-blend.png", [("blend 1 (default)", square(full)), ("blend 0.5", square(half))], tmp_path)
    save("options-mouth-mask.png", [("mouth_mask off", square(full)), ("mouth_mask on", square(mouth))], tmp_path)
    save("options-eyes.png", [("eyes: source (default)", square(full)), ("eyes: target", square(own_eyes))], tmp_path)
    save("options-colour-match.png", [("colour_match on", square(full)), ("colour_match off", square(no_colour))],
         tmp_path)


def test_occlusion_picture(engine, grace_source, target, tmp_path):
    """A cup comes in front of the face of a short clip; with occlusion ``auto`` it stays in
    front, with ``off`` the swap is drawn over it. (A still keeps less: it has no history.)"""
    from swapcast.benchmarks.occlusion import occluded_clip, occluders
    from swapcast.benchmarks.pose_set import PoseClip

    image, mesh = target
    frames = 20
    clip = occluded_clip(PoseClip("astronaut/still", "astronaut", "still", [image] * frames, [mesh] * frames),
                         occluders()["cup"], enters=8, slide=4)
    held, cup = clip.frames[-1], clip.masks[-1] > 0.5
    inside = cup & region(mesh, FACE_OVAL, image.shape)
    assert inside.sum() > 500, "the cup covers part of the face"
    off, auto = (swapped_clip(engine, grace_source, clip.frames, SwapOptions(occlusion=mode))[-1] for mode in ("off", "auto"))
    save("occlusion-cup.png", [("target with a cup", face_square(mesh, held)), ("occlusion off", face_square(mesh, off)),
                               ("occlusion auto", face_square(mesh, auto))], tmp_path)
    assert change(auto, held, inside) < 0.25 * change(off, held, inside), "occlusion auto keeps the cup in front"


def swapped_clip(engine, source, frames: list[np.ndarray], options: SwapOptions) -> list[np.ndarray]:
    outputs = [frame.copy() for frame in frames]
    swapper = FrameSwapper(engine, source, session_id="docs-pictures-clip", options=options)
    try:
        for index, frame in enumerate(outputs):
            swapper.process(frame, index / 30)
    finally:
        swapper.close()
    return outputs
