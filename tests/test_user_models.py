"""Discovery of the user's model files and the signature checks every loader shares."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpu.analysis.arcface import ArcFaceEmbedder
from gpu.analysis.scrfd import ScrfdDetector
from gpu.errors import ModelFileError
from gpu.models.signatures import check_count, check_tensor, find, load_onnx
from gpu.models.user_models import UserModels
from gpu.runners.base import TensorSpec
from gpu.swappers.inswapper import InswapperSwapper
from model_twins import make_arcface

ALL_FILES = ("det_10g.onnx", "w600k_r50.onnx", "inswapper_128.onnx", "inswapper_128_fp16.onnx")


def _touch(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"")


def test_discover_finds_every_file_in_a_facefusion_folder(tmp_path: Path) -> None:
    _touch(tmp_path, *ALL_FILES)
    models = UserModels.discover(tmp_path)
    assert models.directory == tmp_path
    assert models.detector == tmp_path / "det_10g.onnx"
    assert models.embedder == tmp_path / "w600k_r50.onnx"
    assert models.swapper == tmp_path / "inswapper_128.onnx"


def test_discover_finds_an_insightface_pack_one_level_down(tmp_path: Path) -> None:
    _touch(tmp_path / "buffalo_l", "det_10g.onnx", "w600k_r50.onnx")
    _touch(tmp_path, "inswapper_128_fp16.onnx")
    models = UserModels.discover(str(tmp_path))
    assert models.detector == tmp_path / "buffalo_l" / "det_10g.onnx"
    assert models.embedder == tmp_path / "buffalo_l" / "w600k_r50.onnx"
    assert models.swapper == tmp_path / "inswapper_128_fp16.onnx"


def test_discover_leaves_absent_files_none(tmp_path: Path) -> None:
    _touch(tmp_path, "w600k_r50.onnx", "readme.txt")
    models = UserModels.discover(tmp_path)
    assert (models.detector, models.swapper) == (None, None)
    assert models.embedder == tmp_path / "w600k_r50.onnx"


@pytest.mark.parametrize(
    ("present", "prefer_fp16", "expected"),
    [
        (("inswapper_128.onnx", "inswapper_128_fp16.onnx"), False, "inswapper_128.onnx"),
        (("inswapper_128.onnx", "inswapper_128_fp16.onnx"), True, "inswapper_128_fp16.onnx"),
        (("inswapper_128_fp16.onnx",), False, "inswapper_128_fp16.onnx"),
        (("inswapper_128.onnx",), True, "inswapper_128.onnx"),
    ],
)
def test_discover_swapper_fp16_preference(
    tmp_path: Path, present: tuple[str, ...], prefer_fp16: bool, expected: str
) -> None:
    _touch(tmp_path, *present)
    assert UserModels.discover(tmp_path, prefer_fp16=prefer_fp16).swapper == tmp_path / expected


def test_discover_missing_directory_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-models"
    with pytest.raises(ModelFileError) as info:
        UserModels.discover(missing)
    assert info.value.path == str(missing)
    assert info.value.problem == "models directory not found"


def test_discover_refuses_a_file_for_a_directory(tmp_path: Path) -> None:
    _touch(tmp_path, "det_10g.onnx")
    with pytest.raises(ModelFileError, match="not a directory") as info:
        UserModels.discover(tmp_path / "det_10g.onnx")
    assert info.value.path == str(tmp_path / "det_10g.onnx")


def test_load_onnx_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError) as info:
        load_onnx(tmp_path / "det_10g.onnx")
    assert (info.value.path, info.value.problem) == (str(tmp_path / "det_10g.onnx"), "file not found")


@pytest.mark.parametrize("content", [b"this is not a model\n", b"", b"\x00\x01\x02garbage" * 50])
@pytest.mark.parametrize("loader", ["detector", "embedder", "swapper"])
def test_every_loader_refuses_a_non_onnx_file(tmp_path: Path, content: bytes, loader: str) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    embedder = ArcFaceEmbedder(make_arcface(tmp_path / "w600k_r50.onnx"))
    build = {
        "detector": lambda: ScrfdDetector(path),
        "embedder": lambda: ArcFaceEmbedder(path),
        "swapper": lambda: InswapperSwapper(path, embedder),
    }[loader]
    with pytest.raises(ModelFileError) as info:
        build()
    assert info.value.path == str(path)
    assert info.value.problem.startswith("not an ONNX model")
    assert str(path) in str(info.value)


def _spec(shape: tuple[int | str | None, ...], dtype: type = np.float32, name: str = "target") -> TensorSpec:
    return TensorSpec(name, shape, np.dtype(dtype))


def test_check_tensor_names_the_shape_mismatch() -> None:
    with pytest.raises(ModelFileError) as info:
        check_tensor("m.onnx", "input", _spec((1, 3, 256, 256)), ("N", 3, 128, 128))
    assert str(info.value) == "m.onnx: input 'target' has shape [1,3,256,256], expected [N,3,128,128]"


def test_check_tensor_names_the_rank_mismatch() -> None:
    with pytest.raises(ModelFileError) as info:
        check_tensor("m.onnx", "output", _spec((1, 512), name="683"), ("N", 512, 1))
    assert info.value.problem == "output '683' has shape [1,512], expected [N,512,1]"


def test_check_tensor_names_the_dtype_mismatch() -> None:
    with pytest.raises(ModelFileError) as info:
        check_tensor("m.onnx", "input", _spec((1, 512), np.float64, "source"), ("N", 512))
    assert info.value.problem == "input 'source' has type float64, expected float32"


def test_check_tensor_accepts_symbolic_and_matching_dims() -> None:
    check_tensor("m.onnx", "input", _spec(("batch", 3, None, 128), np.float16), ("N", 3, 128, 128),
                 (np.dtype(np.float32), np.dtype(np.float16)))
    check_tensor("m.onnx", "input", _spec((7, 3, 128, 128)), ("N", 3, 128, 128))


def test_check_count_and_find_name_what_is_there() -> None:
    specs = (_spec((1, 512), name="a"), _spec((1, 512), name="b"))
    with pytest.raises(ModelFileError) as info:
        check_count("m.onnx", "output", specs, 1)
    assert info.value.problem == "has 2 outputs ('a', 'b'), expected 1"
    with pytest.raises(ModelFileError) as info:
        find("m.onnx", "input", specs, "source")
    assert info.value.problem == "has no input 'source' (inputs: 'a', 'b')"
    assert find("m.onnx", "input", specs, "b") is specs[1]
