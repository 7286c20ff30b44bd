"""``swapcast models export --triton DIR``: the repository for the config's swap model and tracking graphs."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from model_twins import make_inswapper

from swapcast.cli import EXIT_BAD_INPUT, main


def test_export_writes_the_onnx_model_its_config_and_the_tensorrt_variant(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SWAPCAST_ENGINE__MAX_BATCH", "16")
    monkeypatch.setenv("SWAPCAST_ENGINE__MAX_QUEUE_DELAY_MS", "2.5")
    assert main(["models", "export", "--triton", str(tmp_path), "--instances", "2"]) == 0
    assert "mesh3d_swap" in capsys.readouterr().out
    model = onnx.load(str(tmp_path / "mesh3d_swap" / "1" / "model.onnx"))
    onnx.checker.check_model(model)
    config = (tmp_path / "mesh3d_swap" / "config.pbtxt").read_text()
    for line in ('name: "mesh3d_swap"', 'platform: "onnxruntime_onnx"', "max_batch_size: 16",
                 "preferred_batch_size: [ 4, 8, 16 ]", "max_queue_delay_microseconds: 2500",
                 "count: 2", "kind: KIND_GPU", 'name: "target"', "dims: [ 3, -1, -1 ]", 'name: "swapped"'):
        assert line in config, line
    trt = tmp_path / "mesh3d_swap_trt"
    assert 'platform: "tensorrt_plan"' in (trt / "config.pbtxt").read_text()
    assert "trtexec --onnx=../mesh3d_swap/1/model.onnx" in (trt / "BUILD.txt").read_text()
    # the tracking graphs the default tracker runs go beside it, batched the same way
    for name in ("face_landmark", "face_detection_short_range", "face_detection_full_range_sparse"):
        onnx.checker.check_model(onnx.load(str(tmp_path / name / "1" / "model.onnx")))
        tracking = (tmp_path / name / "config.pbtxt").read_text()
        assert f'name: "{name}"' in tracking and "max_batch_size: 16" in tracking, name
    assert "dims: [ 3, 192, 192 ]" in (tmp_path / "face_landmark" / "config.pbtxt").read_text()


def test_export_takes_the_users_inswapper_with_a_dynamic_batch(tmp_path: Path, monkeypatch) -> None:
    models = tmp_path / "models"
    models.mkdir()
    make_inswapper(models / "inswapper_128.onnx")
    monkeypatch.setenv("SWAPCAST_ENGINE__MODELS_DIR", str(models))
    assert main(["models", "export", "--triton", str(tmp_path / "repo"), "--kind", "cpu"]) == 0
    config = (tmp_path / "repo" / "inswapper_128" / "config.pbtxt").read_text()
    assert "dims: [ 3, 128, 128 ]" in config and "dims: [ 512 ]" in config and "KIND_CPU" in config
    exported = onnx.load(str(tmp_path / "repo" / "inswapper_128" / "1" / "model.onnx"))
    assert exported.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"


def test_export_refuses_bad_flags_with_a_message(tmp_path: Path, capsys) -> None:
    assert main(["models", "export", "--triton", str(tmp_path), "--instances", "0"]) == EXIT_BAD_INPUT
    assert "--instances must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse: usage and the reason, exit status 2
        main(["models", "export", "--triton", str(tmp_path), "--kind", "tpu"])
    assert exited.value.code == 2 and "invalid choice: 'tpu'" in capsys.readouterr().err
