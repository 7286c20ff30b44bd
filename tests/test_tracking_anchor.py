"""The graphs tracker's anchor: a robust similarity fit of the track's reference shape puts
the next ROI where the face is, whatever an occluder does to part of the mesh, and carries
a clear move one frame ahead but not the model's jitter."""

from __future__ import annotations

import numpy as np

from gpu.tracking import face_roi
from gpu.tracking.anchor import FaceAnchor, robust_fit, similarity


def _face(rng: np.random.Generator) -> np.ndarray:
    """(468, 3) a face-sized cloud, eye corners level (points 33 and 263)."""
    mesh = np.column_stack([rng.uniform(-75, 75, 468), rng.uniform(-90, 90, 468), rng.uniform(-30, 30, 468)])
    mesh[33], mesh[263] = (-55, -20, 0), (55, -20, 0)
    return mesh + [320, 240, 0]


def _turned(mesh: np.ndarray, scale: float, angle: float, shift: tuple[float, float]) -> np.ndarray:
    centre = mesh.mean(0)
    cos, sin = np.cos(angle), np.sin(angle)
    rotation = np.array([[cos, -sin, 0], [sin, cos, 0], [0, 0, 1]])
    return scale * (mesh - centre) @ rotation.T + centre + [shift[0], shift[1], 0]


def test_similarity_recovers_a_known_transform() -> None:
    source = _face(np.random.default_rng(0))
    target = _turned(source, 1.3, 0.4, (12.0, -7.0))
    scale, rotation, translation = similarity(source, target, np.ones(len(source)))
    np.testing.assert_allclose(scale * source @ rotation.T + translation, target, atol=1e-6)
    assert abs(scale - 1.3) < 1e-9 and abs(np.linalg.det(rotation) - 1) < 1e-9


def test_points_an_occluder_drags_do_not_move_the_fit() -> None:
    rng = np.random.default_rng(1)
    source = _face(rng)
    truth = _turned(source, 1.1, 0.1, (20.0, 5.0))
    dragged = truth.copy()
    lower = truth[:, 1] > np.percentile(truth[:, 1], 75)  # a quarter of the face, pulled a sixth of its width away
    dragged[lower, :2] += [25.0, 20.0]
    scale, rotation, translation, weights = robust_fit(source, dragged, iterations=5)  # from scratch: a few rounds
    fitted = scale * source @ rotation.T + translation
    assert np.abs(fitted - truth).max() < 0.5
    assert weights[lower].max() < 0.05 and weights[~lower].min() > 0.5
    naive_scale, naive_rotation, naive_translation = similarity(source, dragged, np.ones(len(source)))
    assert np.abs(naive_scale * source @ naive_rotation.T + naive_translation - truth).max() > 10  # what a plain fit does


def test_the_roi_holds_on_the_face_while_its_lower_part_is_dragged_frame_after_frame() -> None:
    rng = np.random.default_rng(2)
    face = _face(rng)
    anchor = FaceAnchor(face)
    lower = face[:, 1] > np.percentile(face[:, 1], 70)
    for frame in range(1, 15):
        mesh = face + rng.normal(0, 0.5, face.shape)
        mesh[lower, :2] += [3.0 * frame, 2.0 * frame]  # a cup pulls further each frame
        anchor.update(mesh)
    roi, truth = anchor.next_roi()[0], face_roi.roi_from_landmarks(face[None])[0]
    assert np.hypot(*(roi[:2] - truth[:2])) < 0.02 * truth[2]
    assert abs(roi[2] / truth[2] - 1) < 0.02 and abs(roi[3] - truth[3]) < 0.02
    dragged_box = face_roi.roi_from_landmarks(mesh[None])[0]  # mediapipe's rule: the mesh's own box
    assert np.hypot(*(dragged_box[:2] - truth[:2])) > 0.08 * truth[2]


def test_a_clear_move_is_carried_ahead_and_jitter_is_not() -> None:
    rng = np.random.default_rng(3)
    face = _face(rng)
    panning, zooming, still = FaceAnchor(face), FaceAnchor(face), FaceAnchor(face)
    for frame in range(1, 4):
        panning.update(_turned(face, 1.0, 0.0, (30.0 * frame, 0.0)))
        zooming.update(_turned(face, 1.1 ** frame, 0.0, (0.0, 0.0)))
        still.update(face + rng.normal(0, 0.5, face.shape))
    next_pan = face_roi.roi_from_landmarks(_turned(face, 1.0, 0.0, (120.0, 0.0))[None])[0]
    last_pan = face_roi.roi_from_landmarks(_turned(face, 1.0, 0.0, (90.0, 0.0))[None])[0]
    predicted = panning.next_roi()[0]
    assert abs(predicted[0] - next_pan[0]) < 0.35 * abs(last_pan[0] - next_pan[0])  # most of the step taken
    next_zoom = face_roi.roi_from_landmarks(_turned(face, 1.1 ** 4, 0.0, (0.0, 0.0))[None])[0]
    assert abs(zooming.next_roi()[0][2] / next_zoom[2] - 1) < 0.035  # the last ROI is 10 % small
    truth = face_roi.roi_from_landmarks(face[None])[0]
    assert np.hypot(*(still.next_roi()[0][:2] - truth[:2])) < 0.01 * truth[2]


def test_the_anchor_says_how_much_of_the_lower_face_is_dragged_off_its_shape() -> None:
    """``lower_outliers``: near 0 on a clear face, most of the lower face under a cup (what
    ``face_flow.trust_of_model`` reads)."""
    rng = np.random.default_rng(4)
    face = _face(rng)
    face[1], face[152] = (320, 250, -30), (320, 325, 0)  # nose tip, chin
    clear, covered = FaceAnchor(face), FaceAnchor(face)
    mouth_and_chin = face[:, 1] > np.percentile(face[:, 1], 75)  # half of what lies below the nose
    for frame in range(1, 8):
        clear.update(face + rng.normal(0, 0.5, face.shape))
        mesh = face + rng.normal(0, 0.5, face.shape)
        mesh[mouth_and_chin, :2] += [4.0 * frame, 3.0 * frame]
        covered.update(mesh)
    assert clear.lower_outliers < 0.1
    assert covered.lower_outliers > 0.4
