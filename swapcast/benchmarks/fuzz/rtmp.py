"""The RTMP layers: handshake, chunk stream, AMF commands, FLV tags and play requests, all
derived from a real ffmpeg publish recorded once per run (through a recording proxy in front
of an in-process RTMP server), then mutated: bytes, lengths, chunk sizes, timestamps, stream
names (non-UTF-8 too), commands out of order, media tags damaged, dropped or reordered.
The hold layer tries to make one connection hold the node's resources: a socket kept open
by pings alone, answers never read, a partial message on each of many chunk streams, a
command whose decoding would hold the event loop; the node must cut each of them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import socket
import struct
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from streamer.rtmp import RtmpServer, amf0
from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter, basic_header
from streamer.rtmp.errors import RtmpHandshakeError, RtmpProtocolError
from streamer.rtmp.handshake import HANDSHAKE_SIZE, client_handshake
from swapcast.benchmarks.fuzz.fixtures import Fixtures
from swapcast.benchmarks.fuzz.mutate import NON_UTF8, hostile_value, mutate_bytes
from swapcast.benchmarks.fuzz.node import FuzzNode
from swapcast.benchmarks.fuzz.outcome import Outcome, hold_outcome
from swapcast.local_cluster import free_port

PLACEHOLDER_KEY = "sk_" + "P" * 32  # as long as a real key: the recording is made with it
RECORDINGS = {  # name -> ffmpeg video input options: an ordinary camera and a 1-pixel-wide one
    "camera": ("testsrc=size=320x240:rate=30", "yuv420p"),
    "one-pixel-wide": ("testsrc=size=1x64:rate=30", "yuv444p"),
}
HOLD_WAYS = ("idle", "unread", "partials", "bomb")
COMMANDS = ("connect", "createStream", "publish", "play", "releaseStream", "FCPublish", "FCUnpublish", "deleteStream",
            "closeStream", "getStreamLength", "_checkbw", "receiveVideo", "pause", "seek", "", "\u00e9")


@dataclass
class Recording:
    """A publish as ffmpeg sent it: the messages after the handshake, in order."""

    name: str
    messages: list[msg.RtmpMessage]

    @property
    def media(self) -> list[msg.RtmpMessage]:
        return [m for m in self.messages if m.type_id in (8, 9, 18)]

    @property
    def preamble(self) -> list[msg.RtmpMessage]:
        """The messages before the first media one (connect to publish): not the FCUnpublish
        and deleteStream at the end, which would end the publish before its media."""
        first = next((i for i, m in enumerate(self.messages) if m.type_id in (8, 9, 18)), len(self.messages))
        return self.messages[:first]


class AcceptAll:
    """An RTMP handler that accepts any publish (and drains it) and any play: the recording
    server's, and the RTMP layers' own fuzz tests'."""

    async def authorize_publish(self, app: str, name: str) -> None: ...

    async def on_publish(self, publisher: Any) -> None:
        async for _ in publisher.media():
            pass

    async def authorize_play(self, app: str, name: str) -> None: ...

    async def on_play(self, player: Any) -> None:
        await player.wait_closed()


async def record(name: str, timeout: float = 60.0) -> Recording | None:
    """ffmpeg publishes 2 s of test video and audio through a proxy that keeps the bytes it
    sends; None when ffmpeg is missing or refuses the input."""
    if shutil.which("ffmpeg") is None:
        return None
    source, pix_fmt = RECORDINGS[name]
    logging.getLogger("streamer.rtmp").setLevel(logging.WARNING)  # the recording server's chatter is not the node's
    server = RtmpServer(AcceptAll(), host="127.0.0.1", port=0, stall_timeout=5)
    await server.start()
    sent = bytearray()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, keep: bool) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if keep:
                    sent.extend(data)
                writer.write(data)
                await writer.drain()
        writer.close()

    async def proxy(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", server.port)
        await asyncio.gather(relay(client_reader, server_writer, True), relay(server_reader, client_writer, False))

    port = free_port()
    front = await asyncio.start_server(proxy, "127.0.0.1", port)
    try:
        process = await asyncio.create_subprocess_exec(
            "ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", source, "-f", "lavfi",
            "-i", "sine=frequency=440:sample_rate=44100", "-t", "2", "-c:v", "libx264", "-preset", "ultrafast",
            "-tune", "zerolatency", "-g", "30", "-pix_fmt", pix_fmt, "-c:a", "aac", "-b:a", "64k", "-f", "flv",
            f"rtmp://127.0.0.1:{port}/live/{PLACEHOLDER_KEY}",
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        async with asyncio.timeout(timeout):
            await process.wait()
    finally:
        front.close()
        await server.close()
    chunks = bytes(sent[1 + 2 * HANDSHAKE_SIZE:])
    messages = ChunkReader(max_message_size=16 * 1024 * 1024).feed(chunks) if chunks else []
    return Recording(name, messages) if any(m.type_id == 9 for m in messages) else None


def with_key(message: msg.RtmpMessage, key: str) -> msg.RtmpMessage:
    """A recorded command with ``key`` as its stream name in place of the placeholder."""
    placeholder = amf_string(PLACEHOLDER_KEY.encode())
    if message.type_id == 20 and placeholder in message.payload:
        payload = message.payload.replace(placeholder, amf_string(key.encode()))
        return msg.RtmpMessage(message.type_id, message.stream_id, message.timestamp, payload)
    return message


def amf_string(text: bytes) -> bytes:
    """An AMF0 string of raw bytes (non-UTF-8 allowed, which ``amf0.encode`` cannot make)."""
    return b"\x02" + struct.pack(">H", len(text) & 0xFFFF) + text


def hostile_name(rng: random.Random, fixtures: Fixtures) -> bytes:
    key = fixtures.stream_key.encode()
    return rng.choice((
        key, key + b"?x=1", key[:-1], key + b"\xff", b"sk_\xff\xfe" + key[5:], rng.choice(NON_UTF8) * 5, b"", b"a" * 5000,
        b"../../" + key, key.upper(), fixtures.spare_key_id.encode(), b"\x00" + key, mutate_bytes(rng, key, 1),
    ))


def hostile_command(rng: random.Random, fixtures: Fixtures) -> msg.RtmpMessage:
    name = rng.choice(COMMANDS)
    transaction = rng.choice((0.0, 1.0, 2.0, -1.0, 1e308, float("nan")))
    try:
        body = _command_body(rng, fixtures, name, transaction)
    except (ValueError, TypeError, OverflowError, RecursionError):  # a value AMF0 cannot carry (a lone surrogate, ...)
        body = amf0.encode(name, transaction, None)
    if rng.random() < 0.2:
        body = mutate_bytes(rng, body)
    type_id = rng.choice((20, 20, 20, 17, 18, 15))
    if type_id == 17:
        body = b"\x00" + body
    return msg.RtmpMessage(type_id, rng.choice((0, 0, 1, 2, 2**32 - 1)), 0, body)


def _command_body(rng: random.Random, fixtures: Fixtures, name: str, transaction: float) -> bytes:
    if name in ("publish", "play", "releaseStream", "FCPublish", "deleteStream") and rng.random() < 0.7:
        body = amf0.encode(name, transaction, None) + amf_string(hostile_name(rng, fixtures))
        return body + amf0.encode(rng.choice(("live", "record", "append", "", "\u00e9")))
    if name == "connect":
        command_object = {"app": rng.choice(("live", "", "x" * 3000, "live/../x", "\u00e9")),
                          "tcUrl": rng.choice(("rtmp://127.0.0.1/live", "", "\u00e9", "rtmp://[::1")),
                          rng.choice(("flashVer", "objectEncoding", "a")): hostile_value(rng)}
        return amf0.encode(name, transaction, command_object)
    return amf0.encode(name, transaction, hostile_value(rng), hostile_value(rng))


def control_message(rng: random.Random) -> msg.RtmpMessage:
    value = rng.choice((0, 1, 128, 2**31 - 1, 2**31, 2**32 - 1))
    return rng.choice((
        lambda: msg.set_chunk_size(value & 0x7FFFFFFF or 1), lambda: msg.RtmpMessage(1, 0, 0, struct.pack(">I", value)),
        lambda: msg.abort(value), lambda: msg.window_ack_size(value), lambda: msg.acknowledgement(value),
        lambda: msg.set_peer_bandwidth(value), lambda: msg.RtmpMessage(4, 0, 0, rng.randbytes(rng.choice((0, 2, 6, 10)))),
        lambda: msg.RtmpMessage(rng.choice((0, 7, 10, 11, 12, 13, 14, 16, 19, 21, 22, 255)), 0, 0, rng.randbytes(20)),
    ))()


class RtmpLayers:
    """Five kinds of RTMP case; FLV publishes (which start the real decode-swap-encode chain)
    run one at a time, since they share alice's stream key."""

    kinds = ("handshake", "chunk", "amf", "flv", "play", "hold")
    HOLD_IDLE_S = 16.0  # the node's rtmp.setup_timeout_s (10 s) with room to spare

    def __init__(self, node: FuzzNode, fixtures: Fixtures, recordings: list[Recording]) -> None:
        self.node, self.fixtures, self.recordings = node, fixtures, recordings
        self._publishing = asyncio.Lock()

    async def once(self, rng: random.Random, kind: str) -> Outcome:
        if kind == "hold":
            return await self._hold(rng)
        if kind != "flv":
            return await self._once(rng, kind)
        async with self._publishing:  # before connecting: a connection left waiting would stall out
            return await self._once(rng, kind)

    async def _once(self, rng: random.Random, kind: str) -> Outcome:
        case = getattr(self, "_" + kind)
        inputs = 1
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.node.rtmp_port)
        except OSError as exc:
            return Outcome("rtmp-" + kind, kind, "refused", f"RTMP port refused a connection: {exc}")
        sent = bytearray()
        status = "closed"
        try:
            async with asyncio.timeout(20):
                label, inputs = await case(rng, reader, writer, sent)
                status = "answered" if await _drain(reader, 0.05) else "closed"
        except RtmpHandshakeError:  # the server gave up on our handshake (or on the connection before it)
            label, status = kind, "handshake-cut"
        except (OSError, asyncio.IncompleteReadError):  # the server cut us: what it should do with garbage
            label, status = kind, "cut"
        except TimeoutError:
            return Outcome("rtmp-" + kind, kind, "hung", "an RTMP case did not finish within 20 s", bytes(sent))
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return Outcome("rtmp-" + kind, label, status, None, b"", inputs)

    # -- the cases: each writes its bytes through _send (kept in ``sent`` for reproducers) ---------

    async def _handshake(self, rng, reader, writer, sent) -> tuple[str, int]:
        c0 = bytes([rng.choice((3, 3, 6, 0, 255))])
        c1 = rng.randbytes(HANDSHAKE_SIZE) if rng.random() < 0.5 else b"\x00" * 8 + rng.randbytes(HANDSHAKE_SIZE - 8)
        data = mutate_bytes(rng, c0 + c1 + c1, rng.randint(1, 6)) if rng.random() < 0.7 else (c0 + c1)[:rng.randrange(1 + HANDSHAKE_SIZE)]
        await _send(writer, sent, data)
        await _drain(reader, 0.2)
        return "handshake", 1

    async def _chunk(self, rng, reader, writer, sent) -> tuple[str, int]:
        await client_handshake(reader, writer, timeout=5)
        recording = rng.choice(self.recordings)
        messages = [self._with_key(m) for m in recording.messages[:rng.randint(4, 40)]]
        data = _chunked(rng, messages)
        await _send(writer, sent, mutate_bytes(rng, data, rng.randint(1, 8)))
        await _drain(reader, 0.3)
        return f"chunk/{recording.name}", 1

    async def _amf(self, rng, reader, writer, sent) -> tuple[str, int]:
        await client_handshake(reader, writer, timeout=5)
        messages = [msg.command("connect", 1.0, {"app": "live", "tcUrl": "rtmp://127.0.0.1/live"})]
        for _ in range(rng.randint(1, 6)):
            messages.append(hostile_command(rng, self.fixtures) if rng.random() < 0.8 else control_message(rng))
        if rng.random() < 0.3:
            messages.insert(0, control_message(rng))
        await _send(writer, sent, _chunked(rng, messages))
        await _drain(reader, 0.3)
        return "amf", 1

    async def _play(self, rng, reader, writer, sent) -> tuple[str, int]:
        """Play with a hostile name, or with the real play token (a viewer of whatever FLV
        publish is live), leaving abruptly after a moment."""
        await client_handshake(reader, writer, timeout=5)
        token = self.fixtures.play_token.encode()
        name = token if token and rng.random() < 0.4 else hostile_name(rng, self.fixtures)
        messages = [msg.command("connect", 1.0, {"app": rng.choice(("live", "", "x"))}), msg.command("createStream", 2.0, None),
                    msg.RtmpMessage(20, 1, 0, amf0.encode("play", 3.0, None) + amf_string(name))]
        await _send(writer, sent, _chunked(rng, messages))
        await _drain(reader, 0.3)
        return "play", 1

    async def _flv(self, rng, reader, writer, sent) -> tuple[str, int]:
        await client_handshake(reader, writer, timeout=5)
        recording = rng.choice(self.recordings)
        preamble = [self._with_key(m) for m in recording.preamble]
        media = self._mutated_media(rng, recording.media)
        chunks = ChunkWriter()
        await _send(writer, sent, b"".join(chunks.write(m) for m in preamble))
        await _drain(reader, 0.2)  # the server authorises the key
        for start in range(0, len(media), 8):
            await _send(writer, sent, b"".join(chunks.write(m) for m in media[start:start + 8]))
            await asyncio.sleep(0.01)
        if rng.random() < 0.5:  # a clean end, as OBS does it
            await _send(writer, sent, chunks.write(msg.command("deleteStream", 9.0, None, 1.0)))
        await _drain(reader, 0.5)
        return f"flv/{recording.name}", len(media)

    async def _hold(self, rng: random.Random) -> Outcome:
        """One connection that tries to hold the node's resources; a problem when the node
        keeps it (the reproducer says how, since the bytes are just many of the same)."""
        how = rng.choice(HOLD_WAYS)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # answers back up at the node, not here
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", self.node.rtmp_port))
            reader, writer = await asyncio.open_connection(sock=sock)
        except OSError as exc:
            sock.close()
            return Outcome("rtmp-hold", how, "refused", f"RTMP port refused a connection: {exc}")
        try:
            async with asyncio.timeout(self.HOLD_IDLE_S + 30):
                await client_handshake(reader, writer, timeout=5)
                held = await getattr(self, "_hold_" + how)(reader, writer)
        except (OSError, asyncio.IncompleteReadError, RtmpHandshakeError):
            held = None  # cut: what the node should do
        except TimeoutError:
            held = "the case did not finish"
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return hold_outcome("rtmp-hold", how, held)

    async def _hold_idle(self, reader, writer) -> str | None:
        chunks = ChunkWriter()
        writer.write(chunks.write(msg.command("connect", 1.0, {"app": "live"})))
        started = time.monotonic()
        while time.monotonic() - started < self.HOLD_IDLE_S:
            writer.write(chunks.write(msg.ping_request(1)))
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    if not await reader.read(65536):
                        return None
        return f"a connection sending only pings was held for {self.HOLD_IDLE_S:g} s without a publish or play"

    async def _hold_unread(self, reader, writer) -> str | None:
        chunks = ChunkWriter()
        writer.write(chunks.write(msg.set_chunk_size(65536)) + chunks.write(msg.command("connect", 1.0, {"app": "live"})))
        unknown = chunks.write(msg.command("x" * 60_000, 2.0, None))
        for _ in range(400):  # 24 MB of commands whose answers are never read
            writer.write(unknown)
            await writer.drain()
        answered = 0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(15):
                while data := await reader.read(1 << 20):
                    answered += len(data)
                    if answered > 12 * 1024 * 1024:  # more than the node's bound and both socket buffers
                        return f"the node held over {answered / 2**20:.0f} MB of answers for a peer that did not read them"
                return None  # cut, its unsent answers dropped
        return f"the node was still sending answers 15 s later ({answered / 2**20:.1f} MB read)"

    async def _hold_partials(self, reader, writer) -> str | None:
        chunks = ChunkWriter(65536)
        writer.write(ChunkWriter().write(msg.set_chunk_size(65536)))
        whole = msg.RtmpMessage(9, 1, 0, bytes(1 << 20))
        for csid in range(3, 43):  # 40 MB, one partial message of 1 MB on each of 40 chunk streams
            writer.write(chunks.write(whole, csid=csid)[: -(1 + 65536)])
            await writer.drain()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(3):
                while await reader.read(65536):
                    pass
                return None
        return "the node held 40 MB of partial messages on 40 chunk streams of one connection"

    async def _hold_bomb(self, reader, writer) -> str | None:
        nulls = 4 * 1024 * 1024  # 4 MB of AMF0 null markers in a strict array: ~2 s of decoding
        chunks = ChunkWriter(65536)
        writer.write(ChunkWriter().write(msg.set_chunk_size(65536)))
        payload = amf0.encode("connect", 1.0, {"app": "live"}) + b"\x0a" + nulls.to_bytes(4, "big") + b"\x05" * nulls
        writer.write(chunks.write(msg.RtmpMessage(20, 0, 0, payload)))
        await writer.drain()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                while await reader.read(65536):
                    pass
                return None
        return "the node took a 4 MB connect command of null markers (decoded on its event loop) and kept the connection"

    def _with_key(self, message: msg.RtmpMessage) -> msg.RtmpMessage:
        return with_key(message, self.fixtures.stream_key)

    @staticmethod
    def _mutated_media(rng: random.Random, media: list[msg.RtmpMessage]) -> list[msg.RtmpMessage]:
        """The recorded tags with some damaged (bytes, lengths), timestamps bent (backwards,
        huge jumps, the 32-bit wrap), tags dropped, duplicated or swapped."""
        out = list(media[:rng.randint(2, min(len(media), 45))])
        rate = rng.choice((0.02, 0.1, 0.3))
        for i, message in enumerate(out):
            payload, timestamp = message.payload, message.timestamp
            if rng.random() < rate:
                payload = mutate_bytes(rng, payload, rng.randint(1, 6))
            if rng.random() < rate / 2:
                timestamp = rng.choice((0, timestamp // 2, timestamp + 10**6, 2**32 - 1, 2**24 - 1, 2**24))
            out[i] = msg.RtmpMessage(message.type_id, message.stream_id, timestamp & 0xFFFFFFFF, payload)
        for _ in range(rng.randint(0, 3)):
            i, j = rng.randrange(len(out)), rng.randrange(len(out))
            op = rng.choice(("drop", "dup", "swap"))
            if op == "drop" and len(out) > 1:
                del out[i]
            elif op == "dup":
                out.insert(i, out[min(j, len(out) - 1)])
            elif i < len(out) and j < len(out):
                out[i], out[j] = out[j], out[i]
        return out


def _chunked(rng: random.Random, messages: list[msg.RtmpMessage]) -> bytes:
    """``messages`` chunked at a random chunk size (announced first), on random chunk streams."""
    writer = ChunkWriter()
    size = rng.choice((1, 2, 64, 128, 4096, 65536, 0x7FFFFFFF))
    data = writer.write(msg.set_chunk_size(size)) if rng.random() < 0.8 else b""
    for message in messages:
        csid = rng.choice((None, None, 2, 3, 63, 64, 319, 320, 65599))
        try:
            data += writer.write(message, csid=csid)
        except RtmpProtocolError:  # a Set Chunk Size our writer refuses to follow: sent in one chunk as it is
            data += basic_header(0, 2) + b"\x00\x00\x00" + len(message.payload).to_bytes(3, "big") + bytes(
                [message.type_id]) + struct.pack("<I", message.stream_id) + message.payload
    return data


async def _send(writer: asyncio.StreamWriter, sent: bytearray, data: bytes) -> None:
    sent += data
    writer.write(data)
    await writer.drain()


async def _drain(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Read what the server says for up to ``seconds``; whether it said anything."""
    got = False
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                got = True
    return got
