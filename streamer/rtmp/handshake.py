"""The plain RTMP handshake (version 3), both roles.

Server: read C0+C1, answer S0+S1+S2 at once (S1 = our time, zero field 0, random bytes;
S2 = C1 echoed), read C2 without checking it. Clients that open with a digest-style C1
(ffmpeg, OBS/librtmp) see a zero version field in S1, skip digest validation and carry on
with the plain scheme. Client: send C0+C1, read S0+S1+S2, answer C2 = S1 echoed (ffmpeg's
listen mode checks exactly that). Every read runs under a timeout."""

from __future__ import annotations

import asyncio
import os
import struct
import time
from dataclasses import dataclass

from streamer.rtmp.errors import RtmpHandshakeError

RTMP_VERSION = 3
HANDSHAKE_SIZE = 1536


@dataclass(frozen=True)
class HandshakePacket:
    """C1/S1/C2/S2 fields: `time`, the second field (zero, or a version for digest C1s), random."""

    time: int
    field2: int
    random: bytes

    def to_bytes(self) -> bytes:
        return struct.pack(">II", self.time & 0xFFFFFFFF, self.field2) + self.random


def parse_packet(data: bytes) -> HandshakePacket:
    if len(data) != HANDSHAKE_SIZE:
        raise RtmpHandshakeError(f"handshake packet has {len(data)} bytes, need {HANDSHAKE_SIZE}")
    time_field, field2 = struct.unpack_from(">II", data)
    return HandshakePacket(time_field, field2, bytes(data[8:]))


def parse_version(data: bytes) -> int:
    """C0/S0: only version 3 (plain) is served; 6 (RTMPE) and anything else is refused."""
    if len(data) != 1:
        raise RtmpHandshakeError("missing version byte")
    if data[0] != RTMP_VERSION:
        raise RtmpHandshakeError(f"unsupported RTMP version {data[0]} (only 3)")
    return data[0]


def make_packet(epoch: float) -> HandshakePacket:
    """A fresh plain S1/C1: milliseconds since `epoch`, zero field, 1528 random bytes."""
    return HandshakePacket(int((time.monotonic() - epoch) * 1000), 0, os.urandom(HANDSHAKE_SIZE - 8))


async def _read_exactly(reader: asyncio.StreamReader, count: int, timeout: float, what: str) -> bytes:
    try:
        async with asyncio.timeout(timeout):
            return await reader.readexactly(count)
    except asyncio.IncompleteReadError as exc:
        raise RtmpHandshakeError(f"peer closed during the handshake ({what}: {len(exc.partial)}/{count} bytes)") from None
    except TimeoutError:
        raise RtmpHandshakeError(f"handshake timed out after {timeout:g} s waiting for {what}") from None


async def server_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, timeout: float) -> HandshakePacket:
    """Run the server side; returns the client's C1 (for logging/inspection)."""
    epoch = time.monotonic()
    parse_version(await _read_exactly(reader, 1, timeout, "C0"))
    c1 = parse_packet(await _read_exactly(reader, HANDSHAKE_SIZE, timeout, "C1"))
    s1 = make_packet(epoch)
    writer.write(bytes([RTMP_VERSION]) + s1.to_bytes() + c1.to_bytes())
    parse_packet(await _read_exactly(reader, HANDSHAKE_SIZE, timeout, "C2"))
    return c1


async def client_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, timeout: float) -> HandshakePacket:
    """Run the client side; returns the server's S1."""
    epoch = time.monotonic()
    c1 = make_packet(epoch)
    writer.write(bytes([RTMP_VERSION]) + c1.to_bytes())
    parse_version(await _read_exactly(reader, 1, timeout, "S0"))
    s1 = parse_packet(await _read_exactly(reader, HANDSHAKE_SIZE, timeout, "S1"))
    writer.write(s1.to_bytes())
    parse_packet(await _read_exactly(reader, HANDSHAKE_SIZE, timeout, "S2"))
    return s1
