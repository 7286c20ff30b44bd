"""Handshake: both roles against each other over TCP, a digest-style C1, refusals, timeouts."""

from __future__ import annotations

import asyncio
import os
import struct

import pytest
from rtmp_testkit import run

from streamer.rtmp.errors import RtmpHandshakeError, RtmpProtocolError
from streamer.rtmp.handshake import (
    HANDSHAKE_SIZE,
    HandshakePacket,
    client_handshake,
    parse_packet,
    parse_version,
    server_handshake,
)


class _Sink:
    """Minimal StreamWriter stand-in that records what is written."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data


def reader_with(data: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


def test_client_and_server_complete_over_tcp():
    async def scenario() -> tuple[HandshakePacket, HandshakePacket]:
        seen: list[HandshakePacket] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(await server_handshake(reader, writer, timeout=2))
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            s1 = await client_handshake(reader, writer, timeout=2)
            writer.close()
            await asyncio.sleep(0.05)
        finally:
            server.close()
        return seen[0], s1

    c1, s1 = run(scenario(), timeout=10)
    assert s1.field2 == 0 and len(s1.random) == HANDSHAKE_SIZE - 8
    assert c1.field2 == 0


def test_server_answers_a_digest_style_c1_with_plain_s1_and_echoed_s2():
    """ffmpeg/OBS send a version in C1's second field and a digest in the random bytes."""
    c1 = struct.pack(">II", 0, 0x80000702) + os.urandom(HANDSHAKE_SIZE - 8)
    c2 = os.urandom(HANDSHAKE_SIZE)
    sink = _Sink()

    async def scenario() -> HandshakePacket:
        return await server_handshake(reader_with(b"\x03" + c1 + c2), sink, timeout=1)  # type: ignore[arg-type]

    assert run(scenario()).field2 == 0x80000702
    assert sink.data[0] == 3 and len(sink.data) == 1 + 2 * HANDSHAKE_SIZE
    assert sink.data[5:9] == b"\x00\x00\x00\x00"  # S1's zero field: no digest to validate
    assert sink.data[1 + HANDSHAKE_SIZE :] == c1  # S2 echoes C1


def test_client_echoes_s1_as_c2():
    s1 = struct.pack(">II", 5, 0) + os.urandom(HANDSHAKE_SIZE - 8)
    sink = _Sink()

    async def scenario() -> None:
        await client_handshake(reader_with(b"\x03" + s1 + bytes(HANDSHAKE_SIZE)), sink, timeout=1)  # type: ignore[arg-type]

    run(scenario())
    assert sink.data[0] == 3 and sink.data[1 + HANDSHAKE_SIZE :] == s1


@pytest.mark.parametrize("version", [6, 0, 255])
def test_other_versions_are_refused(version):
    with pytest.raises(RtmpHandshakeError, match="version"):
        parse_version(bytes([version]))


def test_truncated_and_silent_peers():
    async def truncated() -> None:
        await server_handshake(reader_with(b"\x03" + bytes(100)), _Sink(), timeout=1)  # type: ignore[arg-type]

    with pytest.raises(RtmpHandshakeError, match="closed during the handshake"):
        run(truncated())

    async def silent() -> None:
        await server_handshake(reader_with(b"\x03", eof=False), _Sink(), timeout=0.2)  # type: ignore[arg-type]

    with pytest.raises(RtmpProtocolError, match="timed out"):
        run(silent())


def test_packet_round_trip_and_length_check():
    packet = HandshakePacket(7, 0, bytes(HANDSHAKE_SIZE - 8))
    assert parse_packet(packet.to_bytes()) == packet
    with pytest.raises(RtmpHandshakeError):
        parse_packet(bytes(10))
