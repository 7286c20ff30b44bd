"""Logging a failure that may repeat on every frame.

A swap that fails sends the frame on unswapped, so the stream lives on; but a failure that
repeats (a lost GPU, out of device memory, a model that rejects its input) would write a
traceback for every frame: 30 a second per session. ``FailureLog`` writes the first one
with its traceback, then at most one line per interval with how many failed since."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class FailureLog:
    def __init__(self, logger: logging.Logger, what: str, *, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.what, self.interval_s, self._clock = logger, what, interval_s, clock
        self._last_report: float | None = None
        self._since_report = 0

    def failed(self) -> None:
        """Call from the ``except`` block (the traceback comes from there)."""
        now = self._clock()
        self._since_report += 1
        if self._last_report is not None and now - self._last_report < self.interval_s:
            return
        more = self._since_report - 1
        suffix = f" ({more} more like it in the last {now - self._last_report:.0f} s)" if more else ""
        self.logger.error("%s%s", self.what, suffix, exc_info=True)
        self._last_report, self._since_report = now, 0
