"""Built-in face analysis on real faces: BlazeFace, face mesh, tracker, dlib identity."""

import numpy as np
import pytest

from gpu.analysis.blazeface import BlazeFaceDetector
from gpu.analysis.face_mesh import FaceMesh, FaceTracker
from gpu.analysis.identity import SAME_PERSON_DISTANCE, identity_distance
from gpu.analysis.landmarks import five_points
from gpu.models.builtin import BuiltinModels
from gpu.tracking.graph_tracker import GraphFaceTracker
from streamer.samples import moving_face_frames


def test_builtin_models_are_found_inside_the_wheels():
    models = BuiltinModels.locate()
    for path in vars(models).values():
        assert path.is_file() and "site-packages" in str(path)


@pytest.mark.parametrize("model_range", ["short", "full"])
def test_blazeface_finds_one_face_with_ordered_keypoints(astronaut_image, model_range):
    faces = BlazeFaceDetector(model_range).detect(astronaut_image)
    assert len(faces) == 1
    face = faces[0]
    x0, y0, x1, y1 = face.box
    assert 150 < x0 < x1 < 300 and 50 < y0 < y1 < 220  # the astronaut's head, top middle
    kps = face.kps
    assert kps[0, 0] < kps[1, 0]  # left eye (image) before right eye
    assert kps[3, 0] < kps[4, 0]  # left mouth corner before right
    assert kps[:2, 1].mean() < kps[2, 1] < kps[3:, 1].mean()  # eyes above nose above mouth
    assert ((kps >= face.box[:2] - 5) & (kps <= face.box[2:] + 5)).all()


def test_blazeface_counts_faces(two_faces):
    assert len(BlazeFaceDetector("full").detect(two_faces)) == 2
    assert BlazeFaceDetector("full").detect(np.full((240, 320, 3), 127, np.uint8)) == []


def test_face_mesh_gives_468_points_inside_the_face(grace_image):
    detection = BlazeFaceDetector().detect(grace_image)[0]
    face = FaceMesh().landmarks(grace_image, detection)
    mesh = face.mesh
    assert mesh.shape == (468, 2)
    x0, y0, x1, y1 = detection.box
    centre = mesh.mean(0)
    assert x0 < centre[0] < x1 and y0 < centre[1] < y1
    np.testing.assert_allclose(face.kps, five_points(mesh))
    # eye centres from the mesh land near the detector's eye keypoints
    assert np.linalg.norm(face.kps[:2] - detection.kps[:2], axis=1).max() < 0.15 * (x1 - x0)


def test_face_mesh_on_a_region_without_a_face_finds_no_face(grace_image):
    detection = BlazeFaceDetector().detect(grace_image)[0]
    blank = np.full_like(grace_image, 90)
    assert FaceMesh().landmarks(blank, detection) is None


@pytest.fixture(params=["mediapipe", "graphs"])
def make_tracker(request):
    """Either tracker backend (``engine.tracker``), built with the given arguments."""
    if request.param == "graphs":
        graphs = request.getfixturevalue("tracking_graphs")
        return lambda **kwargs: GraphFaceTracker(graphs, **kwargs)
    return FaceTracker


def test_tracker_keeps_one_id_for_a_moving_face(grace_image, make_tracker):
    tracker = make_tracker(max_faces=2)
    ids = [tuple(f.track_id for f in tracker.process(frame, i / 30)) for i, frame in enumerate(moving_face_frames(grace_image, 20, (480, 360)))]
    assert all(len(frame_ids) == 1 for frame_ids in ids)
    assert len(set(ids)) == 1


def test_tracker_finds_small_faces_far_from_the_camera(grace_image, make_tracker):
    canvas = np.full((720, 1280, 3), 100, np.uint8)
    small = grace_image[::5, ::5]  # a ~40 px face in a 720p frame
    canvas[300 : 300 + small.shape[0], 900 : 900 + small.shape[1]] = small
    faces = make_tracker().process(canvas, 0.0)
    assert len(faces) == 1 and 900 < faces[0].center[0] < 900 + small.shape[1]


def test_tracker_gives_two_faces_two_ids_and_forgets_them(two_faces, make_tracker):
    tracker = make_tracker(max_faces=4)
    first = tracker.process(two_faces, 0.0)
    second = tracker.process(two_faces, 1 / 30)
    assert len(first) == 2 and len({f.track_id for f in first}) == 2
    assert {f.track_id for f in first} == {f.track_id for f in second}
    assert tracker.process(np.zeros_like(two_faces), 2 / 30) == []
    assert {f.track_id for f in tracker.process(two_faces, 3 / 30)}.isdisjoint({f.track_id for f in first})


def test_smoothing_steadies_a_still_face_under_noise(grace_image, make_tracker):
    rng = np.random.default_rng(3)
    frames = [np.clip(grace_image + rng.normal(0, 3, grace_image.shape), 0, 255).astype(np.uint8) for _ in range(40)]

    def jitter(smoothing: bool) -> float:
        tracker = make_tracker(smoothing=smoothing)
        points = np.stack([tracker.process(f, i / 30)[0].mesh for i, f in enumerate(frames)][10:])
        return float(np.sqrt(((points - points.mean(0)) ** 2).sum(-1).mean(0)).mean())

    raw, smoothed = jitter(False), jitter(True)
    assert smoothed <= 1.0  # the target: <= 1 px on a still frame
    assert smoothed < raw


def test_identity_separates_people_and_survives_motion(engine, astronaut_image, grace_image, identity_of):
    astronaut, grace = identity_of(astronaut_image), identity_of(grace_image)
    assert astronaut.shape == (128,)
    assert identity_distance(astronaut, grace) > SAME_PERSON_DISTANCE
    for frame in moving_face_frames(grace_image, 6, (640, 480))[1:4]:
        assert identity_distance(identity_of(frame), grace) < 0.25
