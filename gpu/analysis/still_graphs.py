"""Still-image faces on the converted graphs (``engine.tracker: graphs``): the same finder
(tile sweep, HOG second opinion, NMS) and the same mesh check as mediapipe's still path
(``gpu.analysis.face_mesh.FaceMesh``), but every model run goes through the node's
``TrackingGraphs``, so a node without the mediapipe package (a GPU image) registers faces.

Per candidate, as mediapipe's static face mesh does on the region ``FaceMesh`` gives it:
the region (``REGION_SCALE`` x the box) is turned upright by the candidate's roll and seen
by short range (a rotated pass: a tilted head's keypoints are found on an upright face),
and the landmark model runs on the ROI of that detection. Once more, on the ROI of its own
mesh (the tracker's rule), where
- short range found nothing there: the candidate's own box and keypoints gave the ROI, and
  the face must hold its presence on its mesh's ROI (a HOG box on a neck scored 0.66 on its
  box, 0.0 there);
- the mesh's roll disagrees with the ROI's by more than ``RETRY_DEGREES`` (``FaceMesh``'s
  retry);
- a confident candidate (short range saw it, and the sweep scored it ``RESCUE_SCORE`` or
  more) has low presence on its detection's ROI (a head turned ~45 degrees, whose
  detection ROI sits off its face).
A face short range saw whose ROI reaches past the frame and whose presence is still low
is tried once more on the photo padded with black (a face cut by the edge).
A face is judged on the last ROI it was tried on, except that one short range does not
see must hold its presence on both and a confident one on either. Judged on the mesh's ROI
alone, a rocket's logo scores 0.57-0.76 (BlazeFace: 0.66-0.69) and the astronaut's mission
patch (a HOG candidate short range does not see) 0.6.
A kept face whose presence is under ``SURE_PRESENCE`` and does not hold on its mesh's
ROI scaled 0.85x and 1.2x is in doubt and kept only if dlib's CNN detector finds it (``still_faces.DOUBT_SCALES``).
All candidates of a photo share each of these runner calls. Only one pass otherwise: a
second on the mesh's ROI moved the meshes away from mediapipe's (pose set: 1.21 px mean
against 0.70 px) and from the set's truth (1.49 % of the face width against 1.43 %).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import cv2
import numpy as np

from gpu.analysis.blazeface import BlazeFaceRange
from gpu.analysis.detection import DIM_LIGHTNESS, FaceFinder, roll_of
from gpu.analysis.face_mesh import REGION_SCALE, RETRY_DEGREES, face_from_mesh, mesh_roll, plausible_mesh, reaches_past
from gpu.analysis.still_faces import DOUBT_SCALES, RESCUE_SCORE, CnnFaceCheck
from gpu.device import array_module
from gpu.kernels import ops
from gpu.tracking import face_roi
from gpu.tracking.graphs import GraphBlazeFace, TrackingGraphs
from gpu.types import Face

# Each candidate's upright region is resampled to this side for short range (128 px input).
REGION_PX = 192
# mediapipe's face mesh keeps a face whose presence is over this (min_detection_confidence).
MIN_PRESENCE = 0.5
# A kept face with presence under this has its presence checked on rescaled ROIs (see
# ``still_faces.DOUBT_SCALES``): the rocket's smiley held at most 0.85 where it was kept,
# 95 % of real faces 0.99 or more (the check for every face cost ~100 ms a crowd photo).
SURE_PRESENCE = 0.99


_still_ids = itertools.count(1)


class GraphStillFaces:
    """Candidates and meshes of still images on the node's ``TrackingGraphs``. Each call
    attaches its own session to the graphs' batchers only while it runs, so a lone live
    session keeps its inline fast path between stills."""

    def __init__(self, graphs: TrackingGraphs, whole_frame: BlazeFaceRange = "full", hog: bool = True,
                 equalise: bool = True, equalise_below: float = DIM_LIGHTNESS,
                 rescue_score: float = RESCUE_SCORE, black_border: bool = True, second_opinion: bool = True) -> None:
        """``equalise_below``, ``rescue_score``: see ``FaceFinder``, ``RESCUE_SCORE``;
        ``black_border``: faces cut by the edge tried on a black border; ``second_opinion``:
        doubtful faces kept only when dlib's CNN detector finds them (``bench detect``
        compares the still path with none of these)."""
        self._graphs = graphs
        self.rescue_score = rescue_score
        self.black_border = black_border
        self._cnn = CnnFaceCheck() if second_opinion else None
        self._session = f"still-{next(_still_ids)}"
        detectors = {name: GraphBlazeFace(graphs, name, self._session) for name in ("short", "full")}
        self.finder = FaceFinder(whole_frame, hog=hog, equalise=equalise, detectors=detectors,
                                 equalise_below=equalise_below)

    def find(self, image: np.ndarray) -> list[Face]:
        """Every candidate of the finder's whole sweep (and HOG), merged."""
        self._graphs.attach(self._session)
        try:
            return self.finder.find(image)
        finally:
            self._graphs.detach(self._session)

    def landmarks(self, image: np.ndarray, faces: Sequence[Face]) -> list[Face | None]:
        """Each candidate with its mesh, mesh keypoints and the mesh's box, or None where no
        plausible mesh is found (not a face); see the module's note for the passes."""
        if not faces:
            return []
        self._graphs.attach(self._session)
        try:
            rois, seen = self._detection_rois(image, faces)
            points, presence = self._graphs.landmarks(self._session, [image] * len(rois), rois)
            confident = [detected and face.score >= self.rescue_score
                         for face, detected in zip(faces, seen, strict=True)]
            retry = [i for i, (mesh, roi, alive) in enumerate(zip(points, rois, presence, strict=True))
                     if not seen[i] or (confident[i] and alive < MIN_PRESENCE)
                     or abs(_angle(mesh_roll(mesh) - np.degrees(roi[3]))) > RETRY_DEGREES]
            if retry:
                again, alive = self._graphs.landmarks(self._session, [image] * len(retry),
                                                      face_roi.roi_from_landmarks(points[retry]))
                for i, mesh, held in zip(retry, again, alive, strict=True):
                    if not seen[i]:  # it must hold its presence on both ROIs
                        points[i], presence[i] = mesh, min(presence[i], held)
                    elif not confident[i] or held >= MIN_PRESENCE or held > presence[i]:  # a confident one on either
                        points[i], presence[i] = mesh, held
            cut = [i for i, (roi, alive) in enumerate(zip(rois, presence, strict=True))
                   if seen[i] and alive < MIN_PRESENCE and _reaches_past(roi, image.shape)]
            if cut and self.black_border:
                points[cut], presence[cut] = self._on_black_border(image, rois[cut])
            kept = [i for i, (face, mesh, alive) in enumerate(zip(faces, points, presence, strict=True))
                    if alive >= MIN_PRESENCE and plausible_mesh(mesh, face.box)]
            unsure = [i for i in kept if presence[i] < SURE_PRESENCE]
            if unsure and self._cnn is not None:
                doubtful = [i for i, holds in zip(unsure, self._holds_when_rescaled(image, points[unsure]), strict=True)
                            if not holds]
                kept = [i for i in kept if i not in doubtful or self._cnn.confirms(image, points[i])]
        finally:
            self._graphs.detach(self._session)
        return [face_from_mesh(points[i], score=face.score) if i in kept else None for i, face in enumerate(faces)]

    def _holds_when_rescaled(self, image: np.ndarray, meshes: np.ndarray) -> np.ndarray:
        """(N,) whether each mesh's presence holds (``MIN_PRESENCE``) on its own ROI scaled by
        each of ``DOUBT_SCALES`` (one batched call), on the photo padded with black: a real
        face's does, a painted one's comes and goes with the crop (see ``DOUBT_SCALES``)."""
        rois = face_roi.roi_from_landmarks(meshes)
        scaled = np.concatenate([rois * np.array([1, 1, scale, 1], np.float32) for scale in DOUBT_SCALES])
        if any(_reaches_past(roi, image.shape) for roi in scaled):
            image, scaled, _ = _padded_with_black(image, scaled)
        _, presence = self._graphs.landmarks(self._session, [image] * len(scaled), scaled)
        return (presence.reshape(len(DOUBT_SCALES), len(meshes)) >= MIN_PRESENCE).all(axis=0)

    def _on_black_border(self, image: np.ndarray, rois: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Meshes and presence for landmark ROIs that reach past the frame (a face cut by the
        edge), on the photo padded with black: the landmark crop repeats the edge's pixels
        out there, in streaks across the face's missing part (a dark head turned 45 degrees
        and cut by the edge: presence 0.11, and 0.90 padded). Presence is the lower of the
        detection's ROI and its mesh's, both padded."""
        padded, shifted, margin = _padded_with_black(image, rois)
        first, alive = self._graphs.landmarks(self._session, [padded] * len(rois), shifted)
        again, held = self._graphs.landmarks(self._session, [padded] * len(rois), face_roi.roi_from_landmarks(first))
        again[..., :2] -= margin
        return again, np.minimum(alive, held)

    def _detection_rois(self, image: np.ndarray, faces: Sequence[Face]) -> tuple[np.ndarray, list[bool]]:
        """(N, 4) landmark ROIs and whether short range saw each: the candidate's face as
        short range sees it in its upright region (all regions side by side in one strip,
        one batched call), mapped back to the frame; the candidate's own box and keypoints
        where short range finds nothing."""
        to_region = np.stack([region_matrix(face) for face in faces])
        regions = ops.crop_faces([image] * len(faces), to_region, REGION_PX)
        xp = array_module(regions)
        strip = xp.ascontiguousarray(xp.concatenate(list(regions), axis=1))
        windows = [(i * REGION_PX, 0, (i + 1) * REGION_PX, REGION_PX) for i in range(len(faces))]
        found = self._graphs.detect(self._session, "short", strip, windows)
        rois, seen = [], []
        for index, (face, matrix, in_region) in enumerate(zip(faces, to_region, found, strict=True)):
            central = _central(in_region, index * REGION_PX)
            seen.append(central is not None)
            if central is None:
                rois.append(face_roi.roi_from_detection(face.box[None], face.kps[None])[0])
            else:
                rois.append(_roi_in_frame(central, index * REGION_PX, matrix))
        return np.stack(rois).astype(np.float32), seen

    def close(self) -> None:
        self.finder.close()


def _padded_with_black(image: np.ndarray, rois: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The photo padded with black by the largest ROI's size each side, the ROIs moved with
    it, and the margin: a landmark crop reaching past the frame then sees black, not the
    edge's pixels repeated in streaks."""
    margin = int(np.ceil(rois[:, 2].max()))
    padded = array_module(image).pad(image, ((margin, margin), (margin, margin), (0, 0)))
    shifted = rois.copy()
    shifted[:, :2] += margin
    return padded, shifted, margin


def _reaches_past(roi: np.ndarray, shape: tuple[int, ...]) -> bool:
    """Whether a landmark ROI (cx, cy, side, rotation) reaches past the frame."""
    return reaches_past(*(float(v) for v in roi[:3]), shape)


def _angle(degrees: float) -> float:
    """``degrees`` wrapped to [-180, 180)."""
    return (degrees + 180.0) % 360.0 - 180.0


def region_matrix(face: Face) -> np.ndarray:
    """(2, 3) frame -> region pixels: ``REGION_SCALE`` x the box's long side about its
    centre, turned by the keypoints' roll so the face is upright, onto ``REGION_PX``."""
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    side = max(face.box[2] - face.box[0], face.box[3] - face.box[1], 1.0) * REGION_SCALE
    matrix = cv2.getRotationMatrix2D((float(cx), float(cy)), roll_of(face.kps), REGION_PX / float(side))
    matrix[:, 2] += REGION_PX / 2 - np.array([cx, cy])
    return matrix


def _central(faces: Sequence[Face], offset: int) -> Face | None:
    """The best detection whose centre lies in the middle of its region (where the
    candidate's box maps: 1 / ``REGION_SCALE`` of the side), or None."""
    half = REGION_PX / REGION_SCALE / 2
    middle = np.array([offset + REGION_PX / 2, REGION_PX / 2])
    inside = [face for face in faces if (np.abs(face.center - middle) <= half).all()]
    return max(inside, key=lambda face: face.score) if inside else None


def _roi_in_frame(face: Face, offset: int, to_region: np.ndarray) -> np.ndarray:
    """The landmark ROI (cx, cy, side, rotation) of a detection in a region, in frame pixels."""
    shift = np.array([offset, 0.0], dtype=np.float32)
    box = face.box - np.tile(shift, 2)
    kps = face.kps - shift
    roi = face_roi.roi_from_detection(box[None], kps[None])[0].astype(np.float64)
    back = cv2.invertAffineTransform(to_region)
    centre = back[:, :2] @ roi[:2] + back[:, 2]
    eyes = kps[:2].astype(np.float64) @ back[:, :2].T + back[:, 2]
    scale = float(np.hypot(*to_region[0, :2]))
    rotation = np.arctan2(*(eyes[1] - eyes[0])[::-1])
    return np.array([centre[0], centre[1], roi[2] / scale, rotation], dtype=np.float32)
