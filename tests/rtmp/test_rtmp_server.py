"""The server against real clients: ffmpeg publishing and playing, rejected keys, a stalled
publisher, garbage next to a healthy publisher."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from pathlib import Path

import pytest

from rtmp_testkit import (
    FFMPEG,
    FFMPEG_SOURCE,
    RecordingHandler,
    finish_process,
    needs_ffmpeg,
    probe_streams,
    run,
    start_process,
    wait_for,
)

from streamer.rtmp import RtmpPublishClient, RtmpServer, flv
from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter
from streamer.rtmp.handshake import client_handshake


@needs_ffmpeg
def test_ffmpeg_publish_delivers_avc_and_aac(ffmpeg_publish):
    assert ffmpeg_publish.returncode == 0, ffmpeg_publish.stderr
    assert ffmpeg_publish.ended_reason == "unpublished"
    messages = ffmpeg_publish.messages
    video = [(m, flv.parse_video_tag(m.payload)) for m in messages if m.kind == "video"]
    audio = [(m, flv.parse_audio_tag(m.payload)) for m in messages if m.kind == "audio"]
    data = [m for m in messages if m.kind == "data"]

    assert data and data[0].payload.startswith(b"\x02\x00\x0aonMetaData")  # @setDataFrame stripped
    assert video[0][1].is_sequence_header and video[0][1].codec == "avc"
    config = flv.parse_avc_decoder_config(video[0][1].data)
    assert config.sps and config.pps and config.length_size == 4
    frames = [tag for _, tag in video[1:-1]]
    assert all(tag.packet_type == flv.VideoPacketType.NALU for tag in frames)
    assert video[-1][1].packet_type == flv.VideoPacketType.END_OF_SEQUENCE
    assert sum(tag.is_keyframe for tag in frames) >= 2 and frames[0].is_keyframe
    assert len(frames) >= 70  # 3 s at 25 fps
    nal_types = {unit[0] & 0x1F for unit in flv.split_annexb(flv.avcc_to_annexb(frames[0].data))}
    assert 5 in nal_types  # an IDR slice

    assert audio[0][1].is_sequence_header and audio[0][1].sound_format == flv.SOUND_FORMAT_AAC
    assert len(audio[0][1].data) >= 2  # AudioSpecificConfig
    assert len(audio) > 100 and all(tag.aac_packet_type == flv.AacPacketType.RAW for _, tag in audio[1:])

    for kind in ("video", "audio"):
        stamps = [m.timestamp for m in messages if m.kind == kind]
        assert stamps == sorted(stamps) and stamps[-1] > stamps[1] >= 0
    assert 2800 <= max(m.timestamp for m in messages) <= 3200


@needs_ffmpeg
def test_ffmpeg_publish_with_unknown_key_is_refused():
    async def scenario() -> tuple[int, str, RecordingHandler]:
        handler = RecordingHandler({"KEY"})
        server = RtmpServer(handler, port=0)
        await server.start()
        try:
            proc = await start_process(
                FFMPEG, "-hide_banner", "-nostdin", *FFMPEG_SOURCE, "-t", "2", "-f", "flv",
                f"rtmp://127.0.0.1:{server.port}/live/WRONG",
            )  # fmt: skip
            rc, err = await finish_process(proc, 20)
        finally:
            await server.close()
        return rc, err, handler

    rc, err, handler = run(scenario(), timeout=30)
    assert rc != 0
    assert "unknown stream key" in err or "BadName" in err or "error" in err.lower()
    assert handler.publishers == [] and handler.received == {}


@needs_ffmpeg
def test_ffmpeg_plays_what_the_handler_sends(ffmpeg_publish, tmp_path: Path):
    out = tmp_path / "played.flv"

    async def scenario() -> tuple[int, str]:
        handler = RecordingHandler({"KEY"}, playlist=ffmpeg_publish.messages)
        server = RtmpServer(handler, port=0)
        await server.start()
        try:
            proc = await start_process(
                FFMPEG, "-hide_banner", "-nostdin", "-y", "-i", f"rtmp://127.0.0.1:{server.port}/live/KEY",
                "-c", "copy", "-f", "flv", str(out),
            )  # fmt: skip
            return await finish_process(proc, 25)
        finally:
            await server.close()

    rc, err = run(scenario(), timeout=35)
    assert rc == 0, err
    assert probe_streams(str(out)) == ["audio:aac", "video:h264"]


def test_stalled_publisher_is_cut_after_stall_timeout():
    async def scenario() -> tuple[float, str | None]:
        handler = RecordingHandler({"KEY"})
        server = RtmpServer(handler, port=0, stall_timeout=1.0)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await client_handshake(reader, writer, timeout=2)
            chunks = ChunkWriter()
            for message in (
                msg.command("connect", 1, {"app": "live"}),
                msg.command("createStream", 2, None),
                msg.command("publish", 3, None, "KEY", "live", stream_id=1),
            ):
                writer.write(chunks.write(message))
            await _read_until_status(reader, "NetStream.Publish.Start")
            silent_since = time.monotonic()
            while await reader.read(65536):  # the server closes the socket: EOF
                pass
            elapsed = time.monotonic() - silent_since
            await wait_for(lambda: handler.publish_ended.is_set(), 2)
            writer.close()
            return elapsed, handler.publishers[0].ended_reason
        finally:
            await server.close()

    elapsed, reason = run(scenario(), timeout=15)
    assert 0.8 <= elapsed <= 2.5
    assert reason is not None and reason.startswith("stalled")


async def _read_until_status(reader: asyncio.StreamReader, code: str) -> None:
    chunks = ChunkReader()
    while True:
        data = await reader.read(65536)
        assert data, f"closed before {code}"
        for message in chunks.feed(data):
            if message.type_id == msg.MessageType.AMF0_COMMAND:
                command = msg.parse_command(message.type_id, message.payload)
                if command.name == "onStatus" and command.args[0]["code"] == code:
                    return


@needs_ffmpeg
def test_garbage_client_is_dropped_while_healthy_publisher_keeps_going(ffmpeg_publish):
    media = ffmpeg_publish.messages

    async def scenario() -> tuple[int, int, bool]:
        handler = RecordingHandler({"KEY"})
        server = RtmpServer(handler, port=0)
        await server.start()
        try:
            client = RtmpPublishClient(f"rtmp://127.0.0.1:{server.port}/live/KEY", timeout=5)
            await client.connect()
            half = len(media) // 2
            for message in media[:half]:
                await client.send(message)

            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await client_handshake(reader, writer, timeout=2)
            writer.write(b"\x7f" + bytes(range(256)) * 4)  # fmt 1 on a fresh chunk stream, then junk
            async with asyncio.timeout(2):
                garbage_closed = await reader.read(65536) == b""
            writer.close()

            for message in media[half:]:
                await client.send(message)
            await client.close()
            await wait_for(lambda: handler.publish_ended.is_set(), 5)
            return len(handler.received["KEY"]), len(handler.publishers), garbage_closed
        finally:
            await server.close()

    received, publishers, garbage_closed = run(scenario(), timeout=30)
    assert garbage_closed and publishers == 1 and received == len(media)


_PYAV_PUSH = """
import sys, av, numpy as np
out = av.open(sys.argv[1], "w", format="flv")
stream = out.add_stream("libx264", rate=25)
stream.width, stream.height, stream.pix_fmt, stream.options = 160, 120, "yuv420p", {"preset": "ultrafast"}
for i in range(30):
    frame = av.VideoFrame.from_ndarray(np.full((120, 160, 3), i * 8, np.uint8), format="rgb24")
    frame.pts = i
    for packet in stream.encode(frame):
        out.mux(packet)
for packet in stream.encode(None):
    out.mux(packet)
out.close()
"""
_PYAV_PULL = """
import sys, av
with av.open(sys.argv[1], options={"analyzeduration": "0", "probesize": "4096"}, timeout=5) as src:
    print(sum(1 for packet in src.demux(video=0) if packet.size))
"""


def test_pyav_bundled_ffmpeg_publishes_and_plays():
    """PyAV's own (newer) libavformat as publisher and player. It runs in a child process:
    PyAV keeps the GIL during blocking RTMP I/O, which would freeze this event loop."""

    async def python(code: str, url: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            async with asyncio.timeout(20):
                out, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
        return proc.returncode, out.decode()

    async def scenario() -> tuple[list, str]:
        handler = RecordingHandler({"KEY"})
        async with RtmpServer(handler, port=0) as server:
            url = f"rtmp://127.0.0.1:{server.port}/live/KEY"
            await python(_PYAV_PUSH, url)
            await wait_for(lambda: handler.publish_ended.is_set(), 5)
            handler.playlist = handler.received["KEY"]
            _, played = await python(_PYAV_PULL, url)
        return handler.received["KEY"], played

    received, played = run(scenario(), timeout=45)
    video = [flv.parse_video_tag(m.payload) for m in received if m.kind == "video"]
    assert video[0].is_sequence_header and sum(not tag.is_sequence_header for tag in video) >= 30
    assert int(played.strip()) == 30


class _SlowAuthorisation(RecordingHandler):
    """Holds every publish in authorisation until the test lets it through."""

    def __init__(self) -> None:
        super().__init__({"KEY"})
        self.asked = asyncio.Event()
        self.proceed = asyncio.Event()

    async def authorize_publish(self, app: str, name: str) -> None:
        self.asked.set()
        await self.proceed.wait()


def _publish_commands(chunks: ChunkWriter) -> bytes:
    return b"".join(chunks.write(m) for m in (
        msg.command("connect", 1, {"app": "live"}),
        msg.command("createStream", 2, None),
        msg.command("publish", 3, None, "KEY", "live", stream_id=1),
    ))  # fmt: skip


def test_client_that_leaves_while_being_authorised_is_closed_quietly(caplog):
    """Under uvloop (as `swapcast serve` runs) a write to a socket the peer reset raises
    RuntimeError: answering the publish then used to end in an 'internal error' traceback."""
    import socket
    import struct

    import uvloop

    async def scenario() -> _SlowAuthorisation:
        handler = _SlowAuthorisation()
        async with RtmpServer(handler, port=0) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await client_handshake(reader, writer, timeout=2)
            writer.write(_publish_commands(ChunkWriter()))
            await writer.drain()
            await asyncio.wait_for(handler.asked.wait(), 5)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
            writer.close()
            await asyncio.sleep(0.3)  # the reset reaches the server while it still authorises
            handler.proceed.set()
            await wait_for(lambda: server.connection_count == 0, 5)
        return handler

    with caplog.at_level("INFO", logger="streamer.rtmp"), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        handler = runner.run(asyncio.wait_for(scenario(), 20))
    assert handler.publishers == []  # nothing was started for a client that had gone
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")], [r.getMessage() for r in caplog.records]
    assert any("closed (" in r.getMessage() for r in caplog.records)


def test_unpublish_is_answered_and_the_client_closes_the_connection():
    """GStreamer's rtmp2sink sends deleteStream and closes the socket itself; a server that
    closes first makes it exit 1 ('connection closed remotely') after every good publish."""

    async def scenario() -> tuple[list[str], msg.UserControl | None, str | None]:
        handler = RecordingHandler({"KEY"})
        async with RtmpServer(handler, port=0) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await client_handshake(reader, writer, timeout=2)
            out, chunks = ChunkWriter(), ChunkReader()
            writer.write(_publish_commands(out))
            await _read_until_status(reader, "NetStream.Publish.Start")
            writer.write(out.write(msg.command("FCUnpublish", 4, None, "KEY")) + out.write(msg.command("deleteStream", 5, None, 1.0)))
            await wait_for(handler.publish_ended.is_set, 5)  # the publish is over for the app...
            writer.write(out.write(msg.ping_request(77)))  # ...and the connection still answers
            statuses, pong = [], None
            async with asyncio.timeout(5):
                while pong is None and (data := await reader.read(65536)):
                    for message in chunks.feed(data):
                        if message.type_id == msg.MessageType.AMF0_COMMAND:
                            command = msg.parse_command(message.type_id, message.payload)
                            if command.name == "onStatus":
                                statuses.append(command.args[0]["code"])
                        elif message.type_id == msg.MessageType.USER_CONTROL:
                            pong = msg.parse_user_control(message.payload)
            writer.close()
            await wait_for(lambda: server.connection_count == 0, 5)
            return statuses, pong, handler.publishers[0].ended_reason

    statuses, pong, reason = run(scenario())
    assert "NetStream.Unpublish.Success" in statuses
    assert pong == msg.UserControl(msg.UserControlEvent.PING_RESPONSE, 77)
    assert reason == "unpublished"


def test_a_client_that_unpublishes_and_stays_is_closed_after_a_grace_time():
    async def scenario() -> bytes:
        async with RtmpServer(RecordingHandler({"KEY"}), port=0, stall_timeout=30) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await client_handshake(reader, writer, timeout=2)
            out = ChunkWriter()
            writer.write(_publish_commands(out))
            await _read_until_status(reader, "NetStream.Publish.Start")
            writer.write(out.write(msg.command("deleteStream", 4, None, 1.0)))
            async with asyncio.timeout(10):  # well before the 30 s stall timeout
                while data := await reader.read(65536):
                    pass
            writer.close()
            return data

    assert run(scenario()) == b""  # EOF: the server closed once the grace time was over


GST_LAUNCH = shutil.which("gst-launch-1.0")


@pytest.mark.skipif(not GST_LAUNCH, reason="GStreamer (gst-launch-1.0, rtmp2sink) not installed: scripts/bootstrap installs it")
def test_gstreamer_rtmp2sink_publish_ends_with_exit_0():
    """rtmp2sink exited 1 ('connection closed remotely') after every good publish while the
    server closed right after deleteStream."""

    async def scenario() -> tuple[int, str, int]:
        handler = RecordingHandler({"KEY"})
        async with RtmpServer(handler, port=0) as server:
            proc = await start_process(
                GST_LAUNCH, "-q", "videotestsrc", "num-buffers=50", "!", "video/x-raw,width=320,height=240,framerate=25/1",
                "!", "x264enc", "tune=zerolatency", "speed-preset=ultrafast", "!", "h264parse", "!", "flvmux", "streamable=true",
                "!", "rtmp2sink", f"location=rtmp://127.0.0.1:{server.port}/live/KEY",
            )  # fmt: skip
            code, stderr = await finish_process(proc, 60)
            return code, stderr, len(handler.received.get("KEY", []))

    code, stderr, received = run(scenario(), timeout=90)
    assert code == 0, stderr
    assert received >= 50


def test_a_connection_that_neither_publishes_nor_plays_is_cut_after_the_setup_time():
    """Pings keep a connection from stalling: one that never publishes or plays held its
    socket (and a file descriptor of the node) for ever."""

    async def scenario() -> str | None:
        async with RtmpServer(RecordingHandler({"KEY"}), port=0, stall_timeout=5, setup_timeout=1.0) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await client_handshake(reader, writer, timeout=2)
            chunks = ChunkWriter()
            writer.write(chunks.write(msg.command("connect", 1, {"app": "live"})))
            connection = next(iter(server._connections.values()))
            for _ in range(40):  # 8 s of pings, well past the setup time
                if connection.closed.is_set():
                    break
                writer.write(chunks.write(msg.ping_request(1)))
                await asyncio.sleep(0.2)
            writer.close()
            return connection.close_reason

    reason = run(scenario(), timeout=20)
    assert reason is not None and "no publish or play" in reason


def test_connections_of_one_address_that_have_not_started_are_bounded_and_publishers_are_not():
    """Many idle sockets from one address took a file descriptor each, for as long as they
    sent a byte now and then: past ``max_pending_per_ip`` unstarted connections of one
    address, the next is closed at once. A connection that publishes or plays stops counting."""

    async def first_byte(connection: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> bytes:
        reader, writer = connection
        with contextlib.suppress(ConnectionError):
            writer.write(bytes([3]) + bytes(1536))  # C0 + C1: a server that took us answers S0
            return await asyncio.wait_for(reader.read(1), 3)
        return b""

    async def scenario() -> tuple[list[bytes], int, bytes]:
        handler = RecordingHandler({"KEY"})
        async with RtmpServer(handler, port=0, max_pending_per_ip=3) as server:
            publisher = RtmpPublishClient(f"rtmp://127.0.0.1:{server.port}/live/KEY")
            await publisher.connect()
            idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(5)]
            answers = [await first_byte(connection) for connection in idle]
            for _, writer in idle:
                writer.close()
            await wait_for(lambda: server.connection_count == 1, 5)
            connection = await asyncio.open_connection("127.0.0.1", server.port)
            room = await first_byte(connection)  # the idle ones left: room again
            connection[1].close()
            publishing = len(handler.publishers) - int(handler.publish_ended.is_set())
            await publisher.close()
            return answers, publishing, room

    answers, publishing, room = run(scenario(), timeout=30)
    assert answers == [b"\x03"] * 3 + [b""] * 2
    assert publishing == 1 and room == b"\x03"
