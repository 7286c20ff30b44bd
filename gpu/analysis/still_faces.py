"""Still-image face analysis (registration, ``swapcast swap`` on a photo, job stills) on the
engine's tracker backend: the converted graphs (``gpu.analysis.still_graphs``, no mediapipe
needed) or mediapipe's own detector and mesh graphs. Both find candidates with the same
``FaceFinder`` sweep and confirm each by a plausible mesh."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import numpy as np

from gpu.analysis.blazeface import BlazeFaceRange
from gpu.analysis.detection import DIM_LIGHTNESS, FaceFinder, suppress
from gpu.types import Face

StillBackend = Literal["mediapipe", "graphs"]


class StillFaces(Protocol):
    """Candidates of a still and their meshes (None: no plausible mesh, not a face)."""

    def find(self, image: np.ndarray) -> list[Face]: ...

    def landmarks(self, image: np.ndarray, faces: Sequence[Face]) -> list[Face | None]: ...

    def close(self) -> None: ...


class MediapipeStillFaces:
    """mediapipe's BlazeFace graphs over the sweep and its static face mesh per candidate."""

    def __init__(self, whole_frame: BlazeFaceRange = "full", hog: bool = True, equalise: bool = True,
                 equalise_below: float = DIM_LIGHTNESS) -> None:
        from gpu.analysis.face_mesh import FaceMesh

        self.finder = FaceFinder(whole_frame, hog=hog, equalise=equalise, equalise_below=equalise_below)
        self._mesh = FaceMesh()

    def find(self, image: np.ndarray) -> list[Face]:
        return self.finder.find(image)

    def landmarks(self, image: np.ndarray, faces: Sequence[Face]) -> list[Face | None]:
        return [self._mesh.landmarks(image, face) for face in faces]

    def close(self) -> None:
        self.finder.close()
        self._mesh.close()


def still_faces(backend: StillBackend, graphs: Callable[[], object], whole_frame: BlazeFaceRange = "full") -> StillFaces:
    """The still analysis of ``backend``; ``graphs`` gives the node's ``TrackingGraphs``
    (asked only for the graphs backend, so a mediapipe node converts nothing)."""
    if backend == "graphs":
        from gpu.analysis.still_graphs import GraphStillFaces

        return GraphStillFaces(graphs(), whole_frame)
    if backend == "mediapipe":
        return MediapipeStillFaces(whole_frame)
    raise ValueError(f"still-image analysis: unknown backend {backend!r} (mediapipe or graphs)")


def analyse_still(still: StillFaces, image: np.ndarray) -> list[Face]:
    """Faces in a still RGB image, largest first: every candidate of the sweep meshed; a
    candidate without a plausible mesh is no face, and one mesh per face is kept."""
    candidates = still.find(image)
    meshed = [face for face in still.landmarks(image, candidates) if face is not None]
    return sorted(suppress(meshed), key=lambda f: f.area, reverse=True)
