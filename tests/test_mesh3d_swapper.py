"""The 3D-aware built-in swapper: geometry (visibility, culling), lighting, its graph, and
identity on the real sample faces."""

from dataclasses import replace

import numpy as np
import pytest

from gpu.analysis.identity import identity_distance
from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, canonical_mesh, signed_areas
from gpu.options import SwapOptions
from gpu.runners.onnxruntime import OnnxRuntimeRunner
from gpu.swappers import mesh3d
from gpu.swappers.base import run_jobs, stack_feeds
from gpu.swappers.mesh3d import Mesh3dSource, Mesh3dSwapper
from gpu.swappers.mesh3d_geometry import OUTER_LIP_CONTOUR, fit_pose, texel_facing, texel_visibility, uv_atlas, uv_polygon_mask
from gpu.swappers.mesh3d_graph import build_mesh3d_swap_graph
from gpu.swappers.mesh3d_lighting import fit_sh, shade
from gpu.types import Face


def _turned(yaw_deg: float, scale: float = 9.0, centre=(128.0, 120.0)) -> np.ndarray:
    """The canonical mesh turned about its vertical axis, as a posed (468, 3) pixel mesh
    (positive yaw turns the nose towards +x)."""
    yaw = np.radians(yaw_deg)
    rotation = np.array([[np.cos(yaw), 0, -np.sin(yaw)], [0, 1, 0], [np.sin(yaw), 0, np.cos(yaw)]])
    points = canonical_mesh().vertices.astype(np.float64) @ rotation.T * scale
    points[:, :2] += centre
    return points


def _face(points: np.ndarray, track_id: int | None = None) -> Face:
    from gpu.analysis.landmarks import five_points

    mesh = points[:, :2].astype(np.float32)
    box = np.concatenate([mesh.min(0), mesh.max(0)])
    return Face(box=box, kps=five_points(mesh), mesh=mesh, depth=points[:, 2].astype(np.float32), track_id=track_id)


# -- geometry --------------------------------------------------------------------------------------


def test_a_turned_face_hides_its_far_side_and_what_the_nose_covers():
    atlas = uv_atlas(64)
    frontal = texel_visibility(_turned(0), atlas)
    assert (frontal > 0).mean() > 0.9
    turned_points = _turned(50)
    turned = texel_visibility(turned_points, atlas)
    assert (turned > 0).mean() < (frontal > 0).mean() - 0.1
    far = turned_points[atlas.corners, 2].mean(1) > np.median(turned_points[:, 2])  # texels that moved away
    assert turned[far].mean() < 0.5 * turned[~far].mean()
    # the nose hides cheek that still faces the camera: occlusion, not only back faces
    assert ((texel_facing(turned_points, atlas) > 0.05) & (turned == 0)).sum() > 0


def test_a_turned_face_renders_without_folded_triangles():
    swapper = Mesh3dSwapper(runner=object())
    mesh = canonical_mesh()
    for yaw in (0, 45, 70):
        points = _turned(yaw)
        uv, rendered, holes, grid, _ = swapper._render(points)
        small = points.copy()
        small[:, :2] = points[:, :2] * 0.5 - 0.25
        back = signed_areas(small, mesh.triangles) >= 0
        if yaw >= 45:
            assert back.sum() > 20  # the far side turned away ...
        drawn_ids = _drawn_triangles(swapper, points)
        assert not back[drawn_ids].any()  # ... and none of it is drawn
        # every drawn triangle keeps the canonical orientation from image to UV: no fold
        image_area = signed_areas(small, mesh.triangles)[drawn_ids]
        uv_area = signed_areas(mesh.uv, mesh.triangles)[drawn_ids]
        assert (np.sign(image_area) == np.sign(uv_area)).all()
        assert rendered.sum() > 1000 and holes.sum() > 0 and not (rendered & holes).any()
        # wherever the face shows, it samples inside the texture (no rim pulled towards nothing)
        mask, _ = swapper._mask(uv, rendered, holes, False, 0.01)
        assert np.abs(grid[mask > 0]).max() <= 1.0


def _drawn_triangles(swapper: Mesh3dSwapper, points: np.ndarray) -> np.ndarray:
    from gpu.swappers.mesh3d_geometry import rasterise

    mesh = canonical_mesh()
    small = points.copy()
    small[:, :2] = points[:, :2] * 0.5 - 0.25
    half = swapper.crop_size // 2
    raster = rasterise(small, mesh.triangles, signed_areas(small, mesh.triangles) < 0, (half, half))
    return np.unique(raster.triangle[raster.covered])


def test_pose_fit_removes_pose_and_size():
    mesh = canonical_mesh()
    turned = _turned(35, scale=6.0, centre=(300.0, 200.0))
    pose = fit_pose(turned)
    assert pose.scale == pytest.approx(6.0, rel=1e-6)
    np.testing.assert_allclose(pose.normalise(turned), mesh.vertices, atol=1e-4)


# -- lighting --------------------------------------------------------------------------------------


def test_sh_fit_recovers_known_lighting_despite_highlights():
    rng = np.random.default_rng(3)
    normals = rng.normal(size=(3000, 3))
    normals[:, 2] = -np.abs(normals[:, 2])  # one view: the half of the sphere facing the camera
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    truth = np.zeros((9, 3), np.float32)
    truth[0] = (0.8, 0.55, 0.4)
    truth[1:4] = rng.normal(0, 0.1, (3, 3))
    truth[4:] = rng.normal(0, 0.03, (5, 3))
    colours = shade(normals, truth) + rng.normal(0, 0.005, (3000, 3))
    highlights = rng.random(3000) < 0.08
    colours[highlights] += 0.5  # specular spots, glasses: what the robust fit must ignore
    plain = fit_sh(normals, colours, np.ones(3000), ridge=0.0)
    np.testing.assert_allclose(plain, truth, atol=0.02)
    # the default ridge shrinks bands 1-2 (band 2 hard): the light on the seen half stays
    # close, and its direction (band 1, x and y) keeps its sign and most of its size
    ridged = fit_sh(normals, colours, np.ones(3000))
    assert np.abs(shade(normals, ridged) - shade(normals, truth)).mean() < 0.035
    strong = np.abs(truth[1:3]) > 0.05
    assert (np.sign(ridged[1:3])[strong] == np.sign(truth[1:3])[strong]).all()
    assert (np.abs(ridged[1:3])[strong] > 0.5 * np.abs(truth[1:3])[strong]).all()


# -- graph -----------------------------------------------------------------------------------------


def _random_rows(count: int, size: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "target": rng.random((count, 3, size, size), dtype=np.float32),
        "albedo": rng.random((count, 3, 32, 32), dtype=np.float32) * 2,
        "shading": rng.random((count, 3, size // 2, size // 2), dtype=np.float32),
        "grid": rng.uniform(-1, 1, (count, size, size, 2)).astype(np.float32),
        "mask": rng.random((count, 1, size, size), dtype=np.float32),
        "keep": (rng.random((count, 1, size, size)) > 0.9).astype(np.float32),
        "blend": rng.random((count, 1, 1, 1), dtype=np.float32),
    }


def test_graph_has_dynamic_batch_and_declared_io():
    runner = OnnxRuntimeRunner(build_mesh3d_swap_graph())
    assert [spec.name for spec in runner.inputs] == ["target", "albedo", "shading", "grid", "mask", "keep", "blend"]
    assert [spec.name for spec in runner.outputs] == ["swapped"]
    assert all(spec.shape[0] in ("N", None) for spec in (*runner.inputs, *runner.outputs))


def test_graph_rows_are_independent_batch_equals_single_rows():
    runner = OnnxRuntimeRunner(build_mesh3d_swap_graph())
    feeds = _random_rows(4)
    batched = runner.run(feeds)[0]
    assert batched.shape == (4, 3, 64, 64)
    for i in range(4):
        single = runner.run({name: value[i : i + 1] for name, value in feeds.items()})[0]
        np.testing.assert_allclose(batched[i], single[0], atol=1e-5)


def test_graph_relights_the_albedo_inside_the_face_and_passes_the_target_elsewhere():
    runner = OnnxRuntimeRunner(build_mesh3d_swap_graph())
    feeds = _random_rows(1, size=32)
    feeds["blend"][:] = 0.0
    np.testing.assert_allclose(runner.run(feeds)[0], feeds["target"], atol=1e-6)
    feeds["blend"][:] = 1.0
    feeds["mask"][:] = 0.0
    np.testing.assert_allclose(runner.run(feeds)[0], feeds["target"], atol=1e-6)
    # the whole crop is face: the output is albedo x shading exactly (the pyramid adds up; a
    # target without fine detail has no grain to give)
    ys, xs = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    feeds["target"][:] = 0.3
    feeds["grid"][:] = np.stack([(2 * xs + 1) / 32 - 1, (2 * ys + 1) / 32 - 1], axis=-1)
    feeds["albedo"] = np.random.default_rng(1).random((1, 3, 32, 32), dtype=np.float32)
    feeds["shading"][:] = 0.5
    feeds["mask"][:] = 1.0
    expected = feeds["albedo"] * 0.5 * (1 - feeds["keep"]) + feeds["target"] * feeds["keep"]
    np.testing.assert_allclose(runner.run(feeds)[0], expected, atol=1e-5)  # ... but what must be kept is kept


# -- the swap on real faces --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swapper():
    return Mesh3dSwapper()


@pytest.fixture(scope="module")
def sources(engine, swapper, astronaut_image, grace_image):
    return {name: swapper.register(image, engine.analyse_image(image)[0])
            for name, image in (("astronaut", astronaut_image), ("grace", grace_image))}


def _swap(engine, swapper, source, target_image, options=SwapOptions()):
    face = engine.analyse_image(target_image)[0]
    frame = target_image.copy()
    job = swapper.prepare(frame, face, source, options)
    swapper.finish(frame, job, run_jobs(swapper.runner, [job])[0])
    return frame, job


def test_register_unwraps_the_source_into_a_filled_albedo(sources):
    for source in sources.values():
        assert source.albedo.shape == (3, mesh3d.TEXTURE_SIZE, mesh3d.TEXTURE_SIZE)
        assert 0.0 <= source.albedo.min() and source.albedo.max() <= mesh3d.ALBEDO_MAX
        atlas = uv_atlas(mesh3d.TEXTURE_SIZE)
        skin = source.albedo[:, atlas.texels[0], atlas.texels[1]]
        assert 0.7 < float(np.median(skin)) < 1.3  # albedo is relative to the skin's own light
        assert source.lighting.shape == (9, 3) and source.shape.shape == (468, 3)


def test_the_albedo_carries_no_detail_finer_than_a_crop_pixel():
    """GridSample has no mip levels: detail finer than the crop's pixels would alias into a
    shimmer as the face moves by fractions of a pixel, so the albedo is low-passed once; what
    the crop can show stays, and a larger crop keeps finer detail."""

    def response(crop_size: int, period: float) -> float:
        size = mesh3d.TEXTURE_SIZE
        stripes = 1.0 + 0.2 * np.cos(2 * np.pi * np.arange(size) / period)
        albedo = np.repeat(np.broadcast_to(stripes, (size, size))[..., None], 3, axis=2).astype(np.float32)
        kept = Mesh3dSwapper(runner=OnnxRuntimeRunner(build_mesh3d_swap_graph()), crop_size=crop_size)._anti_aliased(albedo)
        inner = slice(size // 4, 3 * size // 4)
        return float(kept[inner, inner, 0].std() / albedo[inner, inner, 0].std())

    assert response(256, 2.0) < 0.05  # texel-sized detail (2 texels a crop pixel): gone
    assert response(256, 8.0) > 0.5  # detail of a few crop pixels: mostly kept
    assert response(512, 2.0) > 2 * response(256, 2.0)  # a larger crop shows finer detail


def test_a_small_photo_is_not_softened_twice(engine, astronaut_image, grace_image):
    """A photo whose face spans fewer pixels than the texture has texels is already as soft
    as the anti-aliasing's low pass (its bilinear unwrap): it is not low-passed again (the
    whole low pass made a ~100 px source's swap a third smoother at the finest scales)."""
    size = mesh3d.TEXTURE_SIZE
    stripes = 1.0 + 0.2 * np.cos(2 * np.pi * np.arange(size) / 4.0)
    albedo = np.repeat(np.broadcast_to(stripes, (size, size))[..., None], 3, axis=2).astype(np.float32)
    swapper = Mesh3dSwapper(runner=OnnxRuntimeRunner(build_mesh3d_swap_graph()))
    inner = slice(size // 4, 3 * size // 4)

    def response(texels_per_pixel: float) -> float:
        kept = swapper._anti_aliased(albedo, texels_per_pixel)
        return float(kept[inner, inner, 0].std() / albedo[inner, inner, 0].std())

    assert response(3.0) == 1.0  # a ~100 px face in the photo: nothing taken twice
    assert response(0.0) < response(1.7) < 1.0  # a ~200 px face: only the rest of the low pass
    # what a real photo spans: the astronaut's face is ~95 px wide, Grace Hopper's ~190 px
    from gpu.swappers.mesh3d_geometry import posed

    spans = [mesh3d.texels_per_pixel(posed(face.mesh, face.depth), size)
             for face in (engine.analyse_image(image)[0] for image in (astronaut_image, grace_image))]
    assert 1.6 < spans[0] / spans[1] < 2.4 and spans[0] > 2.5


def test_a_small_photo_is_sharpened_on_a_larger_face_and_left_as_it_is_on_one_as_small(engine, swapper, sources, grace_image):
    """A source photo's pixel blown up over two frame pixels or more (the astronaut's ~95 px
    face on Grace Hopper's ~190 px one) is blurred over its neighbours: the swap takes that
    softness back, so its eyes and brows are as crisp as the frame around them. On a face as
    small as the photo's (Grace Hopper shrunk to the astronaut's size) nothing changes."""
    import cv2

    small_source = sources["astronaut"]
    assert small_source.photo_texels > 2.5
    unknown = replace(small_source, photo_texels=0.0)  # a source stored before the photo's size was kept

    def detail(image: np.ndarray, face: Face) -> float:
        """The detail a few pixels across (a band-pass) around the face's eyes: their lids' and lashes' edges."""
        eyes = face.mesh[list(LEFT_EYE_CONTOUR + RIGHT_EYE_CONTOUR)]
        (x0, y0), (x1, y1) = (eyes.min(0) - 12).astype(int), (eyes.max(0) + 12).astype(int)
        grey = image[y0:y1, x0:x1].astype(np.float32).mean(2)
        return float(np.abs(cv2.GaussianBlur(grey, (0, 0), 1.0) - cv2.GaussianBlur(grey, (0, 0), 3.0)).mean())

    large_face = engine.analyse_image(grace_image)[0]
    sharpened, job = _swap(engine, swapper, small_source, grace_image)
    plain, plain_job = _swap(engine, swapper, unknown, grace_image)
    assert job.feeds["albedo"] is not small_source.albedo and plain_job.feeds["albedo"] is unknown.albedo
    assert detail(sharpened, large_face) > 1.08 * detail(plain, large_face)  # 1.14 when written
    # the face's colour and light are the same: only its finest detail changed
    x0, y0, x1, y1 = large_face.box.astype(int)
    blurred = [cv2.GaussianBlur(image[y0:y1, x0:x1].astype(np.float32), (0, 0), 4.0) for image in (sharpened, plain)]
    assert np.abs(blurred[0] - blurred[1]).mean() < 1.0

    shrunk = cv2.resize(grace_image, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
    same_size, job = _swap(engine, swapper, small_source, shrunk)
    assert job.feeds["albedo"] is small_source.albedo
    np.testing.assert_array_equal(same_size, _swap(engine, swapper, unknown, shrunk)[0])


def test_the_sharpening_grows_with_the_blow_up_in_steps_and_is_cached():
    source = Mesh3dSource(albedo=np.random.default_rng(0).uniform(0.5, 1.5, (3, 32, 32)).astype(np.float32),
                          lighting=np.zeros((9, 3), np.float32), shape=np.zeros((468, 3), np.float32), photo_texels=3.0)
    start, full, amount = mesh3d.UPSCALE_SHARPENING
    amounts = [source.sharpening(3.0 / upscale) for upscale in (0.5, start, (start + full) / 2, full, 4 * full)]
    assert amounts[0] == amounts[1] == 0.0 and 0.0 < amounts[2] < amounts[3] == amounts[4] == amount
    assert all(a / mesh3d.SHARPENING_STEP == round(a / mesh3d.SHARPENING_STEP) for a in amounts)
    assert replace(source, photo_texels=0.0).sharpening(0.5) == 0.0
    sharp = source.sharpened(amounts[2])
    assert sharp is source.sharpened(amounts[2]) and sharp.shape == source.albedo.shape
    assert sharp.std() > source.albedo.std() and 0.0 <= sharp.min() and sharp.max() <= mesh3d.ALBEDO_MAX
    assert source.albedo_like(np.zeros((4, 4, 3), np.uint8), amounts[2]) is sharp


def test_grazing_but_seen_texels_keep_their_detail(engine, sources, grace_image):
    """The cheeks a frontal photo sees at a grazing angle (what a turned target shows
    large) keep their own texture, not a smooth fill: at least half the detail of the
    texels seen head-on outside her glasses (the earlier fill left about a fifth)."""
    import cv2

    from gpu.swappers.mesh3d_eyewear import _regions
    from gpu.swappers.mesh3d_geometry import posed

    face = engine.analyse_image(grace_image)[0]
    atlas = uv_atlas(mesh3d.TEXTURE_SIZE)
    seen = atlas.scatter(texel_visibility(posed(face.mesh, face.depth), atlas)[:, None])[..., 0]
    luma = sources["grace"].albedo.mean(0)
    detail = np.abs(luma - cv2.GaussianBlur(luma, (0, 0), 2.0))
    grazing = (seen > 0.04) & (seen < 0.12) & (seen[:, ::-1] < 0.12)  # neither side sees it well
    assert grazing.sum() > 1000
    lenses = _regions(mesh3d.TEXTURE_SIZE)[0] > 0  # the skin behind them keeps its wrinkles: more detail than her cheeks
    assert detail[grazing].mean() > 0.4 * detail[(seen > 0.6) & ~lenses].mean()


@pytest.mark.parametrize("direction", ["astronaut_onto_grace", "grace_onto_astronaut"])
def test_swap_reads_as_the_source_person(engine, swapper, sources, astronaut_image, grace_image, identity_of, direction):
    source_name, source_image, target = (("astronaut", astronaut_image, grace_image) if direction.startswith("astronaut")
                                         else ("grace", grace_image, astronaut_image))
    output, _ = _swap(engine, swapper, sources[source_name], target)
    identity = identity_of(output)
    to_source, to_target = identity_distance(identity, identity_of(source_image)), identity_distance(identity, identity_of(target))
    assert to_source < 0.6, f"d(output, source) = {to_source:.3f}"
    assert to_source < to_target, f"d(output, source) = {to_source:.3f} vs d(output, target) = {to_target:.3f}"


def test_eyes_target_keeps_the_targets_own_eyes(engine, swapper, sources, astronaut_image):
    """``eyes: target``: its irises and pupils (where it looks) stay; the lid margins are the
    source's. With the source's eye shape the same as the target's (its own photo), the
    eyes do not move: the pupils change a third of what drawing the source's eyes there
    does (the lid margins' fade reaches their rims)."""
    import cv2

    mesh = engine.analyse_image(astronaut_image)[0].mesh
    eyes = np.zeros(astronaut_image.shape[:2], np.uint8)
    for contour in (RIGHT_EYE_CONTOUR, LEFT_EYE_CONTOUR):
        cv2.fillPoly(eyes, [np.round(mesh[list(contour)]).astype(np.int32)], 1)
    openings = eyes.astype(bool)
    luma = astronaut_image.astype(float).mean(-1)
    inside = cv2.erode(eyes, np.ones((3, 3), np.uint8)).astype(bool)  # the opening's rim pixel is the fade to the source's lids
    pupils = inside & (luma < np.percentile(luma[openings], 15))
    assert pupils.sum() > 10

    def change(eyes: str) -> float:
        output, _ = _swap(engine, swapper, sources["astronaut"], astronaut_image, SwapOptions(eyes=eyes))
        return float(np.abs(output.astype(int) - astronaut_image).mean(-1)[pupils].mean())

    assert change("target") < change("source") / 3.0


def test_eyes_target_moves_the_targets_eyes_into_the_sources_eye_shape(engine, swapper, sources, astronaut_image):
    """Grace Hopper's eyes are narrower than the astronaut's: with ``eyes: target`` the
    astronaut's own eyes are drawn (resampled from her crop, so her gaze stays) inside
    lids that have Grace Hopper's shape; the resampled eyes are pasted too."""
    _, same = _swap(engine, swapper, sources["astronaut"], astronaut_image, SwapOptions(eyes="target"))
    _, moved = _swap(engine, swapper, sources["grace"], astronaut_image, SwapOptions(eyes="target"))
    face = engine.analyse_image(astronaut_image)[0]
    crop = swapper.alignment(face)
    from gpu.kernels.ops import crop_faces

    target = crop_faces([astronaut_image], crop[None], swapper.crop_size)[0].transpose(2, 0, 1) / 255.0
    eyes = moved.feeds["keep"][0] > 0.5
    eyes[swapper.crop_size // 2:] = False  # the mouth's opening is kept too (her teeth): not the eyes
    assert eyes.sum() > 20
    drift = lambda job: np.abs(job.feeds["target"] - target).mean(0)[eyes].mean()  # noqa: E731
    assert drift(moved) > 3.0 * drift(same) + 0.01  # the eyes were moved into other lids ...
    assert moved.context["mask"][eyes].mean() > 0.5  # ... and are pasted


def test_eyes_source_draws_the_sources_eyes_in_the_targets_openings(engine, swapper, sources, astronaut_image):
    """``eyes: source`` (the default): the openings are the source's (drawn on the target's
    lids, so they blink with it), only the mouth's opening stays kept; ``target`` keeps the
    target's eyes."""
    import cv2

    assert SwapOptions().eyes == "source"
    target_eyes, kept_eyes = _swap(engine, swapper, sources["grace"], astronaut_image, SwapOptions(eyes="target"))
    source_eyes, job = _swap(engine, swapper, sources["grace"], astronaut_image)
    mesh = engine.analyse_image(astronaut_image)[0].mesh
    openings = np.zeros(astronaut_image.shape[:2], np.uint8)
    for contour in (RIGHT_EYE_CONTOUR, LEFT_EYE_CONTOUR):
        cv2.fillPoly(openings, [np.round(mesh[list(contour)]).astype(np.int32)], 1)
    inner = cv2.erode(openings, np.ones((3, 3), np.uint8)).astype(bool)
    changed = lambda output: np.abs(output.astype(int) - astronaut_image).mean(-1)[inner].mean()  # noqa: E731
    assert inner.sum() > 20
    assert changed(source_eyes) > 1.5 * changed(target_eyes)  # (the target's eyes move into the source's lids too)
    assert 0 < job.feeds["keep"].sum() < 0.8 * kept_eyes.feeds["keep"].sum()  # the mouth opening alone


def test_shape_moves_towards_the_source_eyes_too_but_not_the_mouth_opening(swapper, sources):
    """The source's eye shape is identity (its lids move to the source's); the inner lips
    stay the target's (the mouth's opening is expression)."""
    from gpu.models.canonical_mesh import INNER_LIP_CONTOUR

    target = _turned(20)
    pose = fit_pose(target)
    moved = swapper._transfer_shape(target, pose, None, sources["astronaut"])
    before = np.linalg.norm(pose.normalise(target) - sources["astronaut"].shape, axis=1)
    after = np.linalg.norm(pose.normalise(moved) - sources["astronaut"].shape, axis=1)
    assert after.mean() < 0.7 * before.mean()
    lids = list(RIGHT_EYE_CONTOUR + LEFT_EYE_CONTOUR)
    assert after[lids].mean() < 0.5 * before[lids].mean()
    np.testing.assert_allclose(moved[list(INNER_LIP_CONTOUR)], target[list(INNER_LIP_CONTOUR)], atol=1e-6)


def test_a_smiling_sources_lips_thicken_a_closed_target_mouth_less(engine, swapper, sources, grace_image):
    """A smile parts the lips and draws their outline up and down with it: that is the
    source's expression more than its lips' shape. On a closed target mouth the outer lip
    lines take well under the whole of that (they moved ~0.9 cm apart: thick, soft lips
    with no line between them), while a closed-mouthed source still gives its whole shape."""
    points = mesh3d._require_depth(engine.analyse_image(grace_image)[0], "target")
    pose = fit_pose(points)
    moved = pose.normalise(swapper._transfer_shape(points, pose, None, sources["astronaut"]))
    target = pose.normalise(points)

    def lips_height(shape: np.ndarray) -> float:
        return float(np.linalg.norm(shape[0] - shape[17]))  # upper and lower outer lip, in the middle

    smiling = sources["astronaut"].shape
    assert mesh3d._mouth_opening(smiling) > mesh3d.OPEN_MOUTH_FADE[1]  # the sample smiles wide
    assert lips_height(smiling) - lips_height(target) > 0.5
    assert lips_height(moved) - lips_height(target) < 0.6 * (lips_height(smiling) - lips_height(target))
    assert np.linalg.norm(moved - target, axis=1).mean() > 0.1  # the rest of the face still moves
    closed = sources["grace"]
    assert mesh3d._mouth_opening(closed.shape) < mesh3d.OPEN_MOUTH_FADE[0]
    np.testing.assert_array_equal(closed.shape_strength(), mesh3d.uv_masks().shape_strength)


def test_a_tracks_neutral_shape_is_a_bounded_running_mean(swapper, sources):
    fresh = Mesh3dSwapper(runner=swapper.runner)
    shape = fit_pose(_turned(0)).normalise(_turned(0))
    smiling = shape.copy()
    smiling[list(range(0, 468, 7))] += 0.4  # an expression: some points move a little
    first = fresh._neutral_shape(5, shape)
    later = fresh._neutral_shape(5, smiling)
    np.testing.assert_allclose(first, shape)
    assert 0 < np.abs(later - shape).max() < 0.4  # averaged, not replaced
    stranger = shape + 3.0  # a jump no expression makes: another stream's face
    np.testing.assert_allclose(fresh._neutral_shape(5, stranger), stranger)
    for track in range(mesh3d.MAX_TRACKS + 10):
        fresh._neutral_shape(100 + track, shape)
    assert len(fresh._neutral) == mesh3d.MAX_TRACKS
    np.testing.assert_allclose(fresh._neutral_shape(-1, smiling), smiling)  # a still is its own neutral


def test_mouth_mask_keeps_the_targets_mouth_and_blend_scales_the_change(engine, swapper, sources, astronaut_image):
    with_mask, _ = _swap(engine, swapper, sources["grace"], astronaut_image, SwapOptions(mouth_mask=True))
    without, _ = _swap(engine, swapper, sources["grace"], astronaut_image)
    half, _ = _swap(engine, swapper, sources["grace"], astronaut_image, SwapOptions(blend=0.5))
    mesh = engine.analyse_image(astronaut_image)[0].mesh
    lips = mesh[[0, 17, 61, 291]]  # outer lip middle and corners
    x0, y0 = lips.min(0).astype(int)
    x1, y1 = lips.max(0).astype(int) + 1

    def error(image):
        return np.abs(image[y0:y1, x0:x1].astype(int) - astronaut_image[y0:y1, x0:x1]).mean()

    assert error(with_mask) < error(without) / 2
    full_change = np.abs(without.astype(int) - astronaut_image).sum()
    half_change = np.abs(half.astype(int) - astronaut_image).sum()
    assert 0.3 * full_change < half_change < 0.7 * full_change


def test_colour_match_off_keeps_the_sources_skin_tone(engine, swapper, sources, astronaut_image):
    matched, job = _swap(engine, swapper, sources["grace"], astronaut_image)
    kept, _ = _swap(engine, swapper, sources["grace"], astronaut_image, SwapOptions(colour_match=False))
    face = job.context["mask"] > 0.9
    assert face.sum() > 1000
    # Grace's photo is warmer (more red over blue) than the astronaut's
    def warmth(image):
        import cv2

        crop = cv2.warpAffine(image, job.matrix, face.shape[::-1]).astype(float)
        return (crop[..., 0] - crop[..., 2])[face].mean()

    assert warmth(kept) > warmth(matched) + 3


@pytest.mark.parametrize("direction", ["astronaut_onto_grace", "grace_onto_astronaut"])
def test_colour_match_gives_the_plain_cheeks_the_targets_colour(engine, swapper, sources, astronaut_image, grace_image, direction):
    """The colour match follows the plain skin: the median ratio per channel, so a source's
    dark red folds (Grace Hopper's) or hair over a cheek do not tint the whole face (a
    ratio of means left Grace's cheeks on the astronaut 0.049 off, green-grey)."""
    import cv2

    source, target = (sources["astronaut"], grace_image) if direction.startswith("astronaut") else (sources["grace"], astronaut_image)
    output, _ = _swap(engine, swapper, source, target)
    mesh = engine.analyse_image(target)[0].mesh
    cheeks = np.zeros(target.shape[:2], np.uint8)
    for point in (50, 280, 205, 425):
        cv2.circle(cheeks, tuple(np.round(mesh[point]).astype(int)), int(0.06 * np.ptp(mesh[:, 0])), 1, -1)

    def chromaticity(image: np.ndarray) -> np.ndarray:
        pixels = image[cheeks > 0].astype(float)
        return np.median(pixels / pixels.sum(1, keepdims=True), axis=0)

    assert np.abs(chromaticity(output) - chromaticity(target)).sum() < 0.04


@pytest.mark.parametrize("direction", ["astronaut_onto_grace", "grace_onto_astronaut"])
def test_lips_take_the_colour_of_the_targets_lips_from_a_grey_photo(engine, swapper, astronaut_image, grace_image,
                                                                   direction, monkeypatch):
    """A black-and-white photo's lips are grey; the tone transfer leaves lips out (their red
    is not the skin's), so without the lip tint they stayed a grey band on a colour face."""
    from swapcast.benchmarks.realism_detail import mouth_report

    source_image, target = (astronaut_image, grace_image) if direction.startswith("astronaut") else (grace_image, astronaut_image)
    grey = np.repeat(source_image.mean(2, keepdims=True), 3, axis=2).astype(np.uint8)
    source = swapper.register(grey, engine.analyse_image(grey)[0])
    mesh = engine.analyse_image(target)[0].mesh
    tinted = mouth_report(_swap(engine, swapper, source, target)[0], target, mesh)
    monkeypatch.setattr(mesh3d, "_tint_lips", lambda *args: None)
    untinted = mouth_report(_swap(engine, swapper, source, target)[0], target, mesh)
    assert tinted.target_lip_red > 5
    assert tinted.lip_red > 0.3 * tinted.target_lip_red  # measured 0.42 and 1.15 of it
    assert tinted.lip_red > untinted.lip_red + 3  # measured -2.8 -> 2.8 and 1.9 -> 7.2


def test_a_smiling_sources_lips_on_a_closed_mouth_are_as_red_as_the_targets(engine, swapper, sources, grace_image):
    """The astronaut smiles: her lips, closed by stretching, are thin and pale. Tinted by the
    median of the lips' band (which on a thin closed mouth is mostly its skin-coloured
    margin) they stayed a pale band, lip red 0.34 of Grace Hopper's own; the redder half
    of the band is the lips (measured 0.88)."""
    from swapcast.benchmarks.realism_detail import mouth_report

    mesh = engine.analyse_image(grace_image)[0].mesh
    report = mouth_report(_swap(engine, swapper, sources["astronaut"], grace_image)[0], grace_image, mesh)
    assert 0.7 * report.target_lip_red < report.lip_red < 1.4 * report.target_lip_red


def test_prepared_rows_batch_like_single_rows_on_the_cpu(engine, swapper, sources, grace_image, two_faces):
    """Rows from different sources and frames stacked into one runner call give the same
    pixels as one call each (what the cross-session batcher relies on); a NumPy frame
    keeps every feed and the paste on the host."""
    targets = [(grace_image, engine.analyse_image(grace_image)[0]), *[(two_faces, f) for f in engine.analyse_image(two_faces)]]
    jobs = [
        swapper.prepare(frame, face, list(sources.values())[i % 2], replace(SwapOptions(), blend=0.6 + 0.2 * (i % 2)))
        for i, (frame, face) in enumerate(targets)
    ]
    assert all(type(value) is np.ndarray for job in jobs for value in (*job.feeds.values(), job.context["mask"]))
    batched = run_jobs(swapper.runner, jobs)
    assert stack_feeds(jobs)["target"].shape[0] == 3
    for job, row in zip(jobs, batched):
        np.testing.assert_allclose(row[0], run_jobs(swapper.runner, [job])[0][0], atol=1e-5)
    frame = grace_image.copy()
    swapper.finish(frame, jobs[0], batched[0])
    assert (frame != grace_image).any()


def test_a_face_without_depth_is_a_clear_error(engine, swapper, sources, grace_image):
    from gpu.errors import NoFaceError

    face = engine.analyse_image(grace_image)[0]
    flat = replace(face, depth=None)
    with pytest.raises(NoFaceError, match="3D landmarks"):
        swapper.register(grace_image, flat)
    with pytest.raises(ValueError, match="mesh and its depth"):
        swapper.prepare(grace_image, flat, sources["astronaut"], SwapOptions())


def test_the_engine_selects_mesh3d_and_its_sources_survive_bytes(astronaut_image, grace_image):
    from gpu.engine import EngineSettings, FaceEngine
    from streamer.pipeline.frame_swapper import FrameSwapper

    engine = FaceEngine(EngineSettings(swapper="mesh3d"))
    assert engine.swapper.name == "mesh3d"
    source = engine.register_source(astronaut_image)
    data = engine.source_to_bytes(source)
    assert len(data) < 400_000
    restored = engine.source_from_bytes(data)
    assert isinstance(restored.payload, Mesh3dSource)
    np.testing.assert_allclose(restored.payload.albedo, source.payload.albedo, atol=mesh3d.ALBEDO_MAX / 510 + 1e-6)
    np.testing.assert_array_equal(restored.payload.shape, source.payload.shape)
    np.testing.assert_array_equal(restored.face.depth, source.face.depth)
    swapped = []
    for which in (source, restored):
        frame = grace_image.copy()
        assert FrameSwapper(engine, which).process_still(frame).faces_swapped == 1
        swapped.append(frame.astype(int))
    assert np.abs(swapped[0] - swapped[1]).max() <= 3


def test_bench_engine_compares_two_swappers_side_by_side(tmp_path, capsys):
    import json

    from swapcast.cli import main

    code = main(["bench", "engine", "--frames", "8", "--swapper", "mesh3d", "--compare", "mesh", "--report", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    table = captured.out[captured.out.index("side by side"):]
    assert table.splitlines()[0].split()[-2:] == ["mesh", "mesh3d"]
    assert "640x480 median ms/frame" in table and "astronaut_onto_grace_hopper output_to_source" in table
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["swapper"] == "mesh3d" and report["compared"]["swapper"] == "mesh"
    assert {"640x480", "1280x720"} <= set(report["compared"]["resolutions"])
    assert set(report["compared"]["identity"]) == set(report["identity"])


def test_a_face_turned_away_is_lit_as_the_source_instead_of_failing(swapper, sources):
    """No skin faces the camera (a landmarker's wild guess at the back of a head): nothing
    to fit the target's light on, so it is lit as the source photo was and the frame goes on."""
    points = _turned(170, scale=9.0, centre=(320.0, 240.0))
    assert mesh3d._skin_lighting(points, lambda at: np.zeros((len(at), 3)), occlusion=False) is None
    frame = np.full((480, 640, 3), 120, np.uint8)
    face = _face(points)
    face.kps = _turned(0, scale=9.0, centre=(320.0, 240.0))[[33, 263, 1, 61, 291], :2].astype(np.float32)  # a usable crop
    job = swapper.prepare(frame, face, sources["astronaut"], SwapOptions())
    swapper.finish(frame, job, run_jobs(swapper.runner, [job])[0])
    assert np.isfinite(job.feeds["shading"]).all() and job.feeds["shading"].max() > 0


def test_a_turned_source_fills_its_hidden_side_from_the_mirrored_one(engine, swapper, sources, astronaut_image):
    from swapcast.benchmarks.pose_set import render_pose

    turned_image = render_pose(astronaut_image, 50)
    face = engine.analyse_image(turned_image)[0]
    turned = swapper.register(turned_image, face)
    atlas = uv_atlas(mesh3d.TEXTURE_SIZE)
    points = np.concatenate([face.mesh, face.depth[:, None]], axis=1).astype(np.float64)
    hidden = texel_visibility(points, atlas) < 0.02
    skin = np.abs(atlas.interpolate(canonical_mesh().uv)[:, 1] - 0.55) < 0.15  # cheeks, nose, mouth band
    # not the lips: a smile's are closed at registration with the same drawn shade in both, which is not the fill's
    lips = uv_polygon_mask(mesh3d.TEXTURE_SIZE, OUTER_LIP_CONTOUR)[atlas.texels] > 0
    region = hidden & skin & ~lips
    assert region.sum() > 500
    rows, cols = atlas.texels[0][region], atlas.texels[1][region]
    truth = sources["astronaut"].albedo[:, rows, cols].mean(0)  # the same texels, seen in the frontal photo
    filled = turned.albedo[:, rows, cols].mean(0)
    # the fill carries the face's structure (brows, nose side, lip corner), not a smooth
    # average: it follows what the frontal photo shows there (the render's own light and
    # colour differ, so the match is in shape, not in level). A smooth fill alone correlates
    # ~0.03; the mirrored side ~0.30
    assert np.corrcoef(filled, truth)[0, 1] > 0.25
