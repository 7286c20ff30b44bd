"""Things in front of a face stay in front: the KeepMask hook every swapper honours, the
built-in occlusion estimate (stills and tracked faces) and the occlusion set's numbers."""

import io
import json
from dataclasses import replace

import cv2
import numpy as np
import pytest

from gpu.analysis.occlusion import OcclusionEstimator
from gpu.kernels.ops import crop_faces
from gpu.options import SwapOptions
from gpu.swappers.base import any_of, keep_mask, run_jobs
from gpu.swappers.mesh import MeshSwapper
from gpu.swappers.mesh3d import Mesh3dSwapper
from gpu.types import Face
from streamer.pipeline.frame_swapper import FrameSwapper
from swapcast.benchmarks import occlusion as bench
from swapcast.benchmarks.pose_set import pose_clips


@pytest.fixture(scope="module")
def faces(engine, astronaut_image, grace_image):
    """(target image, its face, a registered Grace Hopper source for each built-in swapper)."""
    target = engine.analyse_image(astronaut_image)[0]
    source_face = engine.analyse_image(grace_image)[0]
    swappers = {"mesh3d": Mesh3dSwapper(), "mesh": MeshSwapper()}
    sources = {name: swapper.register(grace_image, source_face) for name, swapper in swappers.items()}
    return astronaut_image, target, swappers, sources


def _square_keep(crop, face, matrix):
    """Keeps the crop's centre square (the nose and cheeks), hard-edged."""
    size = crop.shape[0]
    mask = np.zeros(crop.shape[:2], np.float32)
    mask[size * 3 // 8: size * 5 // 8, size * 3 // 8: size * 5 // 8] = 1.0
    return mask


@pytest.mark.parametrize("name", ["mesh3d", "mesh"])
def test_every_swapper_leaves_the_kept_pixels_as_they_were(faces, name):
    image, face, swappers, sources = faces
    swapper = swappers[name]
    outputs = {}
    for label, keep in (("kept", _square_keep), ("plain", None)):
        frame = image.copy()
        job = swapper.prepare(frame, face, sources[name], SwapOptions(), keep)
        swapper.finish(frame, job, run_jobs(swapper.runner, [job])[0])
        outputs[label] = frame
    # the kept square, back in frame pixels (a margin in from its edge for the paste's interpolation)
    size = swapper.crop_size
    square = np.zeros((size, size), np.uint8)
    square[size * 3 // 8 + 2: size * 5 // 8 - 2, size * 3 // 8 + 2: size * 5 // 8 - 2] = 255
    inverse = cv2.invertAffineTransform(swapper.alignment(face))
    region = cv2.warpAffine(square, inverse, image.shape[1::-1], flags=cv2.INTER_NEAREST) > 0
    assert region.sum() > 500
    kept_change = np.abs(outputs["kept"].astype(int) - image.astype(int))[region].max()
    plain_change = np.abs(outputs["plain"].astype(int) - image.astype(int))[region].mean()
    assert kept_change <= 1, f"{name}: kept pixels changed by up to {kept_change}"
    assert plain_change > 10, f"{name}: without the keep mask the square is swapped (mean change {plain_change:.1f})"
    # away from the square the swap is the same (mesh3d's pyramid moves its low frequencies a little)
    outside = ~cv2.dilate(region.astype(np.uint8), np.ones((41, 41), np.uint8)).astype(bool)
    assert np.abs(outputs["kept"].astype(int) - outputs["plain"].astype(int))[outside].mean() < 0.5


def test_keep_masks_combine_and_are_checked():
    crop = np.zeros((8, 8, 3), np.uint8)
    half = lambda c, f, m: np.full(c.shape[:2], 0.5, np.float32)  # noqa: E731
    corner = lambda c, f, m: np.pad(np.ones((2, 2), np.float32), ((0, 6), (0, 6)))  # noqa: E731
    nothing = lambda c, f, m: None  # noqa: E731
    assert any_of(None, None) is None
    assert any_of(None, half) is half
    combined = keep_mask(any_of(half, corner, nothing), crop, None, None)
    assert combined[0, 0] == 1.0 and combined[7, 7] == 0.5
    assert keep_mask(any_of(nothing, nothing), crop, None, None) is None
    with pytest.raises(ValueError, match="expected the crop's"):
        keep_mask(lambda c, f, m: np.zeros((4, 4), np.float32), crop, None, None)
    assert keep_mask(lambda c, f, m: np.full((8, 8), 3.0), crop, None, None).max() == 1.0


def _crop(image, face):
    swapper = Mesh3dSwapper()
    matrix = swapper.alignment(face)
    return crop_faces([image], matrix[None], swapper.crop_size)[0], matrix


def _tracked_keeps(engine, frames, estimator):
    """(crop, matrix, keep mask) per frame: its face as one track through ``estimator``."""
    for frame in frames:
        face = replace(engine.analyse_image(frame)[0], track_id=0)
        crop, matrix = _crop(frame, face)
        yield crop, matrix, estimator(crop, face, matrix)


def test_a_bare_still_face_keeps_almost_nothing(faces):
    """Only the lock of hair over the astronaut's temple (hair in front of the face's mesh)."""
    image, face, _, _ = faces
    crop, matrix = _crop(image, face)
    keep = OcclusionEstimator()(crop, replace(face, track_id=-1), matrix)
    assert keep is None or float(keep.mean()) < 0.04
    if keep is not None:
        rows = np.nonzero(keep > 0.5)[0]
        assert np.median(rows) < 0.4 * keep.shape[0], "kept pixels lie above the eyes (hair), not on the face"


def test_a_still_keeps_a_blue_object_on_a_cheek(faces):
    image, face, _, _ = faces
    occluded = image.copy()
    centre = face.mesh[205].astype(int)  # the right cheek (image left)
    occluded[centre[1] - 14: centre[1] + 14, centre[0] - 14: centre[0] + 14] = (30, 90, 220)
    crop, matrix = _crop(occluded, face)
    keep = OcclusionEstimator()(crop, replace(face, track_id=-1), matrix)
    assert keep is not None
    patch = np.zeros(image.shape[:2], np.float32)
    patch[centre[1] - 14: centre[1] + 14, centre[0] - 14: centre[0] + 14] = 1.0
    in_crop = cv2.warpAffine(patch, matrix, keep.shape[::-1]) > 0.99
    assert float(keep[in_crop].mean()) > 0.9
    assert float(keep[~in_crop].mean()) < 0.05


def test_occlusion_off_hands_the_swapper_no_keep_mask(engine):
    source = engine.register_source(bench.person_image("grace_hopper"))
    swapper = FrameSwapper(engine, source, SwapOptions(occlusion="off"))
    try:
        assert swapper._keep_mask() is None
        swapper.update(occlusion="auto")
        assert swapper._keep_mask() is not None and swapper._occlusion.keep_worn
        swapper.update(occlusion="objects")  # the same estimate, the glasses a face wears left out
        assert swapper._keep_mask() is not None and not swapper._occlusion.keep_worn
    finally:
        swapper.close()


@pytest.mark.slow
def test_a_gift_box_held_over_a_panning_face_stays_in_front(engine):
    """The occlusion set's pan with the gift box over a cheek: with occlusion on, most of
    the box survives the swap (off: almost none) and the face around it is still the source."""
    clip = bench.occlusion_set(people=("astronaut",), motions=("pan",), objects=("gift",), frames=24)[0]
    source = engine.register_source(bench.person_image("grace_hopper"))
    kept = {}
    for mode in ("auto", "off"):
        outputs, _ = bench.swap_clip(engine, source, clip, SwapOptions(occlusion=mode))
        kept[mode] = bench.kept_fraction(clip, outputs)
        if mode == "auto":
            scores = bench.identity_scores(engine, clip, outputs, source.identity)
            assert bench.edge_flicker(clip, outputs) < 2.5
    assert kept["off"] < 0.3
    assert kept["auto"] > 0.85, kept
    # most frames: since mesh3d's source clean-up the swap alone scores d(out, src) ~0.55 on this target
    assert bench._passes(scores) > len(scores) / 2, scores


@pytest.mark.slow
@pytest.mark.parametrize("person", ["grace_hopper", "astronaut"])
def test_a_coffee_cup_held_over_a_panning_face_stays_in_front(engine, person):
    """scikit-image's coffee cup comes up over the mouth of a fast-panning sample face:
    with occlusion on most of the cup's pixels survive the swap (measured 91-99.7 %; off:
    12-22 %), its edge flickers no more than the input's own motion explains (auto
    0.99-1.19; off's swap follows the held mesh smoothly, 0.56-0.62, so off is no bound),
    and the face outside the cup (and outside the glasses Grace Hopper wears, which are
    kept too) is still the source's: the identity rule holds there on every scored frame,
    as with occlusion off. (A count of pixels the swap changed is no measure here: with
    her glasses kept the lighting fit leaves them out as not skin, which moves the swap's
    colour a few levels.)"""
    clip = bench.occlusion_set(people=(person,), motions=("pan",), objects=("cup",), frames=24)[0]
    other = next(name for name in bench.PEOPLE if name != person)
    source = engine.register_source(bench.person_image(other))
    outputs = {mode: bench.swap_clip(engine, source, clip, SwapOptions(occlusion=mode))[0] for mode in ("auto", "off")}
    kept = {mode: bench.kept_fraction(clip, frames) for mode, frames in outputs.items()}
    edge = {mode: bench.edge_flicker(clip, frames) for mode, frames in outputs.items()}
    assert kept["auto"] > 0.85 and kept["off"] < 0.45, kept
    assert edge["auto"] < 1.3, edge
    outside = bench.identity_scores(engine, clip, bench.outside_object(clip, outputs["auto"], outputs["off"]), source.identity)
    assert bench._passes(outside) == len(outside), outside


def test_an_object_held_still_stays_kept(engine, astronaut_image):
    """A tracked face learnt bare, then the occlusion set's microphone held over its mouth
    for 3 s while the picture jitters 2.5 px each way (a tracker's noise): the model never
    learns what is kept or just round it, so the kept part of the grille does not shrink
    texel by texel (it fell from 77 % to 13 % of the grille when the model learnt the
    object's edge)."""
    face = replace(engine.analyse_image(astronaut_image)[0], track_id=0)
    microphone = bench.occluders()["microphone"]
    size = astronaut_image.shape[1::-1]
    placement = bench._placement(microphone, face.mesh, 0.0)
    alpha = cv2.warpAffine(microphone.alpha, placement, size)
    rgb = cv2.warpAffine(microphone.rgb, placement, size).astype(np.float32)
    held = (astronaut_image * (1.0 - alpha[..., None]) + rgb * alpha[..., None] + 0.5).astype(np.uint8)
    swapper = Mesh3dSwapper()
    matrix = swapper.alignment(face)
    estimator, rng, kept = OcclusionEstimator(), np.random.default_rng(0), []
    for index in range(12 + 90):
        jitter = np.float32([[1, 0, rng.uniform(-2.5, 2.5)], [0, 1, rng.uniform(-2.5, 2.5)]])
        frame = cv2.warpAffine(astronaut_image if index < 12 else held, jitter, size, borderMode=cv2.BORDER_REPLICATE)
        keep = estimator(crop_faces([frame], matrix[None], swapper.crop_size)[0], face, matrix)
        grille = cv2.warpAffine(cv2.warpAffine(alpha, jitter, size), matrix, (swapper.crop_size,) * 2) > 0.5
        if index >= 12:
            kept.append(0.0 if keep is None else float((keep[grille] > 0.5).mean()))
    early, late = np.mean(kept[:15]), np.mean(kept[-15:])
    assert early > 0.6, early
    assert late > early - 0.1, [round(k, 2) for k in kept[::6]]


def test_a_shadow_over_a_cheek_is_learnt_not_kept_for_good(engine, astronaut_image):
    """A shadow darkening a cheek by half comes over a tracked face and stays (a lamp
    turned off): it may be kept at first, but it scales the skin's colour without changing
    its chromaticity, so the model learns it and the swap covers the cheek again within a
    few seconds (kept for good, 17-20 % of the crop, when nothing kept was ever learnt)."""
    face = replace(engine.analyse_image(astronaut_image)[0], track_id=0)
    width = float(np.ptp(face.mesh[:, 0]))
    shade = np.zeros(astronaut_image.shape[:2], np.float32)
    centre = face.mesh[205].astype(int)
    cv2.ellipse(shade, (int(centre[0]), int(centre[1])), (int(width * 0.3), int(width * 0.45)), 0, 0, 360, 1.0, -1)
    shade = cv2.GaussianBlur(shade, (0, 0), width * 0.08)
    shadowed = (astronaut_image * (1.0 - 0.5 * shade[..., None])).astype(np.uint8)
    swapper = Mesh3dSwapper()
    matrix = swapper.alignment(face)
    size = astronaut_image.shape[1::-1]
    estimator, rng, kept = OcclusionEstimator(), np.random.default_rng(0), []
    for index in range(12 + 150):
        jitter = np.float32([[1, 0, rng.uniform(-1.5, 1.5)], [0, 1, rng.uniform(-1.5, 1.5)]])
        frame = cv2.warpAffine(astronaut_image if index < 12 else shadowed, jitter, size, borderMode=cv2.BORDER_REPLICATE)
        keep = estimator(crop_faces([frame], matrix[None], swapper.crop_size)[0], face, matrix)
        kept.append(0.0 if keep is None else float((keep > 0.5).mean()))
    assert max(kept[-15:]) < 0.01, [round(k, 3) for k in kept[12::10]]


def test_bench_occlusion_refuses_too_few_frames(capsys):
    from swapcast.cli import main

    assert main(["bench", "occlusion", "--frames", "4"]) == 2
    assert "--frames must be at least 8" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_occlusion_prints_on_and_off_side_by_side(tmp_path, capsys):
    from swapcast.cli import main

    code = main(["bench", "occlusion", "--quick", "--frames", "12", "--report", str(tmp_path), "--json"])  # 12: the object settles by frame 7 and has frames left to be kept
    out = capsys.readouterr().out
    assert code in (0, 1)  # 1: the kept fraction missed the target on this short run
    assert "astronaut/pan+cup" in out and "astronaut/pan+gift" in out and "occluder pixels kept" in out
    summary = json.loads(out[out.index("{"):])
    assert summary["auto"]["kept"] > summary["off"]["kept"]
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["astronaut_pan_cup.png", "astronaut_pan_gift.png"]


@pytest.mark.slow
@pytest.mark.parametrize("person, motion", [("grace_hopper", "yaw_sweep"), ("grace_hopper", "pan"), ("astronaut", "pan")])
def test_a_bare_moving_face_keeps_almost_nothing(engine, person, motion):
    """A tracked face moving for 24 frames with nothing in front of it: its wrinkles,
    glasses and shading misfit their model here and there (Grace Hopper's, turning, in
    specks of up to 2 % of the crop), but no such speck is kept -- a half-swapped face.
    (Her glasses themselves are kept unless the estimate leaves worn glasses out: the
    next test.)"""
    clip = next(c for c in pose_clips((person,), frames=24) if c.motion == motion)
    kept = [0.0 if keep is None else float((keep > 0.5).mean())
            for _, _, keep in _tracked_keeps(engine, clip.frames, OcclusionEstimator(keep_worn=False))]
    assert max(kept) < 0.01, [round(k, 4) for k in kept]


@pytest.mark.slow
@pytest.mark.parametrize("motion", ["pan", "yaw_sweep"])
def test_the_glasses_a_tracked_face_wears_are_kept_and_little_else(engine, motion):
    """Grace Hopper's own glasses stay in front of her swapped face (found by shape in her
    track's model, kept where the crop shows their dark lines): from a fifth of a second
    in, the kept pixels cover her dark top bars (drawn by hand on the photo:
    ``bench.WORN``), and little is kept away from her glasses (her skin, brows and
    wrinkles are swapped)."""
    clip = next(c for c in pose_clips(("grace_hopper",), frames=24) if c.motion == motion)
    worn = bench.worn_masks("grace_hopper", clip.meshes, clip.frames[0].shape)
    covered, elsewhere = [], []
    for index, (crop, matrix, keep) in enumerate(_tracked_keeps(engine, clip.frames, OcclusionEstimator())):
        if index < 10:
            continue
        size = crop.shape[0]
        glasses = cv2.warpAffine(worn[index], np.asarray(matrix, np.float64), (size, size)) > 0.5
        near = cv2.dilate(glasses.astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
        dark = glasses & (cv2.cvtColor(crop, cv2.COLOR_RGB2GRAY) < 90)  # the top bars (the rims are pale amber)
        kept = keep is not None and keep > 0.5
        covered.append(float(np.mean(kept[dark])) if keep is not None else 0.0)
        elsewhere.append(float(np.mean(kept & ~near)) if keep is not None else 0.0)
    assert min(covered) > 0.55, [round(c, 2) for c in covered]
    # of the crop (the bare-face bound is 1 %; the hand-drawn glasses, moved by an affine
    # fit, miss some of a turned head's far temple)
    assert max(elsewhere) < 0.015, [round(e, 4) for e in elsewhere]


@pytest.mark.slow
def test_a_thin_glasses_frame_over_a_panning_face_stays_in_front(engine):
    """Glasses frames (two thin rims and a bridge, a few pixels wide) come in over a panning
    face whose tracked mesh lags the move by several pixels: most of the frame survives
    the swap, and its edge flickers no more than the input does there."""
    clip = bench.occlusion_set(people=("astronaut",), motions=("pan",), objects=("glasses",), frames=24)[0]
    source = engine.register_source(bench.person_image("grace_hopper"))
    outputs, _ = bench.swap_clip(engine, source, clip, SwapOptions(occlusion="auto"))
    assert bench.kept_fraction(clip, outputs) > 0.7
    assert bench.edge_flicker(clip, outputs) < 1.5


def test_a_solid_kept_region_is_filled_out_to_its_hull_a_ring_is_not():
    """A cup seen as a C (its cream wall over pale lips went unseen) is filled out to its
    hull; a glasses rim's ring is not (its hull is the eye), nor a speck."""
    from gpu.analysis.occlusion import RASTER, _filled_out

    disc = np.zeros((RASTER, RASTER), np.float32)
    cv2.circle(disc, (64, 80), 24, 1.0, -1)
    cup = disc.copy()
    cv2.ellipse(cup, (50, 62), (20, 12), 0, 0, 360, 0.0, -1)  # the bite the colour missed
    filled = _filled_out(cup)
    bite = (disc > 0.5) & (cup < 0.5)
    assert filled[bite].mean() > 0.5 and filled[cup > 0.5].min() == 1.0, filled[bite].mean()  # (the arc past the chord stays out)
    assert not filled[cv2.dilate(disc, np.ones((3, 3), np.uint8)) < 0.5].any()  # nothing past the object's outline
    ring = np.zeros((RASTER, RASTER), np.float32)
    cv2.ellipse(ring, (64, 64), (24, 14), 0, 0, 360, 1.0, 3)
    assert not _filled_out(ring).any()
    speck = np.zeros((RASTER, RASTER), np.float32)
    speck[10:14, 10:14] = 1.0
    assert not _filled_out(speck).any()


def test_a_mesh_lagging_behind_a_bare_face_keeps_nothing(faces):
    """A tracked face learnt in place, then the picture moves 6 px while the mesh stays (a
    tracker lagging a fast pan): the face's own edges and the background now under its
    outline must not become occluders -- the estimate finds the face under the mesh."""
    image, face, _, _ = faces
    estimator = OcclusionEstimator()
    tracked = replace(face, track_id=0)
    crop, matrix = _crop(image, face)
    for _ in range(12):
        estimator(crop, tracked, matrix)
    moved = cv2.warpAffine(image, np.float32([[1, 0, 6], [0, 1, 2]]), image.shape[1::-1], borderMode=cv2.BORDER_REPLICATE)
    crop, matrix = _crop(moved, face)
    kept = [estimator(crop, tracked, matrix) for _ in range(4)]
    assert all(keep is None or float((keep > 0.5).mean()) < 0.01 for keep in kept)


@pytest.mark.parametrize("value, expected", [("off", "off"), ("false", "off"), ("on", "auto"), ("auto", "auto")])
def test_occlusion_from_the_environment_reads_yaml_booleans(value, expected):
    """YAML reads a bare ``off`` as False: the option takes it as what it says."""
    from swapcast.config import load_config

    assert load_config(environ={"SWAPCAST_SWAP__OCCLUSION": value}).swap.occlusion == expected


def test_occlusion_is_off_by_default_and_rejects_other_values():
    from swapcast.config import ConfigError, load_config

    assert load_config(environ={}).swap.occlusion == "off" == SwapOptions().occlusion
    with pytest.raises(ConfigError, match="occlusion"):
        load_config(environ={"SWAPCAST_SWAP__OCCLUSION": "maybe"})


@pytest.mark.slow
def test_bench_occlusion_scores_bare_faces_apart(engine):
    """A bare clip counts for identity on bare faces, not for the object's kept pixels."""
    clips = bench.occlusion_set(people=("astronaut",), motions=("pan",), objects=("gift",), frames=8) \
        + bench.bare_clips(people=("astronaut",), frames=8)[:1]
    out = io.StringIO()
    outcome = bench.run_occlusion_benchmark(engine, clips, out=out)
    summary, rows = outcome["summary"], outcome["clips"]
    assert [r.kept is None for r in rows] == [False, False, True, True]
    for mode in ("auto", "off"):
        object_rows = [r for r in rows if r.occlusion == mode and r.kept is not None]
        bare = [r for r in rows if r.occlusion == mode and r.kept is None][0]
        assert summary[mode]["kept"] == object_rows[0].kept
        assert summary[mode]["bare_identity_pass"] == bare.identity_passed / bare.identity_scored
        assert bare.outside_passed == bare.identity_passed  # nothing in front: outside the object is the whole face
    # off swaps the object's pixels too: outside it, its output is its output
    assert [r.outside_passed for r in rows if r.occlusion == "off"] == [r.identity_passed for r in rows if r.occlusion == "off"]
    assert "astronaut/pan+bare" in out.getvalue() and "identity rule on bare faces" in out.getvalue()


def test_identity_outside_the_object_takes_only_the_object_from_the_off_output():
    """The outside-the-object identity input: the object's pixels (grown by the margin)
    come from the occlusion-off frame, every other pixel from the output as it was."""
    rng = np.random.default_rng(0)
    mesh = rng.uniform(100, 300, (468, 2)).astype(np.float32)
    alpha = np.zeros((400, 400), np.float32)
    alpha[180:220, 150:250] = 1.0
    empty = np.zeros_like(alpha)
    clip = bench.OccludedClip("synthetic", "astronaut", [np.zeros((400, 400, 3), np.uint8)] * 2, [mesh, mesh],
                              [empty, alpha], [np.zeros((2, 3), np.float32)] * 2, alpha, 1, 30.0)
    outputs = [np.full((400, 400, 3), 200, np.uint8)] * 2
    off = [np.full((400, 400, 3), 50, np.uint8)] * 2
    before, during = bench.outside_object(clip, outputs, off)
    assert (before == 200).all()  # no object yet: the output as it was
    reach = round(bench.OUTSIDE_MARGIN * float(np.ptp(mesh[list(bench.FACE_OVAL), 0])))
    assert reach >= 1
    assert (during[180 - reach:220 + reach, 150:250] == 50).all()
    assert (during[:180 - reach - 1] == 200).all() and (during[220 + reach + 1:] == 200).all()


def test_identity_outside_what_is_in_front_leaves_out_the_glasses_a_face_wears_too():
    """For a face that wears glasses (``bench.WORN``) their pixels come from the
    occlusion-off output as a held object's do, on a bare clip as on an occluded one."""
    mesh = np.random.default_rng(1).uniform(100, 300, (468, 2)).astype(np.float32)
    glasses = np.zeros((400, 400), np.float32)
    glasses[100:120, 120:280] = 1.0
    empty = np.zeros_like(glasses)
    clip = bench.OccludedClip("synthetic+bare", "grace_hopper", [np.zeros((400, 400, 3), np.uint8)], [mesh], [empty],
                              [np.zeros((2, 3), np.float32)], np.zeros((1, 1), np.float32), 0, 30.0, worn=[glasses])
    blended = bench.outside_object(clip, [np.full((400, 400, 3), 200, np.uint8)], [np.full((400, 400, 3), 50, np.uint8)])[0]
    assert (blended[100:120, 120:280] == 50).all() and (blended[300:] == 200).all()


def test_the_hand_drawn_glasses_follow_grace_hoppers_frames_through_a_clip():
    """``bench.WORN`` moved into each frame of a zoom lies on her frames: the drawn top bars'
    pixels are much darker than her forehead just above them; the astronaut wears nothing."""
    clip = next(c for c in pose_clips(("grace_hopper",), frames=8) if c.motion == "zoom")
    masks = bench.worn_masks("grace_hopper", clip.meshes, clip.frames[0].shape)
    assert bench.worn_masks("astronaut", clip.meshes, clip.frames[0].shape) is None
    for frame, mask in zip(clip.frames, masks, strict=True):
        luma = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY).astype(np.float32)
        drawn = mask > 0.5
        rows = np.nonzero(drawn.any(axis=1))[0]
        top = drawn & (np.arange(frame.shape[0])[:, None] < rows.min() + 0.2 * np.ptp(rows))  # the bars
        above = np.roll(top, -int(0.25 * np.ptp(rows)), axis=0) & ~drawn  # her forehead
        assert luma[top].mean() < 0.7 * luma[above].mean(), (luma[top].mean(), luma[above].mean())  # measured 0.6


def test_a_face_found_again_keeps_its_model() -> None:
    """A face the tracker lost and found again (a new track id, the same place) takes over
    the ended track's appearance model: a new one would learn what is in front as the face."""
    from gpu.analysis.occlusion import ORPHAN_FRAMES, _Track

    estimator = OcclusionEstimator()
    box = np.array([100, 100, 260, 300], np.float32)
    first = estimator._track(Face(box=box, kps=np.zeros((5, 2), np.float32), track_id=1), 10)
    estimator.forget(set())  # track 1 ended
    assert estimator._track(Face(box=box + 8, kps=np.zeros((5, 2), np.float32), track_id=2), 10) is first  # found again nearby
    estimator.forget({2})
    elsewhere = estimator._track(Face(box=box + 400, kps=np.zeros((5, 2), np.float32), track_id=3), 10)
    assert elsewhere is not first and isinstance(elsewhere, _Track)
    estimator.forget(set())
    for _ in range(ORPHAN_FRAMES + 1):
        estimator.forget(set())
    assert estimator._track(Face(box=box, kps=np.zeros((5, 2), np.float32), track_id=4), 10) is not first  # too long ago: a new model


def _features(image: np.ndarray) -> np.ndarray:
    from gpu.analysis.occlusion import _FEATURES

    return (image.reshape(-1, 3) @ _FEATURES.T).reshape(image.shape).astype(np.float32)


def test_a_pale_rim_between_a_kept_cup_and_its_outer_edge_is_kept_open_skin_is_not():
    """A cup's cream rim is as pale as the cheek behind it: colour cannot grow into it, but
    the kept coffee and the cup's dark outer edge close it in. Kept coffee lying on open
    skin gains nothing: the flood from it runs into skin with no edge round it."""
    from gpu.analysis.occlusion import RASTER, _enclosed

    rng = np.random.default_rng(3)
    skin = np.array([0.78, 0.62, 0.52], np.float32)
    image = np.broadcast_to(skin, (RASTER, RASTER, 3)) + rng.normal(0.0, 0.005, (RASTER, RASTER, 3)).astype(np.float32)
    image = np.ascontiguousarray(image, np.float32)
    centre = (64, 70)
    cv2.circle(image, centre, 21, (0.25, 0.1, 0.08), 2)  # the cup's dark outer edge
    cv2.circle(image, centre, 20, (0.82, 0.7, 0.58), -1)  # its cream rim and wall
    cv2.circle(image, centre, 13, (0.7, 0.35, 0.1), -1)  # the coffee
    seeds = np.zeros((RASTER, RASTER), np.uint8)
    cv2.circle(seeds, centre, 15, 1, -1)  # the kept region: the coffee and a little past it
    face = np.ones((RASTER, RASTER), bool)
    pool = (cv2.dilate(seeds, np.ones((25, 25), np.uint8)) > 0) & (seeds == 0)
    rim = np.zeros((RASTER, RASTER), np.uint8)
    cv2.circle(rim, centre, 19, 1, -1)
    rim &= seeds == 0
    enclosed = _enclosed(seeds, _features(image), pool, face)
    assert enclosed[rim > 0].mean() > 0.9, enclosed[rim > 0].mean()
    assert not enclosed[cv2.dilate(rim, np.ones((7, 7), np.uint8)) == 0].any()  # nothing past the outer edge

    bare = np.ascontiguousarray(np.broadcast_to(skin, (RASTER, RASTER, 3)) + rng.normal(0.0, 0.005, (RASTER, RASTER, 3)),
                                np.float32)
    cv2.circle(bare, centre, 13, (0.7, 0.35, 0.1), -1)
    assert not _enclosed(seeds, _features(bare), pool, face).any()


def test_the_skin_a_kept_rim_or_handle_rings_is_not_closed_in():
    """The eye's edges close in the skin inside a glasses frame's rim, and a mug handle's
    edges the skin seen through it: both are the face. A thin rim is no solid object to
    grow from; a handle's loop is a hole in one."""
    from gpu.analysis.occlusion import RASTER, _enclosed, _holes, _solid_regions

    rng = np.random.default_rng(4)
    image = np.ascontiguousarray(np.broadcast_to(np.array([0.78, 0.62, 0.52], np.float32), (RASTER, RASTER, 3))
                                 + rng.normal(0.0, 0.005, (RASTER, RASTER, 3)), np.float32)
    cv2.ellipse(image, (64, 60), (10, 5), 0, 0, 360, (0.2, 0.12, 0.1), -1)  # the eye
    rim = np.zeros((RASTER, RASTER), np.uint8)
    cv2.ellipse(rim, (64, 62), (26, 18), 0, 0, 360, 1, 5)  # kept a little past the frame, as the splatted verdict is
    cv2.ellipse(image, (64, 62), (26, 18), 0, 0, 360, (0.05, 0.05, 0.05), 3)
    assert not _solid_regions(rim)[0].any()

    handle = np.zeros((RASTER, RASTER), np.uint8)
    cv2.circle(handle, (64, 64), 16, 1, 14)  # a thick loop: solid enough to grow from
    cv2.circle(image, (64, 64), 16, (0.6, 0.1, 0.1), 10)
    solid, _ = _solid_regions(handle)
    assert solid.any() and _holes(solid)[64, 64]
    pool = (cv2.dilate(solid, np.ones((25, 25), np.uint8)) > 0) & (handle == 0)
    assert not _enclosed(solid, _features(image), pool, np.ones((RASTER, RASTER), bool))[58:70, 58:70].any()
