"""The mesh3d rasteriser paints all triangles at once, exactly as one OpenCV fill per
triangle did (kept here, only as the reference): same triangle per pixel, same coverage,
same barycentric weights -- on random triangles (thin ones, ones crossing the image
border) and on real prepared faces, a -45 degree yaw included."""

import cv2
import numpy as np
import pytest

from gpu.models.canonical_mesh import canonical_mesh, signed_areas
from gpu.swappers.mesh3d import Mesh3dSwapper
from gpu.swappers.mesh3d_geometry import posed, rasterise, uv_atlas
from streamer.samples import moving_face_frames


def _reference_ids(points: np.ndarray, triangles: np.ndarray, keep: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The previous rasteriser: far to near, one ``fillConvexPoly`` per triangle."""
    chosen = np.nonzero(keep)[0]
    if points.shape[1] > 2:
        chosen = chosen[np.argsort(-points[triangles[chosen], 2].sum(1), kind="stable")]
    ids = np.full(shape, -1, dtype=np.int32)
    fixed = np.round(points[triangles[chosen], :2] * 16).astype(np.int32)
    for polygon, label in zip(fixed, chosen.tolist(), strict=True):
        cv2.fillConvexPoly(ids, polygon, label, lineType=cv2.LINE_8, shift=4)
    return ids


def _reference_weights(points: np.ndarray, triangles: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(H, W, 3) clamped, normalised barycentric weights of each pixel in its triangle."""
    ys, xs = np.nonzero(ids >= 0)
    corners = points[triangles[ids[ys, xs]], :2].astype(np.float64)
    a = corners[:, 0]
    v0, v1 = corners[:, 1] - a, corners[:, 2] - a
    det = v0[:, 0] * v1[:, 1] - v0[:, 1] * v1[:, 0]
    dx, dy = xs - a[:, 0], ys - a[:, 1]
    wb, wc = (dx * v1[:, 1] - dy * v1[:, 0]) / det, (v0[:, 0] * dy - v0[:, 1] * dx) / det
    weights = np.clip(np.stack([1.0 - wb - wc, wb, wc], 1), 0.0, 1.0)
    image = np.zeros((*ids.shape, 3))
    image[ys, xs] = weights / weights.sum(1, keepdims=True)
    return image


def _assert_same_raster(points: np.ndarray, triangles: np.ndarray, keep: np.ndarray, shape: tuple[int, int]) -> int:
    raster = rasterise(points, triangles, keep, shape)
    expected = _reference_ids(points, triangles, keep, shape)
    np.testing.assert_array_equal(raster.triangle, expected)
    weights = np.zeros((*shape, 3))
    weights[raster.rows, raster.cols] = raster.weights
    np.testing.assert_allclose(weights, _reference_weights(points, triangles, expected), atol=1e-5)
    return int((expected >= 0).sum())


def test_random_triangles_paint_exactly_what_one_fill_per_triangle_paints():
    rng = np.random.default_rng(11)
    for trial in range(40):
        count = 300
        points = np.concatenate([rng.uniform(-6, 46, (count * 3, 2)), rng.uniform(0, 10, (count * 3, 1))], 1)
        if trial % 2:  # small, thin triangles like a face mesh's, some across the border
            points[:, :2] = np.repeat(rng.uniform(-3, 43, (count, 2)), 3, axis=0) + rng.normal(0, 1.5, (count * 3, 2))
        triangles = np.arange(count * 3).reshape(count, 3)
        keep = rng.random(count) < 0.9
        _assert_same_raster(points, triangles, keep, (40, 48))


def test_the_uv_atlases_are_unchanged():
    mesh = canonical_mesh()
    for size in (32, 128, 384):
        everything = np.ones(len(mesh.triangles), dtype=bool)
        covered = _assert_same_raster(mesh.uv * size - 0.5, mesh.triangles, everything, (size, size))
        assert len(uv_atlas(size).triangle) == covered


@pytest.mark.parametrize("which", ["bench clip frame", "yaw -45", "yaw +45"])
def test_real_prepared_faces_render_the_same_triangles(engine, grace_image, which):
    from swapcast.benchmarks.pose_set import render_pose

    if which == "bench clip frame":
        image = moving_face_frames(grace_image, 8, size=(640, 480))[3]
    else:
        image = render_pose(grace_image, -45 if "-" in which else 45)
    face = engine.analyse_image(image)[0]
    swapper = Mesh3dSwapper(runner=object())
    matrix = swapper.alignment(face)
    scale = float(np.sqrt(abs(np.linalg.det(matrix[:, :2]))))
    points = swapper._in_crop(posed(face.mesh, face.depth), matrix, scale)
    small = points.copy()
    small[:, :2] = points[:, :2] * 0.5 - 0.25  # as ``_render`` draws it: half resolution, back faces culled
    triangles = canonical_mesh().triangles
    front = signed_areas(small, triangles) < 0
    if which != "bench clip frame":
        assert (~front).sum() > 20  # turned: the far side faces away and must stay undrawn
    half = swapper.crop_size // 2
    assert _assert_same_raster(small, triangles, front, (half, half)) > 3000
