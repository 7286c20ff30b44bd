"""inswapper_128 adapter on generated twins: latent, dynamic batch, masks and paste-back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

from gpu.analysis.arcface import ArcFaceEmbedder
from gpu.errors import ModelFileError
from gpu.options import SwapOptions
from gpu.swappers.base import run_jobs
from gpu.swappers.inswapper import InswapperSwapper, make_batch_dynamic
from gpu.types import Face
from model_twins import make_arcface, make_inswapper
from streamer.samples import astronaut

# Eileen Collins in scikit-image's astronaut (measured once with mediapipe FaceDetection).
ASTRONAUT = Face(
    box=np.array([173.7, 67.8, 277.6, 171.7], dtype=np.float32),
    kps=np.array([[202.8, 103.5], [248.0, 105.9], [224.0, 132.3], [201.8, 139.5], [245.9, 142.2]], np.float32),
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("models")
    make_arcface(directory / "w600k_r50.onnx")
    make_inswapper(directory / "inswapper_128.onnx")
    make_inswapper(directory / "inswapper_128_fp16.onnx", fp16=True)
    return directory


@pytest.fixture(scope="module")
def embedder(models: Path) -> ArcFaceEmbedder:
    return ArcFaceEmbedder(models / "w600k_r50.onnx")


@pytest.fixture(scope="module")
def swapper(models: Path, embedder: ArcFaceEmbedder) -> InswapperSwapper:
    return InswapperSwapper(models / "inswapper_128.onnx", embedder)


@pytest.fixture
def frame() -> np.ndarray:
    return astronaut()


def _latents(count: int, seed: int = 3) -> np.ndarray:
    raw = np.random.default_rng(seed).normal(size=(count, 512))
    return (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)


def test_latent_is_normalised_embedding_times_emap_normalised(
    swapper: InswapperSwapper, embedder: ArcFaceEmbedder, models: Path, frame: np.ndarray
) -> None:
    emap = numpy_helper.to_array(onnx.load(str(models / "inswapper_128.onnx")).graph.initializer[-1])
    embedding = embedder.embed(frame, ASTRONAUT.kps)
    expected = (embedding / np.linalg.norm(embedding)) @ emap
    expected /= np.linalg.norm(expected)

    latent = swapper.register(frame, ASTRONAUT)

    assert latent.shape == (512,) and latent.dtype == np.float32
    np.testing.assert_allclose(latent, expected, atol=1e-6)
    assert np.linalg.norm(latent) == pytest.approx(1.0, abs=1e-6)


def test_batch_of_four_equals_four_single_rows(swapper: InswapperSwapper, frame: np.ndarray) -> None:
    options = SwapOptions()
    shifts = [(0.0, 0.0), (12.0, -8.0), (-15.0, 10.0), (30.0, 25.0)]
    faces = [Face(box=ASTRONAUT.box + [dx, dy, dx, dy], kps=ASTRONAUT.kps + [dx, dy]) for dx, dy in shifts]
    jobs = [swapper.prepare(frame, face, latent, options) for face, latent in zip(faces, _latents(4), strict=True)]
    assert len({job.feeds["target"].tobytes() for job in jobs}) == 4  # four different targets

    batched = run_jobs(swapper.runner, jobs)
    singles = [run_jobs(swapper.runner, [job])[0] for job in jobs]

    assert swapper.runner.inputs[0].shape[0] == "N"
    for together, alone in zip(batched, singles, strict=True):
        assert together[0].shape == (3, 128, 128)
        np.testing.assert_allclose(together[0], alone[0], atol=1e-5)
    # The rows really differ, and each depends on its own source: swap the sources of two rows.
    assert not np.allclose(batched[0][0], batched[1][0], atol=1e-3)
    crossed = dict(jobs[0].feeds, source=jobs[1].feeds["source"])
    other = swapper.runner.run({k: v[None] for k, v in crossed.items()})[0][0]
    assert np.abs(other - batched[0][0]).max() > 1e-2


def test_the_twin_pins_batch_one_until_rewritten(models: Path) -> None:
    model = onnx.load(str(models / "inswapper_128.onnx"))
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "N"  # inputs alone are not enough
    feeds = {"target": np.zeros((4, 3, 128, 128), np.float32), "source": _latents(4)}
    with pytest.raises(Exception, match="(?i)reshape"):
        ort.InferenceSession(model.SerializeToString()).run(None, feeds)

    make_batch_dynamic(model, "inswapper_128.onnx")

    initializers = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    shapes = [initializers[node.input[1]].tolist() for node in model.graph.node if node.op_type == "Reshape"]
    assert shapes == [[0, -1], [-1, 3, 1, 1]]
    assert not [v for v in model.graph.value_info if v.type.tensor_type.shape.dim[0].dim_value == 1]
    out = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    assert out.shape == (4, 3, 128, 128)


def test_fp16_twin_loads_and_runs(models: Path, embedder: ArcFaceEmbedder, swapper: InswapperSwapper,
                                  frame: np.ndarray) -> None:
    half = InswapperSwapper(models / "inswapper_128_fp16.onnx", embedder)
    assert half.name == "inswapper_128_fp16"
    assert [spec.dtype for spec in half.runner.inputs] == [np.float16, np.float16]
    latent = half.register(frame, ASTRONAUT)
    assert latent.dtype == np.float32
    np.testing.assert_allclose(latent, swapper.register(frame, ASTRONAUT), atol=2e-3)

    jobs = [half.prepare(frame, ASTRONAUT, latent, SwapOptions()) for _ in range(2)]
    assert jobs[0].feeds["target"].dtype == np.float16 and jobs[0].feeds["source"].dtype == np.float16
    rows = run_jobs(half.runner, jobs)
    reference = run_jobs(swapper.runner, [swapper.prepare(frame, ASTRONAUT, latent, SwapOptions())])[0]
    np.testing.assert_allclose(rows[0][0].astype(np.float32), reference[0], atol=2e-2)

    before = frame.copy()
    half.finish(frame, jobs[0], rows[0])
    assert not np.array_equal(frame, before)


def _swap(swapper: InswapperSwapper, frame: np.ndarray, options: SwapOptions) -> np.ndarray:
    out = frame.copy()
    latent = _latents(1)[0]
    job = swapper.prepare(out, ASTRONAUT, latent, options)
    swapper.finish(out, job, run_jobs(swapper.runner, [job])[0])
    return out


def _inside_box(shape: tuple[int, ...], box: np.ndarray) -> np.ndarray:
    ys, xs = np.mgrid[: shape[0], : shape[1]]
    x0, y0, x1, y1 = box
    return (xs >= x0) & (xs <= x1) & (ys >= y0) & (ys <= y1)


def test_prepare_finish_changes_only_the_face_box(swapper: InswapperSwapper, frame: np.ndarray) -> None:
    swapped = _swap(swapper, frame, SwapOptions())

    changed = np.any(swapped != frame, axis=2)
    inside = _inside_box(frame.shape, ASTRONAUT.box)
    assert changed[inside].mean() > 0.3  # the face really was swapped
    assert not changed[~inside].any()  # everything else is bit-identical
    np.testing.assert_array_equal(swapped[~inside], frame[~inside])


def test_blend_zero_leaves_the_frame_untouched(swapper: InswapperSwapper, frame: np.ndarray) -> None:
    np.testing.assert_array_equal(_swap(swapper, frame, SwapOptions(blend=0.0)), frame)


def test_blend_half_moves_pixels_half_way(swapper: InswapperSwapper, frame: np.ndarray) -> None:
    full = _swap(swapper, frame, SwapOptions(blend=1.0)).astype(np.float32)
    half = _swap(swapper, frame, SwapOptions(blend=0.5)).astype(np.float32)
    np.testing.assert_allclose(half, (full + frame) / 2, atol=1.01)


def test_mouth_mask_keeps_the_targets_mouth(swapper: InswapperSwapper, frame: np.ndarray) -> None:
    plain = _swap(swapper, frame, SwapOptions(mouth_mask=False))
    kept = _swap(swapper, frame, SwapOptions(mouth_mask=True))

    left, right = ASTRONAUT.kps[3], ASTRONAUT.kps[4]
    x0, x1 = int(left[0]) + 4, int(right[0]) - 4
    y0, y1 = int(min(left[1], right[1])) - 4, int(max(left[1], right[1])) + 4
    mouth = (slice(y0, y1), slice(x0, x1))
    original = frame[mouth].astype(np.int16)
    plain_error = np.abs(plain[mouth].astype(np.int16) - original).mean()
    kept_error = np.abs(kept[mouth].astype(np.int16) - original).mean()
    assert plain_error > 10
    assert kept_error < 1.0
    # Outside the mouth both swaps agree.
    far = _inside_box(frame.shape, ASTRONAUT.box) & (np.mgrid[: frame.shape[0], : frame.shape[1]][0] < 105)
    np.testing.assert_array_equal(plain[far], kept[far])


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"target_shape": (1, 3, 256, 256)}, "input 'target' has shape [1,3,256,256], expected [N,3,128,128]"),
        ({"source_shape": (1, 256)}, "input 'source' has shape [1,256], expected [N,512]"),
        ({"target_name": "img"}, "has no input 'target' (inputs: 'img', 'source')"),
        ({"target_dtype": TensorProto.DOUBLE}, "input 'target' has type float64, expected float32 or float16"),
        ({"extra_output": True}, "has 2 outputs ('output', 'mask'), expected 1"),
        ({"emap_last": False}, "last initializer 'late_bias' has shape [3], expected emap [512,512]"),
    ],
)
def test_signature_mismatches_name_the_file_and_the_problem(
    tmp_path: Path, embedder: ArcFaceEmbedder, kwargs: dict, problem: str
) -> None:
    path = make_inswapper(tmp_path / "inswapper_128.onnx", **kwargs)
    with pytest.raises(ModelFileError) as info:
        InswapperSwapper(path, embedder)
    assert info.value.path == str(path)
    assert info.value.problem == problem
    assert str(path) in str(info.value)
