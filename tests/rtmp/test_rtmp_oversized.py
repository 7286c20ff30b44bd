"""An oversized message (an H.264 access unit of 16 MiB (the 24-bit length field's maximum), a huge audio or control message)
is refused from its first chunk header, before its payload is held: the peer gets an
error-level onStatus saying why, the node logs why in the connection's closing line, and other sessions go on."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rtmp_testkit import RecordingHandler, run, wait_for

from streamer.rtmp import RtmpPublishClient, RtmpServer
from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter, basic_header
from streamer.rtmp.handler import MediaMessage
from streamer.rtmp.handshake import client_handshake


def _first_chunk(type_id: int, length: int, csid: int = 6) -> bytes:
    """A fmt 0 header announcing ``length`` bytes, and the first 128 of them."""
    header = basic_header(0, csid) + bytes(3) + length.to_bytes(3, "big") + bytes([type_id]) + (1).to_bytes(4, "little")
    return header + bytes(min(length, 128))


@pytest.mark.parametrize(("type_id", "length"), [
    (msg.MessageType.VIDEO, msg.MAX_VIDEO_BYTES + 1),
    (msg.MessageType.VIDEO, 0xFFFFFF),
    (msg.MessageType.AUDIO, msg.MAX_AUDIO_BYTES + 1),
    (msg.MessageType.AMF0_COMMAND, msg.MAX_COMMAND_BYTES + 1),
    (msg.MessageType.SET_CHUNK_SIZE, 1000),
    (22, 1 << 20),  # an aggregate: nothing here reads them
])
def test_an_oversized_message_is_refused_at_its_header(type_id, length):
    reader = ChunkReader()
    with pytest.raises(msg.MessageTooLarge) as refused:
        reader.feed(_first_chunk(type_id, length))
    assert refused.value.length == length and refused.value.limit < length
    assert not any(state.partial for state in reader._streams.values())


def test_the_largest_allowed_video_message_passes():
    writer, reader = ChunkWriter(4096), ChunkReader()
    reader.feed(ChunkWriter().write(msg.set_chunk_size(4096)))
    out = reader.feed(writer.write(msg.RtmpMessage(msg.MessageType.VIDEO, 1, 0, bytes(msg.MAX_VIDEO_BYTES))))
    assert [len(m.payload) for m in out] == [msg.MAX_VIDEO_BYTES]


async def _publish_raw(port: int, key: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await client_handshake(reader, writer, timeout=2)
    chunks = ChunkWriter()
    for message in (msg.command("connect", 1, {"app": "live"}), msg.command("createStream", 2, None),
                    msg.command("publish", 3, None, key, "live", stream_id=1)):
        writer.write(chunks.write(message))
    return reader, writer


async def _statuses_until_closed(reader: asyncio.StreamReader) -> list[tuple[str, str]]:
    chunks, seen = ChunkReader(), []
    try:
        while data := await reader.read(65536):
            for message in chunks.feed(data):
                if message.type_id == msg.MessageType.AMF0_COMMAND:
                    command = msg.parse_command(message.type_id, message.payload)
                    if command.name == "onStatus":
                        seen.append((command.args[0]["code"], command.args[0]["description"]))
    except ConnectionError:
        pass  # the rest of the message we never read can turn the close into a reset
    return seen


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
                statuses = await _statuses_until_closed(reader)
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
