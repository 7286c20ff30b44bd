"""A swapped face is as soft as the frame it goes into: a crisp photo on a webcam's soft
face is blurred to it; a face on a sharp frame is left alone."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from gpu.kernels import softness as softness_module
from gpu.kernels.softness import LEEWAY, READ_EVERY, SofteningPerTrack, soften_like_frame, softening, softness
from mesh3d_still import swap_still
from swapcast.benchmarks.pose_set import person_image
from swapcast.benchmarks.realism_detail import too_sharp


def _shapes(size: int = 256, seed: int = 0) -> np.ndarray:
    """Flat patches with hard edges, of many contrasts."""
    rng = np.random.default_rng(seed)
    image = np.full((size, size), 120, np.float32)
    for _ in range(30):
        x, y = rng.integers(0, size - 26, 2)
        w, h = rng.integers(5, 40, 2)
        cv2.rectangle(image, (int(x), int(y)), (int(x + w), int(y + h)), float(rng.integers(20, 230)), -1)
    return image


def test_a_blur_is_read_at_the_edges_whatever_their_contrast():
    shapes, everywhere = _shapes(), np.ones((256, 256), bool)
    own = softness(shapes, everywhere)  # the gradient operator's own width
    for sigma in (1.0, 2.0, 3.0):
        blurred = cv2.GaussianBlur(shapes, (0, 0), sigma)
        reading = softness(blurred, everywhere)
        assert np.sqrt(reading**2 - own**2) == pytest.approx(sigma, rel=0.2)
        assert softness(0.4 * blurred, everywhere) == pytest.approx(reading, rel=0.02)
    assert softness(np.full((256, 256), 90, np.float32), everywhere) is None  # nothing to read


def test_only_a_frame_softer_than_the_face_by_more_than_the_leeway_softens_it():
    assert softening(3.0, 1.0, 1.5) == pytest.approx(np.sqrt(9.0 - 1.0 - 1.5**2))
    assert softening(1.0, 2.0, 1.5) == 0.0
    assert softening(np.sqrt(1.0 + 0.9 * 1.5**2), 1.0, 1.5) == 0.0  # within the leeway
    assert softening(None, 1.0, 1.5) == 0.0 and softening(2.0, None, 1.5) == 0.0


def test_a_tracks_softening_is_read_every_few_frames_smoothed_and_a_still_takes_its_own():
    tracks = SofteningPerTrack(max_tracks=2)
    assert tracks.known(None) is None and tracks.update(None, 1.5) == 1.5
    assert tracks.known(7) is None  # nothing known yet: read
    assert tracks.update(7, 1.0) == 1.0
    assert [tracks.known(7) for _ in range(READ_EVERY - 1)] == [1.0] * (READ_EVERY - 1)
    assert tracks.known(7) is None  # a reading is due
    moved = tracks.update(7, 2.0)
    assert 1.0 < moved < 1.5  # a jump in one reading moves the level part of the way
    tracks.update(8, 0.0)
    tracks.update(9, 0.0)  # track 7 is the least recently seen: forgotten
    assert tracks.known(7) is None and tracks.update(7, 2.0) == 2.0


def _face_crop() -> tuple[np.ndarray, np.ndarray]:
    """A colour crop with sharp shapes, and its middle as the face."""
    shapes = _shapes(seed=3)
    crop = np.clip(np.stack([shapes, 0.8 * shapes + 20, 0.6 * shapes + 30], -1), 0, 255).astype(np.uint8)
    face = np.zeros((256, 256), np.float32)
    face[40:216, 40:216] = 1.0
    return crop, face


def test_a_sharp_face_on_a_soft_frame_is_blurred_to_it_and_not_on_a_sharp_one():
    crop, face = _face_crop()
    soft_frame = cv2.GaussianBlur(crop, (0, 0), 3.0)
    softened = soften_like_frame(crop, soft_frame, face, 1.0, None, SofteningPerTrack())
    region = face > 0.5
    read = lambda image: softness(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32), region)  # noqa: E731
    assert read(crop) < read(soft_frame) - 1.0
    lacking = lambda image: np.sqrt(max(read(soft_frame) ** 2 - read(image) ** 2, 0.0))  # noqa: E731
    assert lacking(crop) > 2.0
    assert lacking(softened) < LEEWAY + 0.3  # as soft as the frame, but for the leeway
    assert soften_like_frame(crop, crop, face, 1.0, None, SofteningPerTrack()) is crop
    # the leeway is in the frame's pixels: a face the crop holds at twice the frame's resolution has twice as many
    assert lacking(soften_like_frame(crop, soft_frame, face, 2.0, None, SofteningPerTrack())) > lacking(softened) + 0.3


@pytest.fixture(scope="module")
def astronaut_onto_grace(engine):
    source = person_image("astronaut")
    target = person_image("grace_hopper")
    return source, engine.analyse_image(source)[0], target, engine.analyse_image(target)[0]


def test_the_astronauts_photo_on_a_soft_picture_of_grace_hopper_is_softened_to_it(astronaut_onto_grace, monkeypatch):
    """Grace Hopper's photo out of focus (blurred by 2.5 px): the swapped face had the photo's
    crisp features in a soft head; on her sharp photo nothing changes."""
    source, source_face, sharp, face = astronaut_onto_grace
    soft = cv2.GaussianBlur(sharp, (0, 0), 2.5)
    softened = swap_still(source, source_face, soft, face)
    on_sharp = swap_still(source, source_face, sharp, face)
    monkeypatch.setattr(softness_module, "LEEWAY", np.inf)
    crisp = swap_still(source, source_face, soft, face)
    assert too_sharp(crisp, soft, face.mesh) > 1.5
    assert too_sharp(softened, soft, face.mesh) < LEEWAY + 0.2
    np.testing.assert_array_equal(swap_still(source, source_face, sharp, face), on_sharp)
