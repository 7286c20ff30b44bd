"""``swapcast bench engine --trackers``: both backends measured in one run, accuracy rows
against every reference; a bad backend name is refused with its reason."""

from __future__ import annotations

import json

import numpy as np
import pytest

from swapcast.benchmarks import pose_set, tracking
from swapcast.cli import main


@pytest.fixture
def small_pose_set(monkeypatch, grace_image):
    """One still and one short clip with their truth (the real pose set renders for minutes)."""
    frames = [np.ascontiguousarray(grace_image[:480, :512]) for _ in range(3)]
    mesh = np.zeros((468, 2), np.float32) + [250.0, 250.0]  # a truth the size of a point: errors are large, not absent
    still = pose_set.PoseSample("grace_hopper/test", "grace_hopper", "yaw", frames[0], mesh)
    clip = pose_set.PoseClip("grace_hopper/test", "grace_hopper", "pan", frames, [mesh] * 3)
    monkeypatch.setattr(pose_set, "pose_set", lambda quick=False: iter([still]))
    monkeypatch.setattr(pose_set, "pose_clips", lambda quick=False: iter([clip]))
    monkeypatch.setattr(tracking, "ROUNDS", 1)


@pytest.mark.slow
def test_trackers_are_compared_in_one_run(small_pose_set, capsys) -> None:
    code = main(["bench", "engine", "--trackers", "mediapipe,graphs", "--seconds", "0.3", "--device", "cpu", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert set(report["cost"]) == {f"{name}/{count}" for name in ("mediapipe", "graphs") for count in tracking.SESSION_COUNTS}
    for run in report["cost"].values():
        assert run["frames"] > 0 and run["cpu_ms_per_frame"] > 0
    assert report["cost"]["graphs/4"]["landmark_batch"] >= 1.0
    clips = report["accuracy"]["pose set clips"]
    assert {"graphs vs mediapipe", "graphs vs facemesh", "graphs vs truth", "mediapipe vs truth"} <= set(clips)
    occluded = report["accuracy"]["occluded clips"]  # the clip with each object in front
    assert occluded["graphs vs truth"]["faces"] + occluded["graphs vs truth"]["missed"] == 4 * 3
    assert clips["graphs vs truth"]["face_pct_max"] >= clips["graphs vs truth"]["face_pct_mean"] > 0
    assert clips["graphs vs mediapipe"]["mean_px"] < 2.0  # both track the same face
    assert clips["graphs vs truth"]["mean_px"] > 10.0  # the point-sized truth is far from every mesh point
    assert "graphs    4 session(s)" in captured.out


def test_an_unknown_tracker_is_refused(capsys) -> None:
    assert main(["bench", "engine", "--trackers", "mediapipe,dlib"]) == 2
    assert "unknown tracker(s) dlib" in capsys.readouterr().err
