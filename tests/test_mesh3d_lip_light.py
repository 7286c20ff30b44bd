"""A closed swapped mouth's upper lip takes the target's light (in shade under a light from
above) in its own shape; the lips are not a flat pad."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.options import SwapOptions
from gpu.swappers import mesh3d_lip_light
from gpu.swappers.base import run_jobs
from gpu.swappers.mesh3d import Mesh3dSwapper
from gpu.swappers.mesh3d_lip_light import (
    LOWER_OUTER,
    PROFILE,
    STRENGTH,
    UPPER_OUTER,
    LipGeometry,
    lip_light_gain,
    profile,
    relight_closed_lips,
)
from gpu.swappers.mesh3d_lips import inner_lip_lines
from swapcast.benchmarks.pose_set import person_image
from swapcast.benchmarks.realism_set import _target


def _mouth(left: float, right: float, row: float, upper: float, lower: float) -> np.ndarray:
    """(468, 2) points with a closed mouth: corners at ``left``/``right`` on ``row``, the
    upper lip ``upper`` pixels thick in the middle, the lower one ``lower``."""
    points = np.zeros((468, 2), np.float32)
    t = np.linspace(0.0, 1.0, 11, dtype=np.float32)
    x, bulge = left + t * (right - left), np.sin(np.pi * t)
    inner_upper, inner_lower = inner_lip_lines()
    for ids, rows in ((UPPER_OUTER, row - upper * bulge), (LOWER_OUTER, row + lower * bulge),
                      (inner_upper, row - 0.3 * bulge), (inner_lower, row + 0.3 * bulge)):
        points[list(ids)] = np.stack([x, rows], 1)
    return points


def _lit_like_lips(geometry: LipGeometry, shape: tuple[int, int], upper: float, lower: float, below: float) -> np.ndarray:
    """A lightness image: skin at 1, the upper lip at ``upper``, the lower at ``lower`` and
    the band under it at ``below`` (as fractions of the skin)."""
    ys, xs = np.mgrid[0:shape[0], 0:shape[1]].astype(np.float32)
    s = geometry.profile_of(xs, ys)
    inside = (xs > geometry.left) & (xs < geometry.right)
    image = np.ones(shape, np.float32)
    image[inside & (s >= 0) & (s < 1)] = upper
    image[inside & (s >= 1) & (s < 2)] = lower
    image[inside & (s >= 2) & (s < 2.7)] = below
    return image


def _sampler(image: np.ndarray):
    def at(points: np.ndarray) -> np.ndarray:
        x = np.clip(np.round(points[:, 0]).astype(int), 0, image.shape[1] - 1)
        y = np.clip(np.round(points[:, 1]).astype(int), 0, image.shape[0] - 1)
        return image[y, x]
    return at


def test_a_flat_face_profile_gets_the_targets_dark_upper_lip_lit_lower_lip_and_shadow():
    target = np.zeros_like(PROFILE)
    target[(PROFILE > 0.1) & (PROFILE < 0.9)] = np.log(0.5)  # upper lip
    target[(PROFILE > 2.1) & (PROFILE < 2.6)] = np.log(0.6)  # the shadow under the lower one
    face = np.full_like(PROFILE, np.log(0.8))
    face[np.abs(PROFILE - 1.0) < 0.1] = np.log(0.2)  # the face's own meeting line: not compared
    gain = lip_light_gain(target, face)
    at = lambda s: gain[np.argmin(np.abs(PROFILE - s))]  # noqa: E731
    assert at(0.5) < -0.3
    assert at(2.35) < -0.2
    assert at(1.5) > -0.05
    assert abs(at(-1.0)) < 0.05 and abs(at(3.0)) < 0.05  # none at the ends
    assert abs(at(1.0) - (at(0.75) + at(1.25)) / 2) < 0.15  # the meeting line left out


def test_the_swapped_lips_move_towards_the_targets_light_in_their_own_shape():
    shape = (100, 100)
    target = LipGeometry(_mouth(25, 75, 50, 5, 6))
    face = LipGeometry(_mouth(22, 78, 52, 8, 7))  # fuller lips, a little lower, wider
    target_image = _lit_like_lips(target, shape, upper=0.5, lower=1.0, below=0.6)
    face_image = np.full(shape, 0.9, np.float32)
    shading = np.ones(shape + (3,), np.float32)
    relight_closed_lips(shading, _sampler(target_image), _sampler(face_image * 1.0), target, face, np.ones(shape, bool))
    relit = shading.mean(2) * face_image
    before, after, wanted = (profile(_sampler(image), face) for image in (face_image, relit, _lit_like_lips(face, shape, 0.5, 1.0, 0.6)))
    upper_lip = (PROFILE > 0.2) & (PROFILE < 0.8)
    moved = (after - before)[upper_lip].mean()
    assert moved < 0.5 * STRENGTH * (wanted - before)[upper_lip].mean()  # darker, by about STRENGTH of the way
    assert moved > 1.5 * STRENGTH * (wanted - before)[upper_lip].mean()
    # nothing moves beyond the mouth's corners or far above and below it
    assert np.allclose(shading[:, :20], 1.0) and np.allclose(shading[:, 81:], 1.0)
    assert np.allclose(shading[:25], 1.0) and np.allclose(shading[80:], 1.0)
    # shade is redder than light
    lip = shading[47, 50]
    assert lip[0] > lip[1] > lip[2]
    # the lower lip and the shadow under it keep the face's own light (see RELIT)
    assert np.allclose(shading[56:70, 40:60], 1.0)


@pytest.fixture(scope="module")
def smiling_onto_closed(engine):
    """The astronaut's smiling photo and a frontal Grace Hopper (closed mouth), analysed."""
    source = person_image("astronaut")
    target, _ = _target(person_image("grace_hopper"), "frontal", seed=3)
    return source, engine.analyse_image(source)[0], target, engine.analyse_image(target)[0]


def _swap(swapper: Mesh3dSwapper, registered, target: np.ndarray, face) -> np.ndarray:
    frame = target.copy()
    job = swapper.prepare(frame, face, registered, SwapOptions())
    swapper.finish(frame, job, run_jobs(swapper.runner, [job])[0])
    return frame


def _frame_profile(image: np.ndarray, points: np.ndarray) -> np.ndarray:
    lightness = image.astype(np.float32).mean(2) + 1.0
    return profile(_sampler(lightness), LipGeometry(points[:, :2]))


def test_a_smiling_sources_lips_on_a_closed_mouth_are_lit_like_the_targets(smiling_onto_closed, monkeypatch):
    """The astronaut's smile onto Grace Hopper's closed mouth: her upper lip is dark, her
    lower lip lit, a shadow under it; the swap's lips were a flat pad."""
    source, source_face, target, target_face = smiling_onto_closed
    swapper = Mesh3dSwapper()
    registered = swapper.register(source, source_face)
    relit = _swap(swapper, registered, target, target_face)
    monkeypatch.setattr(mesh3d_lip_light, "STRENGTH", 0.0)
    flat = _swap(swapper, registered, target, target_face)
    own = _frame_profile(target, target_face.mesh)
    upper, lower = (PROFILE > 0.2) & (PROFILE < 0.8), (PROFILE > 1.2) & (PROFILE < 1.8)
    contrast = lambda p: p[lower].mean() - p[upper].mean()  # noqa: E731  (the lower lip over the upper)
    # read in the target's geometry: the swapped lips lie near, not exactly, where the target's do
    assert contrast(own) > 0.3
    assert contrast(_frame_profile(relit, target_face.mesh)) > contrast(_frame_profile(flat, target_face.mesh)) + 0.1
