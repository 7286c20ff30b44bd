"""``swapcast models convert``: converts the wheel's face models into a cache folder once."""

from __future__ import annotations

from pathlib import Path

import onnx

from swapcast.cli import EXIT_BAD_INPUT, main


def test_models_convert_fills_the_cache_and_reuses_it(tmp_path: Path, capsys) -> None:
    cache = tmp_path / "cache"
    assert main(["models", "convert", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    converted = sorted(cache.glob("*.onnx"))
    assert [p.name.split("-")[0] for p in converted] == [
        "face_detection_full_range_sparse", "face_detection_short_range", "face_landmark",
        "hand_landmark_lite", "palm_detection_full",
    ]
    for path in converted:
        assert str(path) in out
        onnx.checker.check_model(onnx.load(str(path)))
    written = {p: p.stat().st_mtime_ns for p in converted}
    assert main(["models", "convert", "--cache-dir", str(cache)]) == 0
    assert {p: p.stat().st_mtime_ns for p in sorted(cache.glob("*.onnx"))} == written


def test_models_convert_without_a_cache_folder_says_how_to_give_one(capsys, monkeypatch) -> None:
    monkeypatch.delenv("SWAPCAST_ENGINE__ENGINE_CACHE_DIR", raising=False)
    assert main(["models", "convert"]) == EXIT_BAD_INPUT
    assert "--cache-dir" in capsys.readouterr().err
