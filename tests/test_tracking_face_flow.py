"""The upper face's image motion: it holds a mesh the model drags, carries one the model
lost, and leaves the model's answer alone where the face is clear or the image says nothing."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from gpu.tracking.face_flow import COVERED_TRUST, MAX_POINTS, UpperFaceFlow, trust_of_model, upper_points
from swapcast.benchmarks.pose_set import person_image, render_pose_with_mesh

SHIFT = np.array([5.0, 3.0])


@pytest.fixture(scope="module")
def moving_face() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gray frame, the same face moved by ``SHIFT`` pixels, the first frame's mesh with a
    depth column, as the landmark model gives it)."""
    image, mesh = render_pose_with_mesh(person_image("astronaut"), 20.0)
    gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    moved = cv2.warpAffine(gray, np.array([[1, 0, SHIFT[0]], [0, 1, SHIFT[1]]], np.float32), gray.shape[::-1],
                           borderMode=cv2.BORDER_REPLICATE)
    depth = np.linspace(-20.0, 20.0, len(mesh))
    return gray, moved, np.column_stack([mesh, depth]).astype(np.float32)


def _seeded(gray: np.ndarray, mesh: np.ndarray) -> UpperFaceFlow:
    flow = UpperFaceFlow()
    flow.follow(gray, gray, mesh, mesh, 1.0)
    return flow


def test_a_mesh_the_model_drags_is_put_where_the_eyes_went(moving_face) -> None:
    gray, moved, mesh = moving_face
    width = float(np.ptp(mesh[:, 0]))
    drag = np.array([0.12, 0.08]) * width  # the whole mesh pulled toward an object below
    dragged = mesh.copy()
    dragged[:, :2] += SHIFT + drag
    out = _seeded(gray, mesh).follow(gray, moved, mesh, dragged, COVERED_TRUST)
    error = np.linalg.norm(out[:, :2] - (mesh[:, :2] + SHIFT), axis=1).mean()
    assert error < 0.1 * np.linalg.norm(drag), error  # the drag is gone but for the model's small pull
    np.testing.assert_allclose(out[:, 2], mesh[:, 2])  # the model's depth and size are kept


def test_a_clear_face_keeps_the_models_own_mesh(moving_face) -> None:
    gray, moved, mesh = moving_face
    model = mesh + np.float32(1.5)
    flow = _seeded(gray, mesh)
    assert flow.follow(gray, moved, mesh, model, 1.0) is model
    assert not flow.following


def test_a_face_the_model_lost_behind_an_object_moves_with_the_image(moving_face) -> None:
    gray, moved, mesh = moving_face
    flow = _seeded(gray, mesh)
    out = flow.follow(gray, moved, mesh, None, COVERED_TRUST)
    assert flow.following
    np.testing.assert_allclose(out[:, :2], mesh[:, :2] + SHIFT, atol=0.5)


def test_where_the_image_follows_nothing_the_model_answers_alone(moving_face) -> None:
    """A cut to another picture: no point is followed there and back."""
    gray, _, mesh = moving_face
    other = np.random.default_rng(3).integers(0, 256, gray.shape, dtype=np.uint8)
    model = mesh + np.float32(4.0)
    assert _seeded(gray, mesh).follow(gray, other, mesh, None, COVERED_TRUST) is None
    flow = _seeded(gray, mesh)
    assert flow.follow(gray, other, mesh, model, COVERED_TRUST) is model
    assert not flow.following


def test_the_model_is_trusted_less_the_more_of_the_lower_face_is_dragged() -> None:
    shares = np.linspace(0.0, 1.0, 21)
    trust = [trust_of_model(share) for share in shares]
    assert trust[0] == trust[2] == 1.0  # a clear face's few outliers
    assert trust[-1] == pytest.approx(COVERED_TRUST)
    assert all(a >= b for a, b in zip(trust, trust[1:]))


def test_the_points_followed_are_the_upper_faces_middle() -> None:
    _, mesh = render_pose_with_mesh(person_image("grace_hopper"), 0.0)
    chosen = upper_points(mesh)
    assert 20 <= len(chosen) <= MAX_POINTS
    points = mesh[chosen]
    assert points[:, 1].max() < mesh[1, 1]  # above the nose tip: off the mouth and chin
    assert mesh[234, 0] < points[:, 0].min() and points[:, 0].max() < mesh[454, 0]  # inside the face's sides
    left = points[:, 0] < mesh[168, 0]
    assert 0.3 < left.mean() < 0.7  # both eyes' sides
