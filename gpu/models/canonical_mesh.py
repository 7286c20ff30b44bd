"""MediaPipe's canonical face mesh: 468 vertices with UV coordinates, 898 triangles and the
33 weighted landmarks of its Procrustes pose fit.

The face mesh's landmarks come in the same order, so a landmark set is a posed instance of
this mesh: that is what lets a swapper texture a face in UV space, cull the triangles that
face away from the camera and compare face shapes independent of pose. The data file is
MediaPipe's (Apache-2.0, see NOTICE), vendored because no wheel ships it; it is parsed once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

DATA_FILE = "geometry_pipeline_metadata_landmarks.pbtxt"

# Lid margins and the inner lip line, in landmark order around each opening: the triangles
# spanning them close the eyes and the mouth (the target's own eyes and teeth show there).
RIGHT_EYE_CONTOUR = (33, 7, 163, 144, 145, 153, 154, 155, 133, 173, 157, 158, 159, 160, 161, 246)
LEFT_EYE_CONTOUR = (263, 249, 390, 373, 374, 380, 381, 382, 362, 398, 384, 385, 386, 387, 388, 466)
INNER_LIP_CONTOUR = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308, 415, 310, 311, 312, 13, 82, 81, 80, 191)


@dataclass(frozen=True)
class CanonicalMesh:
    """The canonical mesh in the landmarks' orientation: x right, y down, z away from the
    camera (MediaPipe's file has y up and z towards the camera; both are flipped here), so
    a frontal landmark set and ``vertices`` differ only by a similarity transform."""

    vertices: np.ndarray  # (468, 3) float32, centimetres
    uv: np.ndarray  # (468, 2) float32 in [0, 1]; v grows downward like image rows
    triangles: np.ndarray  # (898, 3) int32, wound so a front-facing triangle has a negative image-space signed area
    procrustes_ids: np.ndarray  # (33,) int32 landmark ids of the pose fit
    procrustes_weights: np.ndarray  # (33,) float32
    mirror: np.ndarray  # (468,) int32: the vertex mirrored across the face's midline
    eye_closure: np.ndarray  # (898,) bool: triangles spanning an eye's lid margins
    mouth_closure: np.ndarray  # (898,) bool: triangles spanning the inner lips

    @property
    def closure(self) -> np.ndarray:
        """(898,) bool: triangles that close the eyes or the mouth."""
        return self.eye_closure | self.mouth_closure


def _spans(triangles: np.ndarray, contour: tuple[int, ...]) -> np.ndarray:
    """Triangles whose three corners all lie on ``contour``."""
    return np.isin(triangles, contour).all(axis=1)


def signed_areas(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """Image-space signed area of each triangle of a posed mesh (twice the area); the
    z component of its 3D normal. Negative = facing the camera (canonical winding)."""
    a, b, c = (points[triangles[:, i], :2].astype(np.float64) for i in range(3))
    e1, e2 = b - a, c - a
    return e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]


@lru_cache(maxsize=1)
def canonical_mesh() -> CanonicalMesh:
    """The mesh, parsed once per process."""
    text = resources.files("gpu.models").joinpath("data", DATA_FILE).read_text()
    return parse_canonical_mesh(text)


def parse_canonical_mesh(text: str) -> CanonicalMesh:
    vertex_buffer = np.array(re.findall(r"vertex_buffer:\s*(-?[\d.eE+-]+)", text), dtype=np.float64)
    index_buffer = np.array(re.findall(r"index_buffer:\s*(\d+)", text), dtype=np.int64)
    basis = re.findall(r"procrustes_landmark_basis\s*\{\s*landmark_id:\s*(\d+)\s*weight:\s*([\d.eE+-]+)\s*\}", text)
    if vertex_buffer.size != 468 * 5 or index_buffer.size % 3 or not basis:
        raise ValueError(f"{DATA_FILE}: expected 468 VERTEX_PT vertices, whole triangles and a Procrustes basis")
    rows = vertex_buffer.reshape(468, 5)
    vertices = rows[:, :3] * np.array([1.0, -1.0, -1.0])
    triangles = index_buffer.reshape(-1, 3)
    if np.median(signed_areas(vertices, triangles)) > 0:  # keep "negative = front-facing" whatever the file's winding
        triangles = triangles[:, ::-1]
    mirrored = vertices * np.array([-1.0, 1.0, 1.0])
    mirror = np.argmin(((vertices[:, None] - mirrored[None]) ** 2).sum(-1), axis=0)
    return CanonicalMesh(
        vertices=vertices.astype(np.float32),
        uv=rows[:, 3:].astype(np.float32),
        triangles=np.ascontiguousarray(triangles, dtype=np.int32),
        procrustes_ids=np.array([int(i) for i, _ in basis], dtype=np.int32),
        procrustes_weights=np.array([float(w) for _, w in basis], dtype=np.float32),
        mirror=mirror.astype(np.int32),
        eye_closure=_spans(triangles, RIGHT_EYE_CONTOUR) | _spans(triangles, LEFT_EYE_CONTOUR),
        mouth_closure=_spans(triangles, INNER_LIP_CONTOUR),
    )
