"""The peer's audio, passed back delayed by the measured video latency (lips stay in sync).

A reader task pulls the peer's audio frames and stamps their arrival; every consumer (the
peer's own sender, WHEP viewers) gets a :class:`DelayedAudioOutput` that hands each frame
out no earlier than ``arrival + delay()``, where ``delay`` is the session's smoothed
server-added video latency. Audio is never dropped, only delayed (each consumer's backlog is
capped at a few seconds, oldest first out).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

MAX_DELAY_S = 1.0
BACKLOG_FRAMES = 250  # 5 s of 20 ms frames


class DelayedAudio:
    def __init__(self, delay: Callable[[], float]) -> None:
        self._delay = delay
        self._outputs: set[DelayedAudioOutput] = set()
        self._task: asyncio.Task | None = None
        self._closed = False

    def attach(self, source: MediaStreamTrack) -> None:
        self._task = asyncio.ensure_future(self._read(source))

    def output(self) -> DelayedAudioOutput:
        output = DelayedAudioOutput(self)
        self._outputs.add(output)
        return output

    def delay_s(self) -> float:
        return min(max(self._delay(), 0.0), MAX_DELAY_S)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for output in list(self._outputs):
            output.stop()

    def _discard(self, output: DelayedAudioOutput) -> None:
        self._outputs.discard(output)

    async def _read(self, source: MediaStreamTrack) -> None:
        try:
            while True:
                frame = await source.recv()
                arrived = time.monotonic()
                for output in self._outputs:
                    output._push(arrived, frame)
        except MediaStreamError:
            pass
        finally:
            for output in list(self._outputs):
                output._push(0.0, None)


class DelayedAudioOutput(MediaStreamTrack):
    kind = "audio"

    def __init__(self, audio: DelayedAudio) -> None:
        super().__init__()
        self._audio = audio
        self._queue: deque[tuple[float, AudioFrame | None]] = deque(maxlen=BACKLOG_FRAMES)
        self._ready = asyncio.Event()

    def _push(self, arrived: float, frame: AudioFrame | None) -> None:
        self._queue.append((arrived, frame))
        self._ready.set()

    async def recv(self) -> AudioFrame:
        while not self._queue:
            if self.readyState != "live":
                raise MediaStreamError
            self._ready.clear()
            await self._ready.wait()
        arrived, frame = self._queue.popleft()
        if frame is None or self.readyState != "live":
            self.stop()
            raise MediaStreamError
        wait = arrived + self._audio.delay_s() - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        return frame

    def stop(self) -> None:
        super().stop()
        self._audio._discard(self)
        self._ready.set()
