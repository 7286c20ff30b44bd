"""Chunk stream: spec examples, all header formats, extended timestamps, chunk size changes,
interleaving, abort, and the writer's exact output."""

from __future__ import annotations

import struct

import pytest

from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter, basic_header
from streamer.rtmp.errors import RtmpProtocolError
from streamer.rtmp.messages import RtmpMessage


def header0(csid: int, timestamp: int, length: int, type_id: int, stream_id: int) -> bytes:
    return basic_header(0, csid) + timestamp.to_bytes(3, "big") + length.to_bytes(3, "big") + bytes([type_id]) + struct.pack("<I", stream_id)


def feed_all(data: bytes, reader: ChunkReader | None = None) -> list[RtmpMessage]:
    return (reader or ChunkReader()).feed(data)


def test_spec_example_1_audio_with_fmt_0_2_3_3():
    """RTMP spec 5.3.2.1: 32-byte audio messages, delta 20, compressed to fmt 2 then fmt 3."""
    body = [bytes([i]) * 32 for i in range(4)]
    stream = (
        header0(3, 1000, 32, 8, 12345) + body[0]
        + basic_header(2, 3) + (20).to_bytes(3, "big") + body[1]
        + basic_header(3, 3) + body[2]
        + basic_header(3, 3) + body[3]
    )  # fmt: skip
    out = feed_all(stream)
    assert [(m.timestamp, m.stream_id, m.type_id, m.payload) for m in out] == [
        (1000 + 20 * i, 12345, 8, body[i]) for i in range(4)
    ]


def test_spec_example_2_one_message_over_three_chunks():
    """RTMP spec 5.3.2.2: a 307-byte video message at chunk size 128 is fmt 0 + fmt 3 + fmt 3."""
    payload = bytes(range(256)) + bytes(51)
    stream = header0(4, 1000, 307, 9, 12346) + payload[:128] + b"\xc4" + payload[128:256] + b"\xc4" + payload[256:]
    assert feed_all(stream) == [RtmpMessage(9, 12346, 1000, payload)]
    assert ChunkWriter(128).write(RtmpMessage(9, 12346, 1000, payload), csid=4) == stream


def test_fmt1_changes_length_and_type_and_adds_delta():
    stream = (
        header0(3, 100, 2, 20, 1) + b"ab"
        + basic_header(1, 3) + (5).to_bytes(3, "big") + (3).to_bytes(3, "big") + b"\x12" + b"xyz"
    )  # fmt: skip
    assert feed_all(stream) == [RtmpMessage(20, 1, 100, b"ab"), RtmpMessage(18, 1, 105, b"xyz")]


def test_fmt3_new_message_after_fmt0_repeats_its_timestamp_field():
    """Per the spec (and ffmpeg), a fmt 3 after a fmt 0 uses the fmt 0 timestamp as its delta."""
    stream = header0(3, 40, 1, 8, 1) + b"a" + basic_header(3, 3) + b"b"
    assert [m.timestamp for m in feed_all(stream)] == [40, 80]


@pytest.mark.parametrize(("csid", "encoded"), [(2, b"\x02"), (63, b"\x3f"), (64, b"\x00\x00"), (319, b"\x00\xff"), (320, b"\x01\x00\x01"), (65599, b"\x01\xff\xff")])
def test_basic_header_sizes(csid, encoded):
    assert basic_header(0, csid) == encoded
    message = RtmpMessage(8, 1, 7, b"payload")
    assert feed_all(ChunkWriter().write(message, csid=csid)) == [message]


def test_three_byte_form_can_carry_small_csids():
    stream = b"\x01\x02\x00" + header0(3, 0, 1, 8, 0)[1:] + b"z"  # csid 66 in the 3-byte form
    assert feed_all(stream) == [RtmpMessage(8, 0, 0, b"z")]


def test_basic_header_rejects_out_of_range_csid():
    for csid in (0, 1, 65600):
        with pytest.raises(ValueError):
            basic_header(0, csid)


def test_writer_extended_timestamp_on_fmt0_and_every_fmt3():
    payload = bytes(300)
    out = ChunkWriter(128).write(RtmpMessage(9, 1, 0x01020304, payload), csid=6)
    ext = b"\x01\x02\x03\x04"
    assert out[:4] == b"\x06\xff\xff\xff" and out[12:16] == ext
    assert out[16 + 128 : 16 + 128 + 5] == b"\xc6" + ext
    assert out[16 + 128 + 5 + 128 : 16 + 128 + 5 + 128 + 5] == b"\xc6" + ext
    assert len(out) == 12 + 4 + 300 + 2 * 5
    assert feed_all(out) == [RtmpMessage(9, 1, 0x01020304, payload)]


def test_timestamp_exactly_0xffffff_is_extended():
    out = ChunkWriter().write(RtmpMessage(8, 1, 0xFFFFFF, b"x"), csid=4)
    assert out[1:4] == b"\xff\xff\xff" and out[12:16] == b"\x00\xff\xff\xff"
    assert feed_all(out)[0].timestamp == 0xFFFFFF


def test_extended_delta_on_fmt2_and_fmt3_new_message():
    stream = (
        header0(4, 10, 1, 8, 1) + b"a"
        + basic_header(2, 4) + b"\xff\xff\xff" + (0x01000000).to_bytes(4, "big") + b"b"
        + basic_header(3, 4) + (0x01000000).to_bytes(4, "big") + b"c"
    )  # fmt: skip
    assert [m.timestamp for m in feed_all(stream)] == [10, 10 + 0x01000000, 10 + 0x02000000]


def test_timestamp_arithmetic_wraps_at_32_bits():
    stream = (
        basic_header(0, 4) + b"\xff\xff\xff" + (1).to_bytes(3, "big") + b"\x08" + struct.pack("<I", 1)
        + (0xFFFFFFF0).to_bytes(4, "big") + b"a"
        + basic_header(2, 4) + (0x20).to_bytes(3, "big") + b"b"
    )  # fmt: skip
    assert [m.timestamp for m in feed_all(stream)] == [0xFFFFFFF0, 0x10]


def test_set_chunk_size_applies_mid_buffer():
    writer = ChunkWriter(128)
    big = bytes(range(256)) * 20
    stream = writer.write(msg.set_chunk_size(4096)) + writer.write(RtmpMessage(9, 1, 0, big))
    assert writer.chunk_size == 4096
    reader = ChunkReader()
    out = reader.feed(stream)
    assert out[0].type_id == msg.MessageType.SET_CHUNK_SIZE and out[1].payload == big
    assert reader.chunk_size == 4096


def test_set_chunk_size_one_byte_chunks():
    writer = ChunkWriter(128)
    stream = writer.write(msg.set_chunk_size(1)) + writer.write(RtmpMessage(20, 0, 0, b"hello"))
    assert len(stream) == 16 + 12 + 5 + 4  # four fmt 3 basic headers between the five bytes
    assert feed_all(stream)[1].payload == b"hello"


def test_set_chunk_size_zero_is_a_protocol_error():
    stream = header0(2, 0, 4, 1, 0) + b"\x00\x00\x00\x00"
    with pytest.raises(RtmpProtocolError):
        feed_all(stream)


def test_interleaved_chunk_streams():
    video, audio = bytes([1]) * 300, bytes([2]) * 200
    v = ChunkWriter(128).write(RtmpMessage(9, 1, 33, video), csid=6)
    a = ChunkWriter(128).write(RtmpMessage(8, 1, 23, audio), csid=4)
    v_chunks = [v[:140], v[140:269], v[269:]]
    a_chunks = [a[:140], a[140:]]
    stream = v_chunks[0] + a_chunks[0] + v_chunks[1] + a_chunks[1] + v_chunks[2]
    assert feed_all(stream) == [RtmpMessage(8, 1, 23, audio), RtmpMessage(9, 1, 33, video)]


def test_abort_discards_the_partial_message():
    writer = ChunkWriter(128)
    partial = writer.write(RtmpMessage(9, 1, 0, bytes(300)), csid=6)[:140]
    stream = partial + writer.write(msg.abort(6)) + writer.write(RtmpMessage(9, 1, 40, b"fresh"), csid=6)
    out = feed_all(stream)
    assert [m.type_id for m in out] == [2, 9] and out[1].payload == b"fresh"


def test_byte_by_byte_feed_equals_one_feed():
    writer = ChunkWriter(50)
    stream = b"".join(writer.write(RtmpMessage(t, 1, ts, bytes([ts % 256]) * n)) for t, ts, n in [(9, 0, 120), (8, 20, 7), (9, 0x1FFFFFF, 101), (18, 50, 0)])
    reader = ChunkReader()
    reader.feed(writer.write(msg.set_chunk_size(50)))
    ref = ChunkReader()
    ref.feed(ChunkWriter().write(msg.set_chunk_size(50)))
    piecewise = [m for i in range(len(stream)) for m in reader.feed(stream[i : i + 1])]
    assert piecewise == ref.feed(stream) and len(piecewise) == 4
    assert reader.buffered == 0


def test_message_size_is_bounded():
    with pytest.raises(RtmpProtocolError, match="video message of 2000 bytes"):
        ChunkReader(max_message_size=1000).feed(header0(3, 0, 2000, 9, 1))


@pytest.mark.parametrize("fmt", [1, 2, 3])
def test_compressed_header_without_previous_fmt0(fmt):
    with pytest.raises(RtmpProtocolError, match="without a previous fmt 0"):
        feed_all(basic_header(fmt, 3) + bytes(11))


def test_new_header_interrupting_partial_message():
    partial = ChunkWriter(128).write(RtmpMessage(9, 1, 0, bytes(300)), csid=6)[:140]
    with pytest.raises(RtmpProtocolError, match="interrupts"):
        feed_all(partial + header0(6, 0, 1, 9, 1) + b"x")


def test_partial_messages_held_across_chunk_streams_are_bounded_in_total():
    """Each message is under the limit, but one partial per chunk stream (65,536 of them)
    would let one connection hold gigabytes: the sum of what is held is bounded too."""
    limit = 1 << 20
    reader = ChunkReader(max_message_size=limit)
    writer = ChunkWriter(65536)
    reader.feed(ChunkWriter().write(msg.set_chunk_size(65536)))
    whole = RtmpMessage(9, 1, 0, bytes(limit))
    with pytest.raises(msg.PartialMessagesTooLarge, match="partial messages"):
        for csid in range(3, 64):  # one-byte basic headers: the cut below is one whole chunk
            chunks = writer.write(whole, csid=csid)
            reader.feed(chunks[: -(1 + 65536)])  # all but the last chunk: the message stays partial
    assert sum(len(s.partial) for s in reader._streams.values()) <= 2 * limit


def test_interleaved_messages_up_to_the_limit_still_pass():
    limit = 1 << 16
    writer, reader = ChunkWriter(4096), ChunkReader(max_message_size=limit)
    reader.feed(ChunkWriter().write(msg.set_chunk_size(4096)))
    video, audio = writer.write(RtmpMessage(9, 1, 0, bytes(limit)), csid=6), writer.write(RtmpMessage(8, 1, 0, bytes(limit)), csid=4)
    cut_v = cut_a = 12 + 4096 + 7 * (1 + 4096)  # half of each (8 chunks), at a chunk boundary
    out = reader.feed(video[:cut_v] + audio[:cut_a] + video[cut_v:] + audio[cut_a:])
    assert [(m.type_id, len(m.payload)) for m in out] == [(9, limit), (8, limit)]
