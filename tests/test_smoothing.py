import numpy as np

from gpu.analysis.smoothing import MeshSmoother, OneEuroFilter


def test_still_noisy_points_are_steadied():
    rng = np.random.default_rng(0)
    truth = rng.uniform(0, 500, (468, 2)).astype(np.float32)
    smoother = OneEuroFilter()
    outputs = [smoother(truth + rng.normal(0, 1.0, truth.shape), t / 30) for t in range(120)]
    raw_error = 1.0 * np.sqrt(2)
    smoothed_error = np.sqrt(((np.stack(outputs[30:]) - truth) ** 2).sum(-1)).mean()
    assert smoothed_error < raw_error / 3


def test_fast_motion_is_followed_without_lag():
    smoother = OneEuroFilter()
    point = np.zeros((1, 2), np.float32)
    for t in range(60):  # 300 px/s sweep
        out = smoother(point + [10.0 * t, 0.0], t / 30)
    assert abs(out[0, 0] - 590.0) < 15.0  # well under one frame's worth of lag at that speed... x1.5


def test_first_sample_and_time_reset_pass_through():
    smoother = OneEuroFilter()
    first = np.array([[3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(smoother(first, 1.0), first)
    np.testing.assert_array_equal(smoother(first + 10, 0.5), first + 10)  # time went back: restart


def _face_cloud() -> np.ndarray:
    rng = np.random.default_rng(1)
    mesh = np.column_stack([rng.uniform(-75, 75, 468), rng.uniform(-90, 90, 468), rng.uniform(-30, 30, 468)])
    mesh[33], mesh[263] = (-55, -20, 0), (55, -20, 0)
    return mesh.astype(np.float32)


def _size(mesh: np.ndarray) -> float:
    offsets = mesh[:, :2] - mesh[:, :2].mean(0)
    return float(np.sqrt((offsets ** 2).sum(1).mean()))


def test_mesh_smoother_follows_a_fast_zoom_that_lags_the_per_point_filter():
    face = _face_cloud()
    mesh_smoother, point_filter = MeshSmoother(), OneEuroFilter()
    by_pose, by_point = [], []
    for t in range(24):  # the pose set's zoom: the face from 1x to 1.5x to 0.5x and back in 0.8 s
        frame = face * np.float32(1 + 0.5 * np.sin(2 * np.pi * t / 24)) + [320, 240, 0]
        by_pose.append(_size(mesh_smoother(frame, t / 30)) / _size(frame) - 1)
        by_point.append(_size(point_filter(frame, t / 30)) / _size(frame) - 1)
    assert max(map(abs, by_pose)) < 0.035
    assert max(map(abs, by_point)) > 0.08  # what per-point smoothing did: three times the lag
    np.testing.assert_allclose(mesh_smoother(frame, 1.0)[:, :2].mean(0), frame[:, :2].mean(0), atol=0.5)  # centred as it is


def test_mesh_smoother_steadies_a_still_noisy_face_and_keeps_its_turn():
    rng = np.random.default_rng(0)
    angle = np.radians(20)
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]], np.float32)
    truth = _face_cloud()
    truth[:, :2] = truth[:, :2] @ rotation.T + [300, 200]
    smoother = MeshSmoother()
    outputs = [smoother(truth + rng.normal(0, 1.0, truth.shape), t / 30) for t in range(120)]
    smoothed_error = np.sqrt(((np.stack(outputs[30:])[:, :, :2] - truth[:, :2]) ** 2).sum(-1)).mean()
    assert smoothed_error < np.sqrt(2) / 3
    assert outputs[-1].shape == truth.shape
