"""mesh3d looks real, not like a mask: only the face comes from the source (hair, background
and shadow over it are not its skin), the target's tone and light come from the target,
and several photos of one person merge into one source."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from gpu.engine import SourceFace
from gpu.options import SwapOptions
from gpu.source_merge import merge_source_faces
from gpu.swappers import mesh3d
from gpu.swappers.base import run_jobs
from gpu.swappers.mesh3d import Mesh3dSource, Mesh3dSwapper, merge_sources
from gpu.swappers.mesh3d_skin import _regions, skin_confidence
from gpu.types import Face
from swapcast.benchmarks.realism import face_regions, shading_kept, tone_difference
from swapcast.benchmarks.realism_set import CAST_SHADOWS, _SOURCE_MAKERS, _cast_shadow, _target


@pytest.fixture(scope="module")
def swapper():
    return Mesh3dSwapper()


# -- what is skin ------------------------------------------------------------------------------------


def _synthetic_albedo(size: int = 192, grey: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Skin (1, a little red) with fine darker wrinkles of the skin's colour running across,
    a pair of folds running down (one each side), strands of brown hair over one side, a
    broad dark patch (a shadow the light model missed) and dark features."""
    rng = np.random.default_rng(0)
    skin = np.array([1.05, 0.98, 0.95], np.float32)
    albedo = skin * (1.0 + rng.normal(0, 0.03, (size, size, 1))).astype(np.float32)
    marks = {name: np.zeros((size, size), np.uint8) for name in ("wrinkles", "strands", "patch", "folds")}
    for row in range(int(0.62 * size), int(0.72 * size), 6):  # forehead-like horizontal lines, cheek height
        cv2.line(marks["wrinkles"], (int(0.35 * size), row), (int(0.65 * size), row + 2), 1, 1)
    for col in range(int(0.3 * size), int(0.45 * size), 9):
        cv2.line(marks["strands"], (col, int(0.3 * size)), (col + 8, int(0.6 * size)), 1, 2)
    cv2.circle(marks["patch"], (int(0.66 * size), int(0.45 * size)), int(0.05 * size), 1, -1)
    for col in (int(0.3 * size), size - 1 - int(0.3 * size)):  # a pair of folds running down, mirror images
        cv2.line(marks["folds"], (col, int(0.74 * size)), (col, int(0.86 * size)), 1, 1)
    albedo[marks["wrinkles"] > 0] *= 0.75
    albedo[marks["folds"] > 0] *= 0.6
    albedo[marks["strands"] > 0] = (0.55, 0.42, 0.25)
    albedo[marks["patch"] > 0] *= 0.25
    protected, _ = _regions(size)
    eyes = protected > 0.5
    albedo[eyes] = albedo[eyes] * 0.3  # eyes, brows, lips, nostrils: dark by nature
    if grey:
        albedo = np.repeat(albedo.mean(2, keepdims=True), 3, axis=2)
    return albedo.astype(np.float32), {**{k: v > 0 for k, v in marks.items()}, "features": eyes}


@pytest.mark.parametrize("grey", [False, True])
def test_hair_and_shadow_over_the_face_are_not_its_skin_but_wrinkles_and_features_are(grey):
    albedo, marks = _synthetic_albedo(grey=grey)
    seen = np.ones(albedo.shape[:2], np.float32)
    confidence = skin_confidence(albedo, seen)
    plain = ~(marks["wrinkles"] | marks["strands"] | marks["patch"] | marks["features"] | marks["folds"])
    plain = cv2.erode(plain.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    assert confidence[plain].mean() > 0.97
    assert confidence[marks["patch"]].mean() < 0.2
    others = cv2.dilate((marks["strands"] | marks["patch"] | marks["features"]).astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
    assert confidence[marks["wrinkles"] & ~others].mean() > 0.9  # skin's colour, finely darker: kept
    assert confidence[marks["folds"] & ~others].mean() > 0.9  # running down, but on both sides: the face's own
    beside_strands = cv2.dilate(marks["strands"].astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
    features = marks["features"] & (_regions(albedo.shape[0])[0] > 0.99) & ~beside_strands
    assert confidence[features].mean() > 0.97  # dark by nature: kept (a strand over a brow is not)
    # brown strands: by their colour, or (a grey photo) by how dark they are; not over the
    # eyes and brows (those are never judged)
    strands = marks["strands"] & (_regions(albedo.shape[0])[0] < 0.05)
    assert strands.sum() > 50
    assert confidence[strands].mean() < (0.5 if grey else 0.2)


def test_slanted_and_curved_strands_are_not_skin_but_mirrored_slanted_folds_are():
    """Hair hangs at a slant and curves, and a fringe puts strands on both sides of the
    forehead (never at mirrored places); a face's slanted folds (nasolabial, under the
    eyes) come in mirrored pairs. Grey, so colour cannot tell them apart."""
    size = 192
    albedo = _grey_skin(size, seed=3)
    strands = np.zeros((size, size), np.uint8)
    t = np.linspace(0.0, 1.0, 40)[:, None]
    for start, slant, bend in (((0.34, 0.08), 0.35, 0.04), ((0.42, 0.1), -0.4, -0.05), ((0.6, 0.09), 0.2, 0.06),
                               ((0.7, 0.3), 0.6, 0.0), ((0.64, 0.34), 0.45, 0.05)):
        path = np.array(start) + t * np.array([slant * 0.3, 0.3]) + np.sin(np.pi * t) * np.array([bend, 0.0])
        cv2.polylines(strands, [np.round(path * size).astype(np.int32)], False, 1, 2)
    folds = np.zeros((size, size), np.uint8)
    for side in (-1, 1):  # mirror images of each other, slanted like nasolabial folds
        top, bottom = (0.5 + side * 0.12, 0.62), (0.5 + side * 0.2, 0.82)
        cv2.line(folds, tuple(int(v * size) for v in top), tuple(int(v * size) for v in bottom), 1, 1)
    albedo[folds > 0] *= 0.6
    albedo[strands > 0] *= 0.45
    confidence = skin_confidence(albedo, np.ones((size, size), np.float32))
    judged_strands = (strands > 0) & _judged(size)
    assert judged_strands.sum() > 100
    assert confidence[judged_strands].mean() < 0.2
    away = cv2.dilate(strands, np.ones((9, 9), np.uint8)) == 0
    assert confidence[(folds > 0) & away].mean() > 0.9


def test_a_smiles_fold_on_one_side_only_is_skin_but_a_strand_into_it_is_not():
    """A smile is seldom symmetric: one nasolabial fold, dark and red in its shadow with no
    mirror image, is the face's own (it was taken for a strand and filled as a pale bar
    with hard edges: a scar beside the mouth), while a strand of the same colour hanging
    from the cheek into the same zone is hair."""
    size = 192
    albedo = _grey_skin(size, seed=7) * np.array([1.05, 0.98, 0.95], np.float32)
    fold, strand = np.zeros((size, size), np.uint8), np.zeros((size, size), np.uint8)
    cv2.line(fold, (int(0.39 * size), int(0.6 * size)), (int(0.33 * size), int(0.75 * size)), 1, 2)
    cv2.line(strand, (int(0.74 * size), int(0.3 * size)), (int(0.66 * size), int(0.78 * size)), 1, 2)
    shadow = np.array([0.72, 0.5, 0.45], np.float32)  # darker, and redder as skin's shadow is
    albedo[fold > 0] *= shadow
    albedo[strand > 0] *= shadow
    confidence = skin_confidence(albedo, np.ones((size, size), np.float32))
    assert confidence[(fold > 0) & _judged(size)].mean() > 0.9
    judged_strand = (strand > 0) & _judged(size)
    assert judged_strand.sum() > 60
    assert confidence[judged_strand].mean() < 0.2


def test_strands_that_mirror_each_other_on_the_forehead_are_not_skin_but_frown_lines_are():
    """A parted fringe can put two strands at mirrored places; only near the middle are two
    mirrored lines running down the forehead the face's own (frown lines, about as deep as
    each other). The mirrored strands stayed on the code before (confidence 0.90), and the
    fill copied each into the other's hole."""
    size = 192
    albedo = _grey_skin(size, seed=5)
    strands, frowns = np.zeros((size, size), np.uint8), np.zeros((size, size), np.uint8)
    middle = (size - 1) / 2
    for side in (-1, 1):
        top, bottom = (middle + side * 0.12 * size, 0.06 * size), (middle + side * 0.15 * size, 0.3 * size)
        cv2.line(strands, tuple(int(round(v)) for v in top), tuple(int(round(v)) for v in bottom), 1, 2)
        cv2.line(frowns, (int(round(middle + side * 0.025 * size)), int(0.18 * size)),
                 (int(round(middle + side * 0.03 * size)), int(0.28 * size)), 1, 1)
    albedo[strands > 0] *= 0.45
    albedo[frowns > 0] *= 0.7
    confidence = skin_confidence(albedo, np.ones((size, size), np.float32))
    judged = (strands > 0) & _judged(size)
    assert judged.sum() > 40
    assert confidence[judged].mean() < 0.2
    assert confidence[(frowns > 0) & (_regions(size)[0] < 0.05)].mean() > 0.9


def _grey_skin(size: int, seed: int) -> np.ndarray:
    """(size, size, 3) plain grey skin (1) with a little fine noise."""
    rng = np.random.default_rng(seed)
    return np.full((size, size, 3), 1.0, np.float32) * (1.0 + rng.normal(0, 0.03, (size, size, 1))).astype(np.float32)


def _judged(size: int) -> np.ndarray:
    """(size, size) bool: what the skin tests judge, inside the face and away from its features."""
    return (_regions(size)[0] < 0.05) & _inside_face(size)


def _inside_face(size: int) -> np.ndarray:
    from gpu.swappers.mesh3d_geometry import uv_face_regions

    inner, _ = uv_face_regions(size)
    return inner > 0.5


def test_texels_the_photo_did_not_see_are_not_judged():
    albedo, marks = _synthetic_albedo()
    seen = np.zeros(albedo.shape[:2], np.float32)
    np.testing.assert_array_equal(skin_confidence(albedo, seen), 1.0)


@pytest.fixture(scope="module")
def unwrapped(engine, swapper):
    """The albedo each source variant of the astronaut gives before the skin confidence
    (captured where register hands it over) and after."""
    captured = {}
    original = mesh3d.skin_confidence

    def capture(albedo, seen):
        captured["albedo"], captured["seen"] = albedo, seen
        return original(albedo, seen)

    from swapcast.benchmarks.pose_set import person_image

    photo = person_image("astronaut")
    results = {}
    mesh3d.skin_confidence = capture
    try:
        for variant in ("photo", "hair_b"):
            image = _SOURCE_MAKERS[variant](photo)
            source = swapper.register(image, engine.analyse_image(image)[0])
            results[variant] = (captured["albedo"], captured["seen"], source)
    finally:
        mesh3d.skin_confidence = original
    return results


def test_strands_of_hair_drawn_over_a_photo_leave_its_albedo(unwrapped):
    raw_photo, seen, photo = unwrapped["photo"]
    raw_hair, _, hair = unwrapped["hair_b"]
    protected, _ = _regions(raw_photo.shape[0])
    log = lambda a: np.log(np.maximum(a, 1e-3))  # noqa: E731
    strands = (np.abs(log(raw_hair) - log(raw_photo)).mean(2) > 0.3) & (seen > 0.3) & (protected < 0.05)
    assert strands.sum() > 500
    assert hair.weight[strands].mean() < 0.35 * photo.weight[strands].mean()
    before = np.abs(log(raw_hair) - log(raw_photo)).mean(2)[strands].mean()
    after = np.abs(log(hair.albedo.transpose(1, 2, 0)) - log(photo.albedo.transpose(1, 2, 0))).mean(2)[strands].mean()
    assert after < 0.5 * before


def test_a_real_fringe_is_not_skin_to_its_grazing_top(unwrapped):
    """The astronaut's own fringe over her forehead (above the brows, darker than her skin):
    its paler top and grazing edge were left half trusted, and the fill spread them as
    grey blotches over a target's larger forehead."""
    from gpu.swappers.mesh3d_skin import _below_brows

    raw, seen, _ = unwrapped["photo"]
    confidence = skin_confidence(raw, seen)
    lightness = np.log(np.maximum(raw, 1e-3)).mean(2)
    fringe = (_below_brows(raw.shape[0]) < 0.5) & (seen > 0.05) & (lightness < -0.3)
    assert fringe.sum() > 2000
    assert (confidence[fringe] > 0.5).mean() < 0.15


def _under_fringe(raw: np.ndarray, seen: np.ndarray, reach: tuple[int, int] = (0, 12)) -> tuple[np.ndarray, np.ndarray]:
    """(band, clean): above the brows, the seen texels between ``reach`` texels from the
    fringe (lightness under -0.3) that are not fringe themselves, and the forehead further off."""
    from gpu.swappers.mesh3d_skin import _below_brows

    forehead = (_below_brows(raw.shape[0]) < 0.5) & (seen > 0.3) & (_regions(raw.shape[0])[0] < 0.05)
    fringe = (np.log(np.maximum(raw, 1e-3)).mean(2) < -0.3) & forehead
    distance = cv2.distanceTransform((~fringe).astype(np.uint8), cv2.DIST_L2, 5)
    band = forehead & ~fringe & (distance > reach[0]) & (distance <= reach[1])
    clean = forehead & (distance > 20)
    return band, clean


def test_the_band_under_a_fringe_is_not_trusted_skin(unwrapped):
    """Under the astronaut's fringe lies a band of skin darker than her forehead (the hair's
    shadow, its thin tips), too close to the skin's colour to be judged on its own. Trusted
    (weight 0.28 on average), every swap drew its edge as a wavy grey line across the
    target's forehead; the fill takes it now, as it takes the fringe."""
    raw, seen, source = unwrapped["photo"]
    band, clean = _under_fringe(raw, seen)
    assert band.sum() > 300 and clean.sum() > 300
    lightness = np.log(np.maximum(raw, 1e-3)).mean(2)
    assert np.median(lightness[clean]) - np.median(lightness[band]) > 0.3  # the shadow is there
    assert source.weight[band].mean() < 0.2
    assert source.weight[clean].mean() > 0.8  # the forehead beyond it is still the source's


def test_the_hairs_shadow_further_under_a_fringe_is_not_trusted_either(unwrapped):
    """The shadow under the astronaut's fringe fades over ~20 texels into her forehead's
    sheen. Its far part was judged against a push-pull fill of the clean skin that sagged
    towards the face's mean there, so it read as no darker than expected and stayed (weight
    0.56 at 6-18 texels from the fringe), its ragged upper edge drawn as a line across every
    target's forehead. Judged against the nearest clean skin's level, it goes too."""
    raw, seen, source = unwrapped["photo"]
    band, clean = _under_fringe(raw, seen, (6, 18))
    assert band.sum() > 300 and clean.sum() > 300
    assert source.weight[band].mean() < 0.3  # 0.16 when written
    assert source.weight[clean].mean() > 0.8


# -- the target's tone and light ---------------------------------------------------------------------


def _swap(engine, swapper, source, image, options=SwapOptions()):
    face = engine.analyse_image(image)[0]
    frame = image.copy()
    job = swapper.prepare(frame, face, source, options)
    swapper.finish(frame, job, run_jobs(swapper.runner, [job])[0])
    return frame, face


@pytest.mark.parametrize("light", ["warm", "side_left"])
def test_a_grey_source_takes_the_targets_skin_tone_and_shading(engine, swapper, light):
    """A black-and-white photo of the astronaut onto Grace Hopper under warm or side light:
    the swapped skin has the target's colour and light (low-passed CIE76 under 4, most of
    its shading kept); without the colour match it keeps the photo's grey."""
    from swapcast.benchmarks.pose_set import person_image

    grey = _SOURCE_MAKERS["grey"](person_image("astronaut"))
    source = swapper.register(grey, engine.analyse_image(grey)[0])
    target, faces = _target(person_image("grace_hopper"), light, seed=3)
    regions = face_regions(faces[0].mesh, target.shape)
    matched, _ = _swap(engine, swapper, source, target)
    plain, _ = _swap(engine, swapper, source, target, SwapOptions(colour_match=False))
    assert tone_difference(matched, target, regions) < 4.0
    assert tone_difference(plain, target, regions) > 2.0 * tone_difference(matched, target, regions)
    assert shading_kept(matched, target, regions) > 0.6
    lab = lambda image: cv2.cvtColor(image, cv2.COLOR_RGB2LAB).astype(float)[regions.skin > 0]  # noqa: E731
    chroma = lambda image: np.hypot(lab(image)[:, 1] - 128, lab(image)[:, 2] - 128).mean()  # noqa: E731
    assert chroma(matched) > 0.7 * chroma(target)  # coloured like the target's skin, not grey


def test_a_smooth_face_on_a_grainy_photo_gets_the_photos_grain_but_not_its_wrinkles(engine, swapper, grace_image,
                                                                                   monkeypatch):
    """The astronaut onto Grace Hopper's full-size photo: the crop holds her face at less
    than the photo's resolution, so without the paste's grain the swapped skin is far
    smoother than the skin round it (a mask). With it, it has the photo's grain (the
    camera's: less than her skin's own texture), and her wrinkles show through no more
    than without it."""
    from swapcast.benchmarks.pose_set import person_image
    from swapcast.benchmarks.realism_detail import grain, target_detail_left

    photo = person_image("astronaut")
    source = swapper.register(photo, engine.analyse_image(photo)[0])
    grainy, face = _swap(engine, swapper, source, grace_image)
    smooth_swapper = Mesh3dSwapper(runner=swapper.runner)
    monkeypatch.setattr(smooth_swapper, "_grain", None)  # the paste as it was without the grain
    smooth, _ = _swap(engine, smooth_swapper, source, grace_image)
    assert grain(smooth, grace_image, face.mesh) < 0.4
    assert grain(grainy, grace_image, face.mesh) > max(0.45, 2.0 * grain(smooth, grace_image, face.mesh))
    assert target_detail_left(grainy, grace_image, face.mesh) < target_detail_left(smooth, grace_image, face.mesh) + 0.02


# -- the target's hard shadows ----------------------------------------------------------------------


def _shadowed_skin(size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(RGB in [0, 1], skin weight) of skin with fine texture and thin dark lines (wrinkles,
    a glasses frame), its left part in a hard cast shadow (a third of the light in linear
    light: its colour kept)."""
    rng = np.random.default_rng(1)
    linear = np.array([0.55, 0.33, 0.22], np.float32) * (1.0 + rng.normal(0, 0.04, (size, size, 1))).astype(np.float32)
    linear[::9, :] *= 0.6  # lines of wrinkles and a frame: too thin to be a light level
    linear[:, : size // 2] *= 0.3
    srgb = np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055)
    return srgb.astype(np.float32), np.ones((size, size), np.float32)


def test_the_tones_low_pass_keeps_a_cast_shadows_edge_but_not_thin_lines():
    target, skin = _shadowed_skin()
    lightness = target.mean(2) + 1e-3
    sigma = 4.0  # a tenth of a ~160 px face at a quarter of the crop
    layers = mesh3d._light_layers(target, lightness, skin, sigma)
    assert layers is not None and np.allclose(layers.sum(0), 1.0, atol=1e-5)
    layered, _ = mesh3d._layered_low_pass(lightness[..., None], skin, sigma, layers)
    plain, _ = mesh3d._masked_low_pass(lightness[..., None], skin, sigma)
    assert layered.shape == plain.shape == (64, 64, 1)
    error = lambda low, column: abs(low[:, column, 0].mean() / lightness[:, column].mean() - 1.0)  # noqa: E731
    for column in (28, 29, 30, 33, 34, 35):  # 2-4 px either side of the edge (at 32)
        assert error(layered, column) < 0.1
    assert error(plain, 30) > 0.2  # a Gaussian lights the shadow's edge up
    far_line = layered[9:55:9, 48, 0].mean() / layered[13:50:9, 48, 0].mean()
    assert far_line > 0.9  # the thin lines are no level of their own: the low pass does not follow them


def test_dark_things_not_coloured_like_skin_are_no_light_level():
    """Sunglasses or a microphone (dark, grey) over evenly lit skin: one light level, so the
    tone's low pass leaves them out as before instead of darkening the face round them."""
    target, skin = _shadowed_skin()
    target = target.copy()
    lit = target[:, 32:]
    target[:, :32] = lit[:, :32]  # evenly lit skin
    cv2.ellipse(target, (20, 24), (10, 7), 0, 0, 360, (0.1, 0.11, 0.13), -1)
    cv2.ellipse(target, (44, 24), (10, 7), 0, 0, 360, (0.1, 0.11, 0.13), -1)
    lightness = target.mean(2) + 1e-3
    layers = mesh3d._light_layers(target, lightness, skin, 4.0)
    assert layers is None or float(layers[:, 24, 20].max()) == pytest.approx(float(layers[:, 50, 50].max()), abs=0.2)
    coloured = mesh3d._skin_coloured(target, skin)
    assert coloured[24, 20] < 0.1 and coloured[50, 50] > 0.9


def test_a_hat_brims_shadow_on_the_target_stays_on_the_swapped_face(engine, swapper, grace_image):
    """The astronaut onto Grace Hopper with her upper face in a brim's shadow: the swapped
    face is as dark above the shadow's edge against below it as her own face was (blurred
    over, the upper face was lit under a dark brim: a mask)."""
    from swapcast.benchmarks.pose_set import person_image

    photo = person_image("astronaut")
    source = swapper.register(photo, engine.analyse_image(photo)[0])
    mesh = engine.analyse_image(grace_image)[0].mesh
    target = _cast_shadow(grace_image, mesh, *CAST_SHADOWS["brim_shadow"])  # the edge at 0.38 of the face's height
    swapped, face = _swap(engine, swapper, source, target)
    regions = face_regions(face.mesh, target.shape)
    top, height = float(face.mesh[:, 1].min()), float(np.ptp(face.mesh[:, 1]))
    rows = np.arange(target.shape[0])[:, None]
    edge = top + 0.38 * height
    above = (regions.skin > 0) & (rows > edge - 0.16 * height) & (rows < edge - 0.04 * height)
    below = (regions.skin > 0) & (rows > edge + 0.04 * height) & (rows < edge + 0.16 * height)
    luma = lambda image, where: float(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)[where].mean())  # noqa: E731
    assert above.sum() > 200 and below.sum() > 200
    step_target = luma(target, above) / luma(target, below)
    step_swapped = luma(swapped, above) / luma(swapped, below)
    assert step_target < 0.6
    assert step_swapped < step_target + 0.12


# -- several photos of one person --------------------------------------------------------------------


@pytest.fixture(scope="module")
def profiles(engine):
    from swapcast.benchmarks.pose_set import person_image, render_pose

    photo = person_image("astronaut")
    views = {"left": render_pose(photo, -50), "right": render_pose(photo, 50), "frontal": photo}
    return {name: engine.register_source(image, index=0) for name, image in views.items()}


def test_a_left_and_a_right_profile_fill_each_others_far_side(profiles):
    left, right = profiles["left"].payload, profiles["right"].payload
    merged = merge_sources([left, right])
    well_seen = lambda weight: (weight > 0.3).mean()  # noqa: E731
    assert well_seen(merged.weight) > max(well_seen(left.weight), well_seen(right.weight)) + 0.1
    # where one profile alone sees the face, the merged albedo is that profile's own (its
    # grazing texels mix a little of the mirrored side in, as a single photo's do)
    only_left = (left.weight > 0.5) & (right.weight < 0.01)
    only_right = (right.weight > 0.5) & (left.weight < 0.01)
    assert only_left.sum() > 500 and only_right.sum() > 500
    for alone, own, other in ((only_left, left, right), (only_right, right, left)):
        mine = np.abs(merged.albedo[:, alone] - own.albedo[:, alone]).mean()
        assert mine < 0.02 and mine < 0.2 * np.abs(merged.albedo[:, alone] - other.albedo[:, alone]).mean()
    # closer to the frontal photo's albedo than either profile alone, where that is the
    # photo's own skin (elsewhere it is a fill too: hair, the band under it, past the outline)
    frontal = profiles["frontal"].payload
    trusted = frontal.weight > 0.5
    error = lambda source: np.abs(source.albedo[:, trusted] - frontal.albedo[:, trusted]).mean()  # noqa: E731
    assert error(merged) < min(error(left), error(right))


def test_merged_photos_are_sharpened_by_their_resolution_averaged_by_what_each_saw():
    def source(photo_texels: float, seen: float) -> Mesh3dSource:
        return Mesh3dSource(np.ones((3, 8, 8), np.float32), np.zeros((9, 3), np.float32), np.zeros((468, 3), np.float32),
                            weight=np.full((8, 8), seen, np.float32), photo_texels=photo_texels)

    assert merge_sources([source(2.0, 0.75), source(4.0, 0.25)]).photo_texels == pytest.approx(2.5)
    # a photo stored before its resolution was kept does not count
    assert merge_sources([source(0.0, 0.9), source(4.0, 0.1)]).photo_texels == pytest.approx(4.0)
    assert merge_sources([source(0.0, 0.5), source(0.0, 0.5)]).photo_texels == 0.0


def test_merging_takes_the_shape_and_identity_from_all(profiles):
    faces = [profiles["left"], profiles["right"]]
    merged = merge_source_faces("mesh3d", faces)
    shapes = np.stack([f.payload.shape for f in faces])
    assert np.all(merged.payload.shape >= shapes.min(0) - 1e-4) and np.all(merged.payload.shape <= shapes.max(0) + 1e-4)
    from gpu.analysis.identity import identity_distance

    truth = profiles["frontal"].identity
    assert identity_distance(merged.identity, truth) < min(identity_distance(f.identity, truth) for f in faces)
    assert merge_source_faces("mesh3d", [profiles["frontal"]]) is profiles["frontal"]  # one photo: as it was


def test_a_merged_source_swaps(engine, swapper, profiles, grace_image):
    merged = merge_source_faces("mesh3d", [profiles["left"], profiles["right"], profiles["frontal"]])
    output, face = _swap(engine, swapper, merged.payload, grace_image)
    x0, y0, x1, y1 = face.box.astype(int)
    assert np.abs(output[y0:y1, x0:x1].astype(int) - grace_image[y0:y1, x0:x1]).mean() > 5.0


def test_other_swappers_merge_what_they_can():
    rng = np.random.default_rng(2)

    def source(yaw_offset: float, payload) -> SourceFace:
        kps = np.array([[40, 50], [80, 50], [60 + yaw_offset, 70], [45, 90], [75, 90]], np.float32)
        return SourceFace(Face(box=np.array([20, 20, 100, 110], np.float32), kps=kps), rng.normal(0, 0.1, 128).astype(np.float32),
                          payload)

    latents = [rng.normal(0, 1, (1, 512)).astype(np.float32) for _ in range(2)]
    latents = [latent / np.linalg.norm(latent) for latent in latents]
    merged = merge_source_faces("inswapper", [source(0, latents[0]), source(15, latents[1])])
    assert merged.payload.shape == (1, 512)
    assert np.linalg.norm(merged.payload) == pytest.approx(1.0, abs=1e-5)
    turned, frontal = source(15, "turned texture"), source(1, "frontal texture")
    assert merge_source_faces("mesh", [turned, frontal]).payload == "frontal texture"  # 2D textures do not average
    with pytest.raises(ValueError):
        merge_source_faces("mesh3d", [])
    with pytest.raises(ValueError):
        merge_sources([Mesh3dSource(np.zeros((3, 8, 8)), np.zeros((9, 3)), np.zeros((468, 3))),
                       Mesh3dSource(np.zeros((3, 16, 16)), np.zeros((9, 3)), np.zeros((468, 3)))])
