"""The source's eyes take the target's light: a dark-skinned photo's eye whites do not glow
on a lighter target, and their colour survives the albedo's range."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR
from gpu.swappers import mesh3d, mesh3d_eye_light
from gpu.swappers.mesh3d_eye_light import (
    CHROMA_LEEWAY,
    LEEWAY,
    READ_EVERY,
    TRACK_SMOOTHING,
    WHITE_CEILING,
    EyeGainPerTrack,
    eye_gain,
    eyes_in_range,
    relight_eyes,
)
from mesh3d_still import swap_still
from swapcast.benchmarks.pose_set import person_image
from swapcast.benchmarks.realism_set import _SOURCE_MAKERS, _target


def _eyes(opening: float = 10.0) -> np.ndarray:
    """(468, 2) points with two eye openings (crop pixels), ``opening`` pixels high."""
    points = np.zeros((468, 2), np.float32)
    for contour, upper, lower, centre in ((RIGHT_EYE_CONTOUR, 159, 145, (80.0, 100.0)),
                                          (LEFT_EYE_CONTOUR, 386, 374, (170.0, 100.0))):
        angles = np.linspace(0.0, 2.0 * np.pi, len(contour), endpoint=False)
        points[list(contour)] = np.stack([centre[0] + 20.0 * np.cos(angles), centre[1] + opening / 2 * np.sin(angles)], 1)
        points[upper] = (centre[0], centre[1] - opening / 2)
        points[lower] = (centre[0], centre[1] + opening / 2)
    return points


def _eye_colours(white, iris=(0.1, 0.08, 0.06)):
    """A colour lookup: each eye's middle third is the iris, the rest its white."""
    white, iris = np.asarray(white, np.float32), np.asarray(iris, np.float32)

    def at(points: np.ndarray) -> np.ndarray:
        in_iris = (np.abs(points[:, 0] - 80.0) < 7) | (np.abs(points[:, 0] - 170.0) < 7)
        return np.where(in_iris[:, None], iris, white)

    return at


def test_glowing_whites_are_taken_down_to_the_targets_light_and_colour():
    """A dark-skinned photo's whites, scaled by its skin's gain onto a light skin: lighter
    than the target's many times over, and tinted (its skin was redder)."""
    target_white = np.array([0.55, 0.55, 0.52])
    face_white = np.array([1.6, 1.9, 2.4])
    gain = eye_gain(_eye_colours(target_white), _eye_colours(face_white), _eyes(), _eyes())
    assert gain is not None
    relit = face_white * gain
    assert relit.max() <= max(WHITE_CEILING, target_white.max()) + 1e-6  # no glow
    assert relit.mean() >= target_white.mean() - 1e-6  # not darker than the target's own whites
    def off_colour(white: np.ndarray) -> float:  # the largest channel's log distance from the target's whites' colour
        difference = np.log(white) - np.log(target_white)
        return float(np.abs(difference - difference.mean()).max())

    assert off_colour(relit) < 1.5 * np.log(CHROMA_LEEWAY) < off_colour(face_white)  # towards the target's colour


def test_whites_within_the_leeway_or_darker_are_left_as_they_are():
    """How much white an eye shows and how deep it lies differ from person to person:
    whites up to LEEWAY times lighter are someone's own; darker ones are never brightened
    (that lit up a photo's red lid rims) nor read for colour (what is lightest in a shaded
    eye is its red lid)."""
    target = _eye_colours((0.4, 0.4, 0.4))
    for white in ((0.6, 0.6, 0.6), (0.4 * LEEWAY * 0.95,) * 3, (0.15, 0.15, 0.15), (0.25, 0.12, 0.1)):
        assert max(white) < WHITE_CEILING
        gain = eye_gain(target, _eye_colours(white), _eyes(), _eyes())
        np.testing.assert_allclose(gain, 1.0, atol=1e-6)


def test_an_eye_that_is_shut_or_hidden_is_not_read():
    bright = _eye_colours((2.0, 2.0, 2.0))
    assert eye_gain(_eye_colours((0.5, 0.5, 0.5)), bright, _eyes(opening=2.0), _eyes()) is None  # the target blinks
    hidden = lambda points: np.full((len(points), 3), np.nan, np.float32)  # noqa: E731  (a hand over the eyes)
    assert eye_gain(hidden, bright, _eyes(), _eyes()) is None


def test_the_gain_lands_inside_the_eye_openings_only():
    shading = np.ones((128, 128, 3), np.float32)
    relight_eyes(shading, np.array([0.5, 0.6, 0.7]), _eyes(12.0), np.ones((128, 128), bool))
    np.testing.assert_allclose(shading[50, 40], (0.5, 0.6, 0.7), atol=0.02)  # an eye's middle (half resolution)
    np.testing.assert_allclose(shading[50, 64], 1.0)  # between the eyes
    np.testing.assert_allclose(shading[60, 40], 1.0)  # under an eye


def test_a_dark_skinned_photos_whites_are_scaled_whole_into_the_albedos_range():
    """Relative to a dark skin the whites lie three to five times above it: clipped channel
    by channel they came out as a lighter skin; scaled whole they keep their colour and the
    iris its contrast to them."""
    count = 400
    eyes = np.zeros(count, np.float32)
    eyes[:100] = 1.0
    albedo = np.ones((count, 3), np.float32)
    albedo[:80] = (3.0, 4.5, 6.0)  # the whites (bluish beside a red-brown skin)
    albedo[80:100] = (0.6, 0.6, 0.7)  # the iris
    fitted = eyes_in_range(albedo, eyes, np.ones(count, np.float32), ceiling=1.9)
    assert fitted[:80].max() <= 1.9 + 1e-6
    np.testing.assert_allclose(fitted[:80] / fitted[:80].mean(1, keepdims=True), albedo[:80] / albedo[:80].mean(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(fitted[0] / fitted[90], albedo[0] / albedo[90], rtol=1e-5)  # white over iris kept
    np.testing.assert_array_equal(fitted[100:], albedo[100:])  # the skin untouched
    # a light skin's whites, within the range, are left alone
    albedo[:80] = (1.2, 1.25, 1.3)
    np.testing.assert_array_equal(eyes_in_range(albedo, eyes, np.ones(count, np.float32), ceiling=1.9), albedo)


@pytest.fixture(scope="module")
def dark_onto_light(engine):
    """The astronaut with a dark skin (the realism set's held variant) and a frontal Grace Hopper, analysed."""
    source = _SOURCE_MAKERS["dark_skin"](person_image("astronaut"))
    target, _ = _target(person_image("grace_hopper"), "frontal", seed=3)
    return source, engine.analyse_image(source)[0], target, engine.analyse_image(target)[0]


def test_a_dark_skinned_sources_eyes_do_not_glow_on_a_light_skinned_target(dark_onto_light, monkeypatch):
    target_face = dark_onto_light[3]

    def whites(image: np.ndarray) -> np.ndarray:
        """(3,) the mean colour of the lighter quarter of both eye openings, in the target's geometry."""
        mask = np.zeros(image.shape[:2], np.uint8)
        for contour in (LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR):
            cv2.fillPoly(mask, [np.round(target_face.mesh[list(contour), :2]).astype(np.int32)], 1)
        pixels = image[mask > 0].astype(np.float32)
        return pixels[pixels.mean(1) >= np.percentile(pixels.mean(1), 75)].mean(0)

    fixed = whites(swap_still(*dark_onto_light))
    monkeypatch.setattr(mesh3d, "EYE_WHITE_MAX", 1e9)
    monkeypatch.setattr(mesh3d_eye_light, "GAIN_RANGE", (1.0, 1.0))
    glowing = whites(swap_still(*dark_onto_light))
    assert glowing.max() > 0.95 * 255  # the glow without the fix: whites at the top of the range
    assert fixed.mean() < glowing.mean() - 20
    assert fixed.max() < 0.9 * 255


def test_a_tracks_gain_is_read_every_few_frames_smoothed_and_kept_through_a_blink():
    """Per frame the whites' reading jitters with the gaze and lids; in a blink there is
    none, and the eyes must not flash back to the skin's gain for a frame."""
    gains = EyeGainPerTrack(max_tracks=2)
    assert gains.known(7) is None  # nothing read yet: read now
    np.testing.assert_allclose(gains.update(7, np.array([0.5, 0.5, 0.5])), 0.5)
    for _ in range(READ_EVERY - 1):  # between readings the track keeps its gain
        np.testing.assert_allclose(gains.known(7), 0.5)
    assert gains.known(7) is None  # a reading is due
    moved = gains.update(7, np.array([1.0, 1.0, 1.0]))
    np.testing.assert_allclose(moved, np.exp(np.log(0.5) * (1.0 - TRACK_SMOOTHING)))
    np.testing.assert_allclose(gains.update(7, None), moved)  # a blink keeps it
    assert gains.known(None) is None and gains.update(None, None) is None  # a still reads every time, alone
    np.testing.assert_allclose(gains.update(-1, np.array([0.8, 0.8, 0.8])), 0.8)
    assert gains.update(8, None) is None  # a new track with nothing read yet
    gains.update(8, np.array([0.9] * 3))
    gains.update(9, np.array([0.9] * 3))
    assert gains.update(7, None) is None  # the least recently seen track went
