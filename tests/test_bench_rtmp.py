"""`swapcast bench rtmp` runs end to end against a real `swapcast serve` and reports real numbers."""

import json

from swapcast.cli import main


def test_bench_rtmp_reports_latency_fps_cpu_and_how_a_stream_goes_on_air(capsys):
    assert main(["bench", "rtmp", "--publishers", "1", "--seconds", "3", "--on-air-seconds", "3", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])
    run = report["runs"]["1"]
    stream = run["streams"][0]
    assert stream["frames_sent"] >= 80  # ~30 fps for 3 s
    assert 0 < stream["frames_out"] <= stream["frames_sent"]
    assert 0 < run["latency_p50_ms"] <= run["latency_p99_ms"] < 5000
    assert run["server_cpu_per_stream"] > 0 and run["server_rss_mb"] > 100
    assert "target: one publisher re-published at >= 25 fps" in out
    on_air = report["on_air"]  # a 3 s OBS-like clip (90 frames, B-frames, AAC) to a key with a push destination
    assert on_air["video_published"] == 90 and 0 < on_air["video_delivered"] <= 90
    assert on_air["audio_published"] > 100 and on_air["audio_delivered"] > 0
    assert on_air["first_frame_s"] is not None and on_air["first_frame_s"] > 0
    assert on_air["metadata"]["encoder"] == "swapcast" and on_air["metadata"]["width"] == 640.0
    assert "target: first swapped frame at the destination <= 1 s" in out
    assert "target: >= 95% of the published frames at the destination" in out
