"""An oversized message (an H.264 access unit of 16 MiB (the 24-bit length field's maximum), a huge audio or control message)
is refused from its first chunk header, before its payload is held, and so are partial messages
over the bound on all chunk streams: the peer gets an error-level onStatus saying why (even
while it goes on sending the message, as an encoder does), the node logs why in the
connection's closing line, and other sessions go on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import sys
from pathlib import Path
from dataclasses import dataclass, field

import pytest

from rtmp_testkit import RecordingHandler, run, wait_for

from signaling.tls import server_context
from streamer.rtmp import RtmpPublishClient, RtmpServer
from streamer.rtmp import connection as rtmp_connection
from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter, basic_header
from streamer.rtmp.handler import MediaMessage
from streamer.rtmp.handshake import client_handshake

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tls_testkit import ThrowawayCA  # noqa: E402


def _first_chunk(type_id: int, length: int, csid: int = 6) -> bytes:
    """A fmt 0 header announcing ``length`` bytes, and the first 128 of them."""
    header = basic_header(0, csid) + bytes(3) + length.to_bytes(3, "big") + bytes([type_id]) + (1).to_bytes(4, "little")
    return header + bytes(min(length, 128))


@pytest.mark.parametrize(("type_id", "length", "named"), [
    (msg.MessageType.VIDEO, msg.MAX_VIDEO_BYTES + 1, "a video message"),
    (msg.MessageType.VIDEO, 0xFFFFFF, "a video message"),
    (msg.MessageType.AUDIO, msg.MAX_AUDIO_BYTES + 1, "an audio message"),
    (msg.MessageType.AMF0_COMMAND, msg.MAX_COMMAND_BYTES + 1, "a command message (AMF0)"),
    (msg.MessageType.AMF3_DATA, msg.MAX_COMMAND_BYTES + 1, "a data message (AMF3)"),
    (msg.MessageType.SET_CHUNK_SIZE, 1000, "a control message (Set Chunk Size)"),
    (22, 1 << 20, "an aggregate message"),  # nothing here reads them
    (7, 1 << 20, "a message of type 7"),
])
def test_an_oversized_message_is_refused_at_its_header(type_id, length, named):
    reader = ChunkReader()
    with pytest.raises(msg.MessageTooLarge) as refused:
        reader.feed(_first_chunk(type_id, length))
    assert refused.value.length == length and refused.value.limit < length
    assert str(refused.value) == f"{named} of {length} bytes (at most {refused.value.limit})"
    assert not any(state.partial for state in reader._streams.values())


def test_the_largest_allowed_video_message_passes():
    writer, reader = ChunkWriter(4096), ChunkReader()
    reader.feed(ChunkWriter().write(msg.set_chunk_size(4096)))
    out = reader.feed(writer.write(msg.RtmpMessage(msg.MessageType.VIDEO, 1, 0, bytes(msg.MAX_VIDEO_BYTES))))
    assert [len(m.payload) for m in out] == [msg.MAX_VIDEO_BYTES]


async def _publish_raw(port: int, key: str, tls: ssl.SSLContext | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    await client_handshake(reader, writer, timeout=2)
    chunks = ChunkWriter()
    for message in (msg.command("connect", 1, {"app": "live"}), msg.command("createStream", 2, None),
                    msg.command("publish", 3, None, key, "live", stream_id=1)):
        writer.write(chunks.write(message))
    return reader, writer


@dataclass
class _PeerSaw:
    """What a raw publisher read from the node: the onStatus codes and descriptions, and how
    its reading ended ("eof": the node closed in order; else the error, a reset)."""

    statuses: list[tuple[str, str]] = field(default_factory=list)
    ended: str = ""

    @property
    def published(self) -> bool:
        return any(code == "NetStream.Publish.Start" for code, _ in self.statuses)


async def _statuses_until_closed(reader: asyncio.StreamReader, closed: asyncio.Event | None = None,
                                 saw: _PeerSaw | None = None) -> _PeerSaw:
    """What the node sent until it closed (``closed`` is set then)."""
    chunks, saw = ChunkReader(), saw or _PeerSaw()
    try:
        while data := await reader.read(65536):
            for message in chunks.feed(data):
                if message.type_id == msg.MessageType.AMF0_COMMAND:
                    command = msg.parse_command(message.type_id, message.payload)
                    if command.name == "onStatus":
                        saw.statuses.append((command.args[0]["code"], command.args[0]["description"]))
        saw.ended = "eof"
    except ConnectionError as exc:
        saw.ended = repr(exc)  # a reset: what was read before it is kept, what was not is lost
    finally:
        if closed is not None:
            closed.set()
    return saw


async def _send_until_closed(writer: asyncio.StreamWriter, data: bytes, closed: asyncio.Event) -> int:
    """Send ``data`` in 256 KiB slices as an encoder does, stopping once the node closed; the bytes sent."""
    view, sent = memoryview(data), 0
    with contextlib.suppress(OSError):
        while sent < len(view) and not closed.is_set():
            writer.write(view[sent:sent + 256 * 1024])
            await writer.drain()
            sent += len(view[sent:sent + 256 * 1024])
    return sent


def _whole_message(type_id: int, length: int, chunk_size: int = 65536) -> bytes:
    """A Set Chunk Size, then a whole message of ``length`` zero bytes on stream 1."""
    return ChunkWriter().write(msg.set_chunk_size(chunk_size)) + ChunkWriter(chunk_size).write(
        msg.RtmpMessage(type_id, 1, 0, bytes(length)))


async def _published(port: int, handler: RecordingHandler) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw publisher of BAD, once the node has started its publish."""
    reader, writer = await _publish_raw(port, "BAD")
    await wait_for(lambda: handler.publishers, 5)
    return reader, writer


def _refusal(port: int, data: bytes, tls: ssl.SSLContext | None = None) -> tuple[_PeerSaw, int]:
    """A publisher sends ``data`` whole while it reads what the node says: what it read, and
    how many bytes it could send. It runs in its own thread and event loop, as an encoder
    is its own process: in the node's loop, its reads would be ordered before the reset."""

    async def attack() -> tuple[_PeerSaw, int]:
        reader, writer = await _publish_raw(port, "BAD", tls)
        saw, closed = _PeerSaw(), asyncio.Event()
        watch = asyncio.create_task(_statuses_until_closed(reader, closed, saw))
        try:
            await wait_for(lambda: saw.published or closed.is_set(), 5)
            sent = await _send_until_closed(writer, data, closed)
            async with asyncio.timeout(15):
                return await watch, sent
        finally:
            writer.close()
            watch.cancel()

    return asyncio.run(attack())


def _refused_publisher(handler: RecordingHandler, caplog, reason: str) -> None:
    """The node ended the publisher for ``reason`` and logged it in the closing line."""
    assert [p.ended_reason for p in handler.publishers] == [f"protocol error: {reason}"]
    assert any(r.getMessage().endswith(f"closed (protocol error: {reason})") for r in caplog.records)


async def _with_server(handler: RecordingHandler, scenario, tls: ssl.SSLContext | None = None):
    """``scenario(port)`` against a server (its RTMPS port with ``tls``), until its connections closed."""
    server = RtmpServer(handler, port=0, tls=tls)
    await server.start()
    try:
        result = await scenario(server.tls_port if tls else server.port)
        await wait_for(lambda: server.connection_count == 0, 10)  # its closing line is logged
        return result
    finally:
        await server.close()


def test_a_publisher_sending_a_16_mib_access_unit_in_full_reads_why_it_is_refused(caplog):
    """The node reads and drops the rest of the message after its notice and half-closes:
    closing at once, with that rest unread, reset the connection and the notice was lost."""
    caplog.set_level(logging.INFO, logger="streamer.rtmp.connection")
    handler = RecordingHandler({"BAD"})
    saw, sent = run(_with_server(handler, lambda port: asyncio.to_thread(_refusal, port, _whole_message(msg.MessageType.VIDEO, 0xFFFFFF))), 45)
    reason = f"a video message of {0xFFFFFF} bytes (at most {msg.MAX_VIDEO_BYTES})"
    assert ("NetStream.Publish.Failed", reason) in saw.statuses, (saw, sent)
    assert saw.ended == "eof", saw  # the node half-closed after the notice: no reset
    _refused_publisher(handler, caplog, reason)
    assert handler.received["BAD"] == []


def test_over_rtmps_a_publisher_sending_a_16_mib_access_unit_in_full_reads_why_it_is_refused(tmp_path, caplog):
    """TLS cannot half-close: the node reads and drops the rest of the message for the grace,
    so nothing is left unread when it closes and the notice is not lost to a reset."""
    caplog.set_level(logging.INFO, logger="streamer.rtmp.connection")
    ca = ThrowawayCA(tmp_path)
    leaf = ca.issue("127.0.0.1")
    server_tls, client_tls = server_context(leaf.cert, leaf.key), ssl.create_default_context(cafile=str(ca.path))
    handler = RecordingHandler({"BAD"})
    data = _whole_message(msg.MessageType.VIDEO, 0xFFFFFF)
    saw, sent = run(_with_server(handler, lambda port: asyncio.to_thread(_refusal, port, data, client_tls), server_tls), 45)
    reason = f"a video message of {0xFFFFFF} bytes (at most {msg.MAX_VIDEO_BYTES})"
    assert ("NetStream.Publish.Failed", reason) in saw.statuses, (saw, sent)
    _refused_publisher(handler, caplog, reason)


def test_a_publisher_holding_partial_messages_past_the_bound_reads_why_it_is_refused(caplog):
    """Sixteen 1 MiB partial video messages, each within its cap, on as many chunk streams:
    past the 8 MiB bound over all of them the peer is told why, as for a message's own cap."""
    caplog.set_level(logging.INFO, logger="streamer.rtmp.connection")
    legal = msg.RtmpMessage(msg.MessageType.VIDEO, 1, 0, bytes(msg.MAX_VIDEO_BYTES))
    writer = ChunkWriter(65536)
    partials = b"".join(writer.write(legal, csid=csid)[:12 + 16 * 65537 - 1] for csid in range(3, 19))
    data = ChunkWriter().write(msg.set_chunk_size(65536)) + partials
    handler = RecordingHandler({"BAD"})
    saw, _ = run(_with_server(handler, lambda port: asyncio.to_thread(_refusal, port, data)), 45)
    limit = 2 * msg.MAX_VIDEO_BYTES
    reason = f"partial messages of {limit + 65536} bytes on all chunk streams together (at most {limit})"
    assert ("NetStream.Publish.Failed", reason) in saw.statuses, saw
    assert saw.ended == "eof", saw
    _refused_publisher(handler, caplog, reason)


def test_a_refused_peer_that_keeps_sending_is_closed_after_the_bytes_it_may_send(monkeypatch, caplog):
    """With the grace time out of the way, a peer that goes on sending (never reading nor
    closing) is closed once the node dropped REFUSAL_DISCARD_BYTES: it cannot hold it."""
    caplog.set_level(logging.INFO, logger="streamer.rtmp.connection")
    monkeypatch.setattr(rtmp_connection, "NOTICE_GRACE_S", 60.0)
    endless = _first_chunk(msg.MessageType.VIDEO, 0xFFFFFF) + bytes(4 * rtmp_connection.REFUSAL_DISCARD_BYTES)

    async def scenario(port: int) -> int:
        reader, writer = await _published(port, handler)
        try:
            return await _send_until_closed(writer, endless, asyncio.Event())  # reads nothing
        finally:
            writer.close()

    handler = RecordingHandler({"BAD"})
    sent = run(_with_server(handler, scenario), 45)
    assert rtmp_connection.REFUSAL_DISCARD_BYTES <= sent < len(endless)
    _refused_publisher(handler, caplog, f"a video message of {0xFFFFFF} bytes (at most {msg.MAX_VIDEO_BYTES})")


def test_a_refused_peer_that_keeps_sending_slowly_is_closed_after_the_grace(caplog):
    """A peer that sends a byte now and then after the notice, never closing, is closed
    after NOTICE_GRACE_S (the stall timeout would not end it)."""
    caplog.set_level(logging.INFO, logger="streamer.rtmp.connection")

    async def scenario(port: int) -> int:
        reader, writer = await _published(port, handler)
        writer.write(_first_chunk(msg.MessageType.AUDIO, msg.MAX_AUDIO_BYTES + 1))
        trickled = 0
        with contextlib.suppress(OSError):
            while trickled < 300:  # 30 s: far past the grace; the notice and FIN are left unread
                writer.write(b"\0")
                await writer.drain()
                trickled += 1
                await asyncio.sleep(0.1)
        writer.close()
        return trickled

    handler = RecordingHandler({"BAD"})
    trickled = run(_with_server(handler, scenario), 45)
    assert trickled < 300
    _refused_publisher(handler, caplog, f"an audio message of {msg.MAX_AUDIO_BYTES + 1} bytes (at most {msg.MAX_AUDIO_BYTES})")


def test_a_publisher_sending_a_16_mib_access_unit_is_cut_and_another_goes_on(caplog):
    caplog.set_level(logging.INFO, logger="streamer.rtmp.connection")

    async def scenario():
        handler = RecordingHandler({"GOOD", "BAD"})
        server = RtmpServer(handler, port=0)
        await server.start()
        try:
            good = RtmpPublishClient(f"rtmp://127.0.0.1:{server.port}/live/GOOD", timeout=5)
            await good.connect()
            await good.send(MediaMessage("video", 0, b"\x17\x01" + bytes(1000)))
            reader, writer = await _publish_raw(server.port, "BAD")
            await wait_for(lambda: len(handler.publishers) == 2, 5)
            writer.write(_first_chunk(msg.MessageType.VIDEO, 0xFFFFFF))
            async with asyncio.timeout(5):
                statuses = (await _statuses_until_closed(reader)).statuses
            writer.close()
            for timestamp in range(40, 400, 40):
                await good.send(MediaMessage("video", timestamp, b"\x27\x01" + bytes(1000)))
            await good.close()
            await wait_for(lambda: all(p.ended_reason for p in handler.publishers), 5)
            return statuses, handler
        finally:
            await server.close()

    statuses, handler = run(scenario(), timeout=30)
    assert ("NetStream.Publish.Failed", f"a video message of {0xFFFFFF} bytes (at most {msg.MAX_VIDEO_BYTES})") in statuses
    bad = next(p for p in handler.publishers if p.name == "BAD")
    assert bad.ended_reason.startswith("protocol error: a video message of 16777215 bytes")
    assert handler.received["BAD"] == []
    assert len(handler.received["GOOD"]) == 10
    assert any(r.getMessage().endswith(f"closed (protocol error: a video message of 16777215 bytes (at most {msg.MAX_VIDEO_BYTES}))")
               for r in caplog.records)
