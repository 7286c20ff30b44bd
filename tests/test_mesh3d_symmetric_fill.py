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


def test_a_fill_continues_the_skin_at_its_edge():
    """A fringe over the top of a forehead brighter than the rest of the face (a sheen, a
    pale brow): neither side of the face has skin there, and the fill met the forehead in
    a step (the mean of the face around mixed in beside it), drawn along the fringe's ragged
    outline as a line across every target's forehead. Now the fill beside its edge
    continues the forehead's level."""
    from gpu.swappers.mesh3d_geometry import push_pull_fill

    size = 128
    albedo = np.full((size, size, 3), 0.8, np.float32)  # the face
    albedo[:48] = 1.5  # the forehead: a band 8 texels deep shows under the fringe
    confidence = np.ones((size, size), np.float32)
    rng = np.random.default_rng(1)
    outline = 40 + np.round(3 * rng.standard_normal(size)).astype(int)  # the fringe's ragged lower edge
    for column, row in enumerate(outline):
        albedo[:row, column] = 0.3  # the hair
        confidence[:row, column] = 0.0

    def step(filled: np.ndarray) -> float:
        beside = np.concatenate([filled[row - 3:row, column] for column, row in enumerate(outline)])
        return float(np.abs(beside.mean(1) - 1.5).mean())

    filled = symmetric_fill(albedo, np.ones((size, size), np.float32), confidence)
    assert step(filled) < 0.06  # 0.02 when written
    assert step(push_pull_fill(albedo, confidence)) > 0.15  # unanchored: 0.21
    assert filled[:outline.max()].mean(2).min() > 0.8  # no hair comes back
