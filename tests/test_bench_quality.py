"""``swapcast bench quality``: the quick run goes end to end with the ``mesh`` swapper and
writes sane numbers and pictures; a swapper that is not there is a message, not a crash."""

from __future__ import annotations

import json

import pytest

from streamer.media.images import read_image
from swapcast.benchmarks.quality import _engines
from swapcast.cli import main
from swapcast.config import load_config

pytestmark = pytest.mark.slow


def test_quick_run_writes_table_json_and_pictures(tmp_path, capsys):
    report = tmp_path / "quality"
    code = main(["bench", "quality", "--quick", "--swappers", "mesh", "--report", str(report), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    for row in ("yaw -45", "yaw +0", "yaw +30", "roll +30", "width 64", "light warm", "video yaw_sweep", "all stills"):
        assert row in out, f"table row {row!r} missing"
    data = json.loads((report / "quality.json").read_text())
    assert data["swappers"] == ["mesh"] and data["quick"] is True
    faces = data["faces"]
    stills = [f for f in faces if f["kind"] != "video"]
    frames = [f for f in faces if f["kind"] == "video"]
    assert len(stills) == 12 and len(frames) == 24  # 6 stills and a 12-frame clip per person, the other as source
    assert all(f["source"].split("/")[0] != f["target"].split("/")[0] for f in faces), "a source swapped onto itself"
    for face in stills:
        assert 0.0 < face["output_to_source"] < 1.5 and 0.0 < face["output_to_target"] < 1.5
        assert face["ms"] > 0
    frontal = [f for f in stills if f["group"] == "yaw +0"]
    assert all(f["detected"] and f["swapped"] for f in frontal)
    # a frontal swap with the built-in swapper reads as the source (the engine benchmark's bar)
    assert all(f["passed"] for f in frontal)
    summary = data["summary"]["mesh"]
    assert 0.0 <= summary["all"]["recall"] <= 1.0
    assert summary["kinds"]["video"]["flicker"] > 0
    assert summary["rows"]["yaw +0"]["faces"] == 2
    pictures = sorted(p.name for p in report.glob("*.png"))
    assert "astronaut_yawp30.png" in pictures and "grace_hopper_yaw_sweep.png" in pictures
    assert len(pictures) == 12 + 2
    picture = read_image(report / "astronaut_yawp30.png")
    assert picture.shape == (256, 3 * 256, 3)  # target | mesh | source
    # the mapping part: two people crossing, each wearing the other's face by a reference photo
    mapping = data["mapping"]["splits"]["tuning"]
    assert {row["person"] for row in mapping["people"]} == {"astronaut", "grace_hopper"}
    assert mapping["totals"]["frames_with_another"] == 0 and mapping["totals"]["correct"] >= 0.98
    assert "each person their own source" in out and (report / "mapping-tuning-cross-mesh.jpg").is_file()


def test_a_swapper_that_is_not_there_is_left_out_with_the_reason():
    engines, unavailable = _engines(load_config(None), ("mesh", "no-such-swapper"))
    try:
        assert list(engines) == ["mesh"]
        assert "no-such-swapper" in unavailable["no-such-swapper"]
    finally:
        for engine in engines.values():
            engine.close()


def test_no_available_swapper_is_bad_input(capsys):
    assert main(["bench", "quality", "--quick", "--swappers", "no-such-swapper"]) == 2
    captured = capsys.readouterr()
    assert "not available" in captured.out and "none of the swappers" in captured.err


def test_an_unknown_part_of_the_pose_set_is_bad_input(capsys):
    assert main(["bench", "quality", "--quick", "--swappers", "mesh", "--only", "yaw,somersault"]) == 2
    assert "unknown pose set part(s) somersault" in capsys.readouterr().err


def test_a_part_with_no_faces_prints_dashes():
    """`--only` with clips alone leaves the stills' summary empty: its row prints, not crashes."""
    from swapcast.benchmarks.quality import _aggregate, _cells

    cells = _cells(_aggregate([]))
    assert cells.split()[-1] == "-/-" and "nan" not in cells
