"""AMF0: every type against known byte vectors, round trips, and refusals."""

from __future__ import annotations

import math
import struct

import pytest

from streamer.rtmp import amf0
from streamer.rtmp.errors import RtmpProtocolError


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (1.0, b"\x00\x3f\xf0\x00\x00\x00\x00\x00\x00"),
        (True, b"\x01\x01"),
        (False, b"\x01\x00"),
        ("connect", b"\x02\x00\x07connect"),
        ({"app": "live"}, b"\x03\x00\x03app\x02\x00\x04live\x00\x00\x09"),
        (None, b"\x05"),
        (amf0.UNDEFINED, b"\x06"),
        (amf0.EcmaArray({"w": 2.0}), b"\x08\x00\x00\x00\x01\x00\x01w\x00" + struct.pack(">d", 2.0) + b"\x00\x00\x09"),
        ([1.0, "a"], b"\x0a\x00\x00\x00\x02\x00" + struct.pack(">d", 1.0) + b"\x02\x00\x01a"),
        (amf0.Amf0Date(1.5e12, -60), b"\x0b" + struct.pack(">dh", 1.5e12, -60)),
    ],
)
def test_known_vectors_encode_and_decode(value, encoded):
    assert amf0.encode(value) == encoded
    decoded = amf0.decode_all(encoded)
    assert decoded == [value]
    assert type(decoded[0]) is type(value) or isinstance(value, (int, float))


def test_long_string_switches_marker_at_64k():
    short, long = "x" * 0xFFFF, "y" * 0x10000
    assert amf0.encode(short)[0] == amf0.STRING
    assert amf0.encode(long)[:5] == b"\x0c\x00\x01\x00\x00"
    assert amf0.decode_all(amf0.encode(short, long)) == [short, long]


def test_ffmpeg_connect_command_round_trips():
    params = {"app": "live", "type": "nonprivate", "flashVer": "FMLE/3.0", "tcUrl": "rtmp://h/live"}
    body = amf0.encode("connect", 1, params)
    assert amf0.decode_all(body) == ["connect", 1.0, params]
    value, offset = amf0.decode_value(body)
    assert value == "connect" and offset == 10


def test_ints_encode_as_numbers_and_nan_survives():
    assert amf0.decode_all(amf0.encode(3)) == [3.0]
    assert math.isnan(amf0.decode_all(amf0.encode(float("nan")))[0])


def test_invalid_utf8_round_trips_bytes_exactly():
    raw = b"\x02\x00\x02\xff\xfe"
    assert amf0.encode(*amf0.decode_all(raw)) == raw


@pytest.mark.parametrize(
    "bad",
    [
        b"\x00\x3f\xf0",  # truncated number
        b"\x02\x00\x05ab",  # string shorter than its length
        b"\x03\x00\x01a\x05",  # object without its end marker
        b"\x09",  # object end outside an object
        b"\x07\x00\x01",  # reference: unsupported
        b"\x10",  # typed object: unsupported
        b"\x11\x01",  # AMF3 switch: unsupported
        b"\x0a\xff\xff\xff\xff\x05",  # strict array claiming 4 G elements
        b"\x0b\x00",  # truncated date
    ],
)
def test_malformed_input_raises_protocol_error(bad):
    with pytest.raises(RtmpProtocolError):
        amf0.decode_all(bad)


def test_nesting_depth_is_bounded_both_ways():
    deep = b"\x0a\x00\x00\x00\x01" * (amf0.MAX_DEPTH + 2) + b"\x05"
    with pytest.raises(RtmpProtocolError, match="nesting"):
        amf0.decode_all(deep)
    nested: list = []
    for _ in range(amf0.MAX_DEPTH + 2):
        nested = [nested]
    with pytest.raises(ValueError):
        amf0.encode(nested)


def test_unencodable_type_is_a_type_error():
    with pytest.raises(TypeError):
        amf0.encode(object())
