"""AMF0 encoding and decoding (the value format of RTMP commands and FLV script data).

Python mapping: number ↔ float (ints encode as numbers), boolean ↔ bool, string/long
string ↔ str, object ↔ dict, null ↔ None, undefined ↔ UNDEFINED, ECMA array ↔ EcmaArray,
strict array ↔ list, date ↔ Amf0Date. Strings decode with ``surrogateescape`` so any bytes
round-trip. Everything a peer can get wrong raises RtmpProtocolError; nesting is bounded so
a hostile peer cannot blow the Python stack."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from streamer.rtmp.errors import RtmpProtocolError

NUMBER: Final = 0x00
BOOLEAN: Final = 0x01
STRING: Final = 0x02
OBJECT: Final = 0x03
NULL: Final = 0x05
UNDEFINED_MARKER: Final = 0x06
ECMA_ARRAY: Final = 0x08
OBJECT_END: Final = 0x09
STRICT_ARRAY: Final = 0x0A
DATE: Final = 0x0B
LONG_STRING: Final = 0x0C

MAX_DEPTH: Final = 32
_ENCODING: Final = "utf-8"
_ERRORS: Final = "surrogateescape"


class _Undefined:
    """AMF0 `undefined`, distinct from `null` (None) so values round-trip exactly."""

    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDEFINED"


UNDEFINED: Final = _Undefined()


class EcmaArray(dict):
    """An associative array (marker 0x08), e.g. FLV `onMetaData`; a dict that encodes as such."""


@dataclass(frozen=True)
class Amf0Date:
    """A date kept as sent (ms since the epoch + timezone), so odd values never fail decoding."""

    milliseconds: float
    timezone: int = 0


def encode(*values: Any) -> bytes:
    """Encode values back to back, the way a command or data message body is laid out."""
    out = bytearray()
    for value in values:
        _encode_value(value, out, 0)
    return bytes(out)


def _encode_string_body(text: str, out: bytearray) -> None:
    raw = text.encode(_ENCODING, _ERRORS)
    if len(raw) > 0xFFFF:
        raise ValueError(f"AMF0 key of {len(raw)} bytes exceeds 65535")
    out += struct.pack(">H", len(raw)) + raw


def _encode_properties(items: dict, out: bytearray, depth: int) -> None:
    for key, item in items.items():
        _encode_string_body(str(key), out)
        _encode_value(item, out, depth + 1)
    out += b"\x00\x00" + bytes([OBJECT_END])


def _encode_value(value: Any, out: bytearray, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"AMF0 value nested deeper than {MAX_DEPTH}")
    if value is None:
        out.append(NULL)
    elif value is UNDEFINED:
        out.append(UNDEFINED_MARKER)
    elif isinstance(value, bool):
        out += bytes([BOOLEAN, 1 if value else 0])
    elif isinstance(value, (int, float)):
        out.append(NUMBER)
        out += struct.pack(">d", float(value))
    elif isinstance(value, str):
        raw = value.encode(_ENCODING, _ERRORS)
        if len(raw) <= 0xFFFF:
            out.append(STRING)
            out += struct.pack(">H", len(raw))
        else:
            out.append(LONG_STRING)
            out += struct.pack(">I", len(raw))
        out += raw
    elif isinstance(value, EcmaArray):
        out.append(ECMA_ARRAY)
        out += struct.pack(">I", len(value))
        _encode_properties(value, out, depth)
    elif isinstance(value, dict):
        out.append(OBJECT)
        _encode_properties(value, out, depth)
    elif isinstance(value, (list, tuple)):
        out.append(STRICT_ARRAY)
        out += struct.pack(">I", len(value))
        for item in value:
            _encode_value(item, out, depth + 1)
    elif isinstance(value, Amf0Date):
        out.append(DATE)
        out += struct.pack(">dh", value.milliseconds, value.timezone)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as AMF0")


def decode_all(data: bytes) -> list[Any]:
    """Decode every value in `data` (a whole command or data message body)."""
    return _Decoder(data).values()


def decode_value(data: bytes, offset: int = 0) -> tuple[Any, int]:
    """Decode one value at `offset`; returns it and the offset just past it."""
    decoder = _Decoder(data, offset)
    value = decoder.value(0)
    return value, decoder.pos


class _Decoder:
    """Cursor over one buffer; every read checks bounds so truncation becomes a clear error."""

    def __init__(self, data: bytes, offset: int = 0) -> None:
        self.data = memoryview(bytes(data))
        self.pos = offset

    def values(self) -> list[Any]:
        out = []
        while self.pos < len(self.data):
            out.append(self.value(0))
        return out

    def take(self, count: int) -> bytes:
        end = self.pos + count
        if end > len(self.data):
            raise RtmpProtocolError(
                f"AMF0 truncated: need {count} bytes at offset {self.pos}, have {len(self.data) - self.pos}"
            )
        chunk = bytes(self.data[self.pos : end])
        self.pos = end
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack(">H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def text(self, length: int) -> str:
        return self.take(length).decode(_ENCODING, _ERRORS)

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise RtmpProtocolError(f"AMF0 nesting deeper than {MAX_DEPTH}")
        marker = self.u8()
        if marker == NUMBER:
            return struct.unpack(">d", self.take(8))[0]
        if marker == BOOLEAN:
            return self.u8() != 0
        if marker == STRING:
            return self.text(self.u16())
        if marker == LONG_STRING:
            return self.text(self.u32())
        if marker == OBJECT:
            return self.properties(dict(), depth)
        if marker == NULL:
            return None
        if marker == UNDEFINED_MARKER:
            return UNDEFINED
        if marker == ECMA_ARRAY:
            self.u32()  # the count is advisory; encoders disagree, the end marker is authoritative
            return self.properties(EcmaArray(), depth)
        if marker == STRICT_ARRAY:
            count = self.u32()
            if count > len(self.data) - self.pos:  # every element takes at least one byte
                raise RtmpProtocolError(f"AMF0 strict array claims {count} elements past the data")
            return [self.value(depth + 1) for _ in range(count)]
        if marker == DATE:
            milliseconds, timezone = struct.unpack(">dh", self.take(10))
            return Amf0Date(milliseconds, timezone)
        if marker == OBJECT_END:
            raise RtmpProtocolError(f"AMF0 object end marker outside an object at offset {self.pos - 1}")
        raise RtmpProtocolError(f"unsupported AMF0 marker 0x{marker:02x} at offset {self.pos - 1}")

    def properties(self, target: dict, depth: int) -> dict:
        while True:
            key = self.text(self.u16())
            if key == "" and self.pos < len(self.data) and self.data[self.pos] == OBJECT_END:
                self.pos += 1
                return target
            target[key] = self.value(depth + 1)
