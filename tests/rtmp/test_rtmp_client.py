"""The publish/play clients: against ffmpeg's listen mode, against our server, and failures."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from rtmp_testkit import (
    FFMPEG,
    RecordingHandler,
    finish_process,
    needs_ffmpeg,
    probe_streams,
    run,
    start_process,
    wait_for,
)

from streamer.rtmp import (
    MediaMessage,
    RtmpClientError,
    RtmpPlayClient,
    RtmpPublishClient,
    RtmpServer,
)
from streamer.rtmp.client import RtmpUrl, _ClientSession, parse_rtmp_url
from swapcast.local_cluster import free_port


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("rtmp://live.twitch.tv/app/live_123_abc", RtmpUrl("live.twitch.tv", 1935, "app", "live_123_abc")),
        ("rtmp://a.rtmp.youtube.com:1936/live2/key?x=1", RtmpUrl("a.rtmp.youtube.com", 1936, "live2", "key?x=1")),
        ("rtmp://127.0.0.1:5000/app/inst/name", RtmpUrl("127.0.0.1", 5000, "app/inst", "name")),
        # rtmps: RTMP inside TLS, port 443 unless given (the platforms' ingest)
        ("rtmps://a.rtmps.youtube.com/live2/key", RtmpUrl("a.rtmps.youtube.com", 443, "live2", "key", tls=True)),
        ("rtmps://127.0.0.1:1936/live/k", RtmpUrl("127.0.0.1", 1936, "live", "k", tls=True)),
    ],
)
def test_parse_rtmp_url(url, parsed):
    assert parse_rtmp_url(url) == parsed
    assert parsed.tc_url.startswith(("rtmps://" if parsed.tls else "rtmp://") + parsed.host)


@pytest.mark.parametrize("url", ["http://h/app/name", "rtmpx://h/app/name", "rtmp://h/onlyapp", "rtmp:///app/name", "rtmp://h:99999/a/b"])
def test_bad_urls(url):
    with pytest.raises(RtmpClientError):
        parse_rtmp_url(url)


def test_nobody_listening_fails_fast():
    async def scenario() -> None:
        await RtmpPublishClient(f"rtmp://127.0.0.1:{free_port()}/live/x", timeout=3).connect()

    started = time.monotonic()
    with pytest.raises(RtmpClientError, match="cannot connect"):
        run(scenario())
    assert time.monotonic() - started < 2


def test_silent_server_times_out():
    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        try:
            await RtmpPublishClient(f"rtmp://127.0.0.1:{server.sockets[0].getsockname()[1]}/live/x", timeout=0.3).connect()
        finally:
            server.close()

    with pytest.raises(RtmpClientError, match="no answer"):
        run(scenario())


def _media(count: int, start: int = 0) -> list[MediaMessage]:
    out = []
    for i in range(count):
        out.append(MediaMessage("video", (start + 40 * i) & 0xFFFFFFFF, bytes([0x17 if i % 10 == 0 else 0x27, 1, 0, 0, 0]) + bytes(50)))
        out.append(MediaMessage("audio", (start + 40 * i) & 0xFFFFFFFF, b"\xaf\x01" + bytes(20)))
    return out


def test_publish_and_play_through_our_server_with_timestamp_wrap():
    start = 2**32 - 200  # the 32-bit RTMP clock wraps during this stream

    async def scenario() -> tuple[list[MediaMessage], list[MediaMessage]]:
        handler = RecordingHandler({"KEY"})
        async with RtmpServer(handler, port=0) as server:
            url = f"rtmp://127.0.0.1:{server.port}/live/KEY"
            async with RtmpPublishClient(url, timeout=5) as client:
                await client.send(MediaMessage("data", start, b"\x02\x00\x0aonMetaData\x05"))
                for message in _media(20, start):
                    await client.send(message)
            await wait_for(lambda: handler.publish_ended.is_set(), 5)
            handler.playlist = handler.received["KEY"]
            async with RtmpPlayClient(url, timeout=5) as player:
                played = [m async for m in player.media()]
        return handler.received["KEY"], played

    received, played = run(scenario())
    assert received[0] == MediaMessage("data", start, b"\x02\x00\x0aonMetaData\x05")
    video = [m.timestamp for m in received if m.kind == "video"]
    assert video == [start + 40 * i for i in range(20)] and video[-1] > 2**32  # unwrapped, monotonic
    assert [(m.kind, m.payload) for m in played] == [(m.kind, m.payload) for m in received]
    assert [m.timestamp for m in played] == [m.timestamp for m in received]


def test_refusals_reach_the_client_as_errors():
    async def scenario() -> list[str]:
        errors = []
        async with RtmpServer(RecordingHandler({"KEY"}), port=0) as server:
            for client in (
                RtmpPublishClient(f"rtmp://127.0.0.1:{server.port}/live/nope", timeout=3),
                RtmpPlayClient(f"rtmp://127.0.0.1:{server.port}/live/nope", timeout=3),
            ):
                with pytest.raises(RtmpClientError) as info:
                    await client.connect()
                errors.append(str(info.value))
            session = _ClientSession(f"rtmp://127.0.0.1:{server.port}/live/x", timeout=3, chunk_size=128, flash_version="t")
            await session.open()
            with pytest.raises(RtmpClientError) as info:
                await session.call("noSuchCommand", None)
            errors.append(str(info.value))
            await session.abort()
        return errors

    publish, play, unknown = run(scenario())
    assert "NetStream.Publish.BadName" in publish and "unknown stream key" in publish
    assert "NetStream.Play.StreamNotFound" in play
    assert "NetConnection.Call.Failed" in unknown


def test_send_after_the_server_cut_us_raises():
    async def scenario() -> None:
        handler = RecordingHandler({"KEY"})
        async with RtmpServer(handler, port=0) as server:
            client = RtmpPublishClient(f"rtmp://127.0.0.1:{server.port}/live/KEY", timeout=3)
            await client.connect()
            await wait_for(lambda: handler.publishers, 2)
            await handler.publishers[0].close("kicked")
            await asyncio.sleep(0.2)
            try:
                with pytest.raises(RtmpClientError, match="NetStream.Publish.Failed: kicked"):  # told why
                    for message in _media(200):
                        await client.send(message)
            finally:
                await client.close()
            assert handler.publishers[0].ended_reason == "closed by the app: kicked"

    run(scenario())


@needs_ffmpeg
def test_publish_client_to_ffmpeg_listen(ffmpeg_publish, tmp_path: Path):
    out = tmp_path / "pushed.flv"
    port = free_port()

    async def scenario() -> tuple[int, str]:
        proc = await start_process(
            FFMPEG, "-hide_banner", "-nostdin", "-y", "-listen", "1", "-i", f"rtmp://127.0.0.1:{port}/live/x",
            "-c", "copy", "-f", "flv", str(out),
        )  # fmt: skip
        try:
            client = RtmpPublishClient(f"rtmp://127.0.0.1:{port}/live/x", timeout=5)
            async with asyncio.timeout(10):
                while True:  # until ffmpeg listens
                    try:
                        await client.connect()
                        break
                    except RtmpClientError:
                        await asyncio.sleep(0.1)
            for message in ffmpeg_publish.messages:
                await client.send(message)
            await client.close()
        finally:
            rc, err = await finish_process(proc, 15)
        return rc, err

    rc, err = run(scenario(), timeout=30)
    assert rc == 0, err
    assert probe_streams(str(out)) == ["audio:aac", "video:h264"]
