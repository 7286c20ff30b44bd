"""Protocol-control, user-control and command messages: spec byte layouts and parsing."""

from __future__ import annotations

import pytest

from streamer.rtmp import amf0
from streamer.rtmp import messages as msg
from streamer.rtmp.errors import RtmpProtocolError


def test_protocol_control_builders_match_spec_layout():
    assert msg.set_chunk_size(4096) == msg.RtmpMessage(1, 0, 0, b"\x00\x00\x10\x00")
    assert msg.abort(5).payload == b"\x00\x00\x00\x05" and msg.abort(5).type_id == 2
    assert msg.acknowledgement(2**32 + 7).payload == b"\x00\x00\x00\x07"
    assert msg.window_ack_size(2_500_000) == msg.RtmpMessage(5, 0, 0, b"\x00\x26\x25\xa0")
    assert msg.set_peer_bandwidth(2_500_000).payload == b"\x00\x26\x25\xa0\x02"
    assert msg.stream_begin(1) == msg.RtmpMessage(4, 0, 0, b"\x00\x00\x00\x00\x00\x01")
    assert msg.ping_request(9).payload == b"\x00\x06\x00\x00\x00\x09"
    assert msg.ping_response(9).payload == b"\x00\x07\x00\x00\x00\x09"


def test_parsers_invert_builders():
    assert msg.parse_set_chunk_size(msg.set_chunk_size(0x7FFFFFFF).payload) == 0x7FFFFFFF
    assert msg.parse_abort(msg.abort(65599).payload) == 65599
    assert msg.parse_acknowledgement(msg.acknowledgement(123).payload) == 123
    assert msg.parse_window_ack_size(msg.window_ack_size(5000).payload) == 5000
    assert msg.parse_set_peer_bandwidth(msg.set_peer_bandwidth(5000, msg.PeerBandwidthLimit.HARD).payload) == (5000, 0)
    assert msg.parse_user_control(msg.ping_request(77).payload) == msg.UserControl(6, 77)
    buffer = msg.user_control(msg.UserControlEvent.SET_BUFFER_LENGTH, 1, 3000)
    assert msg.parse_user_control(buffer.payload) == msg.UserControl(3, 1, 3000)


@pytest.mark.parametrize("payload", [b"\x00\x00\x00\x00", b"\x80\x00\x00\x01", b"\xff\xff\xff\xff", b"\x00\x01"])
def test_set_chunk_size_rejects_zero_negative_and_short(payload):
    with pytest.raises(RtmpProtocolError):
        msg.parse_set_chunk_size(payload)


def test_set_chunk_size_builder_refuses_out_of_range():
    for size in (0, -1, 2**31):
        with pytest.raises(ValueError):
            msg.set_chunk_size(size)


@pytest.mark.parametrize(
    ("parser", "payload"),
    [
        (msg.parse_abort, b"\x00"),
        (msg.parse_acknowledgement, b""),
        (msg.parse_window_ack_size, b"\x00\x00\x01"),
        (msg.parse_set_peer_bandwidth, b"\x00\x00\x00\x01"),
        (msg.parse_user_control, b"\x00\x06\x00"),
        (msg.parse_user_control, b"\x00\x03\x00\x00\x00\x01"),
    ],
)
def test_short_payloads_raise_protocol_error(parser, payload):
    with pytest.raises(RtmpProtocolError):
        parser(payload)


def test_command_round_trip_and_amf3_variant():
    message = msg.command("publish", 5, None, "KEY", "live", stream_id=1)
    assert message.type_id == 20 and message.stream_id == 1
    parsed = msg.parse_command(message.type_id, message.payload)
    assert parsed == msg.Command("publish", 5.0, None, ["KEY", "live"])
    amf3 = msg.parse_command(msg.MessageType.AMF3_COMMAND, b"\x00" + message.payload)
    assert amf3 == parsed


@pytest.mark.parametrize(
    "payload",
    [b"", amf0.encode(1.0, 2.0), amf0.encode("x", "notanumber"), amf0.encode("x", True), b"\xff"],
)
def test_malformed_commands_raise_protocol_error(payload):
    with pytest.raises(RtmpProtocolError):
        msg.parse_command(20, payload)


def test_command_without_transaction_id_reads_as_zero():
    """ffmpeg's listen mode answers FCPublish with a bare `onFCPublish` string."""
    assert msg.parse_command(20, amf0.encode("onFCPublish")) == msg.Command("onFCPublish", 0.0)


def test_data_message():
    message = msg.data("|RtmpSampleAccess", True, True, stream_id=1)
    assert message.type_id == 18 and amf0.decode_all(message.payload) == ["|RtmpSampleAccess", True, True]


def test_a_command_bigger_than_any_client_sends_is_refused_before_it_is_decoded():
    """AMF0 decodes about 2 million values a second: a 16 MiB command of null markers in a
    strict array held the event loop (every session of the node) for some 9 s, before any
    stream key was checked. Commands are small; one over the limit is a protocol error."""
    nulls = msg.MAX_COMMAND_BYTES
    payload = amf0.encode("connect", 1.0) + b"\x0a" + nulls.to_bytes(4, "big") + b"\x05" * nulls
    with pytest.raises(RtmpProtocolError, match="bytes"):
        msg.parse_command(msg.MessageType.AMF0_COMMAND, payload)
    with pytest.raises(RtmpProtocolError, match="bytes"):
        msg.parse_command(msg.MessageType.AMF3_COMMAND, b"\x00" + payload)
    big_but_allowed = amf0.encode("connect", 1.0, {"app": "live", "x": "y" * 60_000})
    assert msg.parse_command(msg.MessageType.AMF0_COMMAND, big_but_allowed).command_object["app"] == "live"
