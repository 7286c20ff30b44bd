"""The frame's grain made anew on a pasted face (gpu/kernels/grain.py)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from gpu.kernels.grain import GrainTile, band_level, finest_band, grain_noise
from gpu.kernels.warp import crop_faces, paste_back_keeping_detail, paste_region


def _finest(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image, np.float32)
    return image - cv2.GaussianBlur(image, (0, 0), 1.0)


def _shrink(scale: float, shift: tuple[float, float] = (0.0, 0.0), angle: float = 0.0) -> np.ndarray:
    cos, sin = scale * np.cos(angle), scale * np.sin(angle)
    return np.array([[cos, -sin, shift[0]], [sin, cos, shift[1]]], np.float64)


def test_the_tile_is_fine_noise_of_unit_energy_in_the_finest_band():
    tile = GrainTile(seed=3)
    noise = tile.patch(256, 256, _shrink(1.0))
    assert abs(float(noise.mean())) < 0.02
    assert 0.9 < float(_finest(noise).std()) < 1.1
    low = cv2.GaussianBlur(noise, (0, 0), 3.0)
    assert float(low.std()) < 0.05 * float(noise.std())  # all of it fine: no blotches


def test_the_noise_moves_and_turns_with_the_face_at_the_frames_pixel_size():
    tile = GrainTile(seed=1)
    scale = 0.6  # a large face: a frame pixel is 0.6 crop pixels
    here = tile.patch(120, 160, _shrink(scale))
    there = tile.patch(120, 160, _shrink(scale, shift=(-scale * 7, -scale * 4)))  # the face 7 right, 4 down
    np.testing.assert_array_equal(there[4:, 7:], here[:-4, :-7])
    # the grain is as fine as the frame's pixels whatever the face's size
    for other in (0.3, 1.7):
        assert 0.9 < float(_finest(tile.patch(160, 160, _shrink(other))).std() / _finest(here).std()) < 1.1
    turned = tile.patch(160, 160, _shrink(scale, angle=0.4))
    assert 0.9 < float(turned.std() / here.std()) < 1.1


def test_the_level_is_the_grains_not_the_lines_across_it():
    rng = np.random.default_rng(2)
    grain = 3.0 * rng.standard_normal((200, 200)).astype(np.float32)
    lined = grain.copy()
    lined[::25] += 40  # wrinkles, a rim: strong, thin, few
    weight = np.ones((200, 200), np.float32)
    plain = band_level(grain, weight)
    assert plain == pytest.approx(9.0, rel=0.25)
    mean_energy = float(np.mean(lined**2))  # ~8x the grain's
    assert band_level(lined, weight) < min(2.0 * plain, 0.25 * mean_energy)
    assert band_level(grain, np.zeros_like(weight)) is None  # no face there: nothing to measure


def _grainy(size: int, sigma: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(128 + sigma * rng.standard_normal((size, size, 1)), 0, 255).astype(np.uint8).repeat(3, axis=2)


def test_finest_band_is_the_lumas_finest_detail():
    flat = np.full((64, 64, 3), 90, np.uint8)
    assert np.abs(finest_band(flat)).max() < 1e-4
    assert float(finest_band(_grainy(64, 5.0, 0)).std()) > 3.0


def test_the_noise_has_the_lost_bands_energy_as_far_as_the_swapped_face_lacks_grain():
    rng = np.random.default_rng(4)
    lost = 4.0 * rng.standard_normal((160, 160)).astype(np.float32)  # what the crop could not hold
    weight = np.zeros((160, 160), np.float32)
    weight[:, :80] = 1.0
    target_crop, crop_weight = _grainy(96, 4.0, 1), np.ones((96, 96), np.float32)

    def added(swapped_crop: np.ndarray) -> np.ndarray:
        noise = grain_noise(lost, weight, weight, _shrink(0.5), (swapped_crop, target_crop), crop_weight, GrainTile())
        return np.zeros((160, 160), np.float32) if noise is None else noise

    smooth = added(np.full((96, 96, 3), 128, np.uint8))
    assert np.array_equal(smooth[:, 80:], np.zeros_like(smooth[:, 80:]))  # none outside the face
    assert 0.7 * 4.0 < float(_finest(smooth[:, :80]).std()) < 1.3 * 4.0
    assert abs(float(np.corrcoef(smooth[:, :80].ravel(), lost[:, :80].ravel())[0, 1])) < 0.1  # not the frame's own
    half = added(_grainy(96, 4.0 / np.sqrt(2), 2))  # a face with half the target's grain energy gets half of it
    assert 0.35 < float(half[:, :80].std() / smooth[:, :80].std()) ** 2 < 0.65
    assert not added(_grainy(96, 5.0, 3)).any()  # a face grainier than the target's gets none


def test_the_noise_is_the_cameras_grain_not_the_target_skins_texture():
    """An old face's skin is finely textured beyond the camera's grain: the frame round the
    face (here half as grainy) gives the level, so the source's face does not take on the
    target's skin."""
    rng = np.random.default_rng(6)
    lost = 2.0 * rng.standard_normal((160, 160)).astype(np.float32)
    lost[:, :80] *= 2.0  # the face's skin: twice the grain round it
    face = np.zeros((160, 160), np.float32)
    face[:, :80] = 1.0
    crops = (np.full((96, 96, 3), 128, np.uint8), _grainy(96, 4.0, 1))
    tile = GrainTile()
    within = grain_noise(lost, face, face, _shrink(0.5), crops, np.ones((96, 96), np.float32), tile)
    assert 0.7 * 2.0 < float(_finest(within[:, :80]).std()) < 1.3 * 2.0
    alone = grain_noise(lost, face, np.ones_like(face), _shrink(0.5), crops, np.ones((96, 96), np.float32), tile)
    assert 0.7 * 4.0 < float(_finest(alone[:, :80]).std()) < 1.3 * 4.0  # no frame round it: the face's own level


def test_a_smooth_face_pasted_into_a_grainy_frame_is_as_grainy_as_the_frame():
    """A large face (the crop holds it at 0.6 of the frame's resolution) whose crop has no
    grain left: without grain it is smooth against the frame round it; with it, its finest
    band is the frame's, and none of the frame's own pattern (a wrinkle) shows through."""
    rng = np.random.default_rng(7)
    frame = np.clip(128 + 6 * rng.standard_normal((300, 300, 1)), 0, 255).astype(np.uint8).repeat(3, axis=2)
    frame[150:152, 60:240] = 40  # a line the swap must not bring back
    matrix = _shrink(0.6, shift=(-26.0, -26.0)).astype(np.float32)  # frame -> a 128 crop
    target_crop = crop_faces([frame], matrix[None], 128)[0]
    mask = np.zeros((128, 128), np.float32)
    mask[8:120, 8:120] = 1.0
    face = np.full((128, 128, 3), 128, np.uint8)
    plain, grainy = frame.copy(), frame.copy()
    paste_back_keeping_detail(plain, face, target_crop, mask, mask, matrix)
    paste_back_keeping_detail(grainy, face, target_crop, mask, mask, matrix, GrainTile())
    inverse = cv2.invertAffineTransform(matrix)
    x0, y0 = np.round(inverse @ np.array([20, 20, 1.0])).astype(int)
    x1, y1 = np.round(inverse @ np.array([108, 108, 1.0])).astype(int)
    inside = np.zeros(frame.shape[:2], bool)
    inside[y0:y1, x0:x1] = True
    inside[140:162] = False  # away from the line
    own = float(_finest(frame[..., 0])[inside].std())
    assert float(_finest(plain[..., 0])[inside].std()) < 0.2 * own
    assert 0.6 * own < float(_finest(grainy[..., 0])[inside].std()) < 1.2 * own
    assert np.array_equal(grainy[..., 0], grainy[..., 2])  # grey in, grey out: the grain is the luma's, no colour speckle
    line = np.abs(grainy[150:152, x0 + 10 : x1 - 10, 0].astype(int) - 128)
    assert float(line.mean()) < 10  # the line (88 deep) stays gone
    (rx0, ry0, rx1, ry1), _ = paste_region(mask, matrix, frame.shape[:2])
    outside = np.ones(frame.shape[:2], bool)
    outside[ry0:ry1, rx0:rx1] = False
    assert np.array_equal(grainy[outside], frame[outside])
