"""A value each video track reads every few frames and smooths over its readings.

Some per-face readings cost enough not to be taken every frame (the blur of a face's edges,
the light of its eyes), and a value that followed each frame's reading would pulse: a track
keeps its value between readings and folds each new one in, and keeps it through a reading
that finds nothing. A still (no track, or a negative id) takes its own reading every time.
The least recently seen tracks are forgotten beyond a bound."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

Value = TypeVar("Value")


class ReadingsPerTrack(Generic[Value]):
    """Per track: its value, read every ``every`` frames; ``fold(known, reading)`` takes a
    reading into the value the track had."""

    def __init__(self, every: int, fold: Callable[[Value, Value], Value], max_tracks: int = 64) -> None:
        self._every = every
        self._fold = fold
        self._values: OrderedDict[int, tuple[Value, int]] = OrderedDict()  # track -> (value, frames since read)
        self._lock = threading.Lock()
        self._max_tracks = max_tracks

    def known(self, track_id: int | None) -> Value | None:
        """The track's value while no reading is due (counting this frame), else None."""
        if track_id is None or track_id < 0:
            return None
        with self._lock:
            entry = self._values.get(track_id)
            if entry is None or entry[1] + 1 >= self._every:
                return None
            self._values[track_id] = (entry[0], entry[1] + 1)
            self._values.move_to_end(track_id)
            return entry[0]

    def update(self, track_id: int | None, reading: Value | None) -> Value | None:
        """The track's value with this frame's ``reading`` taken in (None: nothing was read,
        the value it had is kept)."""
        if track_id is None or track_id < 0:
            return reading
        with self._lock:
            entry = self._values.pop(track_id, None)
            if entry is None:
                value = reading
            elif reading is None:
                value = entry[0]
            else:
                value = self._fold(entry[0], reading)
            if value is not None:
                self._values[track_id] = (value, 0)
                while len(self._values) > self._max_tracks:
                    self._values.popitem(last=False)
        return value
