"""Hands in front of a face, found by mediapipe's palm detector and hand landmark model.

The appearance estimate (``gpu.analysis.occlusion``) cannot see a hand of the face's own
skin tone: nothing about its colour differs from the cheek behind it. A model that knows
hands does not care about tone. Per stream, ``HandTracker`` follows the hands near the
tracked faces the way mediapipe's hand tracking graph does, on the node's converted graphs
(``TrackingGraphs.palms`` / ``.hands``: batched with every session's rows, on the GPU
where there is one):

- the palm detector runs only where a hand in front of a face can be -- a square of
  ``WINDOW_SCALE`` face widths about each tracked face -- and only every ``DETECT_EVERY``
  frames (a sweep, like the face detector's), so a frame without hands costs a fraction
  of one detector call;
- each hand found is followed frame to frame by the landmark model (21 joints) on a crop
  turned upright by its wrist and knuckles, the next crop from this frame's joints, until
  the model says the hand is gone;
- ``keep(crop, face, matrix)`` (a ``KeepMask``) draws the hands overlapping a face into its
  crop: the palm (the hull of the wrist and knuckles) and each finger as a chain of tapering
  capsules along its joints, widths from the hand's own size, the wrist continuing into the
  forearm -- then its outline pulled to the crop's own edges (a guided filter of the drawn
  hand, guided by the crop, kept within a band around the drawing), so a finger's edge is
  where the picture has it, not where a fixed width guesses it; the hand's shapes of the
  last ``HELD_SHAPES`` frames, moved with its palm, are drawn too: the landmark model now
  and then folds the fingers of a hand it still follows onto one line for a frame or two
  (a fingers-sideways hand over a mouth: every other frame), and a finger the drawing
  leaves out is painted over by the swap.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from gpu.batcher import BatcherBusy
from gpu.device import to_host
from gpu.tracking import hand_roi
from gpu.tracking.graphs import TrackingGraphs
from gpu.types import Face

DETECT_EVERY = 6  # frames between palm sweeps near the faces (a hand that comes in waits at most this long)
WINDOW_SCALE = 2.6  # the palm detector looks in a square this many face widths a side about each face
MAX_HANDS = 4  # per stream
MIN_PRESENCE = 0.5  # mediapipe's min_tracking_confidence: below it the hand is gone
MIN_PALM_SCORE = 0.5  # PalmDetectionCpu's min_detection_confidence
CARRY = 0.8  # of a hand's last move its next crop is carried ahead by (as the face tracker's anchor)
SAME_HAND = 0.35  # of a hand's ROI side: a palm found this close to a followed hand's centre is that hand
NEAR_FACE = 0.1  # of the face's width: a hand's drawing must overlap the face's box grown this much
# widths, in units of the hand's palm length (wrist to middle knuckle; stable as the hand turns)
FINGER_RADIUS = 0.14  # a real finger's is ~0.1; the model's joints sit a few pixels off its middle
THUMB_RADIUS = 0.16
PALM_EDGE = 0.2  # the palm's hull grown by this (the ball of the thumb and the heel of the hand bulge past its joints)
TIP_TAPER = 0.85  # a finger's radius at its tip over its knuckle's
FOREARM = (0.7, 0.4)  # the forearm drawn past the wrist: length and radius
FINGERS = ((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12), (13, 14, 15, 16), (17, 18, 19, 20))
PALM_JOINTS = (0, 1, 2, 5, 9, 13, 17)
EDGE_BAND = 0.35  # of a finger's radius: how far the crop's edges may move the outline either way
EDGE_EPSILON = 2e-3  # the guided filter's regulariser (image values in [0, 1])
EDGE_GROW = 2.0  # of the mask's final softening: how far the kept hand is grown first, so the soft edge lies
# beside the fingers, not on them (a finger's edge half-swapped counted as lost: own-tone hand over a mouth, tuning
# half, 94.4 % of its pixels kept -> 96.0 %)
HELD_SHAPES = 2  # earlier frames' joints of a followed hand drawn with this frame's, moved with its palm


@dataclass
class _Hand:
    joints: np.ndarray  # (21, 3) frame pixels, this frame's
    roi: np.ndarray  # (4,) where the landmark model looks for it next frame
    centre: np.ndarray  # (2,) this frame's ROI centre (before it was carried ahead)
    earlier: tuple[np.ndarray, ...] = ()  # the joints of up to ``HELD_SHAPES`` frames before, latest first

    @classmethod
    def seen(cls, joints: np.ndarray, before: _Hand | None) -> _Hand:
        """The hand at ``joints``, its next ROI carried ahead by ``CARRY`` of its last move
        (a hand held to a panning head moves with it: a crop a frame behind cuts its fingers)."""
        roi = hand_roi.roi_from_hands(joints[None])[0]
        centre = roi[:2].copy()
        if before is None:
            return cls(joints, roi, centre)
        roi[:2] += CARRY * (centre - before.centre)
        return cls(joints, roi, centre, (before.joints, *before.earlier)[:HELD_SHAPES])

    def shapes(self) -> list[np.ndarray]:
        """(21, 2) joints to draw: this frame's, and each earlier frame's moved onto this
        frame's wrist -> middle knuckle line (the palm's length holds when the model folds
        the fingers; its width, knuckle to knuckle, folds with them)."""
        now = self.joints[:, :2]
        return [now, *(_onto(joints[:, :2], now) for joints in self.earlier)]


class HandTracker:
    """One stream's hands near its faces; ``process`` each frame after the face tracker,
    then use it as a ``KeepMask``. One thread at a time (the stream's)."""

    def __init__(self, graphs: TrackingGraphs, session: Hashable) -> None:
        self._graphs = graphs
        self._session = session
        self._hands: list[_Hand] = []
        self._due = 0  # frames until the next palm sweep
        self._closed = False
        self.frames_dropped = 0  # frames the node's batchers refused: hands held where they were
        graphs.attach(session)  # a lone session's rows run inline (``gpu.batcher``)

    @property
    def hands(self) -> list[np.ndarray]:
        """(21, 3) joints of each followed hand, frame pixels."""
        return [hand.joints for hand in self._hands]

    def process(self, frame: Any, faces: Sequence[Face]) -> None:
        """Follow the hands into ``frame`` (RGB, host or device) and, on a sweep frame, look
        for new ones about ``faces``; none are looked for where there is no face."""
        if not faces and not self._hands:
            self._due = 0
            return
        try:
            self._hands = self._followed(frame, faces)
        except (BatcherBusy, TimeoutError):
            self.frames_dropped += 1

    def _followed(self, frame: Any, faces: Sequence[Face]) -> list[_Hand]:
        self._due -= 1
        followed = self._landmarks(frame, [hand.roi for hand in self._hands], list(self._hands))
        # a sweep on schedule, and at once when a hand was lost (it moved out of its crop,
        # more often than it went away)
        if faces and len(followed) < MAX_HANDS and (self._due <= 0 or len(followed) < len(self._hands)):
            self._due = DETECT_EVERY
            new = self._new_palms(frame, faces, [hand.roi for hand in followed])
            followed += self._landmarks(frame, new, [None] * len(new))
        return _distinct(followed)[:MAX_HANDS]

    def _landmarks(self, frame: Any, rois: list[np.ndarray], before: list[_Hand | None]) -> list[_Hand]:
        """The hands the landmark model finds in ``rois`` (``before``: each one as last seen)."""
        if not rois:
            return []
        joints, presence = self._graphs.hands(self._session, frame, np.stack(rois))
        return [_Hand.seen(points, previous) for points, alive, previous in zip(joints, presence, before, strict=True)
                if alive >= MIN_PRESENCE]

    def _new_palms(self, frame: Any, faces: Sequence[Face], followed: list[np.ndarray]) -> list[np.ndarray]:
        height, width = frame.shape[:2]
        windows = [_window(face.box, width, height) for face in faces]
        found = self._graphs.palms(self._session, frame, windows, MIN_PALM_SCORE)
        new: list[np.ndarray] = []
        for palms in found:
            if not len(palms):
                continue
            for roi in hand_roi.roi_from_palms(palms.boxes, palms.keypoints):
                if not any(_same(roi, other) for other in [*followed, *new]):
                    new.append(roi)
        return new

    def __call__(self, crop: Any, face: Face, matrix: np.ndarray) -> np.ndarray | None:
        """(S, S) keep mask of the hands in front of ``face`` in its crop, None without any."""
        if not self._hands:
            return None
        size = crop.shape[0]
        grown = face.box + np.array([-1, -1, 1, 1]) * NEAR_FACE * float(face.box[2] - face.box[0])
        drawn = np.zeros((size, size), np.float32)
        for hand in self._hands:
            low, high = hand.joints[:, :2].min(0), hand.joints[:, :2].max(0)
            if high[0] < grown[0] or low[0] > grown[2] or high[1] < grown[1] or low[1] > grown[3]:
                continue
            for shape in hand.shapes():
                drawn = np.maximum(drawn, hand_silhouette(shape @ matrix[:, :2].T + matrix[:, 2], size))
        if not drawn.any():
            return None
        return _to_edges(drawn, to_host(crop), _finger_radius(self._hands, matrix))

    def close(self) -> None:
        """Leave the node's batchers (the graphs are the engine's)."""
        if not self._closed:
            self._closed = True
            self._graphs.detach(self._session)
        self._hands = []


def hand_silhouette(points: np.ndarray, size: int) -> np.ndarray:
    """(size, size) float32 1 where a hand with ``points`` (21, 2) in these pixels is: the
    palm's hull, the fingers' tapering capsules and the forearm past the wrist."""
    unit = max(float(np.linalg.norm(points[hand_roi.MIDDLE_KNUCKLE] - points[hand_roi.WRIST])), 1.0)
    canvas = np.zeros((size, size), np.uint8)
    shift = 4  # sub-pixel drawing: OpenCV's fixed-point coordinates
    scale = float(1 << shift)

    def fixed(point: np.ndarray) -> tuple[int, int]:
        return int(round(point[0] * scale)), int(round(point[1] * scale))

    def capsule(start: np.ndarray, end: np.ndarray, r0: float, r1: float) -> None:
        direction = end - start
        length = float(np.linalg.norm(direction))
        cv2.circle(canvas, fixed(start), int(round(r0 * scale)), 1, -1, cv2.LINE_8, shift)
        cv2.circle(canvas, fixed(end), int(round(r1 * scale)), 1, -1, cv2.LINE_8, shift)
        if length < 1e-3:
            return
        across = np.array([-direction[1], direction[0]]) / length
        quad = np.array([start + across * r0, end + across * r1, end - across * r1, start - across * r0])
        cv2.fillConvexPoly(canvas, np.round(quad * scale).astype(np.int32), 1, cv2.LINE_8, shift)

    palm = cv2.convexHull(points[list(PALM_JOINTS)].astype(np.float32))[:, 0]
    cv2.fillConvexPoly(canvas, np.round(palm * scale).astype(np.int32), 1, cv2.LINE_8, shift)
    edge = PALM_EDGE * unit
    for corner in range(len(palm)):
        capsule(palm[corner], palm[(corner + 1) % len(palm)], edge, edge)
    radius = FINGER_RADIUS * unit
    for finger in FINGERS:
        base = THUMB_RADIUS * unit if finger[0] == 1 else radius
        for joint in range(3):
            r0 = base * (1 - (1 - TIP_TAPER) * joint / 3)
            r1 = base * (1 - (1 - TIP_TAPER) * (joint + 1) / 3)
            capsule(points[finger[joint]], points[finger[joint + 1]], r0, r1)
    wrist = points[hand_roi.WRIST]
    forearm = wrist + (wrist - points[hand_roi.MIDDLE_KNUCKLE]) * FOREARM[0]
    capsule(wrist, forearm, FOREARM[1] * unit, FOREARM[1] * unit)
    return canvas.astype(np.float32)


def _to_edges(drawn: np.ndarray, crop: np.ndarray, radius: float) -> np.ndarray:
    """The drawn hand's outline moved to the crop's own edges within a band of
    ``EDGE_BAND`` finger radii either way (a guided filter: the mask takes the crop's
    local structure), grown by ``EDGE_GROW`` and softened by a pixel or so."""
    reach = max(1, int(round(EDGE_BAND * radius)))
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * reach + 1,) * 2)
    core = cv2.erode(drawn, kernel)
    band = cv2.dilate(drawn, kernel)
    guide = crop.astype(np.float32) / 255.0
    filtered = cv2.ximgproc.guidedFilter(guide, drawn, max(2, reach), EDGE_EPSILON)
    snapped = np.clip((filtered - 0.5) * 4.0 + 0.5, 0.0, 1.0)
    keep = np.maximum(core, np.minimum(snapped, band))
    softness = max(0.6, 0.25 * reach)
    grow = int(round(EDGE_GROW * softness))
    if grow:
        keep = cv2.dilate(keep, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2))
    return cv2.GaussianBlur(keep, (0, 0), softness)


def _onto(shape: np.ndarray, now: np.ndarray) -> np.ndarray:
    """``shape`` (21, 2) moved, turned and scaled so its wrist and middle knuckle lie on ``now``'s."""
    axis = [hand_roi.WRIST, hand_roi.MIDDLE_KNUCKLE]
    before, after = shape[axis], now[axis]
    was, becomes = before[1] - before[0], after[1] - after[0]
    # the similarity as a complex factor: becomes / was
    factor = complex(*becomes) / (complex(*was) if np.hypot(*was) > 1e-6 else 1.0)
    turn = np.array([[factor.real, -factor.imag], [factor.imag, factor.real]])
    return (shape - before[0]) @ turn.T + after[0]


def _finger_radius(hands: list[_Hand], matrix: np.ndarray) -> float:
    scale = float(np.sqrt(abs(np.linalg.det(matrix[:, :2]))))
    units = [float(np.linalg.norm(hand.joints[hand_roi.MIDDLE_KNUCKLE, :2] - hand.joints[hand_roi.WRIST, :2])) for hand in hands]
    return FINGER_RADIUS * max(units) * scale


def _window(box: np.ndarray, width: int, height: int) -> tuple[int, int, int, int]:
    """The square of ``WINDOW_SCALE`` face widths about the face's centre, in the frame."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    half = max(box[2] - box[0], box[3] - box[1]) * WINDOW_SCALE / 2
    x0, y0 = max(0, int(cx - half)), max(0, int(cy - half))
    x1, y1 = min(width, int(np.ceil(cx + half))), min(height, int(np.ceil(cy + half)))
    return x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)


def _same(roi: np.ndarray, other: np.ndarray) -> bool:
    return float(np.hypot(*(roi[:2] - other[:2]))) < SAME_HAND * float(max(roi[2], other[2]))


def _distinct(hands: list[_Hand]) -> list[_Hand]:
    """Two followed hands that converged on one: the first stays."""
    kept: list[_Hand] = []
    for hand in hands:
        if not any(_same(hand.roi, other.roi) for other in kept):
            kept.append(hand)
    return kept
