"""An open-mouthed source's lips, closed at registration (``gpu.swappers.mesh3d_lips``):
each lip's own part stretched over its band, the teeth and the gap gone, in colour and in
a grey photo."""

import numpy as np
import pytest

from gpu.swappers.mesh3d_lips import lip_layout, closed_lips

SIZE = 384


def _open_mouth(grey: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Skin (1) with red lips whose inner half of each band is teeth (white) and a dark gap
    along the line where closed lips meet: (albedo, where the teeth are, where the lips' own part is)."""
    layout = lip_layout(SIZE)
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
    inner = teeth & (np.abs(np.arange(SIZE)[:, None] - lip_layout(SIZE).meet.mean()) > 4)  # away from where the lips meet
    assert inner.sum() > 150
    # where the teeth were, the lips' colour (within a tenth), not the teeth's
    assert np.abs(closed[inner] - lip_colour).max(1).mean() < 0.1
    assert np.abs(albedo[inner] - lip_colour).max(1).mean() > 0.3
    # nothing as light as the teeth, nothing as dark as the gap (the shade where the lips meet is milder)
    lips = lip_layout(SIZE).lips
    assert closed[lips].mean(1).max() < 1.05 * lip_colour.mean() + 0.05
    assert closed[lips].mean(1).min() > 0.5 * lip_colour.mean()
    # outside the lips nothing changes
    outside = ~np.pad(lips, 3)[3:-3, 3:-3] & (np.abs(closed - albedo).max(2) > 0)
    far = np.ones((SIZE, SIZE), bool)
    far[np.nonzero(lips.any(1))[0].min() - 4:np.nonzero(lips.any(1))[0].max() + 5] = False
    assert not (outside & far).any()


def test_closed_lips_stay_lips():
    """A mouth whose band is all lip (nothing to stretch) keeps its colour, darker only where the lips meet."""
    layout = lip_layout(SIZE)
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


def _lip_depth(layout, upper: bool) -> np.ndarray:
    """(SIZE, SIZE): 0 at a lip's outer line, 1 where the lips meet; NaN off its band."""
    rows = np.arange(SIZE, dtype=np.float32)[:, None]
    outer = layout.top if upper else layout.bottom
    depth = np.full((SIZE, SIZE), np.nan, np.float32)
    depth[:, layout.columns] = (rows - outer[None, :]) / (layout.meet - outer)[None, :]
    depth[(depth < 0) | (depth > 1) | ~layout.lips] = np.nan
    return depth


def test_a_smiles_thin_pale_lower_lip_closes_as_red_as_the_upper_one():
    """A smile stretches the lower lip thin and pale over the lower teeth: closed, it takes
    the lips' colour (its lightness stays the photo's), or the mouth reads as an upper lip alone."""
    layout = lip_layout(SIZE)
    albedo = np.ones((SIZE, SIZE, 3), np.float32)
    upper, lower = _lip_depth(layout, True), _lip_depth(layout, False)
    albedo[upper <= 0.6] = (1.3, 0.75, 0.75)
    albedo[upper > 0.6] = (1.25, 1.25, 1.22)  # upper teeth
    albedo[lower > 0.25] = (1.25, 1.25, 1.22)  # lower teeth
    albedo[lower <= 0.25] = (1.05, 0.92, 0.92)  # the lower lip, thin and pale
    closed = closed_lips(albedo)

    def redness(where: np.ndarray) -> float:
        return float(np.median(closed[where][:, 0] / closed[where][:, 1:].mean(1)))

    upper_body, lower_body = (upper > 0.4) & (upper < 0.8), (lower > 0.4) & (lower < 0.8)
    assert redness(lower_body) > 0.9 * redness(upper_body) > 1.4
    assert redness((lower > 0.0) & (lower < 0.1)) < redness(lower_body)  # faded in from its outer line


def test_lips_stretched_column_by_column_show_no_stripes():
    """Each column's lip ends where its teeth begin, a little further or nearer than its
    neighbour's, so neighbouring columns are stretched by different amounts: along the
    mouth the closed lip is as smooth as the photo's lip, not striped."""
    layout = lip_layout(SIZE)
    rng = np.random.default_rng(3)
    upper = _lip_depth(layout, True)
    albedo = np.ones((SIZE, SIZE, 3), np.float32)
    ends = np.full(SIZE, 0.5, np.float32)
    ends[layout.columns] = rng.uniform(0.3, 0.7, len(layout.columns))  # where each column's teeth begin
    lip = upper <= ends[None, :]
    shade = 1.0 - 0.6 * np.nan_to_num(upper / ends[None, :])  # the lip darker inwards: its own profile
    albedo[lip] = np.array([1.3, 0.75, 0.75], np.float32) * shade[lip][:, None]
    albedo[(upper > ends[None, :]) & layout.lips] = (1.25, 1.25, 1.22)
    closed = closed_lips(albedo)
    body = (upper > 0.3) & (upper < 0.7)
    body &= np.roll(body, 1, axis=1)
    steps = np.abs(closed - np.roll(closed, 1, axis=1)).mean(2)[body]
    assert body.sum() > 300
    assert float(np.median(steps)) < 0.02
