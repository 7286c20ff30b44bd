"""The app-facing contract of the RTMP server: what a handler gets and implements.

Kept apart from server.py so the connection layer can use these types without importing
the server (server.py re-exports them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True, slots=True)
class MediaMessage:
    """One audio/video/data message: `payload` is the FLV tag body (see flv.py), `timestamp`
    the RTMP timeline in ms, unwrapped past 2**32 so it never jumps back to zero."""

    kind: Literal["video", "audio", "data"]
    timestamp: int
    payload: bytes


class PublishRejected(Exception):
    """Raised by a handler to refuse a publish or play; `code`/`description` go to the client
    in an error-level onStatus (e.g. NetStream.Publish.BadName, NetStream.Play.StreamNotFound)."""

    def __init__(self, code: str, description: str) -> None:
        super().__init__(f"{code}: {description}")
        self.code = code
        self.description = description


class Publisher(Protocol):
    """One accepted publish, handed to `RtmpHandler.on_publish`."""

    app: str
    name: str
    remote: str
    ended_reason: str | None

    def media(self) -> AsyncIterator[MediaMessage]:
        """Messages in arrival order; ends (without raising) when the publish ends for any
        reason, which `ended_reason` then records."""
        ...

    async def close(self, reason: str) -> None:
        """Cut the publisher: its media ends now, it is told ``reason`` (an error-level
        onStatus, NetStream.Publish.Failed) and its connection closes once it has had time
        to read that."""
        ...


class Player(Protocol):
    """One accepted play, handed to `RtmpHandler.on_play`."""

    app: str
    name: str
    remote: str

    def send(self, message: MediaMessage) -> None:
        """Queue without blocking; when the queue is full, video is dropped up to the next
        keyframe while audio and sequence headers are kept."""
        ...

    async def wait_closed(self) -> None: ...

    async def close(self, reason: str) -> None: ...


class RtmpHandler(Protocol):
    """What the application implements; the server calls it once per publish/play."""

    async def authorize_publish(self, app: str, name: str) -> None:
        """Raise PublishRejected to refuse the publish."""
        ...

    async def on_publish(self, publisher: Publisher) -> None:
        """Runs for the whole publish; returning early ends it."""
        ...

    async def authorize_play(self, app: str, name: str) -> None:
        """Raise PublishRejected("NetStream.Play.StreamNotFound", ...) to refuse."""
        ...

    async def on_play(self, player: Player) -> None:
        """Runs while the player watches; returning ends the play once the queue is sent."""
        ...
