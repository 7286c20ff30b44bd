"""``swapcast bench offline``: ``swapcast swap`` timed as a user runs it, and its command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

from swapcast.benchmarks.jobs import write_face_clip
from swapcast.benchmarks.offline import same_frames
from swapcast.cli import main


def test_bench_offline_reports_frames_per_second_marginal_cost_and_cores(capsys):
    assert main(["bench", "offline", "--frames", "40", "--rounds", "1", "--sizes", "640x480", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])
    current = report["sizes"]["640x480"]["current"]
    assert current["fps"] > 0 and current["wall_s"] > 0
    assert current["cores"] > 0
    # Differences of two runs 10 frames apart: numbers, but either sign under noise on a shared machine.
    assert math.isfinite(current["marginal_ms_per_frame"]) and math.isfinite(current["cpu_ms_per_frame"])
    assert "frames/s (the command's own)" in out and "target: >= 60 frames/s" in out
    assert "target: marginal <= 20 ms per frame" in out and "load average before" in out


def test_bench_offline_refuses_what_it_cannot_run(capsys, tmp_path):
    assert main(["bench", "offline", "--frames", "30"]) != 0
    assert "--frames must be more than 30" in capsys.readouterr().err
    assert main(["bench", "offline", "--baseline", str(tmp_path)]) != 0
    assert "not a swapcast checkout" in capsys.readouterr().err
    assert main(["bench", "offline", "--sizes", "320x200"]) != 0
    assert "unknown 320x200" in capsys.readouterr().err


def test_same_frames_tells_identical_outputs_from_different_ones(tmp_path: Path):
    first, again, other = tmp_path / "a.mp4", tmp_path / "b.mp4", tmp_path / "c.mp4"
    write_face_clip(first, 0.3, size=(160, 120), audio=False)
    write_face_clip(again, 0.3, size=(160, 120), audio=False)
    write_face_clip(other, 0.3, size=(160, 120), audio=False, preset="ultrafast")
    assert same_frames(first, again) == (True, 0.0)
    equal, worst = same_frames(first, other)
    assert not equal and worst > 0
