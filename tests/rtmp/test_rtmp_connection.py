"""Connection layer pieces: timestamp unwrapping, the player's drop policy, @setDataFrame,
acknowledgements, ping and the connect answer as a raw client sees them."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from rtmp_testkit import RecordingHandler, run

from streamer.rtmp import MediaMessage, RtmpServer, amf0
from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter
from streamer.rtmp.connection import (
    RtmpConnection,
    WorkBudget,
    ServerPlayer,
    TimestampUnwrapper,
    strip_set_data_frame,
)
from streamer.rtmp.handshake import client_handshake


def test_timestamp_unwrapper_counts_past_2_32_and_allows_small_steps_back():
    unwrap = TimestampUnwrapper()
    assert [unwrap(t) for t in (2**32 - 20, 2**32 - 10, 5, 0, 30)] == [2**32 - 20, 2**32 - 10, 2**32 + 5, 2**32, 2**32 + 30]


def test_strip_set_data_frame():
    body = amf0.encode("onMetaData", amf0.EcmaArray({"width": 320.0}))
    assert strip_set_data_frame(amf0.encode("@setDataFrame") + body) == body
    assert strip_set_data_frame(body) == body


class _FakeConnection:
    remote = "test"

    def __init__(self) -> None:
        self.closed = asyncio.Event()
        self.reason: str | None = None

    def close_now(self, reason: str) -> None:
        self.reason = reason
        self.closed.set()


def _video(key: bool, header: bool = False) -> MediaMessage:
    return MediaMessage("video", 0, bytes([0x17 if key else 0x27, 0 if header else 1, 0, 0, 0]))


def test_player_drops_video_until_next_keyframe_but_keeps_audio_and_headers():
    async def scenario() -> tuple[ServerPlayer, list[MediaMessage], _FakeConnection]:
        connection = _FakeConnection()
        player = ServerPlayer(connection, "live", "k", queue_size=3)  # type: ignore[arg-type]
        sent = [_video(True), _video(False), _video(False)]  # fills the queue
        sent += [_video(False), MediaMessage("audio", 0, b"\xaf\x01"), _video(True, header=True)]
        for message in sent:
            player.send(message)
        drained = [await player.next() for _ in range(4)]  # the queue now holds only the header
        player.send(_video(False))  # still waiting for a keyframe: dropped
        player.send(_video(True))  # room again and a keyframe: resumes
        player.send(_video(False))
        player.finish()
        while (item := await player.next()) is not None:
            drained.append(item)
        return player, drained, connection

    player, drained, connection = run(scenario())
    assert player.dropped_video == 2
    kinds = [(m.kind, m.payload[:2]) for m in drained]
    assert kinds == [
        ("video", b"\x17\x01"), ("video", b"\x27\x01"), ("video", b"\x27\x01"),
        ("audio", b"\xaf\x01"), ("video", b"\x17\x00"), ("video", b"\x17\x01"), ("video", b"\x27\x01"),
    ]  # fmt: skip
    assert connection.reason is None


def test_player_that_never_drains_is_cut():
    async def scenario() -> _FakeConnection:
        connection = _FakeConnection()
        player = ServerPlayer(connection, "live", "k", queue_size=2)  # type: ignore[arg-type]
        for _ in range(20):
            player.send(MediaMessage("audio", 0, b"\xaf\x01"))
        return connection

    assert "too slow" in (run(scenario()).reason or "")


def test_connect_answer_acks_and_ping_as_a_raw_client_sees_them():
    async def scenario() -> list[msg.RtmpMessage]:
        async with RtmpServer(RecordingHandler({"KEY"}), port=0, chunk_size=4096) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await client_handshake(reader, writer, timeout=2)
            out = ChunkWriter()
            writer.write(out.write(msg.window_ack_size(1000)) + out.write(msg.command("connect", 1, {"app": "live/"})))
            writer.write(out.write(msg.ping_request(1234)))
            writer.write(out.write(msg.RtmpMessage(18, 0, 0, amf0.encode("x") * 700)))  # > 1000 bytes
            chunks = ChunkReader()
            got: list[msg.RtmpMessage] = []
            async with asyncio.timeout(3):
                while not any(m.type_id == msg.MessageType.ACKNOWLEDGEMENT for m in got):
                    got += chunks.feed(await reader.read(65536))
            writer.close()
            return got

    got = run(scenario())
    types = [m.type_id for m in got]
    assert types[:3] == [5, 6, 1] and msg.parse_set_chunk_size(got[2].payload) == 4096
    result = msg.parse_command(got[3].type_id, got[3].payload)
    assert (result.name, result.transaction_id) == ("_result", 1.0)
    assert result.command_object["fmsVer"].startswith("FMS/")
    assert result.args[0]["code"] == "NetConnection.Connect.Success" and result.args[0]["objectEncoding"] == 0.0
    pongs = [msg.parse_user_control(m.payload) for m in got if m.type_id == msg.MessageType.USER_CONTROL]
    assert msg.UserControl(msg.UserControlEvent.PING_RESPONSE, 1234) in pongs
    ack = next(m for m in got if m.type_id == msg.MessageType.ACKNOWLEDGEMENT)
    assert msg.parse_acknowledgement(ack.payload) >= 1000


def test_a_peer_that_never_reads_its_answers_is_cut_before_they_pile_up():
    """Commands are answered without waiting for the socket (an unknown command's _error
    echoes its name): a client that sends them and never reads made the server hold every
    answer in memory. Past a bound of unsent bytes it is cut."""

    async def scenario() -> tuple[str | None, int]:
        async with RtmpServer(RecordingHandler({"KEY"}), port=0, stall_timeout=30) as server:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
            reader, writer = await asyncio.open_connection(sock=sock)
            await client_handshake(reader, writer, timeout=2)
            out = ChunkWriter()
            writer.write(out.write(msg.set_chunk_size(65536)) + out.write(msg.command("connect", 1, {"app": "live"})))
            connection = next(iter(server._connections.values()))
            unknown = msg.command("x" * 60_000, 2, None)
            peak = 0
            try:
                for _ in range(400):  # 24 MB of answers, never read
                    writer.write(out.write(unknown))
                    await writer.drain()
                    peak = max(peak, connection._writer.transport.get_write_buffer_size())
                    if connection.closed.is_set():
                        break
            except ConnectionError:
                pass
            async with asyncio.timeout(5):
                await connection.closed.wait()
            writer.close()
            return connection.close_reason, peak

    reason, peak = run(scenario())
    assert reason is not None and "not reading" in reason
    assert peak <= RtmpConnection.MAX_UNSENT_BYTES + 70_000


def test_an_oversized_command_or_data_message_cuts_the_connection_without_decoding_it():
    async def scenario(message: msg.RtmpMessage, publish_first: bool) -> str | None:
        async with RtmpServer(RecordingHandler({"KEY"}), port=0) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await client_handshake(reader, writer, timeout=2)
            out = ChunkWriter()
            writer.write(out.write(msg.set_chunk_size(65536)))
            if publish_first:
                writer.write(out.write(msg.command("connect", 1, {"app": "live"})) + out.write(msg.command("createStream", 2, None))
                             + out.write(msg.command("publish", 3, None, "KEY", "live", stream_id=1)))
            connection = next(iter(server._connections.values()))
            with contextlib.suppress(ConnectionError):
                writer.write(out.write(message))
                await writer.drain()
            async with asyncio.timeout(10):
                await connection.closed.wait()
            writer.close()
            return connection.close_reason

    nulls = 1 << 20
    strict_array = b"\x0a" + nulls.to_bytes(4, "big") + b"\x05" * nulls
    command = msg.RtmpMessage(20, 0, 0, amf0.encode("connect", 1.0) + strict_array)
    data = msg.RtmpMessage(18, 1, 0, amf0.encode("@setDataFrame", "onMetaData") + strict_array)
    for message, publish_first in ((command, False), (data, True)):
        reason = run(scenario(message, publish_first))
        assert reason is not None and "protocol error" in reason and "bytes" in reason, reason


def test_a_peer_is_read_no_faster_than_its_parsing_budget():
    """1-byte chunks cost ~1 µs of parsing per byte on the event loop: one peer at 2 MB/s
    took all of it. Past its budget a connection is read more slowly, so after one second
    the server has parsed about a second's budget of a burst, not all of it."""

    async def scenario() -> tuple[int, int]:
        async with RtmpServer(RecordingHandler({"KEY"}), port=0, stall_timeout=30) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await client_handshake(reader, writer, timeout=2)
            out = ChunkWriter()
            burst = out.write(msg.set_chunk_size(1)) + out.write(msg.RtmpMessage(9, 0, 0, bytes(200_000)))
            connection = next(iter(server._connections.values()))
            connection._work = WorkBudget(10_000)
            writer.write(burst)
            await asyncio.sleep(1.0)
            parsed = connection._chunks_in.chunks_parsed
            writer.close()
            return parsed, 200_000

    parsed, sent = run(scenario())
    assert 0 < parsed <= 10_000 + 65_536 < sent  # a second's budget and one 64 KiB read past it
