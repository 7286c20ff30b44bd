"""The pose set: turned renders are real-looking turned heads with the right ground truth,
deterministic, and the set carries every kind of target with its metadata."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.analysis.blazeface import BlazeFaceDetector
from gpu.analysis.face_mesh import FaceMesh
from gpu.analysis.landmarks import NOSE_TIP
from swapcast.benchmarks.pose_set import (
    MOTIONS,
    HeadModel,
    person_image,
    pose_clips,
    pose_set,
    relight,
    render_pose,
    render_pose_with_mesh,
    source_images,
)


@pytest.fixture(scope="module")
def landmarker():
    detector, mesh = BlazeFaceDetector("full"), FaceMesh()

    def landmarks(image: np.ndarray):
        faces = sorted(detector.detect(image), key=lambda f: f.area, reverse=True)
        return mesh.landmarks(image, faces[0]) if faces else None

    yield landmarks
    detector.close()
    mesh.close()


def _nose_offset(mesh: np.ndarray) -> float:
    """Nose tip's x from the middle of the face, in face widths (positive = right)."""
    left, right = mesh[:, 0].min(), mesh[:, 0].max()
    return float((mesh[NOSE_TIP, 0] - (left + right) / 2) / (right - left))


@pytest.mark.parametrize("person", ["astronaut", "grace_hopper"])
def test_no_turn_gives_the_photo_back(person):
    photo = person_image(person)
    image, mesh = render_pose_with_mesh(photo, 0.0)
    assert image.shape == photo.shape and image.dtype == np.uint8
    assert np.abs(image.astype(int) - photo).mean() < 1.0
    assert mesh.shape == (468, 2)


@pytest.mark.parametrize("person", ["astronaut", "grace_hopper"])
def test_a_turn_moves_the_nose_tip_toward_the_turn(person, landmarker):
    """Measured by mediapipe on the renders, not only by the render's own ground truth."""
    photo = person_image(person)
    frontal = _nose_offset(landmarker(photo).mesh)
    right, truth_right = render_pose_with_mesh(photo, 30.0)
    left, truth_left = render_pose_with_mesh(photo, -30.0)
    seen_right, seen_left = landmarker(right), landmarker(left)
    assert seen_right is not None and seen_left is not None, "mediapipe lost the face in a 30 degree render"
    assert _nose_offset(seen_right.mesh) > frontal + 0.08
    assert _nose_offset(seen_left.mesh) < frontal - 0.08
    assert _nose_offset(truth_right) > frontal + 0.08 and _nose_offset(truth_left) < frontal - 0.08


@pytest.mark.parametrize("person", ["astronaut", "grace_hopper"])
def test_mediapipe_finds_the_face_of_a_30_degree_render_where_the_ground_truth_says(person, landmarker):
    image, truth = render_pose_with_mesh(person_image(person), 30.0)
    found = landmarker(image)
    assert found is not None and found.mesh is not None
    width = truth[:, 0].max() - truth[:, 0].min()
    error = np.linalg.norm(found.mesh - truth, axis=1).mean()
    assert error < 0.08 * width, f"mean landmark error {error:.1f} px on a {width:.0f} px face"


def test_renders_are_deterministic():
    photo = person_image("astronaut")
    first, second = HeadModel.from_image(photo), HeadModel.from_image(photo)
    a, mesh_a = first.render(37.0)
    b, mesh_b = second.render(37.0)
    assert np.array_equal(a, b) and np.array_equal(mesh_a, mesh_b)
    assert np.array_equal(render_pose(photo, 20.0, roll_deg=10.0), render_pose(photo, 20.0, roll_deg=10.0))


def test_a_turn_changes_the_head_but_not_the_room():
    photo = person_image("grace_hopper")
    image, mesh = render_pose_with_mesh(photo, 45.0)
    x0, y0 = mesh.min(0).astype(int)
    x1, y1 = mesh.max(0).astype(int)
    assert np.abs(image[y0:y1, x0:x1].astype(int) - photo[y0:y1, x0:x1]).mean() > 10
    assert np.array_equal(image[-60:], photo[-60:])  # the body and the room below stay put


def test_roll_turns_the_eye_line():
    image, mesh = render_pose_with_mesh(person_image("astronaut"), 0.0, roll_deg=30.0)
    _, upright = render_pose_with_mesh(person_image("astronaut"), 0.0)

    def eye_angle(m: np.ndarray) -> float:
        return float(np.degrees(np.arctan2(m[263, 1] - m[33, 1], m[263, 0] - m[33, 0])))

    # counter-clockwise in the image (y down): the right eye rises
    assert eye_angle(mesh) == pytest.approx(eye_angle(upright) - 30.0, abs=0.5)
    assert image.shape == person_image("astronaut").shape


def test_quick_pose_set_has_every_kind_with_ground_truth():
    samples = list(pose_set(quick=True))
    names = [s.name for s in samples]
    assert len(names) == len(set(names))
    assert {s.kind for s in samples} == {"yaw", "roll", "scale", "light"}
    assert {s.person for s in samples} == {"astronaut", "grace_hopper"}
    for sample in samples:
        height, width = sample.image.shape[:2]
        x0, y0, x1, y1 = sample.face_box
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height, sample.name
        assert sample.kps.shape == (5, 2)
    small = next(s for s in samples if s.kind == "scale")
    assert small.face_width == pytest.approx(64, abs=1) and small.image.shape[:2] == (720, 1280)
    turned = next(s for s in samples if s.name == "astronaut/yaw+30")
    assert turned.yaw == 30 and turned.roll == 0 and turned.light == "normal"


def test_quick_clip_is_a_yaw_sweep_with_a_mesh_per_frame():
    clips = list(pose_clips(people=["astronaut"], quick=True))
    assert [c.motion for c in clips] == ["yaw_sweep"]
    clip = clips[0]
    assert len(clip.frames) == len(clip.meshes) == len(clip.yaws) == 12
    assert {f.shape for f in clip.frames} == {(480, 640, 3)}
    assert max(clip.yaws) >= 40 and min(clip.yaws) <= -40
    assert "yaw_sweep" in MOTIONS


def test_sources_are_one_person_in_other_pixels():
    sources = source_images("grace_hopper")
    assert list(sources) == ["grace_hopper", "grace_hopper/mirrored", "grace_hopper/yaw+20", "grace_hopper/blurry_dim"]
    assert sources["grace_hopper/blurry_dim"].mean() < 0.6 * sources["grace_hopper"].mean()
    assert np.array_equal(sources["grace_hopper/mirrored"], sources["grace_hopper"][:, ::-1])
    assert list(source_images("grace_hopper", quick=True)) == ["grace_hopper"]


def test_lights_change_the_picture_the_way_they_say():
    image, mesh = render_pose_with_mesh(person_image("astronaut"), 0.0)
    dim = relight(image, mesh, "dim")
    warm = relight(image, mesh, "warm").astype(float)
    side = relight(image, mesh, "side").astype(float)
    assert dim.mean() < 0.4 * image.mean()
    assert warm[..., 0].mean() > warm[..., 2].mean() * 1.3
    face_mid = int((mesh[:, 0].min() + mesh[:, 0].max()) / 2)
    assert side[:, face_mid + 40].mean() > 2 * side[:, face_mid - 40].mean()


def test_bad_names_are_clear_errors():
    with pytest.raises(ValueError, match="unknown person"):
        person_image("nobody")
    with pytest.raises(ValueError, match="unknown light"):
        relight(np.zeros((8, 8, 3), np.uint8), np.zeros((468, 2), np.float32), "disco")
