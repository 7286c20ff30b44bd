"""Several photos of one person as one source face, wherever a face is registered (the face
library's uploads and added photos, a stream key's stored photos, ``swapcast swap``).

Each photo is registered on its own and checked to show the person the photos before it
show (dlib distance under ``SAME_PERSON_DISTANCE`` from the mean of their identities: a
photo of someone else would blend two people into one face); the sources are merged by the
swapper (``gpu.source_merge``: mesh3d's textures by what each photo saw, identity from all).
A face of the library keeps its photos as ``kept_photo`` crops, so it can be made again
when a photo is added or the node's swapper is another one than the one that made it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np

from gpu.analysis.identity import identity_distance
from gpu.engine import FaceEngine, SourceFace
from gpu.errors import SwapcastError
from gpu.source_merge import mean_identity, merge_source_faces

SAME_PERSON_DISTANCE = 0.6  # dlib's: the same person measures 0.05-0.5, different people 0.63-0.91
KEPT_PHOTO_MARGIN = 2.4  # a kept photo's side, in face box sides: the whole head, some neck and background
KEPT_PHOTO_SIDE = 1024  # px: a kept photo's longest side at most (a face ~400 px wide, more than a swap uses)
KEPT_PHOTO_QUALITY = 92


class DifferentPersonError(SwapcastError):
    """A photo shows someone else than the photos before it (``reason``: which photo)."""

    status = 422

    @property
    def reason(self) -> str:
        return str(self)


def check_same_person(identity: np.ndarray, known: Sequence[np.ndarray], label: str, others: str = "the photos before it") -> None:
    """``DifferentPersonError`` when ``identity`` is ``SAME_PERSON_DISTANCE`` or further from
    the mean of ``known`` (nothing known: nothing to check)."""
    if not known:
        return
    distance = identity_distance(identity, mean_identity(known))
    if distance >= SAME_PERSON_DISTANCE:
        raise DifferentPersonError(
            f"{label} shows someone else than {others} (identity distance {distance:.2f}, the same person "
            f"measures under {SAME_PERSON_DISTANCE}); photos of one face must all show one person")


def register_photos(engine: FaceEngine, photos: Sequence[Any], labels: Sequence[str],
                    known: Sequence[np.ndarray] = (), index: int | None = None,
                    register: Callable[[Any, str], SourceFace] | None = None) -> list[SourceFace]:
    """Each photo (an RGB image, or what ``register(photo, label)`` takes instead of
    ``engine.register_source``) registered in order, each checked to show the person of
    ``known`` (the identities of a face's photos when more are added to it) and of the
    photos before it; the errors name the photo by its label."""
    register = register or (lambda image, label: engine.register_source(image, index, label))
    sources: list[SourceFace] = []
    for photo, label in zip(photos, labels, strict=True):
        source = register(photo, label)
        check_same_person(source.identity, [*known, *(s.identity for s in sources)], label,
                          "the face's photos" if known else "the photos before it")
        sources.append(source)
    return sources


def remade_sources(engine: FaceEngine, kept: Sequence[bytes]) -> list[SourceFace]:
    """A face's kept photos registered again (each was checked when it was added; the face
    is the largest in its crop)."""
    sources = []
    for n, jpeg in enumerate(kept, 1):
        bgr = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        if bgr is None:
            raise SwapcastError(f"kept photo {n} of the face is damaged")
        sources.append(engine.register_source(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), 0, f"kept photo {n}"))
    return sources


def merged(engine: FaceEngine, sources: Sequence[SourceFace]) -> SourceFace:
    """One source for the engine's swapper from several of one person (one: as it is)."""
    return merge_source_faces(engine.swapper.name, sources)


def kept_photo(image: np.ndarray, box: np.ndarray) -> bytes:
    """The photo as a face keeps it (RGB in, JPEG out): a square around the face
    ``KEPT_PHOTO_MARGIN`` box sides wide (the head, with room for the detector), within the
    image, at most ``KEPT_PHOTO_SIDE`` px. A 12 MP photo's face is kept in ~100-200 kB."""
    height, width = image.shape[:2]
    x0, y0, x1, y1 = (float(v) for v in box)
    half = max(x1 - x0, y1 - y0) * KEPT_PHOTO_MARGIN / 2
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    left, top = int(max(0, cx - half)), int(max(0, cy - half))
    right, bottom = int(min(width, np.ceil(cx + half))), int(min(height, np.ceil(cy + half)))
    crop = image[top:bottom, left:right] if right > left and bottom > top else image
    scale = KEPT_PHOTO_SIDE / max(crop.shape[:2])
    if scale < 1:
        crop = cv2.resize(crop, (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale))),
                          interpolation=cv2.INTER_AREA)
    ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(crop, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, KEPT_PHOTO_QUALITY])
    if not ok:  # pragma: no cover - OpenCV always encodes a non-empty RGB crop
        raise RuntimeError("kept photo encoding failed")
    return encoded.tobytes()
