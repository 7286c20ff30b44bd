"""Still-image face analysis (registration, ``swapcast swap`` on a photo, job stills) on the
engine's tracker backend: the converted graphs (``gpu.analysis.still_graphs``, no mediapipe
needed) or mediapipe's own detector and mesh graphs. Both find candidates with the same
``FaceFinder`` sweep and confirm each by a plausible mesh."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

import cv2
import numpy as np

from gpu.analysis.blazeface import BlazeFaceRange
from gpu.analysis.detection import DIM_LIGHTNESS, FaceFinder, suppress
from gpu.analysis.face_mesh import REGION_SCALE, mesh_roll
from gpu.device import to_host
from gpu.types import Face

StillBackend = Literal["mediapipe", "graphs"]

# A candidate BlazeFace is this sure of, and sees again in its upright region (graphs;
# mediapipe: its mesh graph's own detector), whose presence is low on its detection's ROI
# is judged on its mesh's ROI too (graphs; mediapipe: see below): a turned head's
# detection ROI sits off its face (a 72 px head turned 45 degrees: presence 0.24 there,
# 0.59 on its mesh's). Measured on bench detect's stills and clutter: faces that needed it
# scored 0.75-0.81; of what short range sees again and is no face, a smiley logo on a
# rocket's nose scored highest, 0.69 (presence 0.57-0.76 on its mesh's ROI).
RESCUE_SCORE = 0.72
# mediapipe's still mesh, which finds its own ROI in the region it is given, tries such a
# candidate once more on a region this many times its box, where its detector sees the
# whole head (the 72 px head turned 45 degrees, BlazeFace's keypoints rolled 10: no mesh
# on 1.8-2.4x, a mesh on 2.8x; upright, from 2.2x).
RESCUE_REGION_SCALE = 2.8

# A doubtful face (its mesh presence does not hold on its ROI scaled by these) is kept only
# when dlib's CNN face detector finds it: a smiley painted on a rocket's nose held 0.5-0.94
# on its mesh's ROI and 0.00-0.45 at one of these scales; real faces 0.94 or more at both,
# except 5 % (heads turned 45-60 degrees, dim, dark, cut by the edge), which MMOD finds.
DOUBT_SCALES = (0.85, 1.2)
# The upright views of a doubtful face MMOD looks at, in turn until it finds the face:
# (side in px, upsampling, side as a multiple of the mesh's box). On bench detect's stills
# the first found 7 of 8 doubtful real faces, the second the last (a head turned 60
# degrees); the smiley in none of 7 noisy copies, in either.
CNN_VIEWS = ((200, 0, 1.8), (120, 1, 1.5))
# mediapipe's still mesh finds its own ROI in the region it is given, so a region scaled by
# DOUBT_SCALES moves its ROI less: one noisy copy's smiley was meshed in both; in 1.6x, none.
MEDIAPIPE_DOUBT_SCALES = (*DOUBT_SCALES, 1.6)


class StillFaces(Protocol):
    """Candidates of a still and their meshes (None: no plausible mesh, not a face)."""

    def find(self, image: np.ndarray) -> list[Face]: ...

    def landmarks(self, image: np.ndarray, faces: Sequence[Face]) -> list[Face | None]: ...

    def close(self) -> None: ...


class MediapipeStillFaces:
    """mediapipe's BlazeFace graphs over the sweep and its static face mesh per candidate,
    with the graphs path's rules where mediapipe allows: a face cut by the edge meshed on
    black, a confident candidate without a mesh tried on a wider region, and a doubtful face
    kept only on MMOD's second opinion (see ``DOUBT_SCALES``)."""

    def __init__(self, whole_frame: BlazeFaceRange = "full", hog: bool = True, equalise: bool = True,
                 equalise_below: float = DIM_LIGHTNESS, rescue_score: float = RESCUE_SCORE,
                 black_border: bool = True, second_opinion: bool = True) -> None:
        from gpu.analysis.face_mesh import FaceMesh

        self.finder = FaceFinder(whole_frame, hog=hog, equalise=equalise, equalise_below=equalise_below)
        self.rescue_score = rescue_score
        self.black_border = black_border
        self._mesh = FaceMesh()
        self._cnn = CnnFaceCheck() if second_opinion else None

    def find(self, image: np.ndarray) -> list[Face]:
        return self.finder.find(image)

    def landmarks(self, image: np.ndarray, faces: Sequence[Face]) -> list[Face | None]:
        return [self._landmarks(image, face) for face in faces]

    def _landmarks(self, image: np.ndarray, face: Face) -> Face | None:
        found = self._mesh.landmarks(image, face, black_border=self.black_border)
        if found is None and face.score >= self.rescue_score:
            found = self._mesh.landmarks(image, face, RESCUE_REGION_SCALE, self.black_border)
        if found is None or self._cnn is None or self._holds_when_rescaled(image, found):
            return found
        return found if self._cnn.confirms(image, found.mesh) else None

    def _holds_when_rescaled(self, image: np.ndarray, found: Face) -> bool:
        """Whether the mesh graph finds a face again in regions about its mesh
        ``MEDIAPIPE_DOUBT_SCALES`` x the usual size."""
        return all(self._mesh.landmarks(image, found, REGION_SCALE * scale, self.black_border) is not None
                   for scale in MEDIAPIPE_DOUBT_SCALES)

    def close(self) -> None:
        self.finder.close()
        self._mesh.close()


class CnnFaceCheck:
    """dlib's CNN face detector (MMOD, shipped in face-recognition-models) as a second
    opinion on a doubtful face: a different model family from BlazeFace and the mesh, trained
    on photos of real faces, that finds heads turned 60 degrees and dark, dim or small faces
    in an upright crop but no painted smiley. ~60-100 ms of CPU a view, so only for faces in
    doubt."""

    def __init__(self) -> None:
        import dlib

        spec = importlib.util.find_spec("face_recognition_models")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("dlib's CNN face detector needs face-recognition-models (pip install -e .)")
        model = Path(next(iter(spec.submodule_search_locations))) / "models" / "mmod_human_face_detector.dat"
        self._cnn = dlib.cnn_face_detection_model_v1(str(model))

    def confirms(self, image: np.ndarray, mesh: np.ndarray) -> bool:
        """Whether MMOD finds a face in the middle of an upright view of ``mesh`` (468, 2+)."""
        image = to_host(image)
        for side, upsample, scale in CNN_VIEWS:
            found = self._cnn(upright_view(image, mesh, side, scale), upsample)
            if any(abs(d.rect.center().x - side / 2) < side / 4 and abs(d.rect.center().y - side / 2) < side / 4
                   for d in found):
                return True
        return False


def upright_view(image: np.ndarray, mesh: np.ndarray, side: int, scale: float) -> np.ndarray:
    """A ``side`` x ``side`` RGB view of the face of ``mesh``: ``scale`` x its box's long
    side about its centre, turned upright by its eye line, black past the frame."""
    low, high = mesh[:, :2].min(0), mesh[:, :2].max(0)
    centre = (low + high) / 2
    matrix = cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), mesh_roll(mesh), side / (float((high - low).max()) * scale))
    matrix[:, 2] += side / 2 - centre
    return cv2.warpAffine(np.ascontiguousarray(image), matrix, (side, side), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT)


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
