"""Helpers shared by the RTMP tests: running coroutines with a deadline, bounded
subprocesses (ffmpeg/ffprobe), and a recording handler."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from streamer.rtmp import MediaMessage, Player, Publisher, PublishRejected

T = TypeVar("T")

FFMPEG = shutil.which("ffmpeg")
FFPROBE = shutil.which("ffprobe")
needs_ffmpeg = pytest.mark.skipif(not (FFMPEG and FFPROBE), reason="ffmpeg/ffprobe CLI not installed")

# A short deterministic A/V source: H.264 (2 keyframes) + AAC, like a streaming encoder sends.
FFMPEG_SOURCE = [
    "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25",
    "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100",
    "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-g", "25",
    "-c:a", "aac", "-b:a", "64k",
]  # fmt: skip


def run(coro: Coroutine[Any, Any, T], timeout: float = 20.0) -> T:
    """Run a coroutine in a fresh loop with a hard deadline (the tests use no asyncio plugin)."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


async def start_process(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


async def finish_process(proc: asyncio.subprocess.Process, timeout: float) -> tuple[int, str]:
    """Wait for the process (killing it past `timeout`); returns (rc, stderr tail)."""
    try:
        async with asyncio.timeout(timeout):
            _, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        _, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, err.decode(errors="replace")[-3000:]


def probe_streams(path: str) -> list[str]:
    """codec types of the streams ffprobe finds in a file."""
    out = subprocess.run(
        [FFPROBE or "ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name", "-of", "json", path],
        capture_output=True, text=True, timeout=20, check=True,
    ).stdout  # fmt: skip
    return sorted(f"{s['codec_type']}:{s['codec_name']}" for s in json.loads(out)["streams"])


class RecordingHandler:
    """Accepts publishes to `keys`, records their media; plays back `playlist` to players."""

    def __init__(self, keys: set[str], playlist: list[MediaMessage] | None = None) -> None:
        self.keys = keys
        self.playlist = playlist or []
        self.received: dict[str, list[MediaMessage]] = {}
        self.publishers: list[Publisher] = []
        self.players: list[Player] = []
        self.publish_ended = asyncio.Event()

    async def authorize_publish(self, app: str, name: str) -> None:
        if name not in self.keys:
            raise PublishRejected("NetStream.Publish.BadName", f"unknown stream key {name!r}")

    async def on_publish(self, publisher: Publisher) -> None:
        self.publishers.append(publisher)
        bucket = self.received.setdefault(publisher.name, [])
        async for message in publisher.media():
            bucket.append(message)
        self.publish_ended.set()

    async def authorize_play(self, app: str, name: str) -> None:
        if name not in self.keys:
            raise PublishRejected("NetStream.Play.StreamNotFound", f"no stream {name!r}")

    async def on_play(self, player: Player) -> None:
        self.players.append(player)
        for message in self.playlist:
            player.send(message)
            await asyncio.sleep(0)


async def wait_for(predicate: Any, timeout: float, interval: float = 0.02) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(interval)


