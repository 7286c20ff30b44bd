"""The RTMP chunk stream: splitting messages into chunks and reassembling them.

`ChunkReader` is feed-based (bytes in, whole messages out), so it never blocks and can be
fuzzed without sockets. It applies Set Chunk Size and Abort itself, at the exact byte where
they take effect, and still yields them. `ChunkWriter` always starts a message with a fmt 0
header (self-contained, no compression state to get wrong) and continues with fmt 3."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from streamer.rtmp.errors import RtmpProtocolError
from streamer.rtmp import messages as msg
from streamer.rtmp.messages import (
    MessageTooLarge,
    MessageType,
    RtmpMessage,
    parse_abort,
    parse_set_chunk_size,
)

DEFAULT_CHUNK_SIZE = 128
DEFAULT_MAX_MESSAGE_SIZE = msg.MAX_VIDEO_BYTES  # the largest any type may be (messages.max_payload_bytes)
EXTENDED_TIMESTAMP = 0xFFFFFF
MIN_CSID = 2
MAX_CSID = 65599
_U32 = 0xFFFFFFFF


@dataclass
class _ChunkStreamState:
    """What the previous header on one chunk stream left behind (fmt 1–3 inherit it)."""

    timestamp: int = 0
    ts_field: int = 0  # absolute timestamp after fmt 0, delta after fmt 1/2 (fmt 3 re-applies it)
    extended: bool = False  # fmt 3 chunks carry a 4-byte extended timestamp too
    length: int = 0
    type_id: int = 0
    stream_id: int = 0
    partial: bytearray = field(default_factory=bytearray)


class ChunkReader:
    """Incremental chunk parser: `feed(bytes) -> [RtmpMessage]`, state kept per csid."""

    def __init__(self, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        """``max_message_size`` caps every message; each type has its own cap below it
        (``messages.max_payload_bytes``), checked at the message's first chunk header."""
        self.chunk_size = DEFAULT_CHUNK_SIZE
        self.max_message_size = max_message_size
        # one partial message per chunk stream, up to 65,536 of them, would let one peer hold
        # terabytes: what all chunk streams hold together is bounded too (interleaved audio and
        # video at the message limit still fit)
        self.max_partial_bytes = 2 * max_message_size
        self._partial_bytes = 0
        self.chunks_parsed = 0  # the parsing work a peer caused (a chunk costs ~1 µs, whatever its size)
        self._streams: dict[int, _ChunkStreamState] = {}
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a chunk."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[RtmpMessage]:
        self._buffer += data
        messages: list[RtmpMessage] = []
        pos = 0
        try:
            while True:
                consumed, message = self._parse_chunk(pos)
                if consumed == 0:
                    break
                pos += consumed
                if message is not None:
                    self._apply_control(message)
                    messages.append(message)
        finally:
            del self._buffer[:pos]
        return messages

    def _apply_control(self, message: RtmpMessage) -> None:
        if message.stream_id != 0:
            return
        if message.type_id == MessageType.SET_CHUNK_SIZE:
            self.chunk_size = parse_set_chunk_size(message.payload)
        elif message.type_id == MessageType.ABORT:
            state = self._streams.get(parse_abort(message.payload))
            if state is not None:
                self._partial_bytes -= len(state.partial)
                state.partial.clear()

    def _parse_chunk(self, pos: int) -> tuple[int, RtmpMessage | None]:
        """Parse one chunk at `pos`; (0, None) when the buffer does not hold it all yet."""
        buf = self._buffer
        start = pos
        if pos >= len(buf):
            return 0, None
        first = buf[pos]
        fmt = first >> 6
        csid = first & 0x3F
        pos += 1
        if csid == 0:
            if pos + 1 > len(buf):
                return 0, None
            csid = buf[pos] + 64
            pos += 1
        elif csid == 1:
            if pos + 2 > len(buf):
                return 0, None
            csid = buf[pos] + buf[pos + 1] * 256 + 64
            pos += 2
        header_size = (11, 7, 3, 0)[fmt]
        if pos + header_size > len(buf):
            return 0, None
        state = self._streams.get(csid)
        if state is None:
            if fmt != 0:
                raise RtmpProtocolError(f"fmt {fmt} chunk on chunk stream {csid} without a previous fmt 0")
            state = _ChunkStreamState()
        new_message = not state.partial
        ts_field = state.ts_field
        length, type_id, stream_id = state.length, state.type_id, state.stream_id
        if fmt <= 2:
            if not new_message:
                raise RtmpProtocolError(f"fmt {fmt} chunk on chunk stream {csid} interrupts a partial message")
            ts_field = int.from_bytes(buf[pos : pos + 3], "big")
            if fmt <= 1:
                length = int.from_bytes(buf[pos + 3 : pos + 6], "big")
                type_id = buf[pos + 6]
            if fmt == 0:
                stream_id = struct.unpack_from("<I", buf, pos + 7)[0]
        pos += header_size
        extended = ts_field == EXTENDED_TIMESTAMP if fmt <= 2 else state.extended
        if extended:
            if pos + 4 > len(buf):
                return 0, None
            if fmt <= 2 or new_message:
                ts_field = struct.unpack_from(">I", buf, pos)[0]
            pos += 4
        if new_message and length > (limit := min(self.max_message_size, msg.max_payload_bytes(type_id))):
            raise MessageTooLarge(type_id, length, limit)
        take = min(self.chunk_size, length - len(state.partial))
        if pos + take > len(buf):
            return 0, None
        if self._partial_bytes + take > self.max_partial_bytes:
            raise msg.PartialMessagesTooLarge(self._partial_bytes + take, self.max_partial_bytes)

        # The whole chunk is here: commit the header to the chunk stream state.
        if new_message:
            if fmt == 0:
                state.timestamp = ts_field & _U32
            else:
                state.timestamp = (state.timestamp + ts_field) & _U32
            state.ts_field = ts_field
            state.extended = extended
            state.length, state.type_id, state.stream_id = length, type_id, stream_id
        self._streams[csid] = state
        state.partial += buf[pos : pos + take]
        self._partial_bytes += take
        self.chunks_parsed += 1
        pos += take
        if len(state.partial) < state.length:
            return pos - start, None
        message = RtmpMessage(state.type_id, state.stream_id, state.timestamp, bytes(state.partial))
        self._partial_bytes -= len(state.partial)
        state.partial.clear()
        return pos - start, message


def basic_header(fmt: int, csid: int) -> bytes:
    """The 1-, 2- or 3-byte basic header for chunk stream `csid` (2..65599)."""
    if not MIN_CSID <= csid <= MAX_CSID:
        raise ValueError(f"chunk stream id {csid} outside {MIN_CSID}..{MAX_CSID}")
    if csid < 64:
        return bytes([(fmt << 6) | csid])
    if csid < 320:
        return bytes([fmt << 6, csid - 64])
    rest = csid - 64
    return bytes([(fmt << 6) | 1, rest & 0xFF, rest >> 8])


def default_csid(type_id: int) -> int:
    """Chunk stream ids as ffmpeg uses them: control 2, commands 3, audio 4, data 5, video 6."""
    if type_id <= MessageType.SET_PEER_BANDWIDTH:
        return 2
    return {MessageType.AUDIO: 4, MessageType.VIDEO: 6, MessageType.AMF0_DATA: 5}.get(type_id, 3)


class ChunkWriter:
    """Serialises messages at the current outgoing chunk size (fmt 0 first chunk, fmt 3 after)."""

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        self.chunk_size = chunk_size

    def write(self, message: RtmpMessage, csid: int | None = None) -> bytes:
        """Chunks of one message. Sending a Set Chunk Size switches this writer after it."""
        csid = default_csid(message.type_id) if csid is None else csid
        timestamp = message.timestamp & _U32
        extended = timestamp >= EXTENDED_TIMESTAMP
        payload = message.payload
        if len(payload) > 0xFFFFFF:
            raise ValueError(f"message of {len(payload)} bytes does not fit a 24-bit length")
        out = bytearray(basic_header(0, csid))
        out += min(timestamp, EXTENDED_TIMESTAMP).to_bytes(3, "big")
        out += len(payload).to_bytes(3, "big")
        out.append(message.type_id)
        out += struct.pack("<I", message.stream_id)
        ext = struct.pack(">I", timestamp) if extended else b""
        out += ext
        continuation = basic_header(3, csid) + ext
        size = self.chunk_size
        out += payload[:size]
        for offset in range(size, len(payload), size):
            out += continuation
            out += payload[offset : offset + size]
        if message.type_id == MessageType.SET_CHUNK_SIZE and message.stream_id == 0:
            self.chunk_size = parse_set_chunk_size(message.payload)
        return bytes(out)
