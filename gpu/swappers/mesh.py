"""Built-in weight-free "mesh" swapper.

The registered source face is cut into triangles over all 468 mesh points plus a ring grown
past the face outline (the eyes and mouth carry most of a person's identity, so they must
be inside the triangulation) and each triangle is warped onto the target's mesh. The dense
warp (a sampling grid) and the masks are drawn on the host from the landmarks; the crop and
the paste-back run where the frame is (device kernels for a CuPy frame); sampling, colour
match and the masked blend run in ``mesh_graph`` through the runner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from gpu.align import ARCFACE_TEMPLATE_112, estimate_similarity, transform_points
from gpu.analysis.landmarks import (
    FACE_OVAL,
    INNER_LIPS,
    LEFT_EYE,
    MOUTH_LEFT,
    MOUTH_RIGHT,
    OUTER_LIPS,
    RIGHT_EYE,
)
from gpu.device import array_module, is_device_array
from gpu.errors import NoFaceError
from gpu.kernels.ops import crop_faces, paste_faces
from gpu.options import SwapOptions
from gpu.runners.base import Runner
from gpu.swappers.base import FaceJob, KeepMask, keep_mask
from gpu.swappers.mesh_graph import build_mesh_swap_graph
from gpu.types import Face

# Where the five keypoints sit in the aligned crop, as fractions of its size: the ArcFace
# layout shrunk so the whole face outline grown by GROW still fits with a margin.
_ZOOM = 0.78
_CROP_TEMPLATE = (ARCFACE_TEMPLATE_112 / 112.0 - np.array([0.5, 0.56], dtype=np.float32)) * _ZOOM + 0.5
# The swapped region reaches this far past the mesh's face outline: jaw and cheeks carry
# identity, but the mesh ends mid-forehead where the source's hairline would come along,
# so the growth fades to GROW_TOP towards the top of the head.
GROW = 1.1
GROW_TOP = 1.0


@dataclass(frozen=True)
class MeshSource:
    """A registered source face: its aligned texture and mesh in texture pixels."""

    texture: np.ndarray  # (3, T, T) float32 RGB [0, 1]
    points: np.ndarray  # (468 + ring, 2) float32, texture pixels
    triangles: np.ndarray  # (K, 3) int32 indices into points
    _device: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def texture_like(self, frame) -> object:
        """The texture on the frame's device: uploaded once per source, not once per frame."""
        if not is_device_array(frame):
            return self.texture
        texture = self._device.get("texture")
        if texture is None:
            texture = self._device["texture"] = array_module(frame).asarray(self.texture)
        return texture


def _with_ring(mesh: np.ndarray) -> np.ndarray:
    """Mesh points plus the face outline pushed out from the mesh centre: by GROW below the
    eyes, fading to GROW_TOP straight up (the head's own up, from mouth to eyes)."""
    oval = mesh[list(FACE_OVAL)]
    centre = mesh.mean(0)
    up = mesh[list(LEFT_EYE + RIGHT_EYE)].mean(0) - mesh[[MOUTH_LEFT, MOUTH_RIGHT]].mean(0)
    up /= max(float(np.linalg.norm(up)), 1e-6)
    offsets = oval - centre
    upness = np.clip(offsets @ up / np.maximum(np.linalg.norm(offsets, axis=1), 1e-6), 0.0, 1.0)
    grow = GROW - (GROW - GROW_TOP) * upness
    return np.concatenate([mesh, centre + offsets * grow[:, None]]).astype(np.float32)


def _affines(dst_tris: np.ndarray, src_tris: np.ndarray) -> np.ndarray:
    """(K, 2, 3) affine maps taking each destination triangle onto its source triangle,
    in closed form (edge vectors), vectorised over triangles."""
    d0, d1, d2 = (dst_tris[:, i].astype(np.float64) for i in range(3))
    s0, s1, s2 = (src_tris[:, i].astype(np.float64) for i in range(3))
    e1, e2 = d1 - d0, d2 - d0
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    det = np.where(np.abs(det) < 1e-9, 1e-9, det)  # a collapsed triangle maps to its first vertex
    inv = np.stack([np.stack([e2[:, 1], -e2[:, 0]], 1), np.stack([-e1[:, 1], e1[:, 0]], 1)], 1) / det[:, None, None]
    linear = np.stack([s1 - s0, s2 - s0], axis=2) @ inv  # (K, 2, 2)
    offset = s0 - np.einsum("kij,kj->ki", linear, d0)
    return np.concatenate([linear, offset[:, :, None]], axis=2).astype(np.float32)


class MeshSwapper:
    """Swapper contract implementation for the built-in mesh swap."""

    name = "mesh"

    def __init__(self, runner: Runner | None = None, crop_size: int = 256) -> None:
        from gpu.runners.onnxruntime import OnnxRuntimeRunner

        self.runner: Runner = runner or OnnxRuntimeRunner(build_mesh_swap_graph(), name="mesh_swap")
        self.crop_size = crop_size
        self._template = _CROP_TEMPLATE * crop_size

    def alignment(self, face: Face) -> np.ndarray:
        """Frame pixels -> aligned crop pixels for this face."""
        return estimate_similarity(face.kps, self._template)

    def register(self, image: np.ndarray, face: Face) -> MeshSource:
        if face.mesh is None:
            raise NoFaceError("the source face has no landmarks (face mesh found no face)")
        from scipy.spatial import (
            Delaunay,  # only here: the GPU check's image has no scipy
        )

        matrix = self.alignment(face)
        texture = crop_faces([image], matrix[None], self.crop_size)[0]
        points = transform_points(_with_ring(face.mesh), matrix)
        triangles = Delaunay(points).simplices.astype(np.int32)
        return MeshSource(
            texture=np.ascontiguousarray(texture.transpose(2, 0, 1), dtype=np.float32) / 255.0,
            points=points,
            triangles=triangles,
        )

    def prepare(self, frame: np.ndarray, face: Face, source: MeshSource, options: SwapOptions,
                keep: KeepMask | None = None) -> FaceJob:
        if face.mesh is None:
            raise ValueError("the mesh swapper needs target faces with a mesh")
        size = self.crop_size
        xp = array_module(frame)
        matrix = self.alignment(face)
        crop = crop_faces([frame], matrix[None], size)[0]
        points = transform_points(_with_ring(face.mesh), matrix)
        grid, covered = self._sampling_grid(points, source)
        mask = self._mask(points, covered, options)
        occluded = keep_mask(keep, crop, face, matrix)
        mask = xp.asarray(mask if occluded is None else mask * (1.0 - occluded))
        feeds = {
            "target": xp.ascontiguousarray(crop.transpose(2, 0, 1), dtype=np.float32) / 255.0,
            "source": source.texture_like(frame),
            "grid": xp.asarray(grid),
            "mask": mask[None],
            "blend": xp.full((1, 1, 1), options.blend, dtype=np.float32),
            "colour": xp.full((1, 1, 1), 1.0 if options.colour_match else 0.0, dtype=np.float32),
        }
        return FaceJob(feeds=feeds, matrix=matrix, context={"mask": mask})

    def finish(self, frame: np.ndarray, job: FaceJob, row: Sequence[np.ndarray]) -> None:
        xp = array_module(frame)
        swapped = xp.clip(xp.asarray(row[0]).transpose(1, 2, 0) * 255.0 + 0.5, 0, 255).astype(np.uint8)
        paste_faces([frame], [0], swapped[None], job.context["mask"][None], job.matrix[None])

    def _sampling_grid(self, points: np.ndarray, source: MeshSource) -> tuple[np.ndarray, np.ndarray]:
        """Per-pixel source coordinates (GridSample's [-1, 1] convention) by piecewise-affine
        warp: rasterise triangle ids, map each pixel with its triangle's affine. Done at half
        resolution and upsampled: the warp is continuous and piecewise linear, so bilinear
        upsampling is exact inside triangles and sub-pixel at their edges, at a quarter the cost."""
        half = self.crop_size // 2
        ids = np.zeros((half, half), dtype=np.int32)
        dst_tris = points[source.triangles] * 0.5 - 0.25  # full-res pixel centres -> half-res
        for index, triangle in enumerate(np.round(dst_tris * 16).astype(np.int32), start=1):
            cv2.fillConvexPoly(ids, triangle, index, lineType=cv2.LINE_8, shift=4)
        maps = _affines(dst_tris, source.points[source.triangles])
        inside = ids > 0
        ys, xs = np.nonzero(inside)
        pixel_maps = maps[ids[ys, xs] - 1]  # (P, 2, 3)
        texture_size = source.texture.shape[-1]
        small = np.full((half, half, 2), -1.0, dtype=np.float32)
        for axis in (0, 1):
            coord = pixel_maps[:, axis, 0] * xs + pixel_maps[:, axis, 1] * ys + pixel_maps[:, axis, 2]
            small[ys, xs, axis] = (2.0 * coord + 1.0) / texture_size - 1.0
        size = (self.crop_size, self.crop_size)
        grid = cv2.resize(small, size, interpolation=cv2.INTER_LINEAR)
        covered = cv2.resize(inside.astype(np.float32), size, interpolation=cv2.INTER_LINEAR) > 0.999
        return grid, covered

    def _mask(self, points: np.ndarray, covered: np.ndarray, options: SwapOptions) -> np.ndarray:
        """Feathered blend mask: the grown face region minus the target's mouth opening
        (its teeth and tongue must stay) or, with the mouth mask, its whole mouth. Drawn and
        feathered at half resolution (a blur hides the difference), then upsampled."""
        half = self.crop_size // 2
        small_points = points * 0.5 - 0.25
        hard = np.zeros((half, half), dtype=np.uint8)
        ring = small_points[468:]
        cv2.fillConvexPoly(hard, np.round(cv2.convexHull(ring)[:, 0] * 16).astype(np.int32), 255, shift=4)
        lips = OUTER_LIPS if options.mouth_mask else INNER_LIPS
        cv2.fillPoly(hard, [np.round(small_points[list(lips)] * 16).astype(np.int32)], 0, shift=4)
        if options.mouth_mask:
            # a margin around the lips so the target's lip line does not ghost at the edge
            lip_width = np.linalg.norm(small_points[OUTER_LIPS[0]] - small_points[OUTER_LIPS[10]])
            margin = max(1, int(lip_width * 0.08))
            keep = cv2.dilate(255 - hard, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * margin + 1,) * 2))
            hard = np.minimum(hard, 255 - keep)
        radius = max(1, int(round(options.feather * half)))
        # erode first so the fade lies inside the region where the warp is defined
        core = cv2.erode(hard, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (radius + 1, radius + 1)))
        soft = cv2.GaussianBlur(core.astype(np.float32) / 255.0, (0, 0), sigmaX=radius / 2.0)
        return cv2.resize(soft, (self.crop_size, self.crop_size), interpolation=cv2.INTER_LINEAR) * covered
