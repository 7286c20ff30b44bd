"""Plain data passed between face analysis, swappers and the media plane."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Face:
    """One face in one frame, in that frame's pixel coordinates.

    ``kps`` are the five ArcFace-order keypoints: left eye, right eye, nose tip, left mouth
    corner, right mouth corner (left/right as seen in the image). ``mesh`` holds the 468
    face-mesh points when a landmarker ran, ``depth`` their z (pixels on the x scale,
    smaller = nearer the camera, as mediapipe reports it) so 3D-aware swappers can pose the
    mesh; ``track_id`` is set by the tracker.
    """

    box: np.ndarray  # (4,) float32: x0, y0, x1, y1
    kps: np.ndarray  # (5, 2) float32
    score: float = 1.0
    mesh: np.ndarray | None = None  # (468, 2) float32
    depth: np.ndarray | None = None  # (468,) float32, z of the mesh points in pixels
    track_id: int | None = None
    embedding: np.ndarray | None = field(default=None, repr=False)

    @property
    def area(self) -> float:
        x0, y0, x1, y1 = self.box
        return float(max(0.0, x1 - x0) * max(0.0, y1 - y0))

    @property
    def center(self) -> np.ndarray:
        x0, y0, x1, y1 = self.box
        return np.array([(x0 + x1) / 2, (y0 + y1) / 2], dtype=np.float32)
