"""Hands in front of a face: the converted palm and hand models equal mediapipe's TFLite runs,
they fire on the drawn hands of every skin tone, and the hand tracker keeps a hand of the
face's own tone in front of it (where the appearance estimate alone cannot tell them apart)."""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from mediapipe.python import packet_getter
from test_tflite_onnx import _image_packet, _mediapipe_outputs, _onnx_outputs, _run_mediapipe

from gpu.analysis.hands import HandTracker, _Hand, hand_silhouette
from gpu.models.builtin import MediapipeFaceModels
from gpu.models.tflite_onnx import MEDIAPIPE_INPUTS, convert_tflite
from gpu.options import SwapOptions
from gpu.tracking import hand_roi
from gpu.types import Face
from swapcast.benchmarks import hand_render
from swapcast.benchmarks.arrivals import Arrival, arrival_clip
from streamer.samples import grace_hopper
from swapcast.benchmarks.occlusion import face_region, swap_clip

BACKGROUND = (90, 110, 140)


def _hand_picture(tone: str, pose: str, size: int, angle: float = 0.0) -> np.ndarray:
    """A drawn hand on a plain background, ``size`` pixels a side."""
    hand = hand_render.render_hand(tone, pose)
    matrix = cv2.getRotationMatrix2D((hand_render.PATCH / 2,) * 2, angle, 0.8)
    alpha = cv2.warpAffine(hand.alpha, matrix, (hand_render.PATCH,) * 2)[..., None]
    rgb = cv2.warpAffine(hand.rgb, matrix, (hand_render.PATCH,) * 2).astype(np.float32)
    picture = np.full((hand_render.PATCH, hand_render.PATCH, 3), BACKGROUND, np.float32) * (1 - alpha) + rgb * alpha
    return cv2.resize(picture.astype(np.uint8), (size, size), interpolation=cv2.INTER_AREA)


@pytest.fixture(scope="module")
def wheel() -> MediapipeFaceModels:
    return MediapipeFaceModels.locate()


@pytest.fixture(scope="module")
def hand_sessions(wheel) -> dict[str, ort.InferenceSession]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return {path.name: ort.InferenceSession(convert_tflite(path).SerializeToString(), options, providers=["CPUExecutionProvider"])
            for path in (wheel.palm_detection, wheel.hand_landmark)}


@pytest.mark.parametrize("tone", ["light", "dark"])
def test_palm_detector_and_hand_landmarks_equal_mediapipe_tflite(tone: str, wheel, hand_sessions) -> None:
    for path, outputs in ((wheel.palm_detection, 2), (wheel.hand_landmark, 4)):
        image = _hand_picture(tone, "open", MEDIAPIPE_INPUTS[path.name].size)
        expected = _mediapipe_outputs(path, image, outputs)
        got = _onnx_outputs(hand_sessions[path.name], path, [image])
        for mine, theirs in zip(got, expected, strict=True):
            np.testing.assert_allclose(mine.ravel(), theirs, atol=5e-3, rtol=0)
    # the drawn hand is a hand to both: the detector's best anchor and the landmark model's flag
    palm_scores = _onnx_outputs(hand_sessions[wheel.palm_detection.name], wheel.palm_detection,
                                [_hand_picture(tone, "open", 192)])[1]
    assert 1 / (1 + np.exp(-palm_scores.max())) > 0.5
    assert float(got[1].ravel()[0]) > 0.5  # hand presence (the model's own sigmoid)


def test_palm_input_scaling_is_what_mediapipe_palm_detection_feeds(wheel, hand_sessions) -> None:
    image = _hand_picture("tan", "flat", 192)
    config = """
        input_stream: "image" output_stream: "detections"
        node { calculator: "PalmDetectionCpu" input_stream: "IMAGE:image" output_stream: "DETECTIONS:detections" }
    """
    detections = _run_mediapipe(config, {"image": _image_packet(image)}, ["detections"], packet_getter.get_proto_list)["detections"]
    _, scores = _onnx_outputs(hand_sessions[wheel.palm_detection.name], wheel.palm_detection, [image])
    assert abs(1.0 / (1.0 + np.exp(-scores.max())) - max(d.score[0] for d in detections)) < 1e-4


@pytest.mark.parametrize("tone", sorted(hand_render.TONES))
@pytest.mark.parametrize("pose", hand_render.POSES)
def test_the_tracker_finds_drawn_hands_of_every_tone_and_pose(tone: str, pose: str, engine) -> None:
    frame = np.full((480, 640, 3), BACKGROUND, np.uint8)
    frame[80:400, 160:480] = _hand_picture(tone, pose, 320, angle=30.0)
    face = Face(box=np.array([200, 100, 440, 380], np.float32), kps=np.zeros((5, 2), np.float32))  # hands are looked for about faces
    tracker = HandTracker(engine.tracking_graphs, f"test-{tone}-{pose}")
    try:
        tracker.process(frame, [face])
        assert len(tracker.hands) == 1
        joints = tracker.hands[0]
        assert 160 <= joints[:, 0].min() and joints[:, 0].max() <= 480  # on the hand
    finally:
        tracker.close()


def test_roi_from_hands_turns_the_hand_fingers_up() -> None:
    hand = hand_render.render_hand("medium", "open")
    for angle in (0.0, 90.0, -135.0):
        matrix = cv2.getRotationMatrix2D((160.0, 160.0), angle, 1.0)
        joints = hand.joints @ matrix[:, :2].T + matrix[:, 2]
        roi = hand_roi.roi_from_hands(joints[None])[0]
        crop = (joints @ np.array([[np.cos(roi[3]), np.sin(roi[3])], [-np.sin(roi[3]), np.cos(roi[3])]]).T)
        assert crop[hand_roi.MIDDLE_KNUCKLE, 1] < crop[hand_roi.WRIST, 1]  # the knuckles above the wrist in the crop
        assert roi[2] > np.ptp(crop[:, 1])  # the whole hand fits the crop, fingertips included


def test_a_hand_silhouette_covers_the_drawn_hand_it_was_found_on() -> None:
    hand = hand_render.render_hand("light", "flat")
    drawn = hand_silhouette(hand.joints, hand_render.PATCH)
    inside = hand.alpha > 0.5
    palm_and_fingers = inside & (np.arange(hand_render.PATCH)[:, None] < hand.joints[0, 1] - 10)  # above the drawn wrist
    assert (drawn[palm_and_fingers] > 0.5).mean() > 0.9
    assert (drawn > 0.5).sum() < 2.0 * inside.sum()  # not a loose box round it


def test_a_hand_whose_fingers_the_model_folds_for_a_frame_keeps_its_earlier_shape() -> None:
    """The landmark model now and then puts every finger of a hand it still follows on one
    line (a fingers-sideways hand over a mouth: every other frame); the hand's shape of the
    frames before, moved onto its wrist and middle knuckle, is drawn with it."""
    hand = hand_render.render_hand("medium", "flat")
    turn = cv2.getRotationMatrix2D((hand_render.PATCH / 2,) * 2, 6.0, 1.0)
    turn[:, 2] += (7.0, -4.0)  # the hand moved on and turned a little between the frames
    now = hand.joints[:, :2] @ turn[:, :2].T + turn[:, 2]
    folded = now.copy()
    for finger in ((1, 2, 3, 4), (5, 6, 7, 8), (13, 14, 15, 16), (17, 18, 19, 20)):
        folded[list(finger)] = now[[9, 10, 11, 12]]  # every finger on the middle one
    inside = cv2.warpAffine(hand.alpha, turn, (hand_render.PATCH,) * 2) > 0.5
    fingers = inside & (np.arange(hand_render.PATCH)[:, None] < folded[0, 1] - 10)

    def covered(shapes: list[np.ndarray]) -> float:
        drawn = np.max([hand_silhouette(shape, hand_render.PATCH) for shape in shapes], axis=0)
        return float((drawn[fingers] > 0.5).mean())

    seen = _Hand.seen(np.c_[folded, np.zeros(21)].astype(np.float32), _Hand.seen(hand.joints, None))
    assert len(seen.shapes()) == 2
    assert covered(seen.shapes()[:1]) < 0.75  # the folded hand alone: measured 0.64
    assert covered(seen.shapes()) > 0.9  # measured 1.0


@pytest.fixture(scope="module")
def hand_clip():
    """A hand of the face's own tone over the mouth of a turning, zooming head, 40 frames."""
    case = Arrival("hand_own", "astronaut", "hand:own:flat", 8, 24, direction=0.0, anchor=(0.35, 0.0), width=1.1, angle=90.0)
    return arrival_clip(case, frames=40)


def test_a_hand_of_the_faces_own_tone_stays_in_front(hand_clip, engine) -> None:
    source = engine.register_source(grace_hopper())
    kept = {}
    for mode in ("auto", "off"):
        outputs, _ = swap_clip(engine, source, hand_clip, replace(SwapOptions(), occlusion=mode))
        hits = total = 0
        for index in range(hand_clip.enters + 8, hand_clip.enters + 8 + 24):  # the hand in place
            hand = (hand_clip.masks[index] >= 0.5) & face_region(hand_clip.meshes[index], outputs[index].shape)
            change = np.abs(outputs[index].astype(np.int16) - hand_clip.frames[index].astype(np.int16)).max(axis=2)
            hits += int((change[hand] <= 12).sum())
            total += int(hand.sum())
        kept[mode] = hits / total
    assert kept["off"] < 0.6  # swapped over: the hand is on the face
    # measured 0.86 when only each frame's own joints were drawn (the model folds this hand's fingers every
    # other frame), 0.94 with the earlier shapes; the misses left are fingertips as the hand comes in
    assert kept["auto"] >= 0.9
