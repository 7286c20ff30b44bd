"""Keeps audio in step with swapped video.

Video leaves the swap a few tens of milliseconds after it arrived while audio is ready at
once. Audio is therefore held until video up to its timestamp has gone out (or until it
has waited ``max_hold_s``, or ``MAX_HELD`` messages wait, so audio never stalls when video
stops and the hold stays bounded), and the outputs get
one stream interleaved in timestamp order: the delay follows the measured video latency."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from streamer.rtmp.handler import MediaMessage


class AudioDelay:
    MAX_HELD = 256  # ~5 s of AAC frames: a publisher flooding audio does not grow the hold

    def __init__(self, emit: Callable[[MediaMessage], None], max_hold_s: float = 0.5) -> None:
        self._emit = emit
        self._max_hold_s = max_hold_s
        self._held: deque[tuple[float, MediaMessage]] = deque()
        self._video_out = -1  # timestamp of the last video frame sent

    def audio(self, message: MediaMessage) -> None:
        self._held.append((time.monotonic(), message))
        self.flush()

    def video(self, message: MediaMessage) -> None:
        self._video_out = max(self._video_out, message.timestamp)
        self.flush()
        self._emit(message)

    def flush(self) -> None:
        """Send held audio that video has caught up with, and audio held too long."""
        limit = time.monotonic() - self._max_hold_s
        while self._held:
            arrived, message = self._held[0]
            if message.timestamp > self._video_out and arrived > limit and len(self._held) <= self.MAX_HELD:
                break
            self._held.popleft()
            self._emit(message)

    def drain(self) -> None:
        while self._held:
            self._emit(self._held.popleft()[1])

    def close(self) -> None:
        """Drop held audio and let go of the output (a stream's own method: a cycle that would
        keep the whole stream in memory until the garbage collector's next full pass)."""
        self._held.clear()
        self._emit = _discard


def _discard(message: MediaMessage) -> None:
    pass
