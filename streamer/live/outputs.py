"""Where a live stream's swapped output goes: RTMP players, push destinations, a recording.

Every output takes the same ``MediaMessage``s (FLV tag bodies with timestamps), starts at a
keyframe after the sequence headers, and never blocks the stream: a slow or dead output
drops video up to the next keyframe, and a push destination that goes down is reconnected
with backoff while ingest and the other outputs carry on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from signaling.push_policy import redacted
from streamer.live.flv_file import FlvFileWriter
from streamer.rtmp.flv import is_sequence_header, is_video_keyframe
from streamer.rtmp.handler import MediaMessage, Player

log = logging.getLogger(__name__)


class Output(Protocol):
    name: str

    def send(self, message: MediaMessage) -> None: ...

    async def close(self) -> None: ...


class Headers:
    """What a viewer needs before the first frame: the stream's metadata (onMetaData, so
    players know both tracks without probing) and the latest sequence headers (video avcC,
    audio AudioSpecificConfig)."""

    def __init__(self) -> None:
        self.metadata: MediaMessage | None = None
        self.video: MediaMessage | None = None
        self.audio: MediaMessage | None = None

    def update(self, message: MediaMessage) -> bool:
        """Remember ``message`` if it is a sequence header; True when it was one."""
        if not is_sequence_header(message.kind, message.payload):
            return False
        if message.kind == "video":
            self.video = message
        else:
            self.audio = message
        return True

    def messages(self) -> list[MediaMessage]:
        return [m for m in (self.metadata, self.video, self.audio) if m is not None]


def _is_header(message: MediaMessage) -> bool:
    return message.kind == "data" or is_sequence_header(message.kind, message.payload)


class KeyframeGate:
    """Lets messages through from the first video keyframe on (audio before it is dropped
    too, so the output starts in sync)."""

    def __init__(self) -> None:
        self.open = False

    def admits(self, message: MediaMessage) -> bool:
        if not self.open and message.kind == "video" and is_video_keyframe(message.payload):
            self.open = True
        return self.open


class PlayerOutput:
    """An RTMP viewer of the swapped stream (the server's Player does the queueing)."""

    def __init__(self, player: Player, headers: Headers) -> None:
        self.name = f"player {player.remote}"
        self._player = player
        self._gate = KeyframeGate()
        for header in headers.messages():
            player.send(header)

    def send(self, message: MediaMessage) -> None:
        if _is_header(message) or self._gate.admits(message):
            self._player.send(message)

    async def close(self) -> None:
        await self._player.close("stream ended")


class RecordingOutput:
    """Writes the swapped stream to an FLV file."""

    def __init__(self, writer: FlvFileWriter, headers: Headers) -> None:
        self.name = f"recording {writer.path}"
        self._writer = writer
        self._gate = KeyframeGate()
        for header in headers.messages():
            writer.write(header)

    def send(self, message: MediaMessage) -> None:
        if _is_header(message) or self._gate.admits(message):
            self._writer.write(message)

    async def close(self) -> None:
        self._writer.close()


PublishClientFactory = Callable[[str], "PushConnection"]


class PushConnection(Protocol):
    async def connect(self) -> None: ...

    async def send(self, message: MediaMessage) -> None: ...

    async def close(self) -> None: ...


class PushOutput:
    """Re-publishes the swapped stream to one RTMP destination, reconnecting with
    exponential backoff (``retry_initial_s`` doubling up to ``retry_max_s``).

    The stream's start waits for the first connection (a platform's handshake takes a few
    round trips): until that attempt ends, messages queue, so the destination gets the
    stream from its first keyframe rather than from the next one, a GOP (2 s) later. Once
    connected, a destination that goes down misses what is sent until it is back, and
    then starts again at a keyframe."""

    QUEUE_LIMIT = 300  # ~10 s of video + audio; beyond it video is dropped to the next keyframe
    HARD_LIMIT = 4 * QUEUE_LIMIT  # audio and headers too: the backlog is dropped, media restarts at a keyframe

    def __init__(self, url: str, headers: Headers, connect: PublishClientFactory, *,
                 retry_initial_s: float = 1.0, retry_max_s: float = 30.0) -> None:
        self.name = f"push {redacted(url)}"  # the log never shows the destination's stream key
        self.url = url
        self.connected = False
        self.attempts = 0
        self.last_error: str | None = None
        self._headers = headers
        self._connect = connect
        self._retry = (retry_initial_s, retry_max_s)
        self._queue: asyncio.Queue[MediaMessage] = asyncio.Queue()
        self._gate = KeyframeGate()
        self._starting = True  # the first connection attempt has not ended: messages wait for it
        self._whole = True  # the queue holds everything sent since the start, headers included
        self._task = asyncio.create_task(self._run(), name=self.name)

    def send(self, message: MediaMessage) -> None:
        if not self.connected and not self._starting:
            return  # while down nothing is queued; headers are resent on reconnect
        if self._queue.qsize() >= self.HARD_LIMIT:  # a destination that takes nothing: never grow without bound
            while not self._queue.empty():
                self._queue.get_nowait()
            self._gate = KeyframeGate()
            self._whole = False
        if _is_header(message):
            self._queue.put_nowait(message)
            return
        if self._queue.qsize() >= self.QUEUE_LIMIT and message.kind == "video":
            self._gate = KeyframeGate()  # too slow: skip video until the next keyframe
        if self._gate.admits(message):
            self._queue.put_nowait(message)

    async def _run(self) -> None:
        delay = self._retry[0]
        while True:
            client = self._connect(self.url)
            self.attempts += 1
            try:
                await client.connect()
                whole, self._starting = self._starting and self._whole, False
                self.connected, self.last_error, delay = True, None, self._retry[0]
                log.info("%s: connected", self.name)
                if not whole:  # else the queue starts with them, in the order they came
                    for header in self._headers.messages():
                        await client.send(header)
                while True:
                    await client.send(await self._queue.get())
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await client.close()
                raise
            except Exception as exc:  # any failure of the destination: log, back off, retry
                self.last_error = str(exc) or type(exc).__name__
                log.info("%s: %s; retrying in %.1f s", self.name, self.last_error, delay)
            self.connected = self._starting = False
            self._gate = KeyframeGate()
            while not self._queue.empty():
                self._queue.get_nowait()
            with contextlib.suppress(Exception):
                await client.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._retry[1])

    async def close(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
