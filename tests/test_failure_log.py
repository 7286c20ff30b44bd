"""A failure on every frame writes one traceback, then one summary line per interval."""

from __future__ import annotations

import logging

import pytest

from streamer.pipeline.failure_log import FailureLog


def test_repeated_failures_are_summarised(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    failures = FailureLog(logging.getLogger("test.failures"), "swap failed", interval_s=10.0, clock=lambda: now[0])
    caplog.set_level(logging.ERROR, logger="test.failures")

    for frame in range(300):  # 10 s at 30 fps, then 1 more
        now[0] = 100.0 + frame / 30
        try:
            raise RuntimeError(f"out of memory on frame {frame}")
        except RuntimeError:
            failures.failed()
    now[0] = 110.0
    try:
        raise RuntimeError("out of memory again")
    except RuntimeError:
        failures.failed()

    records = caplog.records
    assert [r.getMessage() for r in records] == ["swap failed", "swap failed (299 more like it in the last 10 s)"]
    assert "frame 0" in str(records[0].exc_info[1]) and "again" in str(records[1].exc_info[1])  # tracebacks kept


def test_failures_far_apart_are_each_logged(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    failures = FailureLog(logging.getLogger("test.rare"), "swap failed", interval_s=5.0, clock=lambda: now[0])
    caplog.set_level(logging.ERROR, logger="test.rare")
    for moment in (0.0, 6.0, 20.0):
        now[0] = moment
        try:
            raise ValueError("bad frame")
        except ValueError:
            failures.failed()
    assert [r.getMessage() for r in caplog.records] == ["swap failed"] * 3
