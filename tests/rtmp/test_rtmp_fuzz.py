"""Property-based fuzzing of every parser layer: arbitrary bytes and mutated valid inputs may
only succeed or raise RtmpProtocolError. Plus round-trip properties, a live-server fuzz, and a
replay of the regression corpus in tests/rtmp/corpus/ (`<target>__<name>.bin`).

RTMP_FUZZ_EXAMPLES=20000 runs a deep campaign; the default keeps the suite fast."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rtmp_testkit import run

from streamer.rtmp import RtmpServer, amf0, flv
from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter
from streamer.rtmp.client import _ClientSession
from streamer.rtmp.errors import RtmpProtocolError
from streamer.rtmp.handshake import HANDSHAKE_SIZE, client_handshake, server_handshake
from swapcast.benchmarks.fuzz.rtmp import AcceptAll

EXAMPLES = int(os.environ.get("RTMP_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
LIVE = settings(max_examples=max(25, EXAMPLES // 8), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
CORPUS = Path(__file__).parent / "corpus"

blobs = st.binary(max_size=2048)


def tolerate(parse: Callable[..., Any], *args: Any) -> None:
    """Run a parser; RtmpProtocolError is a valid outcome, anything else fails the test."""
    try:
        parse(*args)
    except RtmpProtocolError:
        pass


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    """`base` with a few random byte flips, insertions, deletions or a truncation."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "set"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, 0x09, 0x01]))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[pos:]
    return bytes(data)


def splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


# -- handshake -----------------------------------------------------------------------------


class _Sink:
    def write(self, data: bytes) -> None:
        pass


def _handshake_with(role: Callable[..., Any], data: bytes) -> None:
    async def scenario() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        await role(reader, _Sink(), timeout=1)

    asyncio.run(scenario())


@FUZZ
@given(st.one_of(blobs, st.binary(min_size=2 * HANDSHAKE_SIZE, max_size=2 * HANDSHAKE_SIZE + 2).map(lambda b: b"\x03" + b)))
def test_fuzz_handshake_both_roles(data):
    tolerate(_handshake_with, server_handshake, data)
    tolerate(_handshake_with, client_handshake, data)


# -- chunk stream --------------------------------------------------------------------------

message_strategy = st.builds(
    msg.RtmpMessage,
    type_id=st.sampled_from([8, 9, 15, 17, 18, 20, 3, 4, 5, 6]),
    stream_id=st.integers(0, 2**32 - 1),
    timestamp=st.integers(0, 2**32 - 1),
    payload=st.binary(max_size=700),
)


@st.composite
def chunk_streams(draw: st.DrawFn) -> tuple[bytes, list[msg.RtmpMessage]]:
    chunk_size = draw(st.integers(1, 400))
    writer = ChunkWriter()
    data = writer.write(msg.set_chunk_size(chunk_size))
    sent = draw(st.lists(message_strategy, max_size=6))
    for message in sent:
        data += writer.write(message, csid=draw(st.integers(3, 65599)))
    return data, sent


@FUZZ
@given(chunk_streams(), st.lists(st.integers(0, 10**6), max_size=8))
def test_chunk_round_trip_any_split(stream, cuts):
    data, sent = stream
    reader = ChunkReader()
    received = [m for piece in splits(data, cuts) for m in reader.feed(piece)]
    assert received[1:] == sent and reader.buffered == 0


@FUZZ
@given(blobs, st.lists(st.integers(0, 10**6), max_size=4))
def test_fuzz_chunk_reader_arbitrary_bytes(data, cuts):
    reader = ChunkReader(max_message_size=65536)
    for piece in splits(data, cuts):
        try:
            reader.feed(piece)
        except RtmpProtocolError:
            return


@FUZZ
@given(chunk_streams().flatmap(lambda stream: mutated(stream[0])))
def test_fuzz_chunk_reader_mutated_streams(data):
    tolerate(ChunkReader(max_message_size=65536).feed, data)


# -- AMF0 ----------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.just(amf0.UNDEFINED),
    st.booleans(),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.builds(amf0.Amf0Date, st.floats(allow_nan=False), st.integers(-(2**15), 2**15 - 1)),
)
amf_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.text(max_size=10), children, max_size=5),
        st.dictionaries(st.text(max_size=10), children, max_size=5).map(amf0.EcmaArray),
    ),
    max_leaves=25,
)


@FUZZ
@given(st.lists(amf_values, max_size=4))
def test_amf0_round_trip(values):
    assert amf0.decode_all(amf0.encode(*values)) == values


@FUZZ
@given(st.one_of(blobs, st.lists(amf_values, max_size=3).flatmap(lambda v: mutated(amf0.encode(*v)))))
def test_fuzz_amf0_decoder(data):
    tolerate(amf0.decode_all, data)


# -- messages ------------------------------------------------------------------------------

PARSERS = [
    msg.parse_set_chunk_size,
    msg.parse_abort,
    msg.parse_acknowledgement,
    msg.parse_window_ack_size,
    msg.parse_set_peer_bandwidth,
    msg.parse_user_control,
]


@FUZZ
@given(st.binary(max_size=16))
def test_fuzz_control_message_parsers(data):
    for parser in PARSERS:
        tolerate(parser, data)


@FUZZ
@given(
    st.sampled_from([17, 20]),
    st.one_of(blobs, st.builds(lambda n, t, v: amf0.encode(n, t, *v), st.text(max_size=12), st.floats(), st.lists(amf_values, max_size=3)).flatmap(mutated)),
)
def test_fuzz_command_parser(type_id, data):
    tolerate(msg.parse_command, type_id, data)


# -- FLV -----------------------------------------------------------------------------------

valid_tags = st.one_of(
    st.builds(
        lambda data, key, kind, cts, codec: flv.build_video_tag(data, keyframe=key, packet_type=kind, composition_time=cts, codec=codec),
        st.binary(max_size=64), st.booleans(), st.sampled_from(list(flv.VideoPacketType)),
        st.integers(-(2**23), 2**23 - 1), st.sampled_from(["avc", "hevc"]),
    ),
    st.builds(lambda data, kind: flv.build_audio_tag(data, aac_packet_type=kind), st.binary(max_size=64), st.sampled_from(list(flv.AacPacketType))),
    st.builds(flv.avc_decoder_config, st.binary(min_size=4, max_size=40), st.binary(max_size=20)),
)  # fmt: skip


@FUZZ
@given(st.one_of(blobs, valid_tags.flatmap(mutated)))
def test_fuzz_flv_parsers(data):
    tolerate(flv.parse_video_tag, data)
    tolerate(flv.parse_audio_tag, data)
    tolerate(flv.parse_avc_decoder_config, data)
    for length_size in (1, 2, 3, 4):
        tolerate(flv.avcc_to_annexb, data, length_size)
    flv.annexb_to_avcc(data)  # total: never raises
    assert all(flv.split_annexb(data))


@FUZZ
@given(st.lists(st.binary(min_size=1, max_size=50).map(lambda b: bytes(x or 1 for x in b)), max_size=6))
def test_annexb_avcc_round_trip_property(units):
    annexb = b"".join(b"\x00\x00\x00\x01" + unit for unit in units)
    assert flv.split_annexb(annexb) == units
    assert flv.avcc_to_annexb(flv.annexb_to_avcc(annexb)) == annexb


# -- a live server -------------------------------------------------------------------------


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _publish_preamble() -> bytes:
    writer = ChunkWriter()
    body = [
        msg.set_chunk_size(64),
        msg.command("connect", 1, {"app": "live", "tcUrl": "rtmp://127.0.0.1/live"}),
        msg.command("createStream", 2, None),
        msg.command("publish", 3, None, "k", "live", stream_id=1),
        msg.RtmpMessage(9, 1, 0, flv.build_video_tag(b"x" * 100, keyframe=True)),
    ]
    return b"".join(writer.write(m) for m in body)


async def _session_against_server(payload: bytes) -> list[logging.LogRecord]:
    capture = _Capture()
    loggers = [logging.getLogger("streamer.rtmp"), logging.getLogger("asyncio")]
    for logger in loggers:
        logger.addHandler(capture)
    server = RtmpServer(AcceptAll(), port=0, stall_timeout=0.5)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        await client_handshake(reader, writer, timeout=2)
        writer.write(payload)
        try:
            async with asyncio.timeout(0.1):
                while await reader.read(65536):
                    pass
        except (TimeoutError, ConnectionError):
            pass
        writer.close()
        healthy = _ClientSession(f"rtmp://127.0.0.1:{server.port}/live/ok", timeout=2, chunk_size=4096, flash_version="t")
        await healthy.open()  # the server still answers a well-behaved client
        await healthy.create_stream()
        await healthy.abort()
    finally:
        await server.close()
        for logger in loggers:
            logger.removeHandler(capture)
    assert server.connection_count == 0
    return capture.records


@LIVE
@given(st.one_of(blobs, st.just(_publish_preamble()).flatmap(mutated)))
def test_fuzz_live_server_survives_garbage(payload):
    records = run(_session_against_server(payload), timeout=10)
    noisy = [r for r in records if r.levelno > logging.INFO or r.exc_info]
    assert not noisy, [r.getMessage() for r in noisy]


# -- regression corpus ---------------------------------------------------------------------

TARGETS: dict[str, Callable[[bytes], Any]] = {
    "chunk": lambda data: ChunkReader(max_message_size=65536).feed(data),
    "amf0": amf0.decode_all,
    "command": lambda data: msg.parse_command(20, data),
    "video": flv.parse_video_tag,
    "audio": flv.parse_audio_tag,
    "avcc": flv.parse_avc_decoder_config,
    "handshake": lambda data: _handshake_with(server_handshake, data),
}


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.bin")), ids=lambda p: p.name)
def test_corpus_replays(path):
    target = path.name.split("__", 1)[0]
    data = path.read_bytes()
    if target == "server":
        records = run(_session_against_server(data), timeout=10)
        assert not [r for r in records if r.levelno > logging.INFO or r.exc_info]
    else:
        tolerate(TARGETS[target], data)


def test_corpus_is_not_empty():
    assert {p.name.split("__", 1)[0] for p in CORPUS.glob("*.bin")} >= {"chunk", "amf0", "server"}
