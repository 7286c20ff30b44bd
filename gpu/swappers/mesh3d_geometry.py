"""Geometry of the 3D-aware swapper: the UV atlas, pose fits, normals, visibility and
rasterisation of a posed canonical mesh.

A posed mesh is the face mesh's 468 points with their depth, ``(468, 3)`` pixels (x right,
y down, z away from the camera), so it is an instance of ``gpu.models.canonical_mesh``.
Everything here is plain NumPy/OpenCV on the host: it works on 468 points and a few
thousand texels, never on frame pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, CanonicalMesh, canonical_mesh

# Eyebrows (texture detail, not skin: left out of the lighting fit).
RIGHT_BROW = (70, 63, 105, 66, 107, 55, 65, 52, 53, 46)
LEFT_BROW = (300, 293, 334, 296, 336, 285, 295, 282, 283, 276)
OUTER_LIP_CONTOUR = (61, 185, 40, 39, 37, 0, 267, 269, 270, 409, 291, 375, 321, 405, 314, 17, 84, 181, 91, 146)
FACE_OUTLINE = (
    10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377,
    152, 148, 176, 149, 150, 136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 67, 109,
)  # fmt: skip


@dataclass(frozen=True)
class UvAtlas:
    """The canonical mesh's triangles rasterised once into a ``size`` x ``size`` UV grid:
    for every covered texel its triangle and barycentric weights, so any per-vertex
    quantity (image position, normal) becomes a per-texel one by one gather."""

    size: int
    texels: tuple[np.ndarray, np.ndarray]  # (rows, cols) of the covered texels, (P,) each
    triangle: np.ndarray  # (P,) int32 triangle of each covered texel
    corners: np.ndarray  # (P, 3) int32 vertex ids of that triangle
    weights: np.ndarray  # (P, 3) float32 barycentric weights

    def interpolate(self, values: np.ndarray) -> np.ndarray:
        """Per-vertex ``(468, C)`` values -> per-texel ``(P, C)``."""
        return np.einsum("pk,pkc->pc", self.weights, values[self.corners])

    def scatter(self, values: np.ndarray, fill: float = 0.0) -> np.ndarray:
        """Per-texel ``(P, C)`` values -> a ``(size, size, C)`` image, ``fill`` elsewhere."""
        image = np.full((self.size, self.size, values.shape[1]), fill, dtype=np.float32)
        image[self.texels] = values
        return image


@lru_cache(maxsize=4)
def uv_atlas(size: int) -> UvAtlas:
    mesh = canonical_mesh()
    uv_pixels = mesh.uv * size - 0.5  # texel centres at integers
    raster = rasterise(uv_pixels, mesh.triangles, np.ones(len(mesh.triangles), dtype=bool), (size, size))
    triangle = raster.triangle[raster.rows, raster.cols]
    return UvAtlas(size, (raster.rows, raster.cols), triangle, mesh.triangles[triangle], raster.weights)


@dataclass(frozen=True)
class Raster:
    """Which triangle covers each pixel centre (the nearest where several do) and where in
    it: ``triangle`` (H, W) int32, -1 where none; for the covered pixels, in row-major
    order, their ``rows``/``cols`` (P,) and barycentric ``weights`` (P, 3)."""

    triangle: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    weights: np.ndarray

    @property
    def covered(self) -> np.ndarray:
        return self.triangle >= 0


def rasterise(points: np.ndarray, triangles: np.ndarray, keep: np.ndarray, shape: tuple[int, int]) -> Raster:
    """Rasterise the ``keep`` triangles of a mesh (points (V, 2) pixels, or (V, 3) with
    depth: then they are painted far to near, so the nearest surface wins - the painter's
    algorithm, exact for a face mesh's small, non-intersecting triangles).

    All triangles at once (``_paint``: the pixels one OpenCV fill per triangle sets, in
    its integer arithmetic, ~3x faster than those fills), then the barycentric weights of
    every covered pixel in one vectorised pass."""
    chosen = np.nonzero(keep)[0]
    if points.shape[1] > 2:
        chosen = chosen[np.argsort(-points[triangles[chosen], 2].sum(1), kind="stable")]
    ids = _paint(points[triangles[chosen], :2], chosen.astype(np.int32), shape)
    covered = np.flatnonzero(ids >= 0)
    ys, xs = np.divmod(covered, shape[1])
    # per triangle, its barycentric weights b and c as affine functions of (x, y)
    a, b, c = (points[triangles[:, k], :2].astype(np.float64) for k in range(3))
    v0, v1 = b - a, c - a
    det = v0[:, 0] * v1[:, 1] - v0[:, 1] * v1[:, 0]
    det = np.where(np.abs(det) < 1e-12, 1e-12, det)
    along_b = np.stack([v1[:, 1], -v1[:, 0]], 1) / det[:, None]
    along_c = np.stack([-v0[:, 1], v0[:, 0]], 1) / det[:, None]
    start_b, start_c = -(a * along_b).sum(1), -(a * along_c).sum(1)
    triangle = ids.reshape(-1)[covered]
    wb = along_b[triangle, 0] * xs + along_b[triangle, 1] * ys + start_b[triangle]
    wc = along_c[triangle, 0] * xs + along_c[triangle, 1] * ys + start_c[triangle]
    # pixels the fill rounds onto a triangle's edge may lie a hair outside it: clamp
    wa = np.clip(1.0 - wb - wc, 0.0, 1.0)
    wb, wc = np.clip(wb, 0.0, 1.0), np.clip(wc, 0.0, 1.0)
    total = np.maximum(wa + wb + wc, 1e-12)
    weights = np.stack([wa / total, wb / total, wc / total], 1)
    return Raster(ids, ys, xs, weights.astype(np.float32))


def _paint(corners: np.ndarray, labels: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(H, W) int32: the label of the last of the (T, 3, 2) triangles covering each pixel,
    -1 where none does -- what one ``cv2.fillConvexPoly(..., LINE_8, shift=4)`` per
    triangle in that order paints (neighbours overlap on their shared edges, the later
    wins), computed for all triangles at once."""
    height, width = shape
    ids = np.full(height * width, -1, dtype=np.int32)
    tri, ys, xs = _fill_convex_pixels(np.round(corners * 16).astype(np.int64), shape)
    inside = (xs >= 0) & (xs < width) & (ys >= 0) & (ys < height)
    winner = np.full(height * width, -1, dtype=np.int64)
    np.maximum.at(winner, (ys * width + xs)[inside], tri[inside])
    drawn = winner >= 0
    ids[drawn] = labels[winner[drawn]]
    return ids.reshape(shape)


def _fill_convex_pixels(corners: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(triangle, y, x) of every pixel OpenCV's ``fillConvexPoly`` (LINE_8, shift=4) sets
    for (T, 3, 2) triangles with corners in 1/16 pixels, in its integer arithmetic (some
    outside the (H, W) ``shape``, for the caller to drop): scanline spans between the two
    edge walks from the top corner, each edge stepped from its start corner's rounded row
    (rows from the top corner's to the bottom one's, exclusive), plus each edge drawn as a
    line (``_line_pixels``)."""
    count = len(corners)
    index = np.arange(count)
    fixed_x, raw_y = corners[:, :, 0] << 12, corners[:, :, 1]  # x in 1/65536 pixels, as OpenCV steps it
    row = (raw_y + 8) >> 4
    top = np.argmin(raw_y, axis=1)
    first_row, top_x = row[index, top], fixed_x[index, top]
    walks = []
    for near, far in ((top + 1) % 3, (top + 2) % 3), ((top + 2) % 3, (top + 1) % 3):  # both ways round
        near_row, near_x = row[index, near], fixed_x[index, near]
        far_row, far_x = row[index, far], fixed_x[index, far]
        walks.append((near_row, top_x, _edge_step(top_x, near_x, near_row - first_row),
                      near_x, _edge_step(near_x, far_x, far_row - near_row)))
    rows = np.maximum(np.maximum(walks[0][0], walks[1][0]) - first_row, 0)
    span_tri = np.repeat(index, rows)
    offset = _ramp(rows)
    y = first_row[span_tri] + offset
    sides = []
    for near_row, start_x, step, turn_x, turn_step in walks:
        near_row = near_row[span_tri]
        below = y - near_row  # rows past the walk's turn at its middle corner (negative before)
        sides.append(np.where(below < 0, start_x[span_tri] + offset * step[span_tri],
                              turn_x[span_tri] + below * turn_step[span_tri]))
    left = (np.minimum(sides[0], sides[1]) + 32768) >> 16
    length = np.maximum(((np.maximum(sides[0], sides[1]) + 32768) >> 16) - left + 1, 0)
    starts = np.repeat(left - (np.cumsum(length) - length), length)
    line_tri, line_y, line_x = _line_pixels(np.roll(corners, 1, axis=1).reshape(-1, 2) << 12, corners.reshape(-1, 2) << 12, shape)
    return (
        np.concatenate([np.repeat(span_tri, length), line_tri // 3]),
        np.concatenate([np.repeat(y, length), line_y]),
        np.concatenate([starts + np.arange(len(starts)), line_x]),
    )


def _edge_step(start_x: np.ndarray, end_x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """OpenCV's per-row x step of an edge walked over ``rows`` rows (rounded; 0 rows: unused)."""
    rows = np.maximum(rows, 1)
    return _trunc_div((end_x - start_x) * 2 + rows, 2 * rows)


def _line_pixels(begin: np.ndarray, end: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(segment, y, x) of OpenCV's ``Line2`` (LINE_8) for (N, 2) segments in 1/65536 pixels:
    clipped to the image, stepped one pixel along the major axis from the start rounded,
    plus the rounded end point."""
    begin, end, drawn = _clip_segments(begin, end, shape)
    delta = end - begin
    along_x = np.abs(delta[:, 0]) > np.abs(delta[:, 1])
    major, minor = np.where(along_x, 0, 1), np.where(along_x, 1, 0)
    segments = np.arange(len(begin))
    flip = delta[segments, major] < 0  # drawn in the major axis' increasing direction
    start, finish = np.where(flip[:, None], end, begin) + 32768, np.where(flip[:, None], begin, end) + 32768
    major_length = np.abs(delta[segments, major])
    slope = _trunc_div(np.where(flip, -delta[segments, minor], delta[segments, minor]) << 16, major_length | 1)
    points = np.where(drawn, (major_length >> 16) + 1, 0)
    k = _ramp(points)
    on_major = np.repeat(start[segments, major] >> 16, points) + k
    on_minor = (np.repeat(start[segments, minor], points) + k * np.repeat(slope, points)) >> 16
    x_major = np.repeat(along_x, points)
    last = finish[drawn] >> 16
    return (
        np.concatenate([np.repeat(segments, points), segments[drawn]]),
        np.concatenate([np.where(x_major, on_minor, on_major), last[:, 1]]),
        np.concatenate([np.where(x_major, on_major, on_minor), last[:, 0]]),
    )


def _clip_segments(begin: np.ndarray, end: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OpenCV's ``clipLine`` on (N, 2) segments in 1/65536 pixels: the few that leave the
    image are cut at its border (which moves their pixels), those wholly outside dropped;
    returns begin, end and which are drawn."""
    height, width = shape
    right, bottom = (width << 16) - 1, (height << 16) - 1
    begin, end = begin.copy(), end.copy()
    drawn = np.ones(len(begin), dtype=bool)

    def code(x: int, y: int) -> int:
        return (x < 0) + (x > right) * 2 + (y < 0) * 4 + (y > bottom) * 8

    outside = np.nonzero((np.minimum(begin, end) < 0).any(1) | (np.maximum(begin[:, 0], end[:, 0]) > right)
                         | (np.maximum(begin[:, 1], end[:, 1]) > bottom))[0]
    for n in outside.tolist():
        (x1, y1), (x2, y2) = begin[n].tolist(), end[n].tolist()
        c1, c2 = code(x1, y1), code(x2, y2)
        if (c1 & c2) == 0 and (c1 | c2) != 0:
            if c1 & 12:
                a = 0 if c1 < 8 else bottom
                x1 += int(float(a - y1) * (x2 - x1) / (y2 - y1))
                y1, c1 = a, (x1 < 0) + (x1 > right) * 2
            if c2 & 12:
                a = 0 if c2 < 8 else bottom
                x2 += int(float(a - y2) * (x2 - x1) / (y2 - y1))
                y2, c2 = a, (x2 < 0) + (x2 > right) * 2
            if (c1 & c2) == 0 and (c1 | c2) != 0:
                if c1:
                    a = 0 if c1 == 1 else right
                    y1 += int(float(a - x1) * (y2 - y1) / (x2 - x1))
                    x1, c1 = a, 0
                if c2:
                    a = 0 if c2 == 1 else right
                    y2 += int(float(a - x2) * (y2 - y1) / (x2 - x1))
                    x2, c2 = a, 0
        begin[n], end[n] = (x1, y1), (x2, y2)
        drawn[n] = (c1 | c2) == 0
    return begin, end, drawn


def _ramp(lengths: np.ndarray) -> np.ndarray:
    """0, 1, ..., n-1 for each n in ``lengths``, concatenated."""
    return np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def _trunc_div(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Integer division rounding towards zero (C's), for a positive denominator."""
    quotient = np.abs(numerator) // denominator
    return np.where(numerator < 0, -quotient, quotient)


def posed(mesh_xy: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """(468, 3) posed mesh from a face's mesh points and their depth."""
    return np.concatenate([mesh_xy, depth[:, None]], axis=1).astype(np.float64)


@dataclass(frozen=True)
class Similarity:
    """``points ~ scale * canonical @ rotation.T + shift`` (3D)."""

    scale: float
    rotation: np.ndarray  # (3, 3)
    shift: np.ndarray  # (3,)

    def normalise(self, points: np.ndarray) -> np.ndarray:
        """Posed points -> canonical frame (pose and size removed)."""
        return (points - self.shift) @ self.rotation / self.scale

    def apply_offsets(self, offsets: np.ndarray) -> np.ndarray:
        """Canonical-frame displacements -> posed-frame displacements."""
        return self.scale * offsets @ self.rotation.T


def fit_pose(points: np.ndarray, mesh: CanonicalMesh | None = None) -> Similarity:
    """Weighted 3D similarity (Umeyama) of the canonical mesh onto a posed mesh, on the
    33 Procrustes landmarks with MediaPipe's weights (stable points: no lips, no lids)."""
    mesh = mesh or canonical_mesh()
    weights = mesh.procrustes_weights.astype(np.float64)
    weights = weights / weights.sum()
    src = mesh.vertices[mesh.procrustes_ids].astype(np.float64)
    dst = points[mesh.procrustes_ids].astype(np.float64)
    src_mean, dst_mean = weights @ src, weights @ dst
    src_c, dst_c = src - src_mean, dst - dst_mean
    cov = (dst_c * weights[:, None]).T @ src_c
    u, s, vt = np.linalg.svd(cov)
    sign = np.ones(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[-1] = -1
    rotation = u @ np.diag(sign) @ vt
    variance = (weights * (src_c**2).sum(1)).sum()
    scale = float((s * sign).sum() / variance)
    return Similarity(scale, rotation, dst_mean - scale * rotation @ src_mean)


def face_normals(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(K, 3) unnormalised triangle normals (length = twice the area), pointing out of the
    face: a triangle facing the camera has a negative z."""
    a = points[triangles[:, 0]]
    u, v = points[triangles[:, 1]] - a, points[triangles[:, 2]] - a
    # the cross product written out: np.cross's generality costs more than the arithmetic here
    return np.stack([u[:, 1] * v[:, 2] - u[:, 2] * v[:, 1], u[:, 2] * v[:, 0] - u[:, 0] * v[:, 2],
                     u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]], 1)


def vertex_normals(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(468, 3) unit vertex normals: area-weighted sums of the incident triangle normals."""
    normals = face_normals(points, triangles)
    flat = triangles.reshape(-1)
    summed = np.stack(
        [np.bincount(flat, weights=np.repeat(normals[:, axis], 3), minlength=len(points)) for axis in range(3)], 1
    )
    return summed / np.maximum(np.linalg.norm(summed, axis=1, keepdims=True), 1e-9)


def facing(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(K,) cosine between each triangle's normal and the direction to the camera: 1 for a
    triangle seen head-on, <= 0 for one turned away (back-facing)."""
    normals = face_normals(points, triangles)
    return -normals[:, 2] / np.maximum(np.linalg.norm(normals, axis=1), 1e-9)


def texel_facing(points: np.ndarray, atlas: UvAtlas, normals: np.ndarray | None = None) -> np.ndarray:
    """(P,) cos(view angle)^2 of each texel (the mesh's smooth normal there), 0 where its
    triangle faces away: grazing, stretched surface counts for little (eos's view-angle
    weight). No occlusion test. ``normals``: the points' ``vertex_normals`` where the
    caller has them already."""
    triangles = canonical_mesh().triangles
    normals = atlas.interpolate(vertex_normals(points, triangles) if normals is None else normals)
    cosines = -normals[:, 2] / np.maximum(np.linalg.norm(normals, axis=1), 1e-9)
    front = facing(points, triangles)[atlas.triangle] > 0
    return np.where(front, np.maximum(cosines, 0.0) ** 2, 0.0).astype(np.float32)


def texel_visibility(points: np.ndarray, atlas: UvAtlas, scale: float = 1.0, normals: np.ndarray | None = None) -> np.ndarray:
    """(P,) ``texel_facing`` weights, 0 also where something nearer covers the texel (a
    turned face's nose over its far cheek): a texel is seen when the z-buffer shows its own
    triangle or one sharing a corner with it at its position. The z-buffer is painted at
    ``scale`` x the image's pixels (a coarse one tells which surface is in front)."""
    triangles = canonical_mesh().triangles
    weight = texel_facing(points, atlas, normals)
    scaled = points * scale
    origin = np.floor(scaled[:, :2].min(0)) - 2
    extent = np.ceil(scaled[:, :2].max(0) - origin).astype(int) + 3
    scaled[:, :2] -= origin
    ids = rasterise(scaled, triangles, facing(points, triangles) > 0, (int(extent[1]), int(extent[0]))).triangle
    position = atlas.interpolate(scaled[:, :2])
    cols = np.clip(np.round(position[:, 0]).astype(int), 0, extent[0] - 1)
    rows = np.clip(np.round(position[:, 1]).astype(int), 0, extent[1] - 1)
    seen = ids[rows, cols]
    shares = (seen >= 0) & (triangles[np.maximum(seen, 0)][:, :, None] == atlas.corners[:, None, :]).any((1, 2))
    return np.where(shares, weight, 0.0).astype(np.float32)


def push_pull_fill(image: np.ndarray, weight: np.ndarray, levels: int = 8) -> np.ndarray:
    """Fill where ``weight`` is 0 from a weighted image pyramid (push-pull): holes take the
    smooth average of what surrounds them, known pixels stay. ``image`` is (H, W, C), any C."""
    image = image.astype(np.float32)
    weight = weight.astype(np.float32)
    pyramid = [(image * weight[..., None], weight)]
    for _ in range(levels):
        values, weights = pyramid[-1]
        if min(weights.shape) <= 2:
            break
        smaller = cv2.pyrDown(values)  # (one channel comes back without its axis)
        pyramid.append((smaller.reshape(smaller.shape[0], smaller.shape[1], -1), cv2.pyrDown(weights)))
    values, weights = pyramid[-1]
    filled = values / np.maximum(weights, 1e-6)[..., None]
    for values, weights in reversed(pyramid[:-1]):
        size = (weights.shape[1], weights.shape[0])
        coarse = cv2.resize(filled, size, interpolation=cv2.INTER_LINEAR).reshape(values.shape)
        known = np.clip(weights, 0.0, 1.0)[..., None]
        filled = known * values / np.maximum(weights, 1e-6)[..., None] + (1.0 - known) * coarse
    return filled.astype(np.float32)


def uv_polygon_mask(size: int, contour: tuple[int, ...]) -> np.ndarray:
    """(size, size) float32 mask of a landmark contour drawn in UV space."""
    mesh = canonical_mesh()
    mask = np.zeros((size, size), dtype=np.uint8)
    polygon = np.round((mesh.uv[list(contour)] * size - 0.5) * 16).astype(np.int32)
    cv2.fillPoly(mask, [polygon], 255, lineType=cv2.LINE_AA, shift=4)
    return mask.astype(np.float32) / 255.0


def uv_face_regions(size: int) -> tuple[np.ndarray, np.ndarray]:
    """(inner, features), float32 (size, size) masks in UV space: the face one texel inside
    its outline, and the eyes, brows and lips grown by one texel -- what skin statistics
    (the lighting fit, the occlusion estimate's skin model) leave out."""
    features = np.zeros((size, size), np.float32)
    for contour in (RIGHT_EYE_CONTOUR, LEFT_EYE_CONTOUR, RIGHT_BROW, LEFT_BROW, OUTER_LIP_CONTOUR):
        features = np.maximum(features, uv_polygon_mask(size, contour))
    features = cv2.dilate(features, np.ones((3, 3), np.uint8))
    inner = cv2.erode(uv_polygon_mask(size, FACE_OUTLINE), np.ones((3, 3), np.uint8))
    return inner, features
