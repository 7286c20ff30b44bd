"""The converted detectors, decoded by ``gpu.tracking.blazeface_decode``, find what
mediapipe's own face detection graphs find, on the sample faces."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.analysis.blazeface import BlazeFaceDetector
from gpu.tracking import blazeface_decode
from gpu.tracking.blazeface_decode import FULL_RANGE, SHORT_RANGE, weighted_nms

# mediapipe crops with warpPerspective, whose fixed-point rounding differs from the crop
# kernel's warpAffine by one level on ~0.1 % of the pixels at non-integer scales (full range:
# a 1024 px frame seen at 192 px); at integer scales the inputs are equal to 1e-7.
BOX_TOLERANCE_PX = 0.25  # measured: up to 0.21 px (full range), short range ~1e-3
SCORE_TOLERANCE = 1e-2  # measured: up to 5.1e-3 (full range), short range ~1e-6


def test_anchors_are_one_per_model_output_row() -> None:
    assert blazeface_decode.ssd_anchors(SHORT_RANGE).shape == (896, 2)
    anchors = blazeface_decode.ssd_anchors(FULL_RANGE)
    assert anchors.shape == (2304, 2)
    # full range: one anchor per cell of a 48 x 48 grid, row by row
    np.testing.assert_allclose(anchors[:2], [[0.5 / 48, 0.5 / 48], [1.5 / 48, 0.5 / 48]])


@pytest.mark.parametrize("model", ["short", "full"])
@pytest.mark.parametrize("picture", ["astronaut_image", "grace_image", "two_faces"])
def test_decode_equals_mediapipe_detections(model: str, picture: str, request, tracking_graphs) -> None:
    image = request.getfixturevalue(picture)
    height, width = image.shape[:2]
    # the whole picture, and a tile off its origin (a view of the detection sweep)
    side = min(width, height) * 3 // 4
    windows = [(0, 0, width, height), (width - side, height // 8, width, height // 8 + side)]
    mediapipe = BlazeFaceDetector(model)
    try:
        expected = mediapipe.detect_windows(image, windows)
    finally:
        mediapipe.close()
    found = tracking_graphs.detect("test", model, image, windows)
    assert sum(map(len, expected)) >= 1
    for theirs, mine in zip(expected, found, strict=True):
        assert len(mine) == len(theirs)
        theirs, mine = sorted(theirs, key=lambda f: f.box[0]), sorted(mine, key=lambda f: f.box[0])
        for a, b in zip(theirs, mine, strict=True):
            np.testing.assert_allclose(b.box, a.box, atol=BOX_TOLERANCE_PX)
            np.testing.assert_allclose(b.kps, a.kps, atol=BOX_TOLERANCE_PX)
            assert abs(b.score - a.score) < SCORE_TOLERANCE


def test_weighted_nms_averages_a_cluster_by_score_and_keeps_the_rest() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], np.float32)
    keypoints = np.stack([np.full((6, 2), v, np.float32) for v in (0.0, 3.0, 55.0)])
    scores = np.array([0.9, 0.3, 0.6], np.float32)
    merged = weighted_nms(boxes, keypoints, scores)
    assert list(merged.scores) == pytest.approx([0.9, 0.6])
    np.testing.assert_allclose(merged.boxes[0], [0.25, 0.25, 10.25, 10.25], atol=1e-5)  # (0.9 * 0 + 0.3 * 1) / 1.2
    np.testing.assert_allclose(merged.keypoints[0], 0.75, atol=1e-5)
    np.testing.assert_allclose(merged.boxes[1], boxes[2])


def test_no_face_decodes_to_no_detection(tracking_graphs) -> None:
    blank = np.full((240, 320, 3), 90, np.uint8)
    assert tracking_graphs.detect("test", "short", blank, [(0, 0, 320, 240)]) == [[]]
