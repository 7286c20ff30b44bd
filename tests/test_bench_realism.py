"""``swapcast bench quality --realism``: the realism set's halves, its measures (tone, edge
step, shading kept) on pictures whose answer is known, and a quick run end to end with
another checkout's code in the old column."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, canonical_mesh
from streamer.media.images import read_image
from gpu.analysis.landmarks import INNER_LIPS, OUTER_LIPS
from swapcast.benchmarks.pose_set import head_model, person_image
from swapcast.benchmarks.realism import edge_step, face_regions, shading_kept, strands_left, tone_difference
from swapcast.benchmarks.realism_detail import detail_kept, grain, mouth_report, shadow_red, target_detail_left
from swapcast.benchmarks.realism_fullres import face_tile
from swapcast.benchmarks.realism_set import (
    SKIN_TONES,
    SOURCE_VARIANTS,
    TARGET_VARIANTS,
    _SOURCE_MAKERS,
    _to_linear,
    realism_sources,
    realism_targets,
)
from swapcast.cli import main

ROOT = Path(__file__).resolve().parents[1]


# -- the measures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lit_face():
    """A 256x256 picture with a skin-coloured face lit from the left (a lightness ramp) and
    the canonical mesh placed on it."""
    mesh = canonical_mesh().vertices[:, :2] * 9.0 + (128.0, 120.0)
    image = np.zeros((256, 256, 3), np.float32)
    image[:] = (200, 150, 130)
    ramp = np.linspace(0.55, 1.15, 256, dtype=np.float32)[None, :, None]
    return np.clip(image * ramp, 0, 255).astype(np.uint8), mesh.astype(np.float32)


def test_identical_pictures_measure_no_difference(lit_face):
    image, mesh = lit_face
    regions = face_regions(mesh, image.shape)
    assert regions.skin.sum() > 2000 and regions.inner.sum() > 200 and regions.outer.sum() > 200
    assert tone_difference(image, image, regions) == pytest.approx(0.0, abs=1e-6)
    assert edge_step(image, image, regions) == pytest.approx(0.0, abs=1e-6)
    assert shading_kept(image, image, regions) == pytest.approx(1.0, abs=1e-6)


def test_grain_reads_one_for_the_targets_own_skin_and_low_for_a_smoothed_face(lit_face):
    """A waxy face (the same skin low-passed) reads well under 1; the same skin, or the
    skin with a few strong lines drawn over it (not grain), reads about 1."""
    image, mesh = lit_face
    rng = np.random.default_rng(2)
    grainy = np.clip(image.astype(np.float32) + rng.normal(0, 6, image.shape[:2])[..., None], 0, 255).astype(np.uint8)
    assert grain(grainy, grainy, mesh) == pytest.approx(1.0)
    assert grain(cv2.GaussianBlur(grainy, (0, 0), 1.2), grainy, mesh) < 0.5
    lined = grainy.copy()
    for row in (105, 135):  # two rims across the face: a few rows of many
        lined[row] = lined[row] // 3
    assert 0.85 < grain(lined, grainy, mesh) < 1.2


def test_shadow_red_reads_skins_warm_detail_and_nothing_for_grey_wrinkles(lit_face):
    """Wrinkles that darken the skin along skin's own colour line (red falls least, blue
    most) read as real skin does (~0.4); the same wrinkles darkening every channel alike
    (grey lines: a dirty face) read ~0, the output's and the target's measured each."""
    image, mesh = lit_face
    rng = np.random.default_rng(4)
    darkening = np.clip(rng.normal(0.0, 0.15, image.shape[:2]), -0.4, 0.0).astype(np.float32)
    darkening = cv2.GaussianBlur(darkening, (0, 0), 0.8)[..., None]
    skin_line = np.exp(darkening * (1.0 + np.array([-0.45, 0.0, 0.45], np.float32)))
    warm = np.clip(image * skin_line, 0, 255).astype(np.uint8)
    grey = np.clip(image * np.exp(darkening), 0, 255).astype(np.uint8)
    output_red, target_red = shadow_red(grey, warm, mesh)
    assert 0.3 < target_red < 0.6
    assert abs(output_red) < 0.1
    assert shadow_red(warm, warm, mesh) == (pytest.approx(target_red), pytest.approx(target_red))


def test_a_grey_flat_mask_reads_as_one(lit_face):
    """The face replaced by a flat grey of its mean lightness: far off in tone, a step at the
    edge, none of the light's ramp kept."""
    image, mesh = lit_face
    regions = face_regions(mesh, image.shape)
    hull = np.zeros(image.shape[:2], np.uint8)
    cv2.fillConvexPoly(hull, cv2.convexHull(np.round(mesh).astype(np.int32)), 1)
    masked = image.copy()
    masked[hull > 0] = int(image[hull > 0].mean())
    assert tone_difference(masked, image, regions) > 8.0
    assert edge_step(masked, image, regions) > 5.0
    assert abs(shading_kept(masked, image, regions)) < 0.1


def test_a_face_tinted_a_little_reads_as_a_little(lit_face):
    image, mesh = lit_face
    regions = face_regions(mesh, image.shape)
    tinted = np.clip(image * np.array([1.0, 0.97, 0.95]), 0, 255).astype(np.uint8)
    assert 0.5 < tone_difference(tinted, image, regions) < 4.0
    assert shading_kept(tinted, image, regions) == pytest.approx(1.0, abs=0.1)


def test_strands_left_reads_streaks_not_a_change_of_tone(lit_face):
    """Dark curves drawn over the face read as a share of its skin; the same face a little
    darker all over (tone, not streaks) or unchanged reads none."""
    image, mesh = lit_face
    regions = face_regions(mesh, image.shape)
    streaked = image.copy()
    for column in (100, 120, 140, 160):
        cv2.line(streaked, (column, 60), (column + 15, 170), (60, 45, 40), 2)
    share = strands_left(streaked, image, regions)
    drawn = (np.abs(streaked.astype(int) - image.astype(int)).max(2) > 0) & (regions.skin > 0)
    assert 0.5 * drawn.mean() / regions.skin.mean() < share < 2.5 * drawn.mean() / regions.skin.mean()
    assert strands_left(image, image, regions) == 0.0
    darker = np.clip(image * 0.85, 0, 255).astype(np.uint8)
    assert strands_left(darker, image, regions) < 0.01
    # fine detail registered a pixel apart differs both ways: not streaks
    rng = np.random.default_rng(4)
    textured = np.clip(image + rng.normal(0, 12, image.shape[:2])[..., None], 0, 255).astype(np.uint8)
    assert strands_left(np.roll(textured, 1, axis=1), textured, regions) < 0.01


# -- the set -----------------------------------------------------------------------------------------


def test_the_halves_share_no_variant_and_each_has_frontal_targets():
    for kind in (SOURCE_VARIANTS, TARGET_VARIANTS):
        assert not set(kind["tune"]) & set(kind["held"])
    for half in ("tune", "held"):
        assert any(v in ("frontal", "mirrored") for v in TARGET_VARIANTS[half])


def test_sources_are_degraded_as_named_and_the_same_every_time():
    sources = {s.variant: s for s in realism_sources("held", people=("astronaut",))}
    assert set(sources) == set(SOURCE_VARIANTS["held"])
    again = {s.variant: s for s in realism_sources("held", people=("astronaut",))}
    for variant, source in sources.items():
        np.testing.assert_array_equal(source.image, again[variant].image)
        assert source.name == f"astronaut/{variant}" and source.half == "held"
    sepia = sources["sepia"].image.astype(float)
    chroma = sepia / np.maximum(sepia.sum(2, keepdims=True), 1)
    assert chroma.reshape(-1, 3)[sepia.sum(2).reshape(-1) > 150].std(0).max() < 0.02  # one tint everywhere
    photo = sources["mirrored"].image

    face_width = float(np.ptp(head_model(photo[:, ::-1]).points[:, 0]))
    assert sources["small80"].image.shape[1] == pytest.approx(photo.shape[1] * 80 / face_width, abs=2)  # the face 80 px wide
    cool = sources["cool_cast"].image.astype(float)
    assert cool[..., 2].mean() > photo[..., 2].mean() and cool[..., 0].mean() < photo[..., 0].mean()


def test_a_darker_skin_keeps_the_eyes_and_the_faces_shading():
    photo = person_image("astronaut")
    mesh = head_model(photo).points[:, :2]
    face = np.zeros(photo.shape[:2], np.uint8)
    cv2.fillConvexPoly(face, cv2.convexHull(np.round(mesh).astype(np.int32)), 1)
    eyes = np.zeros_like(face)
    for contour in (LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR):
        cv2.fillPoly(eyes, [np.round(mesh[list(contour)]).astype(np.int32)], 1)
    skin = (face > 0) & (cv2.dilate(eyes, np.ones((9, 9), np.uint8)) == 0)
    before = photo.astype(np.float32).mean(2)
    for variant in SKIN_TONES:
        darker = _SOURCE_MAKERS[variant](photo).astype(np.float32)
        after = darker.mean(2)
        assert after[skin].mean() < 0.6 * before[skin].mean()
        assert np.percentile(after[eyes > 0], 90) > 0.9 * np.percentile(before[eyes > 0], 90)  # the whites stay white
        assert np.corrcoef(np.log1p(before[skin]), np.log1p(after[skin]))[0, 1] > 0.9  # its light and detail kept
        assert (darker[..., 0] / np.maximum(darker[..., 2], 1))[skin].mean() > (photo[..., 0] / np.maximum(photo[..., 2], 1))[skin].mean()


def test_targets_carry_their_faces_ground_truth():
    targets = {t.variant: t for t in realism_targets("tune", people=("grace_hopper",))}
    assert set(targets) == set(TARGET_VARIANTS["tune"])
    group = targets["group_a"]
    assert len(group.faces) == 3 and not group.frontal
    widths = sorted(f.width for f in group.faces)
    assert widths[0] == pytest.approx(90, rel=0.1) and widths[-1] == pytest.approx(150, rel=0.1)
    assert targets["frontal"].frontal and targets["side_left"].frontal and not targets["yaw+30"].frontal
    side = targets["side_left"]
    box = side.faces[0].box.astype(int)
    face = side.image[box[1]:box[3], box[0]:box[2]].astype(float).mean(2)
    assert face[:, -face.shape[1] // 4:].mean() < 0.7 * face[:, : face.shape[1] // 4].mean()  # lit from the left


def test_a_cast_shadow_dims_one_side_of_a_hard_edge_and_keeps_the_skins_colour():
    photo = person_image("astronaut")
    for half, variant in (("tune", "brim_shadow"), ("held", "window_shadow")):
        target = next(t for t in realism_targets(half, people=("astronaut",)) if t.variant == variant)
        assert target.frontal
        x0, y0, x1, y1 = target.faces[0].box.astype(int)
        w, h = x1 - x0, y1 - y0
        cheek = (slice(y0 + h * 2 // 3, y0 + h * 3 // 4), slice(x0 + w // 5, x0 + w * 2 // 5))
        forehead = (slice(y0 + h // 6, y0 + h // 4), slice(x0 + w * 2 // 5, x0 + w * 3 // 5))
        shaded = forehead if variant == "brim_shadow" else cheek  # the window's shadow lies on the left
        lit = cheek if variant == "brim_shadow" else (cheek[0], slice(x0 + w * 3 // 5, x0 + w * 4 // 5))
        ratio = target.image[shaded].astype(float).mean() / photo[shaded].astype(float).mean()
        assert ratio < 0.7  # in the shadow
        assert target.image[lit].astype(float).mean() == pytest.approx(photo[lit].astype(float).mean(), rel=0.05)
        linear = lambda image: _to_linear(image[shaded]).reshape(-1, 3).mean(0)  # noqa: E731
        chroma = lambda rgb: rgb / rgb.sum()  # noqa: E731
        np.testing.assert_allclose(chroma(linear(target.image)), chroma(linear(photo)), atol=0.02)  # skin-coloured


# -- a quick run -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_quick_run_puts_the_old_code_beside_the_new(tmp_path, capsys):
    """This checkout as the baseline too: the old column is swapped by a child process
    running that checkout's code, the new one here, both scored alike; the full-resolution
    pictures come with the contact sheets."""
    report = tmp_path / "realism"
    code = main(["bench", "quality", "--realism", "--quick", "--half", "held", "--baseline", str(ROOT),
                 "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    assert "old:mesh3d" in out and "new:mesh3d" in out and "held half (not tuned on)" in out
    data = json.loads((report / "realism.json").read_text())
    assert data["half"] == "held" and data["quick"] and data["baseline"] == str(ROOT)
    faces = data["faces"]
    old = [f for f in faces if f["swapper"] == "old:mesh3d"]
    new = [f for f in faces if f["swapper"] == "new:mesh3d"]
    assert len(old) == len(new) > 4
    for face in faces:
        assert 0 < face["output_to_source"] < 1.5 and face["tone"] >= 0 and face["edge_step"] >= 0
        assert face["source"].startswith("astronaut/") and face["target"].startswith("grace_hopper/")
    # the same code both sides: the same swaps, the same numbers
    by_key = {(f["source"], f["target"]): f for f in old}
    for face in new:
        twin = by_key[(face["source"], face["target"])]
        assert face["tone"] == pytest.approx(twin["tone"], abs=0.05)
    sheets = sorted(report.glob("sheet_*.png"))
    assert sheets
    assert read_image(sheets[0]).shape[1] == 4 * 200  # source | target | old | new
    pictures = sorted((report / "fullres").glob("*.png"))
    assert len(pictures) == len(sheets and {(f["source"], f["target"].split("#")[0]) for f in new})
    for face in faces:
        assert face["detail"] > 0 and face["lip_red"] is not None and face["shadow_red"] is not None
    # grain per target person: a wrinkled face's and a smooth one's do not average out unseen
    grains = [f["grain"] for f in new if f["grain"] is not None]
    assert data["summary"]["new:mesh3d"]["grain_by_target"] == {"grace_hopper": pytest.approx(float(np.mean(grains)))}
    assert "new:mesh3d grain by target person: grace_hopper" in out


def test_a_baseline_that_is_no_checkout_is_bad_input(tmp_path, capsys):
    assert main(["bench", "quality", "--realism", "--quick", "--baseline", str(tmp_path)]) == 2
    assert "not a swapcast checkout" in capsys.readouterr().err


# -- what the small tiles hide: detail, the target showing through, the mouth --------------------------


@pytest.fixture(scope="module")
def textured_face():
    """A 320x320 face-sized patch of fine texture (a seeded noise, like pores), its mesh and
    the same face without the texture (a plastic mask of it)."""
    mesh = (canonical_mesh().vertices[:, :2] * 11.0 + (160.0, 150.0)).astype(np.float32)
    rng = np.random.default_rng(1)
    base = np.full((320, 320, 3), (190, 140, 120), np.float32)
    texture = cv2.GaussianBlur(rng.normal(0, 14, (320, 320)).astype(np.float32), (0, 0), 0.8)[..., None]
    textured = np.clip(base + texture, 0, 255).astype(np.uint8)
    return textured, np.clip(base, 0, 255).astype(np.uint8), mesh


def test_a_face_keeps_its_own_detail_and_a_plastic_one_loses_it(textured_face):
    textured, plain, mesh = textured_face
    assert detail_kept(textured, mesh, textured, mesh) == pytest.approx(1.0, abs=1e-6)
    assert detail_kept(plain, mesh, textured, mesh) < 0.1
    blurred = cv2.GaussianBlur(textured, (0, 0), 1.5)
    assert 0.1 < detail_kept(blurred, mesh, textured, mesh) < 0.6
    # at half the size: the detail is compared at the smaller face's width, not asked of pixels it has not got
    small = cv2.resize(textured, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
    assert detail_kept(textured, mesh, small, mesh * 0.5) > 0.8


def test_the_targets_own_detail_left_reads_one_when_unswapped_and_zero_when_replaced(textured_face):
    textured, plain, mesh = textured_face
    assert target_detail_left(textured, textured, mesh) == pytest.approx(1.0, abs=1e-6)
    other = np.roll(textured, 37, axis=1)  # another skin's pores
    assert abs(target_detail_left(other, textured, mesh)) < 0.15
    ghost = cv2.addWeighted(textured, 0.5, other, 0.5, 0)  # a swap faded over the target
    assert 0.35 < target_detail_left(ghost, textured, mesh) < 0.65


def _mouth_face(opening: float) -> tuple[np.ndarray, np.ndarray]:
    """A skin-coloured face with red lips drawn from the canonical mesh's lip contours, the
    inner lips moved apart by ``opening`` pixels and the gap between them dark."""
    mesh = (canonical_mesh().vertices[:, :2] * 11.0 + (160.0, 150.0)).astype(np.float32)
    upper = np.array([13, 82, 81, 80, 191, 312, 311, 310, 415])  # inner lips, one above the other
    lower = np.array([14, 87, 178, 88, 95, 317, 402, 318, 324])
    middle = (mesh[upper, 1] + mesh[lower, 1]) / 2
    mesh[upper, 1], mesh[lower, 1] = middle - opening / 2, middle + opening / 2
    image = np.full((320, 320, 3), (200, 150, 130), np.uint8)
    cv2.fillPoly(image, [np.round(mesh[list(OUTER_LIPS)]).astype(np.int32)], (175, 90, 90))
    cv2.fillPoly(image, [np.round(mesh[list(INNER_LIPS)]).astype(np.int32)], (40, 20, 20))
    return image, mesh


def test_teeth_on_closed_lips_and_a_grey_band_are_told_apart_from_lips():
    closed, mesh = _mouth_face(0.0)
    report = mouth_report(closed, closed, mesh)
    assert report.teeth_on_closed_lips == 0.0 and report.lip_red > 10 and report.mouth_kept is None
    band = closed.copy()
    cv2.fillPoly(band, [np.round(mesh[list(OUTER_LIPS)]).astype(np.int32)], (170, 160, 158))  # a pale grey band
    centre = mesh[list(OUTER_LIPS)].mean(0)
    for dx in (-12, -4, 4, 12):  # white dots: teeth
        cv2.circle(band, (int(centre[0] + dx), int(centre[1])), 2, (250, 250, 248), -1)
    report = mouth_report(band, closed, mesh)
    assert report.lip_red < 2 and report.target_lip_red > 10 and report.teeth_on_closed_lips > 0.02


def test_an_open_target_mouth_is_kept_or_covered():
    open_mouth, mesh = _mouth_face(14.0)
    report = mouth_report(open_mouth, open_mouth, mesh)
    assert report.teeth_on_closed_lips is None and report.mouth_kept == pytest.approx(0.0, abs=1e-6)
    covered = open_mouth.copy()
    cv2.fillPoly(covered, [np.round(mesh[list(INNER_LIPS)]).astype(np.int32)], (175, 90, 90))
    assert mouth_report(covered, open_mouth, mesh).mouth_kept > 20


def test_full_resolution_tiles_keep_the_pixels_and_enlarge_only_small_faces():
    image = np.random.default_rng(2).integers(0, 255, (400, 400, 3), dtype=np.uint8)
    box = np.array([100, 100, 300, 320], np.float32)
    tile = face_tile(image, box, "big")
    side = int(round(1.5 * 220))
    assert tile.shape[:2] == (side + 18, side)
    x0, y0 = int(round(200 - side / 2)), int(round(210 - side / 2))
    np.testing.assert_array_equal(tile[: side - 10, : side - 10], image[y0:y0 + side - 10, x0:x0 + side - 10])
    small = face_tile(image, np.array([10, 10, 50, 60], np.float32), "small")
    assert small.shape[1] == 4 * int(round(1.5 * 50))  # 40 px wide: x4 (nearest), past the edge black
    assert face_tile(None, box, "none")[: side].max() == 0
