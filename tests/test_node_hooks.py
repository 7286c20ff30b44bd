"""What a node reports on each heartbeat: the device busy share of the last beat, not of
the batcher's whole life (an idle node must not go on showing its past load)."""

from __future__ import annotations

from swapcast.app import NodeHooksAdapter


def test_busy_share_is_of_the_last_beat():
    hooks = NodeHooksAdapter(node=None)  # only the arithmetic is exercised
    assert hooks._recent_busy_pct({"wall_s": 10.0, "device_busy_pct": 50.0}) == 50.0  # first beat: its own figure
    assert hooks._recent_busy_pct({"wall_s": 20.0, "device_busy_pct": 25.0}) == 0.0  # idle since: 5 s busy of 20
    assert round(hooks._recent_busy_pct({"wall_s": 22.0, "device_busy_pct": 31.818181818}), 3) == 100.0
    assert hooks._recent_busy_pct({"wall_s": 1.0, "device_busy_pct": 40.0}) == 40.0  # a new batcher
    assert hooks._recent_busy_pct({}) == 0.0  # no batcher yet
