"""A live publisher sends in real time, give or take a burst; one that does not is told so.

What waits for a decoder is bounded (an RTMP stream's hand-over to its thread, a WebRTC
receiver's decoder queue), so a flood never grows memory, but every sample up to a drop is
still decoded: a publisher that sends
far faster than real time keeps a core busy decoding pictures nobody sees, whether by
mistake (``ffmpeg -i file.mp4 ... rtmp://`` or a WHIP push without ``-re`` pushes a file as fast as it
reads) or on purpose. Counted as samples arrive, before any decoding: over the last
``PACE_WINDOW_S`` of wall time, no more than ``MAX_MEDIA_SPEED`` times as much media time
(by the samples' own timestamps, each step counted up to ``MAX_STEP_MS`` so that a jump
in the timestamps is not taken for speed) and no more than ``MAX_FRAME_RATE`` pictures a
second (timestamps that barely move do not hide a flood either). A start-up burst (what
OBS encoded while it connected, a few seconds) is well inside both.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

PACE_WINDOW_S = 10.0
MAX_MEDIA_SPEED = 2.0  # media seconds per wall second, over the window
MAX_FRAME_RATE = 240.0  # pictures per wall second, over the window
MAX_STEP_MS = 1000  # a step between two samples' timestamps counts up to this
# whichever bound trips, the publisher reads the same advice (ffmpeg prints it from onStatus)
REAL_TIME_ADVICE = "faster than real time: publish at the video's own pace (ffmpeg: -re before -i)"


class PublishingTooFast(Exception):
    """The publisher sends faster than real time; the message says so in its terms."""


class PublishPace:
    """Counts one stream's video samples as they arrive; ``PublishingTooFast`` past a bound."""

    def __init__(self, window_s: float = PACE_WINDOW_S, max_speed: float = MAX_MEDIA_SPEED,
                 max_frame_rate: float = MAX_FRAME_RATE, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s, self.max_speed, self.max_frame_rate = window_s, max_speed, max_frame_rate
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque()  # (arrival, media seconds so far)
        self._media_s = 0.0
        self._last_dts: int | None = None

    def count(self, dts_ms: int) -> None:
        """Count one video sample with decode timestamp ``dts_ms``."""
        now = self._clock()
        if self._last_dts is not None:
            self._media_s += min(max(dts_ms - self._last_dts, 0), MAX_STEP_MS) / 1000.0
        self._last_dts = dts_ms
        samples = self._samples
        samples.append((now, self._media_s))
        while now - samples[0][0] > self.window_s:
            samples.popleft()
        if len(samples) > self.max_frame_rate * self.window_s:
            raise PublishingTooFast(f"more than {self.max_frame_rate * self.window_s:.0f} pictures in {self.window_s:g} s "
                                    f"(over {self.max_frame_rate:g} a second), {REAL_TIME_ADVICE}")
        media = self._media_s - samples[0][1]
        if media > self.max_speed * self.window_s:
            raise PublishingTooFast(f"{media:.0f} s of video in the last {self.window_s:g} s, {REAL_TIME_ADVICE}")

    def restart(self) -> None:
        """A new publish starts afresh (its timestamps and its start-up burst)."""
        self._samples.clear()
        self._media_s, self._last_dts = 0.0, None
