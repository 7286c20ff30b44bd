"""The quick mode of ``swapcast bench fuzz``: 2,000 mutated inputs over every layer (HTTP API,
SDP, uploads, RTMP handshake/chunks/AMF/FLV/play) against a real ``swapcast serve``; none may
reach a 5xx, hang, or leave a traceback, and the node must stay up with its threads and RSS
within bounds. The full run (``swapcast bench fuzz``: 100,000 inputs) uses the same code."""

from __future__ import annotations

import pytest

from swapcast.benchmarks.fuzz import run_fuzz

LAYERS = {"http", "sdp", "upload", "events", "rtmp-handshake", "rtmp-chunk", "rtmp-amf", "rtmp-flv", "rtmp-play"}


def test_two_thousand_inputs_leave_the_node_well(tmp_path):
    figures = run_fuzz(inputs=2000, seconds=300, seed=20261201, report_dir=tmp_path)
    assert figures.inputs >= 2000, figures.line()
    assert set(figures.by_layer) >= LAYERS, figures.by_layer  # rtmp-hold is rare here: tests/fuzz/test_fuzz_hold.py
    assert figures.node_alive
    if figures.failures:  # pytest.fail's text is never cut short, as an assertion's repr is
        findings = "\n".join(f"- {f['layer']} {f['label']}: {f['problem'][:600]}" for f in figures.findings[:8])
        pytest.fail(f"{figures.failures}\n{figures.line()}\n{findings}", pytrace=False)
