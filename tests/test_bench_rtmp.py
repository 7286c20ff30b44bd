"""`swapcast bench rtmp` runs end to end against a real `swapcast serve` and reports real numbers."""

import json

from swapcast.cli import main


def test_bench_rtmp_reports_latency_fps_and_cpu(capsys):
    assert main(["bench", "rtmp", "--publishers", "1", "--seconds", "3", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])
    run = report["runs"]["1"]
    stream = run["streams"][0]
    assert stream["frames_sent"] >= 80  # ~30 fps for 3 s
    assert 0 < stream["frames_out"] <= stream["frames_sent"]
    assert 0 < run["latency_p50_ms"] <= run["latency_p99_ms"] < 5000
    assert run["server_cpu_per_stream"] > 0 and run["server_rss_mb"] > 100
    assert "target: one publisher re-published at >= 25 fps" in out
