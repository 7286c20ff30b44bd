"""mesh3d's per-pixel graph on the CPU: the OpenCV twin gives the ONNX graph's output."""

from dataclasses import replace

import cv2
import numpy as np
import pytest

from gpu.engine import EngineSettings, FaceEngine
from gpu.options import SwapOptions
from gpu.runners.onnxruntime import OnnxRuntimeRunner
from gpu.swappers.base import run_jobs
from gpu.swappers.mesh3d import Mesh3dSwapper
from gpu.swappers.mesh3d_graph import Mesh3dGraphOnCpu, build_mesh3d_swap_graph


@pytest.fixture(scope="module")
def graph():
    return OnnxRuntimeRunner(build_mesh3d_swap_graph(), threads=1)


def _rows(count: int, size: int = 64, texels: int = 48, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = rng.random((count, 1, size, size), dtype=np.float32)
    mask[:, :, : size // 4] = 0.0  # rows and columns outside the face region
    mask[:, :, :, -size // 8 :] = 0.0
    return {
        "target": rng.random((count, 3, size, size), dtype=np.float32),
        "albedo": rng.random((count, 3, texels, texels), dtype=np.float32) * 2,
        "shading": rng.random((count, 3, size // 2, size // 2), dtype=np.float32) * 1.5,
        "grid": rng.uniform(-1.2, 1.2, (count, size, size, 2)).astype(np.float32),  # some beyond the border
        "mask": mask,
        "keep": (rng.random((count, 1, size, size)) > 0.9).astype(np.float32),
        "blend": rng.random((count, 1, 1, 1), dtype=np.float32),
    }


def test_the_twin_declares_the_graphs_inputs_and_output(graph):
    twin = Mesh3dGraphOnCpu()
    assert [(s.name, s.shape) for s in twin.inputs] == [(s.name, s.shape) for s in graph.inputs]
    assert [s.name for s in twin.outputs] == [s.name for s in graph.outputs]


def test_the_twin_equals_the_onnx_graph_on_random_rows(graph):
    feeds = _rows(4)
    expected = graph.run(feeds)[0]
    got = Mesh3dGraphOnCpu().run(feeds)[0]
    assert got.shape == expected.shape == (4, 3, 64, 64)
    np.testing.assert_allclose(got, expected, atol=2e-5)


def test_a_row_without_face_region_passes_the_target(graph):
    feeds = _rows(2, seed=1)
    feeds["mask"][1] = 0.0
    got = Mesh3dGraphOnCpu().run(feeds)[0]
    np.testing.assert_array_equal(got[1], np.clip(feeds["target"][1], 0, 1))
    np.testing.assert_allclose(got, graph.run(feeds)[0], atol=2e-5)


def test_small_face_regions_anywhere_in_the_crop_swap_as_through_the_onnx_graph(graph):
    """The twin's pyramid runs over a window around the face region only: regions in a
    corner, on an edge and in the middle, a few pixels or a third of the crop wide, give
    the graph's output everywhere, the target's outside the pyramid's reach."""
    size = 128
    boxes = [(0, 5, 0, 7), (3, 40, 100, 128), (60, 69, 50, 52), (40, 90, 30, 80), (120, 128, 0, 128)]
    feeds = _rows(len(boxes), size=size, seed=2)
    feeds["mask"][...] = 0.0
    for row, (y0, y1, x0, x1) in enumerate(boxes):
        feeds["mask"][row, :, y0:y1, x0:x1] = np.random.default_rng(row).random((y1 - y0, x1 - x0), dtype=np.float32)
    got = Mesh3dGraphOnCpu().run(feeds)[0]
    np.testing.assert_allclose(got, graph.run(feeds)[0], atol=2e-5)
    y0, y1, x0, x1 = boxes[2]
    changed = np.abs(got[2] - np.clip(feeds["target"][2], 0, 1)).max(axis=0) > 0
    rows, cols = np.flatnonzero(changed.any(axis=1)), np.flatnonzero(changed.any(axis=0))
    # the change reaches past the region's box out to 16-pixel blocks, and 15 pixels further
    assert (rows[0], rows[-1] + 1, cols[0], cols[-1] + 1) == (48 - 15, 80 + 15, 48 - 15, 64 + 15)


def test_a_crop_the_pyramid_cannot_halve_is_refused():
    feeds = _rows(1, size=40)
    with pytest.raises(ValueError, match="divisible by 16"):
        Mesh3dGraphOnCpu().run(feeds)


def test_real_faces_swap_to_the_same_pixels_as_through_the_onnx_graph(engine, graph, astronaut_image, grace_image, two_faces):
    """Prepared rows of real faces (two sources, blends, one batch): the twin's swapped
    frames equal the ONNX graph's to within one level in a few pixels."""
    swapper = Mesh3dSwapper(runner=graph)
    sources = [swapper.register(image, engine.analyse_image(image)[0]) for image in (astronaut_image, grace_image)]
    targets = [(grace_image, engine.analyse_image(grace_image)[0]), *[(two_faces, f) for f in engine.analyse_image(two_faces)]]
    jobs = [swapper.prepare(frame, face, sources[i % 2], replace(SwapOptions(), blend=0.7 + 0.3 * (i % 2)))
            for i, (frame, face) in enumerate(targets)]
    through_graph, through_twin = run_jobs(graph, jobs), run_jobs(Mesh3dGraphOnCpu(), jobs)
    for job, frame_in, old, new in zip(jobs, (t[0] for t in targets), through_graph, through_twin, strict=True):
        np.testing.assert_allclose(new[0], old[0], atol=1e-4)
        before, after = frame_in.copy(), frame_in.copy()
        swapper.finish(before, job, old)
        swapper.finish(after, job, new)
        assert (after != frame_in).any()
        difference = np.abs(after.astype(int) - before.astype(int))
        assert difference.max() <= 1 and (difference > 0).mean() < 1e-3


def test_a_cpu_engine_runs_mesh3d_on_the_twin_unless_onnxruntime_is_asked_for():
    auto = FaceEngine(EngineSettings(swapper="mesh3d", device="cpu"))
    asked = FaceEngine(EngineSettings(swapper="mesh3d", device="cpu", runner="onnxruntime"))
    try:
        assert isinstance(auto.swapper.runner, Mesh3dGraphOnCpu)
        assert isinstance(asked.swapper.runner, OnnxRuntimeRunner)
    finally:
        auto.close()
        asked.close()


# -- the target's grain ------------------------------------------------------------------------------


def _grain_rows(face_grain: float, rim: bool = False, size: int = 64, seed: int = 3, noise: float = 0.03,
                wrinkles: int = 0) -> dict[str, np.ndarray]:
    """One row: the whole crop is face; the target is mid-grey with fine noise (its grain,
    ``noise`` its level), with ``rim`` a dark line across (a glasses rim), and ``wrinkles``
    thin, fainter dark lines across (an old face); the re-lit face is flat grey with
    ``face_grain`` times the target's noise level of its own, independent noise."""
    rng = np.random.default_rng(seed)
    target = 0.5 + noise * rng.standard_normal((size, size)).astype(np.float32)
    for row in np.linspace(10, size - 10, wrinkles).round().astype(int):
        target[row, 6:-6] -= 0.1
    if rim:
        target[size // 2 : size // 2 + 2, 8:-8] -= 0.35
    face = 0.6 + face_grain * 0.03 * rng.standard_normal((size, size)).astype(np.float32)
    ys, xs = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    return {
        "target": np.repeat(target[None, None], 3, axis=1),
        "albedo": np.repeat(face[None, None], 3, axis=1),
        "shading": np.ones((1, 3, size // 2, size // 2), np.float32),
        "grid": np.stack([(2 * xs + 1) / size - 1, (2 * ys + 1) / size - 1], axis=-1)[None].astype(np.float32),
        "mask": np.ones((1, 1, size, size), np.float32),
        "keep": np.zeros((1, 1, size, size), np.float32),
        "blend": np.ones((1, 1, 1, 1), np.float32),
    }


def _finest(image: np.ndarray) -> np.ndarray:
    luma = image[0].mean(0)
    return (luma - cv2.GaussianBlur(luma, (0, 0), 1.0))[8:-8, 8:-8]


def test_a_smooth_face_gets_the_targets_grain_back(graph):
    """The re-lit face lacks the finest detail (the albedo's anti-aliasing, two resamplings):
    the target's own grain comes back, so the face is as fine-grained as the skin around it,
    and it is the target's grain (it moves with the frame's own noise and pores)."""
    feeds = _grain_rows(face_grain=0.0)
    out = Mesh3dGraphOnCpu().run(feeds)[0]
    np.testing.assert_allclose(out, graph.run(feeds)[0], atol=2e-5)
    got, own = _finest(out), _finest(feeds["target"])
    assert 0.6 < got.std() / own.std() < 1.1
    assert np.corrcoef(got.ravel(), own.ravel())[0, 1] > 0.8


def test_a_face_with_its_own_grain_gets_none_of_the_targets():
    feeds = _grain_rows(face_grain=1.5)
    out = Mesh3dGraphOnCpu().run(feeds)[0]
    without_target_grain = _finest(feeds["albedo"][:, :, :, :] * feeds["shading"][0, 0, 0, 0])
    assert abs(np.corrcoef(_finest(out).ravel(), _finest(feeds["target"]).ravel())[0, 1]) < 0.1
    assert abs(_finest(out).std() / without_target_grain.std() - 1.0) < 0.1


def test_a_strong_line_of_the_target_is_structure_not_grain(graph):
    """A glasses rim across the target is not grain: it does not come through the face,
    shoulders and all, while the grain around it does."""
    feeds = _grain_rows(face_grain=0.0, rim=True)
    out = Mesh3dGraphOnCpu().run(feeds)[0]
    np.testing.assert_allclose(out, graph.run(feeds)[0], atol=2e-5)
    luma = out[0].mean(0)
    size = luma.shape[0]
    around_rim = luma[size // 2 - 2 : size // 2 + 4, 12:-12]
    elsewhere = luma[8 : size // 2 - 8, 12:-12]
    assert abs(around_rim.mean() - elsewhere.mean()) < 0.02  # the rim was 0.35 darker


def test_a_wrinkled_faces_lines_and_rim_are_structure_too(graph):
    """On a face whose lines are much of its fine detail (an old face in glasses), the
    grain's level is still its grain's, not the lines' (a mean over the face was mostly
    lines, and the gate let the rim and the wrinkles through as a ghost of the target):
    the lines hardly come through the face, its grain between them does."""
    size = 64
    feeds = _grain_rows(face_grain=0.0, rim=True, size=size, noise=0.008, wrinkles=5)
    out = Mesh3dGraphOnCpu().run(feeds)[0]
    np.testing.assert_allclose(out, graph.run(feeds)[0], atol=2e-5)
    target = feeds["target"][0].mean(0)
    inner = np.zeros((size, size), bool)
    inner[8:-8, 10:-10] = True
    lines = target < 0.5 - 0.06
    luma = out[0].mean(0)
    shown = np.abs(luma - np.median(luma[inner]))[lines & inner].mean()
    assert shown < 0.02  # the lines are 0.1 (the rim 0.35) darker: a third of a wrinkle showed
    got, own = _finest(out), _finest(feeds["target"])
    near = cv2.dilate(lines.astype(np.uint8), np.ones((9, 9), np.uint8)) > 0  # within the gate's window of a line
    between = ~near[8:-8, 8:-8]
    assert np.corrcoef(got[between], own[between])[0, 1] > 0.5  # the grain between them is the target's
