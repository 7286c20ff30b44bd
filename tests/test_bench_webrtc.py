"""``swapcast bench webrtc``: a short real run (1 session, then 2) against a ``swapcast serve``
child process on 127.0.0.1, and the command line entry."""

from __future__ import annotations

import json
from fractions import Fraction

import av
import numpy as np
import pytest

from swapcast.benchmarks.webrtc import (
    HEIGHT,
    WIDTH,
    _table,
    burn_counter,
    clip_i420,
    measure_webrtc,
    read_counter,
    unwrap,
)
from swapcast.cli import build_parser, main


def test_counter_survives_a_real_h264_round_trip():
    """The barcode reads back exactly after x264 (ultrafast, low bitrate) and decoding."""
    clip = clip_i420()
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = WIDTH, HEIGHT, "yuv420p"
    encoder.bit_rate = 500_000
    encoder.time_base = Fraction(1, 30)
    encoder.options = {"preset": "ultrafast", "tune": "zerolatency"}
    decoder = av.CodecContext.create("h264", "r")
    numbers = [0, 1, 2, 255, 4096, 30000, 65535, 65536 + 7]
    read = []
    for index, number in enumerate(numbers):
        yuv = clip[index % len(clip)].copy()
        burn_counter(yuv[:HEIGHT], number)
        frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p")
        frame.pts, frame.time_base = index, Fraction(1, 30)
        for packet in encoder.encode(frame):
            for decoded in decoder.decode(packet):
                read.append(read_counter(decoded.to_ndarray(format="gray")))
    for packet in encoder.encode(None):
        for decoded in decoder.decode(packet):
            read.append(read_counter(decoded.to_ndarray(format="gray")))
    assert read == [n % 65536 for n in numbers]
    assert read_counter(np.full((HEIGHT, WIDTH), 128, np.uint8)) is None  # no barcode: unreadable, not misread
    assert unwrap(7, 65536 + 8) == 65536 + 7 and unwrap(5, 3) == -1 and unwrap(65535, 65536) == 65535


def test_cli_entry_parses():
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "webrtc", "--help"])
    assert exit_.value.code == 0
    args = build_parser().parse_args(["bench", "webrtc", "--sessions", "3", "--seconds", "5", "--glass", "--json"])
    assert (args.sessions, args.seconds, args.glass, args.json) == ([3], 5.0, True, True)
    args = build_parser().parse_args(["bench", "webrtc", "--sessions", "1,2,4", "--processes", "1,2", "--gil"])
    assert (args.sessions, args.processes, args.gil) == ([1, 2, 4], [1, 2], True)
    assert main(["bench", "webrtc", "--sessions", "0"]) == 2  # bad input: one line, exit 2
    assert main(["bench", "webrtc", "--processes", "1,0"]) == 2
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "webrtc", "--sessions", "1,x"])
    assert exit_.value.code == 2


def test_one_then_two_sessions_real_numbers():
    report = measure_webrtc(sessions=2, seconds=4, warmup_s=1.0)
    json.dumps(report)  # --json prints it

    one, two = report["phases"]
    assert (one["sessions"], two["sessions"]) == (1, 2)
    assert len(one["per_session"]) == 1 and len(two["per_session"]) == 2
    for phase in (one, two):
        assert phase["fps_out_total"] > 0
        assert 0 < phase["rtt_p50_ms"] <= phase["rtt_p99_ms"] < 10_000
        assert phase["server_latency_p50_ms"] > 0 and phase["server_latency_p99_ms"] >= phase["server_latency_p50_ms"]
        assert phase["rtt_p99_first_half_ms"] > 0 and phase["rtt_p99_second_half_ms"] > 0
        assert phase["server_cpu_cores"] > 0 and phase["client_cpu_cores"] > 0
        assert phase["server_rss_mb"] > 100
        # per stage: the swap thread's CPU per decoded frame, the node's /healthz answer time
        assert phase["server_cpu_ms_per_frame_in_by_thread"]["swap (track, prepare, run, paste)"] > 0
        assert 0 < phase["loop_lag_ms"]["p50_ms"] <= phase["loop_lag_ms"]["p99_ms"]
        assert len(phase["core_busy"]) >= 1 and all(0 <= c <= 1.05 for c in phase["core_busy"])
        assert phase["gil_held"] is None  # only with gil=True
        by_stage = phase["swap_thread_cpu_ms_per_frame_out"]  # the node's own CPU count per stage
        assert by_stage["track"] > 0 and by_stage["convert"] > 0 and by_stage["paste"] >= 0
        assert any(row["faces_swapped"] >= 1 for row in phase["per_session"])  # the node found and swapped the face
        for row in phase["per_session"]:
            # 30 fps paced for ~4 s
            assert 60 <= row["sent"] <= 200, row
            assert 0 < row["received"] <= row["sent"] and row["received"] + row["dropped"] == row["sent"]
            assert row["fps_out"] > 0 and row["rtt_p50_ms"] > 0
            assert 0 < row["server_frames_in"] <= row["sent"] + 5  # the node saw what was sent
            counters = row["counters"]
            # every received frame's number was read, was one that was sent, came once and in order
            assert counters["decoded"] > 0
            assert counters["out_of_range"] == 0 and counters["duplicates"] == 0 and counters["out_of_order"] == 0
            assert counters["unreadable"] <= max(2, counters["decoded"] // 20), counters
    assert report["server_idle"]["rss_mb"] > 100
    assert report["server_peak_rss_mb"] >= two["server_rss_mb"]
    assert isinstance(report["memory_per_extra_session_mb"], float)
    table = "\n".join(_table(report))
    assert "server CPU cores (per session)" in table and "per session at 30 fps out" in table
    # the node's own /metrics agree: every stage observed, frames out of the node's webrtc sessions
    scraped = report["metrics"]
    assert set(scraped["stage_mean_ms"]) >= {"track", "identity", "prepare", "run", "paste", "total"}
    assert 0 < scraped["stage_mean_ms"]["run"] < scraped["stage_mean_ms"]["total"]
    assert scraped["frames"]["out"] >= sum(row["received"] for p in (one, two) for row in p["per_session"]) * 0.9


@pytest.mark.slow
def test_two_node_processes_behind_a_gateway():
    """``--processes 2``: two ``swapcast serve`` nodes and a gateway on a loopback Redis; both
    sessions are swapped and come back through it, the CPU of all three processes counted."""
    report = measure_webrtc(sessions=2, seconds=3, warmup_s=1.0, counts=[2], processes=2)
    (phase,) = report["phases"]
    assert report["processes"] == 2 and phase["sessions"] == 2
    assert all(row["fps_out"] > 0 and row["faces_swapped"] >= 1 for row in phase["per_session"])
    assert report["server_idle"]["rss_mb"] > 2 * 100  # two nodes (each > 100 MB) and the gateway
    assert phase["loop_lag_ms"]["p50_ms"] > 0
    assert report["metrics"]["frames"]["out"] > 0  # both nodes' /metrics, summed
