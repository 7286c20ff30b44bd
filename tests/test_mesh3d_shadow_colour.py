"""A source's skin detail takes skin's colour for its darkness: wrinkles read as skin, not
as grey lines (a grey photo's and a colour one's alike)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from gpu.options import SwapOptions
from gpu.swappers import mesh3d_shadow_colour
from gpu.swappers.base import run_jobs
from gpu.swappers.mesh3d import Mesh3dSwapper
from gpu.swappers.mesh3d_shadow_colour import DETAIL_SIGMA, SKIN_WEIGHTS, coloured_like_skin
from swapcast.benchmarks.pose_set import person_image
from swapcast.benchmarks.realism_detail import shadow_red
from swapcast.benchmarks.realism_set import _SOURCE_MAKERS, _target


def _lined_skin(size: int = 192) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chroma, luminance, lines): flat skin chromaticity, a lightness with thin darker
    lines (wrinkles) over a broad left-to-right ramp (shading)."""
    chroma = np.broadcast_to(np.array([1.15, 0.98, 0.87], np.float32), (size, size, 3)).copy()
    luminance = np.broadcast_to(np.linspace(0.7, 1.2, size, dtype=np.float32)[None, :], (size, size)).copy()
    lines = np.zeros((size, size), np.uint8)
    for row in range(20, size - 20, 12):
        cv2.line(lines, (20, row), (size - 20, row + 3), 1, 1)
    luminance[lines > 0] *= 0.7
    return chroma, luminance, lines > 0


def test_darker_detail_turns_redder_and_less_blue_with_its_lightness_kept():
    chroma, luminance, lines = _lined_skin()
    coloured = coloured_like_skin(chroma, luminance, np.ones(luminance.shape, np.float32))
    between = ~cv2.dilate(lines.astype(np.uint8), np.ones((7, 7), np.uint8)).astype(bool)
    red_over_green = coloured[..., 0] / coloured[..., 1]
    blue_over_green = coloured[..., 2] / coloured[..., 1]
    assert red_over_green[lines].mean() > 1.08 * red_over_green[between].mean()
    assert blue_over_green[lines].mean() < 0.92 * blue_over_green[between].mean()
    lightness = lambda image: (image * SKIN_WEIGHTS).sum(2)  # noqa: E731  (as the re-lit skin weighs the channels)
    np.testing.assert_allclose(lightness(coloured), lightness(chroma), rtol=1e-5)  # the albedo's lightness is the photo's
    # the broad ramp (shading coarser than the detail's band) keeps its colour
    middle = slice(90, 100)
    ramp_ratio = red_over_green[middle][between[middle]]
    assert np.ptp(ramp_ratio) < 0.02 * ramp_ratio.mean()


def test_texels_that_are_not_skin_keep_their_colour():
    chroma, luminance, _ = _lined_skin()
    skin = np.ones(luminance.shape, np.float32)
    skin[:, :96] = 0.0  # brows, eyes, lips: their colour is their own
    coloured = coloured_like_skin(chroma, luminance, skin)
    np.testing.assert_array_equal(coloured[:, :80], chroma[:, :80])
    assert not np.allclose(coloured[:, 120:], chroma[:, 120:])
    assert DETAIL_SIGMA * 192 < 8  # what the test's 16-texel margin relies on


@pytest.fixture(scope="module")
def grey_wrinkled_source(engine):
    """Grace Hopper's photo in black and white, its face analysed once."""
    grey = _SOURCE_MAKERS["grey"](person_image("grace_hopper"))
    return grey, engine.analyse_image(grey)[0]


def _swapped_shadow_red(engine, source_image, source_face) -> tuple[float, float]:
    swapper = Mesh3dSwapper()
    source = swapper.register(source_image, source_face)
    target, _ = _target(person_image("astronaut"), "frontal", seed=3)
    face = engine.analyse_image(target)[0]
    frame = target.copy()
    job = swapper.prepare(frame, face, source, SwapOptions())
    swapper.finish(frame, job, run_jobs(swapper.runner, [job])[0])
    return shadow_red(frame, target, face.mesh)


def test_a_grey_photos_wrinkles_are_drawn_in_skins_colour_not_grey(engine, grey_wrinkled_source, monkeypatch):
    """Grace Hopper's wrinkles from a black-and-white photo onto the astronaut: the swapped
    skin's fine detail reddens where it darkens, over half as much as the target's own
    skin does (0.27 against 0.48); with the detail left grey, hardly at all (0.02)."""
    swapped, own = _swapped_shadow_red(engine, *grey_wrinkled_source)
    monkeypatch.setattr(mesh3d_shadow_colour, "SHADOW_CHROMA_SLOPE", np.zeros(3, np.float32))
    grey, _ = _swapped_shadow_red(engine, *grey_wrinkled_source)
    assert own > 0.3
    assert grey < 0.35 * own
    assert swapped > 0.5 * own
