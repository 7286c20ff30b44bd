"""The RTMP oversize layer: a publisher that announces more than the node may hold, beside a
well-behaved publisher of the same node. Ways: a message header announcing a video, audio or
command message over its type's cap (its payload then sent in full, as an encoder would, or
only its first 128 bytes), partial messages on many chunk streams, each within its cap,
together past the node's bound, and the camera recording with its SPS declaring 16000x16000
pictures (a decoder given it allocates that size: +0.6 GB a publish before the node read the
SPS first).

Meanwhile the well-behaved publisher sends a recorded ffmpeg publish with one access unit
exactly at the video cap (padded by a filler NAL unit). A case is well when the node closed
the attacker for its size, saying why (an error onStatus on the wire: ``refused``; or only in
its closing line in the node log: ``cut``), its RSS grew less than the layer's bound meanwhile
(``RSS_BOUND_MB`` on a node doing nothing else; ``BUSY_RSS_BOUND_MB`` inside a fuzz run, where
the other layers' work moves the node's RSS too), and the well-behaved publisher was neither
refused nor cut and still answered a ping."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter
from streamer.rtmp.errors import RtmpHandshakeError, RtmpProtocolError
from streamer.rtmp.handshake import client_handshake
from swapcast.benchmarks.fuzz.outcome import Outcome
from swapcast.benchmarks.fuzz.picture_bombs import resize_avcc
from swapcast.benchmarks.fuzz.rtmp import Recording, with_key

OVERSIZE_WAYS = ("video", "audio", "command", "partials", "sps")
ANNOUNCED_TYPES = {"video": msg.MessageType.VIDEO, "audio": msg.MessageType.AUDIO, "command": msg.MessageType.AMF0_COMMAND}
PARTIAL_STREAMS = 16  # partial messages of 1 MiB: twice the node's 8 MiB bound over all chunk streams
PARTIAL_SENT = 1 << 20
RSS_BOUND_MB = 64.0  # the cap-sized access unit's copies through the node, and the 8 MiB of partials
# Inside a fuzz run 21 other workers publish, play, upload and hold connections meanwhile: the
# node's RSS rose 280 MB in a case's 2 s with no attack in it (measured, 2 cores under load).
# The attacks this guards against allocate far more (a 16000x16000 SPS: +600 MB; 16 reference
# pictures at 4096x4096: +565 MB); the 64 MB bound is held on a quiet node (tests/fuzz).
BUSY_RSS_BOUND_MB = 400.0
CLOSE_WAIT_S = 5.0  # the node cuts at a header: seconds are plenty
SEND_SLICE = 256 * 1024
WAITED_OUT = ("stalled: no data", "no publish or play within")  # closing reasons of a node that waited, not refused
FILLER_NAL = 12  # H.264 filler data: decoders drop it, so the padded access unit decodes as recorded
SPS_MACROBLOCKS = 1000  # a side of the SPS way's declared picture: 16000 pixels
SPS_TAGS = 30  # the recording's video tags the SPS way sends after its sequence header
T = TypeVar("T")


class OversizeNode(Protocol):
    """What a case needs of the node: its RTMP port, its RSS and its log (the closing line)."""

    rtmp_port: int
    log_path: Path

    def rss_mb(self) -> float: ...


class Keys(Protocol):
    """The stream keys a case publishes with (the fuzz fixtures: carol's two)."""

    well_behaved_key: str
    attacker_key: str


@dataclass
class PeerWatch:
    """What the node told one connection, read in the background: error onStatus codes and
    descriptions, whether publishing started, ping answers, and whether it closed."""

    reader: asyncio.StreamReader
    errors: list[tuple[str, str]] = field(default_factory=list)
    published: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    pongs: set[int] = field(default_factory=set)
    answered: asyncio.Event = field(default_factory=asyncio.Event)  # publish started or refused

    async def run(self) -> None:
        chunks = ChunkReader()
        try:
            while data := await self.reader.read(65536):
                for message in chunks.feed(data):
                    self._take(message)
        except (OSError, RtmpProtocolError):
            pass  # a reset after the notice, or bytes we cannot read: closed either way
        finally:
            self.closed.set()
            self.answered.set()

    def _take(self, message: msg.RtmpMessage) -> None:
        if message.type_id == msg.MessageType.USER_CONTROL:
            event = msg.parse_user_control(message.payload)
            if event.event == msg.UserControlEvent.PING_RESPONSE:
                self.pongs.add(event.value)
        elif message.type_id == msg.MessageType.AMF0_COMMAND:
            command = msg.parse_command(message.type_id, message.payload)
            info = command.args[0] if command.args and isinstance(command.args[0], dict) else {}
            if command.name in ("onStatus", "_error") and info.get("level") == "error":
                self.errors.append((str(info.get("code")), str(info.get("description"))))
                self.answered.set()
            elif info.get("code") == "NetStream.Publish.Start":
                self.published.set()
                self.answered.set()


class Connection:
    """One RTMP client connection with its watch; ``publish`` starts a stream with a key."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer, self.watch, self.chunks = writer, PeerWatch(reader), ChunkWriter()
        self.local_port: int = writer.get_extra_info("sockname")[1]
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await client_handshake(reader, writer, timeout=5)
        except BaseException:
            writer.close()
            raise
        connection = cls(reader, writer)
        connection._task = asyncio.create_task(connection.watch.run())
        return connection

    async def send(self, *messages: msg.RtmpMessage, csid: int | None = None) -> None:
        self.writer.write(b"".join(self.chunks.write(m, csid=csid) for m in messages))
        await self.writer.drain()

    async def send_bytes(self, data: bytes) -> None:
        """Send in slices, stopping once the node has closed (it never reads the rest)."""
        view = memoryview(data)
        for start in range(0, len(view), SEND_SLICE):
            if self.watch.closed.is_set():
                return
            self.writer.write(view[start:start + SEND_SLICE])
            await self.writer.drain()

    async def publish(self, key: str, extra: list[msg.RtmpMessage] | None = None) -> bool:
        """connect, createStream, publish (``extra``: a recording's own preamble instead);
        whether the node started the stream within 5 s."""
        preamble = extra or [msg.command("connect", 1.0, {"app": "live", "tcUrl": "rtmp://127.0.0.1/live"}),
                             msg.command("createStream", 2.0, None),
                             msg.command("publish", 3.0, None, key, "live", stream_id=1)]
        await self.send(*preamble)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self.watch.answered.wait()
        return self.watch.published.is_set() and not self.watch.errors

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class RssPeak:
    """The node's RSS sampled every 50 ms while a case runs: its growth over the start."""

    def __init__(self, node: OversizeNode) -> None:
        self.node, self.start, self.peak = node, node.rss_mb(), 0.0
        self._task = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, self.node.rss_mb())
            await asyncio.sleep(0.05)

    async def growth_mb(self) -> float:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self.peak = max(self.peak, self.node.rss_mb())
        return self.peak - self.start


@dataclass(frozen=True)
class Attack:
    """One oversize input: its way, the length a header way announces, and whether the
    announced payload follows the header (as an encoder sends it) or only its first 128 bytes."""

    way: str
    length: int = 0
    in_full: bool = True

    @classmethod
    def pick(cls, rng: random.Random) -> Attack:
        way = rng.choice(OVERSIZE_WAYS)
        if way in ("partials", "sps"):
            return cls(way)
        return cls(way, rng.choice((msg.max_payload_bytes(ANNOUNCED_TYPES[way]) + 1, 0xFFFFFF)), rng.random() < 0.5)

    @property
    def label(self) -> str:
        return self.way if self.way in ("partials", "sps") else f"{self.way}/{'full' if self.in_full else 'header'}"

    @property
    def size(self) -> str | None:
        """What a refusal for this input's size names; None: partials (refused for their sum)."""
        if self.way == "partials":
            return None
        return f"{16 * SPS_MACROBLOCKS}x{16 * SPS_MACROBLOCKS}" if self.way == "sps" else f"{self.length} bytes"

    @property
    def announced(self) -> str:
        if self.way == "partials":
            return f"{PARTIAL_STREAMS} partial video messages of {PARTIAL_SENT} bytes on as many chunk streams"
        if self.way == "sps":
            return f"a sequence header whose SPS declares {self.size} pictures"
        article = "an" if self.way == "audio" else "a"
        return f"{article} {self.way} message of {self.length} bytes" + ("" if self.in_full else " (its header only)")


@dataclass
class Verdict:
    """What one case saw: how the attacker ended, the reason given and where, RSS growth, and
    how the well-behaved publisher fared."""

    announced: str
    rss_bound_mb: float
    size: str | None = None  # what a refusal for this message's size names ("65537 bytes"); None: partials
    closed: bool = False
    told_peer: str | None = None  # the error onStatus's code and description
    logged: str | None = None  # the node's closing line's reason for the attacker
    rss_growth_mb: float = 0.0
    good_problem: str | None = None

    @property
    def status(self) -> str:
        if not self.closed:
            return "held"
        return "refused" if self.told_peer else "cut"

    @property
    def reason(self) -> str:
        """Why the node said it closed the attacker: to it, else in its log ("" nowhere)."""
        return self.told_peer or self.logged or ""

    @property
    def detail(self) -> str:
        reason = self.told_peer or (f"only in the node log: {self.logged}" if self.logged else "no reason anywhere")
        good = self.good_problem or "the well-behaved publisher went on"
        return f"{self.announced}: {self.status}, {reason}; RSS +{self.rss_growth_mb:.0f} MB; {good}"

    @property
    def problems(self) -> list[str]:
        out = []
        if not self.closed:
            out.append(f"the node kept a connection that sent {self.announced} for {CLOSE_WAIT_S:g} s")
        elif not self.reason:
            out.append(f"the node cut a connection that sent {self.announced} without saying why, to it or in its log")
        elif any(waited in self.reason for waited in WAITED_OUT):
            out.append(f"the node kept a connection that sent {self.announced} until it stalled ({self.reason})")
        elif self.size and self.size not in self.reason:
            out.append(f"the node cut a connection that sent {self.announced} for another reason ({self.reason}): "
                       "it took the message before judging it")
        if self.rss_growth_mb > self.rss_bound_mb:
            out.append(f"the node's RSS grew {self.rss_growth_mb:.0f} MB (bound {self.rss_bound_mb:g}) on {self.announced}")
        if self.good_problem:
            out.append(self.good_problem)
        return out


class RtmpOversizeLayer:
    """One case: the well-behaved publisher starts, the attacker publishes and then oversizes,
    the well-behaved one sends on (the cap-sized access unit among its tags) and pings."""

    def __init__(self, node: OversizeNode, keys: Keys, recording: Recording, rss_bound_mb: float = RSS_BOUND_MB) -> None:
        """``recording``: what the well-behaved publisher sends (one the node takes: the camera);
        ``rss_bound_mb``: the node's RSS growth a case may show."""
        self.node, self.keys, self.recording = node, keys, recording
        self.rss_bound_mb = rss_bound_mb
        self._publishing = asyncio.Lock()  # one case at a time: the keys publish one stream each

    async def once(self, rng: random.Random) -> Outcome:
        return await self.run(Attack.pick(rng))

    async def run(self, attack: Attack) -> Outcome:
        async with self._publishing:
            try:
                async with asyncio.timeout(60):
                    return await self._case(attack, self.recording)
            except TimeoutError:
                return Outcome("rtmp-oversize", attack.label, "hung", "an oversize case did not finish within 60 s")
            except (OSError, asyncio.IncompleteReadError, RtmpHandshakeError) as exc:
                return Outcome("rtmp-oversize", attack.label, "refused", f"the RTMP port refused a publisher: {exc!r}")

    async def _case(self, attack: Attack, recording: Recording) -> Outcome:
        good = await Connection.open(self.node.rtmp_port)
        attacker: Connection | None = None
        try:
            preamble = [with_key(m, self.keys.well_behaved_key) for m in recording.preamble]
            if not await good.publish(self.keys.well_behaved_key, preamble):
                return Outcome("rtmp-oversize", attack.label, "not-published", None,
                               detail=f"the well-behaved publish did not start: {good.watch.errors or 'no answer'}")
            half = len(recording.media) // 2
            await _paced(good, recording.media[:half])
            attacker = await Connection.open(self.node.rtmp_port)
            if not await attacker.publish(self.keys.attacker_key):
                return Outcome("rtmp-oversize", attack.label, "not-published", None,
                               detail=f"the attacker's publish did not start: {attacker.watch.errors or 'no answer'}")
            log_offset = self.node.log_path.stat().st_size
            rss = RssPeak(self.node)
            sent = asyncio.create_task(self._attack(attack, attacker, Verdict(attack.announced, self.rss_bound_mb, attack.size)))
            await _paced(good, _with_cap_sized_unit(recording.media[half:]))  # alongside the attack
            verdict = await _beside(good, sent)
            if verdict.closed:
                verdict.logged = await _beside(good, self._closing_reason(attacker.local_port, log_offset))
            verdict.good_problem = await _still_going(good)
            verdict.rss_growth_mb = await rss.growth_mb()
        finally:
            for connection in (attacker, good):
                if connection is not None:
                    await connection.close()
        problems = verdict.problems
        return Outcome("rtmp-oversize", attack.label, verdict.status, "; ".join(problems) or None,
                       attack.announced.encode() if problems else b"", detail=verdict.detail)

    async def _attack(self, attack: Attack, attacker: Connection, verdict: Verdict) -> Verdict:
        """Send the oversized input (the rest of it too unless the node cuts first), then wait
        for the close."""
        await attacker.send(msg.set_chunk_size(65536))
        if attack.way == "sps":
            with contextlib.suppress(OSError):
                await _paced(attacker, _with_huge_sps(self.recording.media))
        elif attack.way == "partials":
            legal = msg.RtmpMessage(msg.MessageType.VIDEO, 1, 0, bytes(msg.MAX_VIDEO_BYTES))  # within its cap
            chunks = PARTIAL_SENT // 65536
            with contextlib.suppress(OSError):
                for csid in range(3, 3 + PARTIAL_STREAMS):  # the first 1 MiB of each: 12 + 1 header bytes per chunk
                    await attacker.send_bytes(attacker.chunks.write(legal, csid=csid)[:12 + chunks * 65537 - 1])
        else:
            data = attacker.chunks.write(msg.RtmpMessage(ANNOUNCED_TYPES[attack.way], 1, 0, bytes(attack.length)))
            with contextlib.suppress(OSError):
                await attacker.send_bytes(data if attack.in_full else data[:12 + 128])
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await attacker.watch.closed.wait()
        verdict.closed = attacker.watch.closed.is_set()
        verdict.told_peer = next((f"{code}: {text}" for code, text in attacker.watch.errors), None)
        return verdict

    async def _closing_reason(self, local_port: int, offset: int) -> str | None:
        """The reason in the node's closing line for the connection from ``local_port``."""
        line = re.compile(rf"rtmp 127\.0\.0\.1:{local_port}: closed \((.*)\)$", re.MULTILINE)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            with self.node.log_path.open("rb") as log:
                log.seek(offset)
                found = line.search(log.read().decode("utf-8", "replace"))
            if found:
                return found.group(1)
            await asyncio.sleep(0.1)
        return None


def _with_cap_sized_unit(media: list[msg.RtmpMessage]) -> list[msg.RtmpMessage]:
    """The recorded tags, the first coded frame padded with a filler NAL unit to exactly the
    video cap: the largest message the node must take."""
    out = list(media)
    index = next((i for i, m in enumerate(out) if m.type_id == msg.MessageType.VIDEO and m.payload[1:2] == b"\x01"), None)
    if index is not None:
        frame = out[index]
        filler_size = msg.MAX_VIDEO_BYTES - len(frame.payload) - 4
        filler = filler_size.to_bytes(4, "big") + bytes([FILLER_NAL]) + b"\xff" * (filler_size - 2) + b"\x80"
        out[index] = msg.RtmpMessage(frame.type_id, frame.stream_id, frame.timestamp, frame.payload + filler)
    return out


def _with_huge_sps(media: list[msg.RtmpMessage]) -> list[msg.RtmpMessage]:
    """The recording's AVC sequence header with its SPS declaring ``SPS_MACROBLOCKS`` a side
    (its slices left as they were), then its first video tags, on the attacker's stream."""
    video = [m for m in media if m.type_id == msg.MessageType.VIDEO]
    header = next(m for m in video if m.payload[:2] == b"\x17\x00")  # AVC keyframe, AVCPacketType 0
    crafted = header.payload[:5] + resize_avcc(header.payload[5:], SPS_MACROBLOCKS, SPS_MACROBLOCKS)
    tags = [crafted, *(m.payload for m in video if m is not header)][:SPS_TAGS]
    return [msg.RtmpMessage(msg.MessageType.VIDEO, 1, 40 * number, payload) for number, payload in enumerate(tags)]


async def _beside(good: Connection, waited: Awaitable[T]) -> T:
    """What ``waited`` gives; meanwhile the well-behaved publisher pings twice a second, as
    an encoder keeps sending, so the node's stall timeout (2 s in the fuzz node) does not cut
    it while the attacker's end is awaited (a refused peer is drained for up to 2 s)."""
    task = asyncio.ensure_future(waited)
    while not task.done():
        with contextlib.suppress(OSError):
            await good.send(msg.ping_request(0))
        await asyncio.wait({task}, timeout=0.5)
    return task.result()


async def _paced(connection: Connection, media: list[msg.RtmpMessage]) -> None:
    """Tags eight at a time, as a live encoder sends them (faster than real time)."""
    with contextlib.suppress(OSError):
        for start in range(0, len(media), 8):
            if connection.watch.closed.is_set():
                return
            await connection.send(*media[start:start + 8])
            await asyncio.sleep(0.01)


async def _still_going(good: Connection) -> str | None:
    """None when the well-behaved publisher was never refused nor cut and answers a ping."""
    marker = 0x5CA1AB1E
    with contextlib.suppress(OSError):
        await good.send(msg.ping_request(marker))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            while marker not in good.watch.pongs and not good.watch.closed.is_set():
                await asyncio.sleep(0.05)
    if good.watch.errors:
        return f"the well-behaved publisher beside it was refused: {good.watch.errors[0]}"
    if good.watch.closed.is_set():
        return "the well-behaved publisher beside it was cut"
    if marker not in good.watch.pongs:
        return "the well-behaved publisher beside it got no ping answer within 5 s"
    return None
