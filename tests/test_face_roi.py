"""The converted landmark model behind ``gpu.tracking.face_roi`` gives mediapipe's face mesh
on real frames: from a detection (mediapipe's still-image mode) and from the previous
frame's mesh (its tracking mode, rotated ROIs included)."""

from __future__ import annotations

import numpy as np
import pytest
from mediapipe.python.solutions import face_mesh

from gpu.tracking import face_roi
from streamer.samples import moving_face_frames

# "Within a fraction of a pixel": measured at most 0.026 px from a detection, 0.044 px (x, y)
# and 0.073 px (z) following the mesh through a turning head.
LANDMARK_TOLERANCE_PX = 0.1


def _mediapipe_mesh(graph, frame: np.ndarray) -> np.ndarray | None:
    result = graph.process(frame)
    if not result.multi_face_landmarks:
        return None
    height, width = frame.shape[:2]
    return np.array([(p.x * width, p.y * height, p.z * width) for p in result.multi_face_landmarks[0].landmark[:468]])


@pytest.mark.parametrize("picture", ["astronaut_image", "grace_image"])
def test_landmarks_from_a_detection_equal_mediapipe_still_image_mesh(picture: str, request, tracking_graphs) -> None:
    image = request.getfixturevalue(picture)
    height, width = image.shape[:2]
    with face_mesh.FaceMesh(static_image_mode=True, max_num_faces=1) as graph:
        expected = _mediapipe_mesh(graph, image)
    (faces,) = tracking_graphs.detect("test", "short", image, [(0, 0, width, height)])  # FaceMesh's own detector
    rois = face_roi.roi_from_detection(faces[0].box[None], faces[0].kps[None])
    points, presence = tracking_graphs.landmarks("test", [image], rois)
    assert presence[0] > 0.5
    assert np.abs(points[0] - expected).max() < LANDMARK_TOLERANCE_PX


def test_landmarks_from_the_previous_mesh_equal_mediapipe_tracking_mesh(grace_image, tracking_graphs) -> None:
    frames = moving_face_frames(grace_image, 12, (640, 480), seed=5)
    with face_mesh.FaceMesh(static_image_mode=False, max_num_faces=1) as graph:
        expected = [_mediapipe_mesh(graph, frame) for frame in frames]
    assert all(mesh is not None for mesh in expected)
    # frame k's ROI follows mediapipe's own mesh of frame k-1, as its tracking mode does
    rois = face_roi.roi_from_landmarks(np.stack(expected[:-1]).astype(np.float32))
    assert np.ptp(np.degrees(rois[:, 3])) > 2, "the clip must turn the head (rotated ROIs)"
    points, presence = tracking_graphs.landmarks("test", frames[1:], rois)
    assert (presence > 0.5).all()
    errors = np.abs(points - np.stack(expected[1:]))
    assert errors[..., :2].max() < LANDMARK_TOLERANCE_PX
    assert errors[..., 2].max() < LANDMARK_TOLERANCE_PX


def test_the_crop_matrix_and_the_unprojection_are_inverse() -> None:
    rois = np.array([[320.0, 240.0, 150.0, 0.0], [100.5, 80.25, 64.0, np.radians(35.0)]], np.float32)
    matrices = face_roi.roi_matrices(rois, 192)
    crop_points = np.random.default_rng(0).uniform(0, 192, size=(2, 468, 3)).astype(np.float32)
    frame_points = face_roi.unproject_landmarks(crop_points, rois)
    back = np.einsum("nij,nkj->nki", matrices[:, :, :2], frame_points[..., :2]) + matrices[:, None, :, 2]
    np.testing.assert_allclose(back, crop_points[..., :2], atol=2e-3)
    np.testing.assert_allclose(frame_points[..., 2], crop_points[..., 2] / 192 * rois[:, 2:3], rtol=1e-5)
    np.testing.assert_allclose(matrices[:, :, :2] @ rois[:, :2, None].astype(np.float64) + matrices[:, :, 2:], 96.0, atol=1e-4)


def test_planar_equals_scaling_the_crops_and_transposing_them() -> None:
    """The models' (N, 3, S, S) input, built plane by plane, holds exactly what scaling the
    (N, S, S, 3) crops and transposing them gives: with a scalar scale (the landmark model),
    a per-pixel one and an offset (the detectors' letterbox weight and value range)."""
    rng = np.random.default_rng(0)
    crops = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    scale = np.float32(1 / 255.0)
    weight = rng.random((2, 32, 32), dtype=np.float32) * np.float32(2 / 255.0)
    plain = face_roi.planar(crops, scale)
    np.testing.assert_array_equal(plain, (crops.astype(np.float32) * scale).transpose(0, 3, 1, 2))
    weighted = face_roi.planar(crops, weight, -1.0)
    np.testing.assert_array_equal(weighted, (crops.astype(np.float32) * weight[..., None] + np.float32(-1.0)).transpose(0, 3, 1, 2))
    assert plain.dtype == weighted.dtype == np.float32 and plain.flags.c_contiguous and weighted.flags.c_contiguous
