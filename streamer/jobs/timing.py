"""Frame count and duration of a video stream, measured from its packets (no decoding).

The split measures the input this way and the assembly measures its output the same way,
so "same frame count, duration within one frame" compares like with like. One packet is
one frame for the codecs this applies to (H.264/HEVC/VP9/AV1 in mp4, mov, mkv).

What counts is what a player shows: a file trimmed by stream copy (``ffmpeg -ss 2 -i in.mp4
-c copy``, phone and desktop editors) keeps the packets from the keyframe before the cut,
with an edit list that starts playback at the cut; the demuxer flags those lead packets
``is_discard`` and the decoder drops their frames. They are not counted (a 2 s trim held
122 packets, 62 of them shown, and its job failed "rendered 62 frames where the input has 122").
"""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise

import av


class VideoTiming:
    """Feed packets with ``add``; read ``frames``, ``duration_s`` (first frame's start to the
    last frame's end) and ``frame_s`` (the typical frame interval)."""

    def __init__(self, time_base: Fraction) -> None:
        self.time_base = time_base
        self._pts: list[int] = []
        self._end: int | None = None  # the latest pts + duration of the packets that had a duration
        self._open_end: int | None = None  # the latest pts whose packet had no duration

    def add(self, packet: av.Packet) -> bool:
        """Count a packet a player shows; False for the demuxer's empty end-of-stream packets
        and for packets an edit list cuts out (``is_discard``)."""
        pts = packet.pts if packet.pts is not None else packet.dts
        if pts is None or packet.size == 0 or packet.is_discard:
            return False
        self._pts.append(pts)
        if packet.duration:
            end = pts + packet.duration
            self._end = end if self._end is None else max(self._end, end)
        elif self._open_end is None or pts > self._open_end:
            self._open_end = pts
        return True

    @property
    def frames(self) -> int:
        return len(self._pts)

    @property
    def start(self) -> int:
        return min(self._pts)

    def interval(self) -> int:
        """The median gap between consecutive frames, in time-base ticks (1 when unknown)."""
        ordered = sorted(self._pts)
        gaps = sorted(b - a for a, b in pairwise(ordered) if b > a)
        return gaps[len(gaps) // 2] if gaps else 1

    @property
    def frame_s(self) -> float:
        return float(self.interval() * self.time_base)

    @property
    def end(self) -> int:
        """Where the last frame ends, in time-base ticks."""
        ends = [] if self._end is None else [self._end]
        if self._open_end is not None:
            ends.append(self._open_end + self.interval())
        return max(ends)

    @property
    def duration_s(self) -> float:
        return float((self.end - self.start) * self.time_base) if self._pts else 0.0
