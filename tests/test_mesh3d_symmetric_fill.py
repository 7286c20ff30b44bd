"""The mirrored side fills what a source photo's own side lacks, at this side's level."""

import cv2
import numpy as np

from gpu.swappers.mesh3d import symmetric_fill


def _two_sided_albedo(size: int = 128, seed: int = 0) -> np.ndarray:
    """Skin with fine texture; the right half 30 % lighter and a little redder (one side of
    the face lit more, which the light model left in)."""
    rng = np.random.default_rng(seed)
    texture = cv2.GaussianBlur(rng.standard_normal((size, size)).astype(np.float32), (0, 0), 1.0) * 0.05
    albedo = np.repeat((1.0 + texture)[..., None], 3, axis=2)
    albedo[:, size // 2 :] *= np.array([1.35, 1.3, 1.25], np.float32)
    return albedo


def test_a_patch_filled_from_the_other_side_takes_this_sides_level_and_the_others_detail():
    size = 128
    albedo = _two_sided_albedo(size)
    seen = np.ones((size, size), np.float32)
    confidence = np.ones((size, size), np.float32)
    patch = (slice(40, 80), slice(20, 44))  # a strand's patch on the darker side
    truth = albedo[patch].copy()
    albedo[patch] = 0.2  # the hair
    confidence[patch] = 0.0
    filled = symmetric_fill(albedo, seen, confidence)
    inside = filled[patch]
    around = np.concatenate([filled[30:90, 10:20].reshape(-1, 3), filled[30:90, 44:54].reshape(-1, 3)])
    # the patch is as light and as coloured as the skin around it (copied as it was: 30 % lighter)
    np.testing.assert_allclose(inside.reshape(-1, 3).mean(0), around.mean(0), rtol=0.05)
    # and it has skin's texture, the other side's (not a flat fill)
    assert inside.mean(2).std() > 0.5 * truth.mean(2).std()


def test_a_turned_photos_far_side_takes_the_other_side_as_it_is():
    """Where this side has no trusted skin near, there is no level of its own to take."""
    size = 128
    albedo = _two_sided_albedo(size)
    seen = np.ones((size, size), np.float32)
    seen[:, : size // 2] = 0.0  # the left half not seen at all
    filled = symmetric_fill(albedo, seen)
    far = filled[20:-20, 10:40]
    near_mirror = albedo[:, ::-1][20:-20, 10:40]
    np.testing.assert_allclose(far.mean((0, 1)), near_mirror.mean((0, 1)), rtol=0.03)
