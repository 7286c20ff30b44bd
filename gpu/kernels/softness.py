"""A swapped face as soft as the frame it is pasted into.

A source photo is usually sharper than the video it goes onto: a webcam's soft lens, its
compression, a face a little out of focus or moving. The swapped face kept the photo's
crisp eyes, brows and lips in a frame whose hair, ears and collar are soft: a sharp mask
on a soft head. Here the softness of both is measured at their strongest edges (the
features' outlines, a glasses rim), in the same crop, by how much a known extra blur
lowers their gradient (a step blurred by ``s`` loses ``s / sqrt(s^2 + a^2)`` of its peak
gradient under a further blur ``a``, whatever its contrast), and the swapped face is
blurred by what it lacks. A softer swap than its frame is left as it is (detail a photo
never had cannot be made here).
"""

from __future__ import annotations

import cv2
import numpy as np

from gpu.tracking.readings import ReadingsPerTrack

REBLUR = 1.0  # crop pixels: the known extra blur the edges are read under
EDGE_SHARE = 0.04  # the strongest this share of the gradients in the face are its edges
MIN_EDGES = 40  # edge pixels needed for a reading
MAX_SOFTNESS = 4.0  # crop pixels: the most a reading says (a featureless blur reads as this)
LEEWAY = 0.8  # frame pixels: a face this much sharper than its frame is left so (blurs add in quadrature). Within
# it lie the readings' noise, their bias on a wrinkled face (fine lines read sharper than an edge as blurred) and a
# sample photo's own softness (Grace Hopper onto the astronaut's photo: ~0.4-0.6 px lacking, left alone). Blurring
# all the way cost likeness where the source's wrinkles carry it: on the tune half's Grace Hopper -> frontal
# astronaut pairs the closest margin of the identity rule was 0.118 unsoftened, 0.021 with 0.6 px left, 0.039 with
# 0.8, 0.045 with 1.0, 0.088 with 1.3 (which left her wrinkles visibly crisper than the soft frame)
MIN_BLUR = 0.3  # crop pixels: a smaller blur changes next to nothing and is skipped
READ_EVERY = 4  # frames: how often a video track's softness is read
TRACK_SMOOTHING = 0.4  # of each new reading a track's softening takes (about ten frames' memory)


def softness(grey: np.ndarray, region: np.ndarray) -> float | None:
    """The Gaussian sigma (pixels) the strongest edges of ``grey`` (H, W) float32 are blurred
    by, inside ``region`` (H, W) bool; None without enough edges there."""
    sharp = _gradient(grey)
    reblurred = _gradient(cv2.GaussianBlur(grey, (0, 0), REBLUR))
    inside = sharp[region]
    if inside.size < MIN_EDGES / EDGE_SHARE:
        return None
    threshold = np.partition(inside, int(inside.size * (1.0 - EDGE_SHARE)))[int(inside.size * (1.0 - EDGE_SHARE))]
    edges = region & (sharp >= threshold) & (sharp > 1.0)  # not the 8-bit rounding of a flat patch
    if edges.sum() < MIN_EDGES:
        return None
    ratio = float(np.median(sharp[edges] / np.maximum(reblurred[edges], 1e-3)))
    if ratio <= 1.0 + 1e-6:
        return MAX_SOFTNESS
    return float(min(REBLUR / np.sqrt(ratio**2 - 1.0), MAX_SOFTNESS))


def softening(frame_softness: float | None, face_softness: float | None, leeway: float) -> float:
    """The Gaussian sigma that blurs a face of ``face_softness`` to within ``leeway`` of its
    frame's (all in one unit); 0 when it is that soft already, or either is not known."""
    if frame_softness is None or face_softness is None:
        return 0.0
    lacking = frame_softness**2 - face_softness**2 - leeway**2
    return float(np.sqrt(lacking)) if lacking > 0.0 else 0.0


def grey(image: np.ndarray) -> np.ndarray:
    """(H, W) float32 luma of an (H, W, 3) uint8 RGB image."""
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)


def _gradient(image: np.ndarray) -> np.ndarray:
    dx = cv2.Sobel(image, cv2.CV_32F, 1, 0, ksize=3)
    dy = cv2.Sobel(image, cv2.CV_32F, 0, 1, ksize=3)
    return cv2.magnitude(dx, dy)


class SofteningPerTrack(ReadingsPerTrack[float]):
    """The softening of each video track's face, read every ``READ_EVERY`` frames and
    smoothed over its readings (a blur that changed with each frame's reading would pulse;
    the readings take ~0.8 ms a face); a still (no track) takes its own reading."""

    def __init__(self, max_tracks: int = 64) -> None:
        super().__init__(READ_EVERY, lambda level, reading: level + TRACK_SMOOTHING * (reading - level), max_tracks)


def soften_like_frame(swapped: np.ndarray, target_crop: np.ndarray, face: np.ndarray, crop_per_frame_pixel: float,
                      track_id: int | None, tracks: SofteningPerTrack) -> np.ndarray:
    """``swapped`` (S, S, 3) uint8, blurred to the softness of ``target_crop`` (the frame's
    crop, ``crop_per_frame_pixel`` of its pixels to one of the frame's) where the ``face``
    (S, S) in [0, 1] was replaced, but for ``LEEWAY``; itself when it is that soft."""
    sigma = tracks.known(track_id)
    if sigma is None:
        region = np.asarray(face) > 0.5
        rows, columns = np.nonzero(region.any(1))[0], np.nonzero(region.any(0))[0]
        if not len(rows):
            return swapped
        box = np.s_[rows[0]:rows[-1] + 1, columns[0]:columns[-1] + 1]  # the face's box: what the readings need
        reading = softening(softness(grey(target_crop[box]), region[box]), softness(grey(swapped[box]), region[box]),
                            LEEWAY * crop_per_frame_pixel)
        sigma = tracks.update(track_id, reading)
    if sigma < MIN_BLUR:
        return swapped
    return cv2.GaussianBlur(swapped, (0, 0), sigma)
