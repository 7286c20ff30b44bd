"""FaceEngine: source registration rules and the choice between built-in and user models."""

import numpy as np
import pytest

from gpu.engine import EngineSettings, FaceEngine
from gpu.errors import ManyFacesError, ModelFileError, NoFaceError
from model_twins import make_arcface, make_inswapper, make_scrfd
from streamer.pipeline.frame_swapper import FrameSwapper

ASTRONAUT_BOX = np.array([177.6, 82.9, 272.9, 178.2])  # BlazeFace, measured once
ASTRONAUT_KPS = np.array([[201.5, 104.9], [245.8, 109.1], [220.4, 127.3], [201.4, 146.9], [238.2, 150.4]])


def test_builtin_engine_defaults(engine):
    assert engine.swapper.name == "mesh3d"
    assert engine.detector_name == "FaceFinder"


def test_source_rules(engine, astronaut_image, two_faces):
    with pytest.raises(NoFaceError, match="source image: no face found"):
        engine.register_source(np.full((200, 200, 3), 128, np.uint8))
    with pytest.raises(ManyFacesError, match="2 faces found.*--source-face-index") as many:
        engine.register_source(two_faces)
    assert many.value.count == 2
    with pytest.raises(ManyFacesError, match="index 5 out of range"):
        engine.register_source(two_faces, index=5)
    largest = engine.register_source(two_faces, index=0)
    second = engine.register_source(two_faces, index=1)
    assert largest.face.area > second.face.area
    assert engine.register_source(astronaut_image).identity.shape == (128,)


@pytest.fixture(scope="module")
def twin_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    scale = 640 / 512  # the astronaut picture is 512x512, letterboxed to 640
    make_scrfd(folder / "det_10g.onnx", [(ASTRONAUT_BOX * scale, ASTRONAUT_KPS * scale, 0.9)])
    make_arcface(folder / "w600k_r50.onnx")
    make_inswapper(folder / "inswapper_128.onnx")
    return folder


def test_user_models_replace_the_builtin_detector_and_swapper(twin_models, astronaut_image):
    engine = FaceEngine(EngineSettings(models_dir=twin_models))
    assert engine.swapper.name == "inswapper_128"
    assert engine.detector_name == "ScrfdDetector"
    faces = engine.analyse_image(astronaut_image)
    assert len(faces) == 1
    np.testing.assert_allclose(faces[0].box, ASTRONAUT_BOX, atol=1.0)
    source = engine.register_source(astronaut_image)
    assert source.payload.shape == (512,)
    assert abs(np.linalg.norm(source.payload) - 1.0) < 1e-5
    frame = astronaut_image.copy()
    assert FrameSwapper(engine, source).process_still(frame).faces_swapped == 1
    changed = np.any(frame != astronaut_image, axis=-1)
    ys, xs = np.nonzero(changed)
    assert len(xs) > 0
    x0, y0, x1, y1 = ASTRONAUT_BOX
    assert xs.min() >= x0 - 2 and xs.max() <= x1 + 2 and ys.min() >= y0 - 2 and ys.max() <= y1 + 2


def test_the_mesh_swapper_can_be_forced_with_user_models_present(twin_models):
    engine = FaceEngine(EngineSettings(models_dir=twin_models, swapper="mesh"))
    assert engine.swapper.name == "mesh"
    assert engine.detector_name == "ScrfdDetector"


def test_inswapper_needs_its_files(tmp_path):
    with pytest.raises(ModelFileError, match="inswapper_128.onnx"):
        FaceEngine(EngineSettings(swapper="inswapper"))
    make_inswapper(tmp_path / "inswapper_128.onnx")
    with pytest.raises(ModelFileError, match="w600k_r50.onnx"):
        FaceEngine(EngineSettings(models_dir=tmp_path))
    with pytest.raises(ModelFileError, match="models directory not found"):
        FaceEngine(EngineSettings(models_dir=tmp_path / "missing"))
