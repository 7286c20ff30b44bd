"""An open-mouthed source's lips, closed at registration (``gpu.swappers.mesh3d_lips``):
each lip's own part stretched over its band, the teeth and the gap gone, in colour and in
a grey photo."""

import numpy as np
import pytest

from gpu.swappers.mesh3d_lips import _layout, closed_lips

SIZE = 384


def _open_mouth(grey: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Skin (1) with red lips whose inner half of each band is teeth (white) and a dark gap
    along the line where closed lips meet: (albedo, where the teeth are, where the lips' own part is)."""
    layout = _layout(SIZE)
    albedo = np.ones((SIZE, SIZE, 3), np.float32)
    teeth = np.zeros((SIZE, SIZE), bool)
    own = np.zeros((SIZE, SIZE), bool)
    for index, column in enumerate(layout.columns):
        top, meet, bottom = layout.top[index], layout.meet[index], layout.bottom[index]
        rows = np.arange(SIZE)
        lip = ((rows >= top) & (rows < top + 0.5 * (meet - top))) | ((rows <= bottom) & (rows > bottom - 0.5 * (bottom - meet)))
        white = ((rows >= top + 0.5 * (meet - top)) & (rows <= bottom - 0.5 * (bottom - meet)))
        own[lip, column], teeth[white, column] = True, True
        gap = np.abs(rows - meet) < 1.0
        albedo[lip, column] = (1.3, 0.75, 0.75)
        albedo[white, column] = (1.25, 1.25, 1.22)
        albedo[gap & white, column] = (0.2, 0.15, 0.15)
    own &= layout.lips
    teeth &= layout.lips
    if grey:
        albedo = np.repeat(albedo.mean(2, keepdims=True), 3, axis=2)
    return albedo, teeth, own


@pytest.mark.parametrize("grey", [False, True])
def test_the_teeth_and_the_gap_give_way_to_the_lips_stretched(grey):
    albedo, teeth, own = _open_mouth(grey)
    closed = closed_lips(albedo)
    lip_colour = albedo[own].mean(0)
    inner = teeth & (np.abs(np.arange(SIZE)[:, None] - _layout(SIZE).meet.mean()) > 4)  # away from where the lips meet
    assert inner.sum() > 150
    # where the teeth were, the lips' colour (within a tenth), not the teeth's
    assert np.abs(closed[inner] - lip_colour).max(1).mean() < 0.1
    assert np.abs(albedo[inner] - lip_colour).max(1).mean() > 0.3
    # nothing as light as the teeth, nothing as dark as the gap (the shade where the lips meet is milder)
    lips = _layout(SIZE).lips
    assert closed[lips].mean(1).max() < 1.05 * lip_colour.mean() + 0.05
    assert closed[lips].mean(1).min() > 0.5 * lip_colour.mean()
    # outside the lips nothing changes
    outside = ~np.pad(lips, 3)[3:-3, 3:-3] & (np.abs(closed - albedo).max(2) > 0)
    far = np.ones((SIZE, SIZE), bool)
    far[np.nonzero(lips.any(1))[0].min() - 4:np.nonzero(lips.any(1))[0].max() + 5] = False
    assert not (outside & far).any()


def test_closed_lips_stay_lips():
    """A mouth whose band is all lip (nothing to stretch) keeps its colour, darker only where the lips meet."""
    layout = _layout(SIZE)
    albedo = np.ones((SIZE, SIZE, 3), np.float32)
    albedo[layout.lips] = (1.3, 0.75, 0.75)
    closed = closed_lips(albedo)
    meet = np.zeros((SIZE, SIZE), bool)
    for index, column in enumerate(layout.columns):
        meet[int(layout.meet[index]) - 8:int(layout.meet[index]) + 9, column] = True
    away = layout.lips & ~meet
    assert away.sum() > 500
    assert np.abs(closed[away] - albedo[away]).max(1).mean() < 0.03
    assert closed[layout.lips].mean(1).min() > 0.6 * albedo[layout.lips].mean(1).min()
