"""A session's swap worker that cannot go on ends its session (the reason logged, the
manager told) instead of dying silently and leaving the session up with no video."""

from __future__ import annotations

import asyncio

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from streamer.webrtc.swapped_track import SwappedVideo


class TinyCamera(MediaStreamTrack):
    """A peer that sends pictures one pixel wide (what a crafted WHIP client can)."""

    kind = "video"

    def __init__(self, frames: int) -> None:
        super().__init__()
        self._left = frames

    async def recv(self) -> av.VideoFrame:
        if self._left == 0:
            await asyncio.Event().wait()
        self._left -= 1
        await asyncio.sleep(0.01)
        frame = av.VideoFrame.from_ndarray(np.zeros((64, 1, 3), np.uint8), format="rgb24")
        frame.pts = 0
        return frame


def test_a_picture_the_encoders_cannot_take_ends_the_session_with_a_reason():
    async def scenario() -> tuple[str | None, int, bool]:
        video = SwappedVideo("tiny")
        ended = asyncio.Event()
        video.attach(TinyCamera(5), on_end=ended.set)
        await asyncio.wait_for(ended.wait(), 10)
        output = video.output()
        await video.close()
        try:
            await asyncio.wait_for(output.recv(), 5)
            ends_consumers = False
        except MediaStreamError:
            ends_consumers = True
        return video.failure, video.stats.frames_out, ends_consumers

    failure, frames_out, ends_consumers = asyncio.run(scenario())
    assert failure is not None and "1x64" in failure and "cannot be re-encoded" in failure
    assert frames_out == 0 and ends_consumers
