"""The built-in mesh swapper: its graph contract, batching, options and identity on real faces."""

from dataclasses import replace

import numpy as np
import pytest

from gpu.analysis.identity import identity_distance
from gpu.options import SwapOptions
from gpu.runners.onnxruntime import OnnxRuntimeRunner
from gpu.swappers.base import run_jobs, stack_feeds
from gpu.swappers.mesh import MeshSwapper
from gpu.swappers.mesh_graph import build_mesh_swap_graph


def _swap(engine, swapper, source_image, target_image, options=SwapOptions()):
    source_face = engine.analyse_image(source_image)[0]
    target_face = engine.analyse_image(target_image)[0]
    source = swapper.register(source_image, source_face)
    frame = target_image.copy()
    job = swapper.prepare(frame, target_face, source, options)
    swapper.finish(frame, job, run_jobs(swapper.runner, [job])[0])
    return frame, job


@pytest.fixture(scope="module")
def mesh_swapper():
    return MeshSwapper()


def test_graph_has_dynamic_batch_and_declared_io():
    runner = OnnxRuntimeRunner(build_mesh_swap_graph())
    assert [spec.name for spec in runner.inputs] == ["target", "source", "grid", "mask", "blend", "colour"]
    assert [spec.name for spec in runner.outputs] == ["swapped"]
    assert all(spec.shape[0] in ("N", None) for spec in (*runner.inputs, *runner.outputs))


def _random_rows(count: int, size: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "target": rng.random((count, 3, size, size), dtype=np.float32),
        "source": rng.random((count, 3, size, size), dtype=np.float32),
        "grid": rng.uniform(-1, 1, (count, size, size, 2)).astype(np.float32),
        "mask": rng.random((count, 1, size, size), dtype=np.float32),
        "blend": rng.random((count, 1, 1, 1), dtype=np.float32),
        "colour": (rng.random((count, 1, 1, 1)) > 0.5).astype(np.float32),
    }


def test_graph_rows_are_independent_batch_equals_single_rows():
    runner = OnnxRuntimeRunner(build_mesh_swap_graph())
    feeds = _random_rows(5)  # every row: its own source, grid, mask, blend and colour switch
    batched = runner.run(feeds)[0]
    assert batched.shape == (5, 3, 64, 64)
    for i in range(5):
        single = runner.run({name: value[i : i + 1] for name, value in feeds.items()})[0]
        np.testing.assert_allclose(batched[i], single[0], atol=1e-5)


def test_graph_blend_zero_returns_the_target_and_identity_grid_copies_the_source():
    runner = OnnxRuntimeRunner(build_mesh_swap_graph())
    feeds = _random_rows(2, size=32)
    feeds["blend"][:] = 0.0
    np.testing.assert_allclose(runner.run(feeds)[0], feeds["target"], atol=1e-6)
    ys, xs = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    feeds["grid"][:] = np.stack([(2 * xs + 1) / 32 - 1, (2 * ys + 1) / 32 - 1], axis=-1)
    feeds.update(blend=np.ones_like(feeds["blend"]), mask=np.ones_like(feeds["mask"]), colour=np.zeros_like(feeds["colour"]))
    np.testing.assert_allclose(runner.run(feeds)[0], feeds["source"], atol=1e-5)


def test_graph_colour_match_moves_the_face_colour_to_the_target():
    runner = OnnxRuntimeRunner(build_mesh_swap_graph())
    feeds = _random_rows(1, size=32)
    feeds["source"] = np.clip(feeds["source"] * 0.3, 0, 1)  # a dark source
    feeds["target"] = np.clip(0.5 + feeds["target"] * 0.4, 0, 1)  # a bright target
    feeds.update(blend=np.ones((1, 1, 1, 1), np.float32), mask=np.ones((1, 1, 32, 32), np.float32))
    feeds["colour"][:] = 1.0
    matched = runner.run(feeds)[0].mean()
    feeds["colour"][:] = 0.0
    unmatched = runner.run(feeds)[0].mean()
    assert abs(matched - feeds["target"].mean()) < 0.03
    assert abs(unmatched - feeds["target"].mean()) > 0.3


@pytest.mark.parametrize("direction", ["astronaut_onto_grace", "grace_onto_astronaut"])
def test_swap_reads_as_the_source_person(engine, mesh_swapper, astronaut_image, grace_image, identity_of, direction):
    source, target = (astronaut_image, grace_image) if direction.startswith("astronaut") else (grace_image, astronaut_image)
    output, _ = _swap(engine, mesh_swapper, source, target)
    identity = identity_of(output)
    to_source, to_target = identity_distance(identity, identity_of(source)), identity_distance(identity, identity_of(target))
    assert to_source < 0.6, f"d(output, source) = {to_source:.3f}"
    assert to_source < to_target, f"d(output, source) = {to_source:.3f} vs d(output, target) = {to_target:.3f}"


def test_swap_changes_only_the_face_region(engine, mesh_swapper, astronaut_image, grace_image):
    output, _ = _swap(engine, mesh_swapper, astronaut_image, grace_image)
    changed = np.any(output != grace_image, axis=-1)
    ys, xs = np.nonzero(changed)
    x0, y0, x1, y1 = engine.analyse_image(grace_image)[0].box
    width, height = x1 - x0, y1 - y0
    # all changes within the face box grown by 30% (the region reaches past the mesh outline)
    assert xs.min() > x0 - 0.3 * width and xs.max() < x1 + 0.3 * width
    assert ys.min() > y0 - 0.3 * height and ys.max() < y1 + 0.3 * height
    assert changed[int(y0) : int(y1), int(x0) : int(x1)].mean() > 0.5


def test_mouth_mask_keeps_the_targets_mouth(engine, mesh_swapper, astronaut_image, grace_image):
    with_mask, _ = _swap(engine, mesh_swapper, grace_image, astronaut_image, SwapOptions(mouth_mask=True))
    without, _ = _swap(engine, mesh_swapper, grace_image, astronaut_image)
    mesh = engine.analyse_image(astronaut_image)[0].mesh
    lips = mesh[[13, 14, 78, 308]]  # inner lip middle and corners: the smile's teeth
    x0, y0 = lips.min(0).astype(int)
    x1, y1 = lips.max(0).astype(int) + 1
    region = np.s_[y0:y1, x0:x1]

    def error(image):
        return np.abs(image[region].astype(int) - astronaut_image[region]).mean()

    assert error(with_mask) < 2.0 < error(without) or error(with_mask) < error(without) / 3


def test_blend_scales_the_change(engine, mesh_swapper, astronaut_image, grace_image):
    full, _ = _swap(engine, mesh_swapper, astronaut_image, grace_image)
    half, _ = _swap(engine, mesh_swapper, astronaut_image, grace_image, SwapOptions(blend=0.5))
    full_change = np.abs(full.astype(int) - grace_image).sum()
    half_change = np.abs(half.astype(int) - grace_image).sum()
    assert 0.3 * full_change < half_change < 0.7 * full_change


def test_prepared_rows_batch_like_single_rows(engine, mesh_swapper, astronaut_image, grace_image, two_faces):
    """Rows from different sources and frames stacked into one runner call give the same
    pixels as one call each: what the cross-session batcher relies on."""
    sources = [mesh_swapper.register(img, engine.analyse_image(img)[0]) for img in (astronaut_image, grace_image)]
    targets = [(grace_image, engine.analyse_image(grace_image)[0]), *[(two_faces, f) for f in engine.analyse_image(two_faces)]]
    jobs = [
        mesh_swapper.prepare(frame, face, sources[i % 2], replace(SwapOptions(), blend=0.6 + 0.2 * (i % 2)))
        for i, (frame, face) in enumerate(targets)
    ]
    batched = run_jobs(mesh_swapper.runner, jobs)
    assert stack_feeds(jobs)["target"].shape[0] == 3
    for job, row in zip(jobs, batched):
        np.testing.assert_allclose(row[0], run_jobs(mesh_swapper.runner, [job])[0][0], atol=1e-5)


def test_graph_leaves_the_target_outside_the_face_region():
    runner = OnnxRuntimeRunner(build_mesh_swap_graph())
    feeds = _random_rows(2, size=32)
    feeds["mask"][:, :, :, :16] = 0.0
    feeds["blend"][:] = 1.0
    out = runner.run(feeds)[0]
    np.testing.assert_array_equal(out[..., :16], feeds["target"][..., :16])
    assert np.abs(out[..., 16:] - feeds["target"][..., 16:]).mean() > 0.05
