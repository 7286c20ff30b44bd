"""ArcFace embedder on generated twins (batch fixed at 1 like the real file, and dynamic)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from skimage.transform import SimilarityTransform

from gpu.align import arcface_template
from gpu.analysis.arcface import ArcFaceEmbedder
from gpu.errors import ModelFileError
from model_twins import make_arcface
from streamer.samples import astronaut

# Eileen Collins in scikit-image's astronaut (measured once with mediapipe FaceDetection).
ASTRONAUT_KPS = np.array(
    [[202.8, 103.5], [248.0, 105.9], [224.0, 132.3], [201.8, 139.5], [245.9, 142.2]], dtype=np.float32
)


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return astronaut()


def test_embedding_shape_dtype_and_determinism(tmp_path: Path, image: np.ndarray) -> None:
    embedder = ArcFaceEmbedder(make_arcface(tmp_path / "w600k_r50.onnx"))
    first = embedder.embed(image, ASTRONAUT_KPS)
    assert first.shape == (512,) and first.dtype == np.float32
    assert np.all(np.isfinite(first)) and np.linalg.norm(first) > 0
    np.testing.assert_array_equal(embedder.embed(image, ASTRONAUT_KPS), first)
    moved = embedder.embed(image, ASTRONAUT_KPS + [40.0, 60.0])  # another patch of the image
    assert not np.allclose(moved, first, atol=1e-3)


def test_embed_aligns_on_the_arcface_template_with_arcface_normalisation(tmp_path: Path, image: np.ndarray) -> None:
    embedder = ArcFaceEmbedder(make_arcface(tmp_path / "w600k_r50.onnx"))
    matrix = SimilarityTransform.from_estimate(ASTRONAUT_KPS, arcface_template(112)).params[:2]
    crop = cv2.warpAffine(image, matrix, (112, 112), borderMode=cv2.BORDER_REPLICATE)
    blob = ((crop.astype(np.float32) - 127.5) / 127.5).transpose(2, 0, 1)[None]
    expected = embedder.runner.run({embedder.runner.inputs[0].name: blob})[0][0]
    np.testing.assert_allclose(embedder.embed(image, ASTRONAUT_KPS), expected, atol=5e-3)


@pytest.mark.parametrize("batch", [1, "N"], ids=["fixed-1", "dynamic"])
def test_embed_crops_batches_whatever_the_file_allows(tmp_path: Path, batch: int | str) -> None:
    embedder = ArcFaceEmbedder(make_arcface(tmp_path / "w600k_r50.onnx", batch=batch))
    crops = np.random.default_rng(0).integers(0, 256, (3, 112, 112, 3), dtype=np.uint8)
    together = embedder.embed_crops(crops)
    assert together.shape == (3, 512) and together.dtype == np.float32
    single = np.concatenate([embedder.embed_crops(crops[i : i + 1]) for i in range(3)])
    np.testing.assert_allclose(together, single, atol=1e-5)
    assert embedder.embed_crops(crops[:0]).shape == (0, 512)


def test_fixed_and_dynamic_files_agree(tmp_path: Path, image: np.ndarray) -> None:
    fixed = ArcFaceEmbedder(make_arcface(tmp_path / "fixed.onnx", batch=1))
    dynamic = ArcFaceEmbedder(make_arcface(tmp_path / "dynamic.onnx", batch="None"))
    np.testing.assert_allclose(fixed.embed(image, ASTRONAUT_KPS), dynamic.embed(image, ASTRONAUT_KPS), atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"dim": 128}, "output '683' has shape [1,128], expected [N,512]"),
        ({"size": 96}, "input 'input.1' has shape [1,3,96,96], expected [N,3,112,112]"),
    ],
)
def test_signature_mismatches_name_the_file_and_the_problem(tmp_path: Path, kwargs: dict, problem: str) -> None:
    path = make_arcface(tmp_path / "w600k_r50.onnx", **kwargs)
    with pytest.raises(ModelFileError) as info:
        ArcFaceEmbedder(path)
    assert info.value.path == str(path)
    assert info.value.problem == problem
