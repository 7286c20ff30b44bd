"""Sample faces that ship inside installed wheels (no download): used by the page's face
picker, ``swapcast bench`` and the tests."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def astronaut() -> np.ndarray:
    """Eileen Collins (scikit-image's ``astronaut``), RGB uint8 512x512."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut())


def grace_hopper() -> np.ndarray:
    """Grace Hopper (matplotlib's sample data), RGB uint8 600x512."""
    import matplotlib

    path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)


SAMPLE_FACES = {"astronaut": astronaut, "grace_hopper": grace_hopper}


def moving_face_frames(
    face: np.ndarray, count: int, size: tuple[int, int] = (640, 480), seed: int = 0
) -> list[np.ndarray]:
    """Frames of ``face`` panning, zooming and rotating a little over a plain background,
    the way a person moves in front of a webcam. RGB uint8, ``size`` = (width, height)."""
    width, height = size
    rng = np.random.default_rng(seed)
    background = np.full((height, width, 3), (92, 110, 120), dtype=np.uint8)
    frames = []
    src_h, src_w = face.shape[:2]
    base_scale = min(width / src_w, height / src_h) * 0.9
    for i in range(count):
        phase = 2 * np.pi * i / max(count, 1)
        angle = 6.0 * np.sin(phase)
        scale = base_scale * (1.0 + 0.12 * np.sin(phase * 0.5))
        shift = np.array([0.06 * width * np.sin(phase), 0.04 * height * np.cos(phase)])
        matrix = cv2.getRotationMatrix2D((src_w / 2, src_h / 2), angle, scale)
        matrix[:, 2] += np.array([width / 2, height / 2]) + shift - np.array([src_w / 2, src_h / 2])
        frame = cv2.warpAffine(face, matrix, (width, height), dst=background.copy(), borderMode=cv2.BORDER_TRANSPARENT)
        noise = rng.normal(0.0, 1.5, frame.shape)
        frames.append(np.clip(frame + noise, 0, 255).astype(np.uint8))
    return frames
