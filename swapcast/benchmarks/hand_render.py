"""Hands drawn in code, for the occlusion set: no photo of a hand ships with any wheel.

A hand is a palm (a rounded polygon from the wrist to the knuckles) and five fingers of three
tapering segments each, joined by a smooth union of their distance fields, shaded as
rounded solids (brighter along each part's ridge, darker towards its silhouette), with
knuckle creases, the nails' lighter plates on the back of the hand and a warmer flush at
the fingertips. It is crude next to a photo, but mediapipe's own palm detector and hand
landmark model take it for a hand (``tests/test_hands.py`` checks that they fire on every
tone and pose drawn here), which is what the occlusion set needs: a hand the model finds,
over a face of the same skin tone, so the appearance estimate alone cannot tell it apart.

``render_hand(tone, pose)`` -> ``HandPatch``: RGB, alpha and the 21 joints (mediapipe's
order: wrist, thumb 1-4, index 5-8, middle 9-12, ring 13-16, little 17-20) in patch pixels,
fingers pointing up; callers turn and scale it into place.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

PATCH = 320  # pixels a side
# skin tones (sRGB) from very light to very dark, named as the occlusion set reports them
TONES: dict[str, tuple[int, int, int]] = {
    "light": (238, 200, 176), "medium": (205, 150, 112), "tan": (168, 112, 76),
    "brown": (120, 78, 52), "dark": (78, 50, 34),
}
POSES = ("open", "flat", "back")  # fingers spread, palm on; fingers together (a hand over the mouth); back of the hand


@dataclass(frozen=True)
class HandPatch:
    rgb: np.ndarray  # (PATCH, PATCH, 3) uint8
    alpha: np.ndarray  # (PATCH, PATCH) float32 in [0, 1]
    joints: np.ndarray  # (21, 2) float32, patch pixels


# per finger: the knuckle on the palm (patch pixels at PATCH 320), its direction when spread
# and together (degrees, 0 = right, -90 = up), three segment lengths and the base radius
_FINGERS = (
    ((112, 212), (-140, -115), (44, 34, 28), 15.0),  # thumb, from the palm's side
    ((128, 128), (-103, -93), (46, 30, 24), 12.5),
    ((156, 120), (-91, -90), (52, 33, 26), 13.0),
    ((184, 124), (-79, -87), (48, 31, 24), 12.5),
    ((208, 136), (-66, -84), (38, 25, 21), 11.0),
)
_PALM = np.array([[124, 292], [198, 292], [220, 140], [184, 120], [154, 116], [124, 126], [104, 170], [108, 232]], np.float32)
_WRIST = np.array([[132, 318], [192, 318], [198, 280], [126, 280]], np.float32)


@lru_cache(maxsize=64)
def render_hand(tone: str, pose: str = "open") -> HandPatch:
    """One hand of skin ``tone`` (see ``TONES``) in ``pose`` (see ``POSES``), fingers up."""
    if tone not in TONES or pose not in POSES:
        raise ValueError(f"unknown hand {tone!r}/{pose!r}: tones {', '.join(TONES)}, poses {', '.join(POSES)}")
    spread = pose == "open"
    grid = np.mgrid[0:PATCH, 0:PATCH].astype(np.float32)[::-1]  # (2, H, W): x, y
    joints = [np.array([162.0, 300.0], np.float32)]
    segments = []
    for base, (open_angle, closed_angle), lengths, radius in _FINGERS:
        angle = np.deg2rad(open_angle if spread else closed_angle)
        direction = np.array([np.cos(angle), np.sin(angle)], np.float32)
        point = np.array(base, np.float32)
        joints.append(point.copy())
        for length in lengths:
            end = point + direction * length
            segments.append((point, end, radius, radius * 0.9))
            joints.append(end)
            point, radius = end, radius * 0.9
    joints_array = np.stack(joints)
    # signed distances (negative inside) of each part; their smooth union is the hand
    parts = [_polygon_distance(grid, _PALM) - 6.0, _polygon_distance(grid, _WRIST) - 4.0]
    ridges = []
    for start, end, r0, r1 in segments:
        distance, along = _segment_distance(grid, start, end)
        radius = r0 + (r1 - r0) * along
        parts.append(distance - radius)
        ridges.append(np.clip(1.0 - (distance / radius) ** 2, 0.0, 1.0))
    field = parts[0]
    for part in parts[1:]:
        field = _smooth_min(field, part, 6.0)
    alpha = np.clip(0.5 - field, 0.0, 1.0).astype(np.float32)
    depth = cv2.distanceTransform((field < 0).astype(np.uint8), cv2.DIST_L2, 5)
    dome = np.sqrt(np.clip(depth / max(float(depth.max()), 1.0), 0.0, 1.0))
    fingers = np.max(np.stack(ridges), axis=0)
    shade = 0.62 + 0.38 * np.maximum(dome, np.sqrt(fingers))
    base = np.array(TONES[tone], np.float32)
    rgb = base * shade[..., None]
    tips = np.zeros((PATCH, PATCH), np.float32)
    for tip in joints_array[[4, 8, 12, 16, 20]]:
        cv2.circle(tips, tuple(int(v) for v in tip), 12, 1.0, -1, cv2.LINE_AA)
        if pose == "back":
            _nail(rgb, joints_array, tip, base)
    tips = cv2.GaussianBlur(tips, (0, 0), 5.0)
    rgb *= (1.0 + 0.12 * tips[..., None] * np.array([0.6, -0.5, -0.6], np.float32))
    crease = base * 0.72
    for index in (2, 3, 6, 7, 10, 11, 14, 15, 18, 19):  # the joints inside each finger
        before, after = joints_array[index - 1], joints_array[index]
        across = np.array([-(after - before)[1], (after - before)[0]])
        across /= max(float(np.linalg.norm(across)), 1e-6)
        width = 9.0 if index > 4 else 11.0
        cv2.line(rgb, tuple(int(v) for v in after - across * width * 0.7), tuple(int(v) for v in after + across * width * 0.7),
                 tuple(float(c) for c in crease), 2, cv2.LINE_AA)
    if pose != "back":  # the palm's lines
        for line in (((118, 200), (170, 178), (214, 170)), ((112, 226), (160, 214), (200, 226)), ((150, 286), (134, 240), (128, 196))):
            cv2.polylines(rgb, [np.array(line, np.int32)], False, tuple(float(c) for c in crease), 2, cv2.LINE_AA)
    rgb = cv2.GaussianBlur(rgb, (0, 0), 0.8)
    return HandPatch(np.clip(rgb + 0.5, 0, 255).astype(np.uint8), alpha, joints_array.astype(np.float32))


def _nail(rgb: np.ndarray, joints: np.ndarray, tip: np.ndarray, base: np.ndarray) -> None:
    index = int(np.argmin(np.linalg.norm(joints - tip, axis=1)))
    direction = tip - joints[index - 1]
    angle = float(np.degrees(np.arctan2(direction[1], direction[0])))
    centre = tip - direction / max(float(np.linalg.norm(direction)), 1e-6) * 7.0
    nail = tuple(float(c) for c in np.minimum(base * 1.18 + 18, 255))
    cv2.ellipse(rgb, tuple(int(v) for v in centre), (8, 6), angle, 0, 360, nail, -1, cv2.LINE_AA)


def _segment_distance(grid: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distance of every pixel to the segment, and where along it (0..1) the nearest point lies."""
    direction = end - start
    length_sq = max(float(direction @ direction), 1e-6)
    relative = grid - start[:, None, None]
    along = np.clip((relative[0] * direction[0] + relative[1] * direction[1]) / length_sq, 0.0, 1.0)
    nearest_x = start[0] + along * direction[0]
    nearest_y = start[1] + along * direction[1]
    return np.hypot(grid[0] - nearest_x, grid[1] - nearest_y), along


def _polygon_distance(grid: np.ndarray, polygon: np.ndarray) -> np.ndarray:
    """Signed distance to a convex polygon's outline, negative inside."""
    mask = np.zeros(grid.shape[1:], np.uint8)
    cv2.fillPoly(mask, [np.round(polygon).astype(np.int32)], 1)
    inside = cv2.distanceTransform(mask, cv2.DIST_L2, 5)
    outside = cv2.distanceTransform(1 - mask, cv2.DIST_L2, 5)
    return (outside - inside).astype(np.float32)


def _smooth_min(a: np.ndarray, b: np.ndarray, k: float) -> np.ndarray:
    """A union of two distance fields with a fillet of about ``k`` pixels (the webbing)."""
    h = np.clip(0.5 + 0.5 * (b - a) / k, 0.0, 1.0)
    return b * (1 - h) + a * h - k * h * (1 - h)
