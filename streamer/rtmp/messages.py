"""RTMP messages: the reassembled unit the chunk layer yields, plus builders and parsers for
protocol-control (types 1–6), user-control events and AMF0 commands.

Parsers take a payload and return plain values; a short or malformed payload raises
RtmpProtocolError, never IndexError/struct.error."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from streamer.rtmp import amf0
from streamer.rtmp.errors import RtmpProtocolError


class MessageType(IntEnum):
    """Message type ids this stack understands (RTMP spec §5.4, §7.1)."""

    SET_CHUNK_SIZE = 1
    ABORT = 2
    ACKNOWLEDGEMENT = 3
    USER_CONTROL = 4
    WINDOW_ACK_SIZE = 5
    SET_PEER_BANDWIDTH = 6
    AUDIO = 8
    VIDEO = 9
    AMF3_DATA = 15
    AMF3_COMMAND = 17
    AMF0_DATA = 18
    AMF0_COMMAND = 20


class UserControlEvent(IntEnum):
    """User control event types (§7.1.7)."""

    STREAM_BEGIN = 0
    STREAM_EOF = 1
    STREAM_DRY = 2
    SET_BUFFER_LENGTH = 3
    STREAM_IS_RECORDED = 4
    PING_REQUEST = 6
    PING_RESPONSE = 7


class PeerBandwidthLimit(IntEnum):
    """Limit type of Set Peer Bandwidth."""

    HARD = 0
    SOFT = 1
    DYNAMIC = 2


MAX_CHUNK_SIZE = 0x7FFFFFFF
# Commands and data messages are a few hundred bytes (onMetaData ~1 KiB). AMF0 decodes some
# 2 million values a second on the event loop, so a 16 MiB one would hold every session of
# the node for seconds: bigger ones are refused undecoded.
MAX_COMMAND_BYTES = 64 * 1024
# One H.264 access unit: a 4K keyframe at 50 Mbit/s is ~1-2 MB (nginx-rtmp refuses past 1 MB).
# The whole message is held, copied and decoded before anything can judge it: a 16 MiB one
# grew the node by ~130 MB, so a bigger one is refused from its first chunk header.
MAX_VIDEO_BYTES = 4 * 1024 * 1024
MAX_AUDIO_BYTES = 64 * 1024  # an AAC frame is a few hundred bytes, 8 KiB at most
MAX_CONTROL_BYTES = 64  # types 1-6 carry 4 to 6 bytes


_MESSAGE_NAMES = {
    MessageType.SET_CHUNK_SIZE: "a control message (Set Chunk Size)",
    MessageType.ABORT: "a control message (Abort)",
    MessageType.ACKNOWLEDGEMENT: "a control message (Acknowledgement)",
    MessageType.USER_CONTROL: "a user control message",
    MessageType.WINDOW_ACK_SIZE: "a control message (Window Acknowledgement Size)",
    MessageType.SET_PEER_BANDWIDTH: "a control message (Set Peer Bandwidth)",
    MessageType.AUDIO: "an audio message",
    MessageType.VIDEO: "a video message",
    MessageType.AMF3_DATA: "a data message (AMF3)",
    16: "a shared object message (AMF3)",
    MessageType.AMF3_COMMAND: "a command message (AMF3)",
    MessageType.AMF0_DATA: "a data message (AMF0)",
    19: "a shared object message (AMF0)",
    MessageType.AMF0_COMMAND: "a command message (AMF0)",
    22: "an aggregate message",
}


def message_name(type_id: int) -> str:
    """How a refusal names a message of ``type_id`` ("an audio message"), for people to read."""
    return _MESSAGE_NAMES.get(type_id, f"a message of type {type_id}")


class Oversized(RtmpProtocolError):
    """The peer sent more than the node holds: refused, and the peer is told why (an
    error-level onStatus) before the connection closes."""


class MessageTooLarge(Oversized):
    """A message header announced more bytes than its type may have: refused before any
    of its payload is held."""

    def __init__(self, type_id: int, length: int, limit: int) -> None:
        super().__init__(f"{message_name(type_id)} of {length} bytes (at most {limit})")
        self.type_id, self.length, self.limit = type_id, length, limit


class PartialMessagesTooLarge(Oversized):
    """The messages begun and not finished on all chunk streams together would hold more
    than the node's bound (each within its own cap)."""

    def __init__(self, held: int, limit: int) -> None:
        super().__init__(f"partial messages of {held} bytes on all chunk streams together (at most {limit})")
        self.held, self.limit = held, limit


def max_payload_bytes(type_id: int) -> int:
    """The most bytes a message of ``type_id`` may carry; the chunk layer checks it against
    each message header, so an oversized message is cut before it is buffered."""
    if type_id == MessageType.VIDEO:
        return MAX_VIDEO_BYTES
    if type_id == MessageType.AUDIO:
        return MAX_AUDIO_BYTES
    if type_id <= MessageType.SET_PEER_BANDWIDTH:
        return MAX_CONTROL_BYTES
    return MAX_COMMAND_BYTES  # commands, data, shared objects, aggregates: never media-sized here


@dataclass(frozen=True, slots=True)
class RtmpMessage:
    """One whole message; `timestamp` is the 32-bit RTMP timestamp (wraps at 2**32 ms)."""

    type_id: int
    stream_id: int
    timestamp: int
    payload: bytes


def _u32(payload: bytes, what: str) -> int:
    if len(payload) < 4:
        raise RtmpProtocolError(f"{what} payload has {len(payload)} bytes, need 4")
    return struct.unpack_from(">I", payload)[0]


def _control(type_id: int, payload: bytes) -> RtmpMessage:
    return RtmpMessage(type_id, 0, 0, payload)


def set_chunk_size(size: int) -> RtmpMessage:
    if not 1 <= size <= MAX_CHUNK_SIZE:
        raise ValueError(f"chunk size {size} outside 1..{MAX_CHUNK_SIZE}")
    return _control(MessageType.SET_CHUNK_SIZE, struct.pack(">I", size))


def parse_set_chunk_size(payload: bytes) -> int:
    """The new chunk size; the top bit must be zero and the size at least 1."""
    size = _u32(payload, "Set Chunk Size")
    if size & 0x80000000 or size == 0:
        raise RtmpProtocolError(f"invalid chunk size {size}")
    return size


def abort(csid: int) -> RtmpMessage:
    return _control(MessageType.ABORT, struct.pack(">I", csid))


def parse_abort(payload: bytes) -> int:
    """The chunk stream id whose partial message the peer abandoned."""
    return _u32(payload, "Abort")


def acknowledgement(sequence: int) -> RtmpMessage:
    return _control(MessageType.ACKNOWLEDGEMENT, struct.pack(">I", sequence & 0xFFFFFFFF))


def parse_acknowledgement(payload: bytes) -> int:
    return _u32(payload, "Acknowledgement")


def window_ack_size(size: int) -> RtmpMessage:
    return _control(MessageType.WINDOW_ACK_SIZE, struct.pack(">I", size))


def parse_window_ack_size(payload: bytes) -> int:
    return _u32(payload, "Window Acknowledgement Size")


def set_peer_bandwidth(size: int, limit: PeerBandwidthLimit = PeerBandwidthLimit.DYNAMIC) -> RtmpMessage:
    return _control(MessageType.SET_PEER_BANDWIDTH, struct.pack(">IB", size, limit))


def parse_set_peer_bandwidth(payload: bytes) -> tuple[int, int]:
    """(window size, limit type); the limit type is returned raw since peers send odd ones."""
    if len(payload) < 5:
        raise RtmpProtocolError(f"Set Peer Bandwidth payload has {len(payload)} bytes, need 5")
    return struct.unpack_from(">IB", payload)


@dataclass(frozen=True)
class UserControl:
    """A user control event: `value` is the stream id or ping timestamp; `extra` the buffer ms."""

    event: int
    value: int
    extra: int | None = None


def user_control(event: UserControlEvent, value: int, extra: int | None = None) -> RtmpMessage:
    payload = struct.pack(">HI", event, value & 0xFFFFFFFF)
    if extra is not None:
        payload += struct.pack(">I", extra)
    return _control(MessageType.USER_CONTROL, payload)


def stream_begin(stream_id: int) -> RtmpMessage:
    return user_control(UserControlEvent.STREAM_BEGIN, stream_id)


def stream_eof(stream_id: int) -> RtmpMessage:
    return user_control(UserControlEvent.STREAM_EOF, stream_id)


def ping_request(timestamp: int) -> RtmpMessage:
    return user_control(UserControlEvent.PING_REQUEST, timestamp)


def ping_response(timestamp: int) -> RtmpMessage:
    return user_control(UserControlEvent.PING_RESPONSE, timestamp)


def parse_user_control(payload: bytes) -> UserControl:
    if len(payload) < 6:
        raise RtmpProtocolError(f"User Control payload has {len(payload)} bytes, need 6")
    event, value = struct.unpack_from(">HI", payload)
    if event == UserControlEvent.SET_BUFFER_LENGTH:
        if len(payload) < 10:
            raise RtmpProtocolError("Set Buffer Length event without the buffer length")
        return UserControl(event, value, struct.unpack_from(">I", payload, 6)[0])
    return UserControl(event, value)


@dataclass(frozen=True)
class Command:
    """An AMF0 command: name, transaction id, command object and the remaining arguments."""

    name: str
    transaction_id: float
    command_object: Any = None
    args: list[Any] = field(default_factory=list)


def command(
    name: str, transaction_id: float, command_object: Any = None, *args: Any, stream_id: int = 0
) -> RtmpMessage:
    body = amf0.encode(name, transaction_id, command_object, *args)
    return RtmpMessage(MessageType.AMF0_COMMAND, stream_id, 0, body)


def check_command_size(payload: bytes) -> None:
    """``RtmpProtocolError`` for a command or data message over ``MAX_COMMAND_BYTES``."""
    if len(payload) > MAX_COMMAND_BYTES:
        raise RtmpProtocolError(f"a command or data message of {len(payload)} bytes (at most {MAX_COMMAND_BYTES})")


def parse_command(type_id: int, payload: bytes) -> Command:
    """Parse an AMF0 command, or an AMF3 command message (whose body is AMF0 after one byte).

    A missing transaction id reads as 0: ffmpeg's listen mode sends a bare `onFCPublish`."""
    check_command_size(payload)
    if type_id == MessageType.AMF3_COMMAND:
        payload = payload[1:]
    values = amf0.decode_all(payload)
    if not values or not isinstance(values[0], str):
        raise RtmpProtocolError("command message without a name")
    transaction_id = values[1] if len(values) > 1 else 0.0
    if isinstance(transaction_id, bool) or not isinstance(transaction_id, float):
        raise RtmpProtocolError(f"command {values[0]!r} has a non-number transaction id")
    command_object = values[2] if len(values) > 2 else None
    return Command(values[0], transaction_id, command_object, values[3:])


def data(*values: Any, stream_id: int = 0, timestamp: int = 0) -> RtmpMessage:
    """An AMF0 data message (e.g. `|RtmpSampleAccess`, `@setDataFrame`)."""
    return RtmpMessage(MessageType.AMF0_DATA, stream_id, timestamp, amf0.encode(*values))
