"""RTMP test fixtures: one real ffmpeg publish, recorded once and replayed by several tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from rtmp_testkit import (
    FFMPEG,
    FFMPEG_SOURCE,
    RecordingHandler,
    finish_process,
    run,
    start_process,
)

from streamer.rtmp import MediaMessage, RtmpServer


@dataclass(frozen=True)
class FfmpegPublish:
    returncode: int
    stderr: str
    messages: list[MediaMessage]
    ended_reason: str | None


@pytest.fixture(scope="session")
def ffmpeg_publish() -> FfmpegPublish:
    """ffmpeg pushes 3 s of H.264 + AAC to our server at live/KEY; the handler records it."""
    if FFMPEG is None:
        pytest.skip("ffmpeg CLI not installed")

    async def publish() -> FfmpegPublish:
        handler = RecordingHandler({"KEY"})
        server = RtmpServer(handler, port=0)
        await server.start()
        try:
            proc = await start_process(
                FFMPEG, "-hide_banner", "-nostdin", *FFMPEG_SOURCE, "-t", "3", "-f", "flv",
                f"rtmp://127.0.0.1:{server.port}/live/KEY",
            )  # fmt: skip
            rc, err = await finish_process(proc, 30)
            async with asyncio.timeout(5):
                await handler.publish_ended.wait()
        finally:
            await server.close()
        reason = handler.publishers[0].ended_reason if handler.publishers else None
        return FfmpegPublish(rc, err, handler.received.get("KEY", []), reason)

    return run(publish(), timeout=45)
