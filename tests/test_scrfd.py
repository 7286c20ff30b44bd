"""SCRFD decoding against twins whose outputs encode known faces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpu.analysis.scrfd import ScrfdDetector, nms
from gpu.errors import ModelFileError
from model_twins import SCRFD_OUTPUT_DIMS, make_scrfd

# Faces in original-image pixels of an 800x480 frame (box, kps, score).
BIG = (
    np.array([420.0, 90.0, 700.0, 430.0]),
    np.array([[500.0, 210.0], [620.0, 205.0], [560.0, 280.0], [515.0, 350.0], [605.0, 347.0]]),
    0.93,
)
SMALL = (
    np.array([60.0, 300.0, 130.0, 390.0]),
    np.array([[80.0, 330.0], [110.0, 331.0], [95.0, 350.0], [83.0, 370.0], [108.0, 369.0]]),
    0.71,
)
TINY = (
    np.array([300.0, 40.0, 340.0, 90.0]),
    np.array([[310.0, 55.0], [330.0, 55.0], [320.0, 65.0], [312.0, 78.0], [328.0, 78.0]]),
    0.62,
)
# A slightly shifted, lower-scored copy of BIG (NMS must drop it) and a face under threshold.
DUPLICATE = (BIG[0] + [6.0, -4.0, 6.0, -4.0], BIG[1] + [6.0, -4.0], 0.80)
WEAK = (np.array([200.0, 200.0, 260.0, 280.0]), np.full((5, 2), 230.0), 0.30)


def _encode(faces, scale: float):
    """The faces as the model sees them: in letterboxed 640x640 input pixels."""
    return [(box * scale, kps * scale, score) for box, kps, score in faces]


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("transpose", [False, True], ids=["landscape", "portrait"])
def test_decode_recovers_faces_in_original_coordinates(tmp_path: Path, batched: bool, transpose: bool) -> None:
    faces = [TINY, WEAK, SMALL, DUPLICATE, BIG]
    if transpose:  # 480x800: swap x and y of everything
        faces = [(box[[1, 0, 3, 2]], kps[:, ::-1], score) for box, kps, score in faces]
    image = np.full((800, 480, 3) if transpose else (480, 800, 3), 90, dtype=np.uint8)
    scale = 640 / 800  # letterboxed to 640x384 (or 384x640), padded right/bottom
    path = make_scrfd(tmp_path / "det_10g.onnx", _encode(faces, scale), batched=batched)

    found = ScrfdDetector(path).detect(image)

    expected = [faces[4], faces[2], faces[0]]  # by score; duplicate suppressed, weak dropped
    assert [round(f.score, 2) for f in found] == [0.93, 0.71, 0.62]
    for face, (box, kps, _) in zip(found, expected, strict=True):
        assert face.box.shape == (4,) and face.kps.shape == (5, 2)
        np.testing.assert_allclose(face.box, box, atol=1e-3)
        np.testing.assert_allclose(face.kps, kps, atol=1e-3)


def test_thresholds_are_applied(tmp_path: Path) -> None:
    path = make_scrfd(tmp_path / "det_10g.onnx", _encode([BIG, DUPLICATE, SMALL], 0.8))
    image = np.zeros((480, 800, 3), np.uint8)
    assert len(ScrfdDetector(path).detect(image)) == 2  # BIG, SMALL; DUPLICATE overlaps BIG
    assert len(ScrfdDetector(path, score_threshold=0.75).detect(image)) == 1  # BIG
    assert len(ScrfdDetector(path, score_threshold=0.75, nms_threshold=0.95).detect(image)) == 2
    assert [f.score for f in ScrfdDetector(path, score_threshold=0.9).detect(image)] == pytest.approx([0.93])


def test_no_faces_gives_an_empty_list(tmp_path: Path) -> None:
    assert ScrfdDetector(make_scrfd(tmp_path / "det_10g.onnx", [])).detect(np.zeros((300, 200, 3), np.uint8)) == []


def test_nms_keeps_the_best_of_overlapping_boxes() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10.5]], np.float32)
    scores = np.array([0.6, 0.9, 0.5, 0.7], np.float32)
    assert nms(boxes, scores, 0.4) == [1, 2]
    assert nms(boxes, scores, 0.99) == [1, 3, 0, 2]


def _dims(**changes: int) -> list[int]:
    dims = list(SCRFD_OUTPUT_DIMS)
    for index, value in changes.items():
        dims[int(index[1:])] = value
    return dims


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        (
            {"output_dims": SCRFD_OUTPUT_DIMS[:6]},
            "has 6 outputs ('out0', 'out1', 'out2', 'out3', 'out4', 'out5'), expected 9",
        ),
        ({"output_dims": _dims(i4=5)}, "output 'out4' has shape [1,12800,5], expected [N,A,4]"),
        ({"output_dims": _dims(i8=8), "batched": False}, "output 'out8' has shape [12800,8], expected [A,10]"),
        ({"output_dims": _dims(i0=2)}, "output 'out0' has shape [1,12800,2], expected [N,A,1]"),
        ({"input_shape": (1, 1, 640, 640)}, "input 'input.1' has shape [1,1,640,640], expected [N,3,640,640]"),
        ({"input_shape": (1, 3, 320, 320)}, "input 'input.1' has shape [1,3,320,320], expected [N,3,640,640]"),
        ({"input_shape": (1, 3, 640)}, "input 'input.1' has shape [1,3,640], expected [N,3,640,640]"),
    ],
)
def test_signature_mismatches_name_the_file_and_the_problem(tmp_path: Path, kwargs: dict, problem: str) -> None:
    path = make_scrfd(tmp_path / "det_10g.onnx", **kwargs)
    with pytest.raises(ModelFileError) as info:
        ScrfdDetector(path)
    assert info.value.path == str(path)
    assert info.value.problem == problem


def test_outputs_for_another_input_size_are_refused_when_run(tmp_path: Path) -> None:
    path = make_scrfd(tmp_path / "det_10g.onnx", _encode([BIG], 0.8))  # 640 grids, dynamic input
    detector = ScrfdDetector(path, input_size=320)
    with pytest.raises(ModelFileError) as info:
        detector.detect(np.zeros((320, 320, 3), np.uint8))
    assert info.value.path == str(path)
    assert info.value.problem == (
        "output 0 (scores, stride 8) has shape [1, 12800, 1], expected [3200,1] (2 anchors on a 40x40 grid)"
    )


def test_input_size_must_fit_the_strides(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        ScrfdDetector(make_scrfd(tmp_path / "det_10g.onnx"), input_size=600)
