"""Still-image analysis on the converted graphs (``engine.tracker: graphs``): the same faces
and meshes as mediapipe's still path, and it runs where mediapipe cannot be imported."""

import importlib.util
import sys
import types

import cv2
import numpy as np
import pytest

from gpu.analysis.detection import box_iou
from gpu.analysis.still_faces import MediapipeStillFaces, analyse_still
from gpu.analysis.still_graphs import GraphStillFaces, region_matrix
from gpu.engine import EngineSettings, FaceEngine
from gpu.types import Face


@pytest.fixture(scope="module")
def graph_still(tracking_graphs):
    return GraphStillFaces(tracking_graphs)


@pytest.fixture(scope="module")
def mediapipe_still():
    return MediapipeStillFaces()


def _rolled(image: np.ndarray, degrees: float) -> np.ndarray:
    height, width = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), degrees, 1.0)
    return cv2.warpAffine(image, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE)


@pytest.mark.parametrize("picture, roll", [("astronaut_image", 0), ("grace_image", 0), ("grace_image", 40), ("two_faces", 0)])
def test_graph_meshes_match_mediapipe_still_meshes(picture, roll, request, graph_still, mediapipe_still):
    image = _rolled(request.getfixturevalue(picture), roll)
    graphs, mediapipe = analyse_still(graph_still, image), analyse_still(mediapipe_still, image)
    assert len(graphs) == len(mediapipe) >= 1
    for ours, theirs in zip(graphs, mediapipe, strict=True):
        assert box_iou(ours.box, theirs.box) > 0.85
        width = theirs.box[2] - theirs.box[0]
        # the two mesh the same face within ~2-3 % of its width (measured 1.2 px mean on the pose set)
        assert np.linalg.norm(ours.mesh - theirs.mesh, axis=1).mean() < 0.03 * width
        assert ours.depth is not None and ours.depth.shape == (468,)


def test_graph_still_rejects_a_candidate_without_a_face(grace_image, graph_still):
    blank = np.full_like(grace_image, 90)
    candidate = Face(box=np.array([170, 131, 357, 334], np.float32), kps=np.zeros((5, 2), np.float32), score=0.9)
    assert graph_still.landmarks(blank, [candidate]) == [None]
    assert analyse_still(graph_still, blank) == []


def test_a_candidate_short_range_misses_must_hold_its_presence_on_its_own_box(astronaut_image, graph_still):
    # mirrored, the astronaut's mission patch is a HOG candidate that short range does not
    # see: presence 0.24 on its box's ROI, 0.6 once re-centred on its own mesh; it is no face
    mirrored = np.ascontiguousarray(astronaut_image[:, ::-1])
    faces = analyse_still(graph_still, mirrored)
    assert len(faces) == 1
    assert faces[0].box[3] < 200  # the astronaut's face, not the patch on her chest


def test_region_matrix_turns_the_face_upright():
    # eyes on a line tilted 30 degrees (y down): the region puts them level, the box's centre in the middle
    eyes = np.array([[100.0, 100.0], [100.0 + 40 * np.cos(np.radians(30)), 100.0 + 40 * np.sin(np.radians(30))]])
    kps = np.vstack([eyes, [[120, 130], [105, 150], [135, 150]]]).astype(np.float32)
    face = Face(box=np.array([80, 80, 160, 170], np.float32), kps=kps)
    matrix = region_matrix(face)
    mapped = eyes @ matrix[:, :2].T + matrix[:, 2]
    assert abs(mapped[0, 1] - mapped[1, 1]) < 1e-3 and mapped[0, 0] < mapped[1, 0]
    centre = np.array([120.0, 125.0]) @ matrix[:, :2].T + matrix[:, 2]
    np.testing.assert_allclose(centre, [96, 96], atol=1e-6)


def test_still_analysis_runs_without_mediapipe(monkeypatch, two_faces, grace_image):
    """A node whose mediapipe cannot be imported (only the wheel's model files, converted)
    registers faces and analyses stills through the graphs."""
    spec = importlib.util.find_spec("mediapipe")
    for name in [name for name in sys.modules if name == "mediapipe" or name.startswith("mediapipe.")]:
        monkeypatch.delitem(sys.modules, name)
    shell = types.ModuleType("mediapipe")  # where its files are, and no code: every submodule import fails
    shell.__spec__, shell.__path__ = spec, []
    monkeypatch.setitem(sys.modules, "mediapipe", shell)
    with pytest.raises(ImportError):
        MediapipeStillFaces()
    engine = FaceEngine(EngineSettings(tracker="graphs"))
    try:
        faces = engine.analyse_image(two_faces)
        assert len(faces) == 2 and all(face.mesh is not None and face.mesh.shape == (468, 2) for face in faces)
        source = engine.register_source(grace_image)
        assert source.face.mesh is not None and source.identity.shape == (128,)
    finally:
        engine.close()
    assert not any(name.startswith("mediapipe.") for name in sys.modules)
