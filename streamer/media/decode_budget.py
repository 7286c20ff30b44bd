"""What one decode of a user's bytes may cost: frames decoded, pixels decoded and wall time.

A file's own numbers are no bound. Timestamps say how much media time has passed (20,000
frames fit in 0.22 s at 90 kHz), a reader that skips frames it cannot use never reaches its
frame limit if it counts only the frames it kept, and a static picture compresses to a few
bytes a frame, so a 335 KB upload held 20,000 frames at 1280x720. A ``DecodeBudget`` counts
every frame that came out of the decoder, used or not, before anything else looks at it,
and the pixels and seconds spent; the reader asks it first, each frame.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpu.errors import SwapcastError


class DecodeBudgetExceeded(SwapcastError):
    """A decode went past one of its bounds; the message names which."""

    status = 422


@dataclass
class DecodeBudget:
    """Bounds of one decode; the wall time counts from when the budget is made."""

    max_frames: int
    max_pixels: int
    max_seconds: float
    clock: Callable[[], float] = time.monotonic
    frames: int = 0
    pixels: int = 0
    _started: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._started = self.clock()

    def charge(self, width: int, height: int) -> None:
        """Count one decoded frame of ``width`` x ``height``; ``DecodeBudgetExceeded`` once
        the frames, the pixels or the wall time are over."""
        self.frames += 1
        self.pixels += width * height
        if self.frames > self.max_frames:
            raise DecodeBudgetExceeded(f"decoded more than {self.max_frames:,} frames")
        if self.pixels > self.max_pixels:
            raise DecodeBudgetExceeded(f"decoded more than {self.max_pixels:,} pixels")
        self.check_time()

    def check_time(self) -> None:
        """``DecodeBudgetExceeded`` once the wall time is over (between packets too: a
        decoder may take many before it gives a frame)."""
        if self.clock() - self._started > self.max_seconds:
            raise DecodeBudgetExceeded(f"decoding took more than {self.max_seconds:g} s")
