"""Where a closed mouth's lips meet (``gpu.swappers.mesh3d_mouth_line``): the crop reads the
texture's meeting line along the landmarks' curve, to the sub-pixel, not along the half
resolution raster's staircase."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.models.canonical_mesh import INNER_LIP_CONTOUR, canonical_mesh
from gpu.options import SwapOptions
from gpu.swappers.base import run_jobs
from gpu.swappers.mesh3d import Mesh3dSwapper
from gpu.swappers.mesh3d_lips import inner_lip_lines, lip_layout
from gpu.swappers.mesh3d_mouth_line import (
    LAYOUT_SIZE,
    LINE_REACH,
    TEXELS_PER_PIXEL,
    meeting_line,
    on_the_meeting_line,
)

SIZE = 128


def test_the_meeting_line_runs_corner_to_corner_between_the_lips():
    points = canonical_mesh().uv * 1000.0  # image-like: y down, the upper lip above the lower
    line = meeting_line(points)
    upper, lower = inner_lip_lines()
    assert set(upper) | set(lower) == set(INNER_LIP_CONTOUR)
    assert np.all(np.diff(line[:, 0]) > 0)  # left corner to right corner
    between = line[1:-1, 1]
    assert np.all((between > points[upper[1:-1], 1]) & (between < points[lower[1:-1], 1]))


def _mouth_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A crop's grid over a closed mouth as the half-resolution raster draws it: the UV
    column runs across the mouth, the row jumps from a few texels above the meeting row
    to a few below it along a staircase of two-pixel steps. (grid, the meeting row per
    crop column in grid units, the landmarks' line: a smooth arc the staircase follows)."""
    layout = lip_layout(LAYOUT_SIZE)
    columns = np.linspace(layout.columns[0] + 2, layout.columns[-1] - 2, SIZE)
    meet = np.interp(columns, layout.columns, layout.meet)
    to_grid = lambda texel: 2.0 * (texel + 0.5) / LAYOUT_SIZE - 1.0  # noqa: E731
    xs = np.arange(SIZE, dtype=np.float32)
    arc = 60.0 + 6.0 * ((xs - 64.0) / 64.0) ** 2  # the lips meet here (crop rows)
    stair = 2.0 * np.floor(arc / 2.0) + 1.0  # ... and the raster switches lips here
    rows = np.arange(SIZE, dtype=np.float32)[:, None]
    texel_rows = np.where(rows < stair[None, :], meet[None, :] - 4.0 + (rows - stair) * 1.5, meet[None, :] + 4.0 + (rows - stair) * 1.5)
    grid = np.stack([np.broadcast_to(to_grid(columns)[None, :], (SIZE, SIZE)), to_grid(texel_rows)], -1).astype(np.float32)
    line = np.stack([xs[::8], arc[::8]], -1)
    return grid, to_grid(meet), line


@pytest.mark.parametrize("crop_per_frame_pixel", [0.8, 2.0])
def test_pixels_near_where_the_lips_meet_read_across_the_line_by_their_distance(crop_per_frame_pixel):
    """On a large face (a frame pixel under a crop pixel) the line spans its crop pixels;
    on a small one (a frame pixel over two crop pixels) as many frame pixels, so it is
    read half as fast over twice the reach."""
    grid, meet, line = _mouth_grid()
    moved = on_the_meeting_line(grid, line, crop_per_frame_pixel)
    widening = max(1.0, crop_per_frame_pixel)
    rows = np.arange(SIZE, dtype=np.float32)
    texels = lambda grid_rows: (grid_rows + 1.0) * LAYOUT_SIZE / 2.0  # noqa: E731
    for column in range(12, SIZE - 12, 7):
        y = float(np.interp(column, line[:, 0], line[:, 1]))
        before = texels(grid[:, column, 1]) - texels(meet[column])
        after = texels(moved[:, column, 1]) - texels(meet[column])
        near = np.abs(rows - y) <= LINE_REACH * widening - 0.5
        # the meeting row is crossed where the landmarks say, to the sub-pixel, at TEXELS_PER_PIXEL a pixel
        crossing = float(np.interp(0.0, after[near], rows[near]))
        assert crossing == pytest.approx(y, abs=0.05)
        assert np.allclose(np.diff(after[near]), TEXELS_PER_PIXEL / widening, atol=0.05)
        # the staircase never read the line itself: it jumped over it by 8 texels
        assert np.abs(before).min() >= 4.0 - 1e-3
        far = np.abs(rows - y) > LINE_REACH * widening + 1.5
        assert np.array_equal(moved[far, column], grid[far, column])
    assert np.array_equal(moved[..., 0], grid[..., 0])  # the column is each pixel's own


def test_nothing_moves_past_the_corners_or_when_the_mouth_is_out_of_the_crop():
    grid, _, line = _mouth_grid()
    inner = line[2:-2]  # a mouth narrower than the crop's lips
    moved = on_the_meeting_line(grid, inner)
    outside = (np.arange(SIZE) < inner[0, 0] - 1) | (np.arange(SIZE) > inner[-1, 0] + 1)
    assert np.array_equal(moved[:, outside], grid[:, outside])
    assert not np.array_equal(moved[:, ~outside], grid[:, ~outside])
    assert on_the_meeting_line(grid, line + np.float32(3 * SIZE)) is grid


@pytest.mark.parametrize("turned, least", [(False, 20.0), (True, 12.0)])
def test_a_smiling_source_on_a_closed_mouth_draws_a_dark_line_where_the_lips_meet(engine, astronaut_image, grace_image,
                                                                                  turned, least):
    """The astronaut's open smile, closed onto Grace Hopper's closed mouth, frontal or turned
    30 degrees: along the middle 60 % of the mouth, within a pixel of the target's meeting
    line, the swap is darker than the lower lip 3 pixels below it. (The raster's staircase
    put the line up to 2.5 pixels off it, contrast there down to 10; a turned closed mouth
    was taken for an open one and kept a pale line between the lips, -41.) The upper lip
    is not the measure: it is in the target's shade (``mesh3d_lip_light``), as in her own
    mouth, whose upper lip is darker than the line in places."""
    from swapcast.benchmarks.realism_set import _target

    target = _target(grace_image, "yaw-30", seed=3)[0] if turned else grace_image
    swapper = Mesh3dSwapper()
    source = swapper.register(astronaut_image, engine.analyse_image(astronaut_image)[0])
    face = engine.analyse_image(target)[0]
    frame = target.copy()
    job = swapper.prepare(frame, face, source, SwapOptions())
    swapper.finish(frame, job, run_jobs(swapper.runner, [job])[0])
    line = meeting_line(face.mesh)
    luma = frame.astype(np.float32).mean(2)
    width = float(np.ptp(line[:, 0]))
    contrasts = []
    for x in range(int(line[0, 0] + 0.2 * width), int(line[0, 0] + 0.8 * width)):
        y = int(round(float(np.interp(x, line[:, 0], line[:, 1]))))
        contrasts.append(max(luma[row + 3, x] - luma[row, x] for row in (y - 1, y, y + 1)))
    assert len(contrasts) > 20
    assert min(contrasts) > least
