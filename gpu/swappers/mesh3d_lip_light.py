"""The target's light across its closed lips, per frame.

Closed lips are lit by their form: the upper lip faces down and is dark, the lower one
faces up and catches the light, and under it lies a shadow before the chin. That light is
finer than the tone transfer's low pass (a lip is ~1/15 of the face's height), so the
swapped lips kept the light of the source photo's: a smiling photo's lips are stretched
thin and evenly lit, and closed on a target (``mesh3d_lips``) they read as a flat pad with
a line through it (on the realism set: the target's upper lip at ~0.5 of its skin, its lower
lip at ~0.9 and the shadow under it at ~0.5; the swap's ~0.8, 0.8 and none).

Here the lightness across the mouth is read as a profile, in each face's own lip geometry
(from above the upper lip, over both lips, to below the lower one, the lips' thickness
their unit), averaged over the middle of the mouth: once in the target crop, once in the
re-lit swapped face. The swapped upper lip takes the difference, so it gets the target's
light in its own shape; its colour, texture and outline stay the source's. The lower lip,
the shadow under it and the skin round the mouth keep the photo's light (see ``RELIT``).
The line where the lips meet is left out (both faces draw their own), the profile's ends
anchor it to the skin around, and it fades out towards the mouth's corners.
"""

from __future__ import annotations

import cv2
import numpy as np

from gpu.swappers.mesh3d_lips import inner_lip_lines
from gpu.swappers.mesh3d_shadow_colour import SHADOW_CHROMA_SLOPE

UPPER_OUTER = (61, 185, 40, 39, 37, 0, 267, 269, 270, 409, 291)  # landmarks, corner to corner
LOWER_OUTER = (61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291)
PROFILE = np.linspace(-1.0, 3.0, 33, dtype=np.float32)  # across the mouth: -1..0 above the upper lip (one upper lip's
# thickness), 0..1 the upper lip, 1..2 the lower lip, 2..3 below it (one lower lip's thickness)
MEETING_GAP = 0.2  # of a lip: the profile within this of the meeting line (1) is not compared
MIDDLE = (0.25, 0.75)  # of the mouth's width, corner to corner: the columns the profiles average over
CORNER_FADE = (0.05, 0.25)  # ... and from the corners: the correction fades in over this
COLUMNS = 12  # columns sampled in the middle
RELIT = (0.0, 0.85)  # the part of the profile that takes the target's light: the upper lip (short of the meeting
# line). Relit, the lower lip, the shadow under it and the skin above the mouth brought the target's shape along: on the
# tune half's astronaut -> frontal Grace Hopper swaps dlib's distance to the source 0.433 -> 0.431 with the lower lip,
# 0.445 with the shadow, 0.442 with the skin above; 0.423 with the upper lip alone
PART_EDGE = 0.1  # ... its edges fade over this much of a lip
GAIN_RANGE = (0.5, 1.6)  # the most the lips' light is moved
SMOOTHING = 1.0  # profile samples: the correction's low pass across the mouth
STRENGTH = 0.6  # how much of the difference the face takes: the target's profile also holds its lips' own
# shape and colour (a thin dark upper lip, a crease under the lower one), which are not the light


class LipGeometry:
    """A face's closed mouth in (half-resolution) crop pixels: per column, its upper outer
    line, where its lips meet and its lower outer line."""

    def __init__(self, points: np.ndarray) -> None:
        upper, lower = inner_lip_lines()
        self.lines = tuple(_by_column(line) for line in (
            points[list(UPPER_OUTER), :2], (points[upper, :2] + points[lower, :2]) / 2.0, points[list(LOWER_OUTER), :2]))
        self.left, self.right = float(points[61, 0]), float(points[291, 0])

    @property
    def width(self) -> float:
        return self.right - self.left

    def rows(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per column x: the upper outer line's row, the meeting row, the lower outer line's."""
        return tuple(np.interp(x, *line).astype(np.float32) for line in self.lines)

    def row_at(self, x: np.ndarray, s: np.ndarray) -> np.ndarray:
        """The row of profile coordinate ``s`` (see ``PROFILE``) in column ``x``."""
        top, meet, bottom = self.rows(x)
        upper, lower = meet - top, bottom - meet
        return np.where(s < 1.0, top + s * upper, meet + (s - 1.0) * lower)

    def profile_of(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Profile coordinate of pixels (x, y) (or of columns ``x`` (W,) by rows ``y``
        (H, 1)); the inverse of ``row_at``."""
        top, meet, bottom = self.rows(x)
        upper, lower = np.maximum(meet - top, 0.5), np.maximum(bottom - meet, 0.5)
        return np.where(y < meet, (y - top) / upper, 1.0 + (y - meet) / lower)

    def along(self, x: np.ndarray) -> np.ndarray:
        """0 at the left corner, 1 at the right."""
        return (x - self.left) / max(self.width, 1e-3)


def profile(lightness_at, geometry: LipGeometry) -> np.ndarray:
    """(len(PROFILE),) the mean log lightness across the mouth's middle; ``lightness_at``
    maps (N, 2) points to their lightness."""
    x = geometry.left + np.linspace(*MIDDLE, COLUMNS, dtype=np.float32) * geometry.width
    xs = np.repeat(x[:, None], len(PROFILE), 1)
    ys = geometry.row_at(xs, np.broadcast_to(PROFILE, xs.shape))
    values = lightness_at(np.stack([xs, ys], -1).reshape(-1, 2)).reshape(xs.shape)
    return np.log(np.maximum(values, 1e-3)).mean(0)


def lip_light_gain(target_profile: np.ndarray, face_profile: np.ndarray) -> np.ndarray:
    """(len(PROFILE),) the log gain that gives the face the target's profile: the meeting
    line left out, none at the ends, smoothed and bounded."""
    difference = target_profile - face_profile
    compared = np.abs(PROFILE - 1.0) > MEETING_GAP
    difference = np.interp(PROFILE, PROFILE[compared], difference[compared])
    ends = difference[0] + (difference[-1] - difference[0]) * (PROFILE - PROFILE[0]) / (PROFILE[-1] - PROFILE[0])
    gain = cv2.GaussianBlur((difference - ends)[None, :].astype(np.float32), (0, 0), SMOOTHING, borderType=cv2.BORDER_REPLICATE)[0]
    return np.clip(gain, *np.log(GAIN_RANGE)).astype(np.float32)


def relight_closed_lips(shading: np.ndarray, target_lightness, face_lightness, target: LipGeometry, face: LipGeometry,
                        drawn: np.ndarray) -> None:
    """Multiply ``shading`` (H, W, 3), in place, by the gain that gives the face drawn in
    ``face``'s lip geometry the target's light across its lips (``drawn`` (H, W) bool: the
    pixels the face covers). ``*_lightness`` map (N, 2) points to lightness."""
    if min(target.width, face.width) < 4.0:
        return
    gain = lip_light_gain(profile(target_lightness, target), profile(face_lightness, face))
    height, width = shading.shape[:2]
    x0, x1 = int(max(np.floor(face.left), 0)), int(min(np.ceil(face.right) + 1, width))
    if x1 - x0 < 2:
        return
    columns = np.arange(x0, x1, dtype=np.float32)
    # the rows the relit part spans (it ends above the meeting line)
    y0 = int(max(np.floor(face.row_at(columns, np.float32(RELIT[0] - PART_EDGE / 2)).min()), 0))
    y1 = int(min(np.ceil(face.row_at(columns, np.float32(RELIT[1] + PART_EDGE / 2)).max()) + 1, height))
    if y1 - y0 < 2:
        return
    s = face.profile_of(columns, np.arange(y0, y1, dtype=np.float32)[:, None])
    f = face.along(columns)
    fade = np.clip((np.minimum(f, 1.0 - f) - CORNER_FADE[0]) / (CORNER_FADE[1] - CORNER_FADE[0]), 0.0, 1.0)
    part = np.clip(np.minimum(s - RELIT[0], RELIT[1] - s) / PART_EDGE + 0.5, 0.0, 1.0)
    log_gain = (STRENGTH * np.interp(s, PROFILE, gain) * fade * part * drawn[y0:y1, x0:x1])[..., None]
    # shade on skin and lips is redder and less blue than their light (see mesh3d_shadow_colour)
    shading[y0:y1, x0:x1] *= np.exp(log_gain * (1.0 + SHADOW_CHROMA_SLOPE))


def _by_column(line: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A polyline (K, 2) as (columns ascending, rows) for ``np.interp``."""
    order = np.argsort(line[:, 0])
    return line[order, 0], line[order, 1]
