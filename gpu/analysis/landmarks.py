"""Face-mesh index sets shared by the analysis and the swappers."""

from __future__ import annotations

import numpy as np

# Mesh indices as seen in the image: "left" = smaller x for a frontal face (subject's right).
LEFT_EYE = (33, 133, 159, 145)
RIGHT_EYE = (362, 263, 386, 374)
NOSE_TIP = 1
MOUTH_LEFT = 61
MOUTH_RIGHT = 291

# Face oval (closed loop) of the 468-point mesh.
FACE_OVAL = (
    10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377,
    152, 148, 176, 149, 150, 136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 67, 109,
)  # fmt: skip
# Inner lip contour: the mouth opening (teeth, tongue) that always stays the target's.
INNER_LIPS = (
    78, 191, 80, 81, 82, 13, 312, 311, 310, 415, 308, 324, 318, 402, 317, 14, 87, 178, 88, 95,
)  # fmt: skip
# Outer lip contour: what the mouth mask option keeps from the target.
OUTER_LIPS = (
    61, 185, 40, 39, 37, 0, 267, 269, 270, 409, 291, 375, 321, 405, 314, 17, 84, 181, 91, 146,
)  # fmt: skip


def five_points(mesh: np.ndarray) -> np.ndarray:
    """ArcFace-order 5 keypoints (eyes, nose tip, mouth corners) from a 468-point mesh."""
    return np.stack(
        [
            mesh[list(LEFT_EYE)].mean(0),
            mesh[list(RIGHT_EYE)].mean(0),
            mesh[NOSE_TIP],
            mesh[MOUTH_LEFT],
            mesh[MOUTH_RIGHT],
        ]
    ).astype(np.float32)
