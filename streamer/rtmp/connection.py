"""One server-side RTMP connection: handshake, chunk I/O, the NetConnection/NetStream command
dialogue that ffmpeg/OBS expect, and the hand-off of media to the application handler.

Failure policy: anything the peer gets wrong (RtmpProtocolError, resets, stalls) ends this
connection only and is logged at INFO in one line; exceptions from our own code or from the
handler are logged with a traceback since they are bugs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Literal

from signaling.log_safety import key_hint, quoted
from streamer.rtmp import amf0
from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter
from streamer.rtmp.errors import RtmpProtocolError
from streamer.rtmp.flv import is_sequence_header, is_video_keyframe
from streamer.rtmp.handler import MediaMessage, PublishRejected, RtmpHandler
from streamer.rtmp.handshake import server_handshake

log = logging.getLogger(__name__)

_U32 = 0xFFFFFFFF
_READ_SIZE = 65536
KIND_OF_TYPE: dict[int, Literal["video", "audio", "data"]] = {
    msg.MessageType.VIDEO: "video",
    msg.MessageType.AUDIO: "audio",
    msg.MessageType.AMF0_DATA: "data",
    msg.MessageType.AMF3_DATA: "data",
}
TYPE_OF_KIND = {"video": msg.MessageType.VIDEO, "audio": msg.MessageType.AUDIO, "data": msg.MessageType.AMF0_DATA}
_END_PUBLISH = {"FCUnpublish", "deleteStream", "closeStream"}
UNPUBLISH_GRACE_S = 2.0  # after a client unpublishes, the time it has to close the connection itself
NOTICE_GRACE_S = 2.0  # the time a client has to read why it is cut and close by itself
# What a refused peer may still send while it reads why (read and dropped): the rest of the
# largest message a 24-bit length announces, in 128-byte chunks ~17 MB, and what is in flight
REFUSAL_DISCARD_BYTES = 32 * 1024 * 1024


class TimestampUnwrapper:
    """Turns 32-bit RTMP timestamps into a 64-bit timeline: a step of less than 2**31 in either
    direction is taken as the short way round, so a wrap at 2**32 keeps counting up."""

    def __init__(self) -> None:
        self._last: int | None = None
        self._value = 0

    def __call__(self, timestamp: int) -> int:
        if self._last is None:
            self._value = timestamp
        else:
            delta = (timestamp - self._last) & _U32
            self._value += delta - (1 << 32) if delta >= 1 << 31 else delta
        self._last = timestamp
        return self._value


def strip_set_data_frame(payload: bytes) -> bytes:
    """A publisher's `@setDataFrame onMetaData {...}` → the FLV script body `onMetaData {...}`."""
    first, offset = amf0.decode_value(payload)
    return payload[offset:] if first == "@setDataFrame" else payload


class _MediaQueue:
    """Bounded single-producer/single-consumer FIFO whose end never blocks: a full queue
    pushes back on the socket reader (TCP backpressure), `end()` wakes both sides."""

    def __init__(self, limit: int) -> None:
        self._items: deque[MediaMessage] = deque()
        self._limit = limit
        self._ended = False
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()

    async def put(self, item: MediaMessage) -> None:
        while len(self._items) >= self._limit and not self._ended:
            self._writable.clear()
            await self._writable.wait()
        if not self._ended:
            self._items.append(item)
            self._readable.set()

    def end(self) -> None:
        self._ended = True
        self._readable.set()
        self._writable.set()

    async def get(self) -> MediaMessage | None:
        while not self._items:
            if self._ended:
                return None
            self._readable.clear()
            await self._readable.wait()
        self._writable.set()
        return self._items.popleft()


class ServerPublisher:
    """The `Publisher` the handler sees for one publish on this connection."""

    def __init__(self, connection: RtmpConnection, app: str, name: str, queue_size: int, stream_id: int) -> None:
        self.app = app
        self.name = name
        self.remote = connection.remote
        self.ended_reason: str | None = None
        self._connection = connection
        self._queue = _MediaQueue(queue_size)
        self.stream_id = stream_id

    async def media(self) -> AsyncIterator[MediaMessage]:
        while (item := await self._queue.get()) is not None:
            yield item

    async def close(self, reason: str) -> None:
        """Cut the publisher, telling it why (an error-level onStatus) before the socket closes."""
        self.end(f"closed by the app: {reason}")
        notice = msg.command("onStatus", 0, None, _status("error", "NetStream.Publish.Failed", reason), stream_id=self.stream_id)
        await self._connection.close(f"publisher closed by the app: {reason}", notice)

    async def deliver(self, message: MediaMessage) -> None:
        await self._queue.put(message)

    def end(self, reason: str) -> None:
        """Record why the publish ended (first reason wins) and let `media()` finish."""
        if self.ended_reason is None:
            self.ended_reason = reason
        self._queue.end()


class ServerPlayer:
    """The `Player` the handler sees: a non-blocking, bounded send queue drained by the
    connection's writer task. When full, video is dropped until the next keyframe (the
    pipeline never waits on a slow viewer); audio, data and sequence headers are kept up to
    a hard limit, past which the viewer is cut."""

    def __init__(self, connection: RtmpConnection, app: str, name: str, queue_size: int) -> None:
        self.app = app
        self.name = name
        self.remote = connection.remote
        self.dropped_video = 0
        self._connection = connection
        self._capacity = queue_size
        self._items: deque[MediaMessage] = deque()
        self._ready = asyncio.Event()
        self._skip_to_keyframe = False
        self._finishing = False

    def send(self, message: MediaMessage) -> None:
        if self._connection.closed.is_set() or self._finishing:
            return
        payload = message.payload
        if message.kind == "video" and not is_sequence_header("video", payload):
            if len(self._items) >= self._capacity or (self._skip_to_keyframe and not is_video_keyframe(payload)):
                self._skip_to_keyframe = True
                self.dropped_video += 1
                return
            self._skip_to_keyframe = False
        if len(self._items) >= 4 * self._capacity:
            self._connection.close_now(f"player too slow: {len(self._items)} messages queued")
            return
        self._items.append(message)
        self._ready.set()

    async def wait_closed(self) -> None:
        await self._connection.closed.wait()

    async def close(self, reason: str) -> None:
        await self._connection.close(f"player closed by the app: {reason}")

    def finish(self) -> None:
        """The handler is done: send what is queued, then end the play."""
        self._finishing = True
        self._ready.set()

    async def next(self) -> MediaMessage | None:
        """The next message to write; None once finished and drained."""
        while not self._items:
            if self._finishing:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()


class WorkBudget:
    """The parsing work a peer may cause per second, as a token bucket: past it, the
    connection is read more slowly (TCP pushes back on the peer). Without it, one peer sending
    1-byte chunks (~1 µs of parsing each) at 2 MB/s took the whole event loop."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self._tokens = per_second
        self._at = time.monotonic()

    async def spend(self, units: float) -> None:
        now = time.monotonic()
        self._tokens = min(self.per_second, self._tokens + (now - self._at) * self.per_second) - units
        self._at = now
        if self._tokens < 0:
            await asyncio.sleep(-self._tokens / self.per_second)


class RtmpConnection:
    """Server role for one TCP connection; `run()` returns when the connection is over."""

    # chunks (and messages, at 8 chunks each) parsed per second: 20 Mbit/s at the default
    # 128-byte chunks, far more at the 4096 bytes OBS and ffmpeg use
    WORK_PER_SECOND = 20_000

    # Answers to commands and pings are written without waiting for the socket; a peer that
    # sends those and never reads would make us hold every answer. Players wait for the
    # socket after each message, so they never come near this.
    MAX_UNSENT_BYTES = 4 * 1024 * 1024

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handler: RtmpHandler,
        *,
        stall_timeout: float,
        chunk_size: int,
        window_ack_size: int = 2_500_000,
        queue_size: int = 512,
        setup_timeout: float | None = None,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        """``setup_timeout``: seconds from the connection to its publish or play, which
        ``on_started`` hears about (pings alone would keep an idle socket from stalling)."""
        peer = writer.get_extra_info("peername")
        self.remote = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.closed = asyncio.Event()
        self.close_reason: str | None = None
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self._stall_timeout = stall_timeout
        self._chunk_size = chunk_size
        self._window_ack_size = window_ack_size
        self._queue_size = queue_size
        self._chunks_in = ChunkReader()
        self._work = WorkBudget(self.WORK_PER_SECOND)
        self._chunks_out = ChunkWriter()
        self._unwrap = TimestampUnwrapper()
        self._app: str | None = None
        self._next_stream_id = 1
        self._peer_window = 0
        self._received = 0
        self._acked = 0
        self._publisher: ServerPublisher | None = None
        self._player: ServerPlayer | None = None
        self._setup_deadline = None if setup_timeout is None else time.monotonic() + setup_timeout
        self._setup_timeout = setup_timeout
        self._on_started = on_started
        self._serve_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closing_soon = False
        self._refusing = False  # told the peer why it is cut: nothing more is parsed nor written

    async def run(self) -> None:
        self._serve_task = asyncio.create_task(self._serve())
        try:
            await asyncio.wait({self._serve_task})
            self.close_now("closed")
            if self._tasks:
                await asyncio.wait(self._tasks)  # the handler returns once its media/play ends
        finally:
            self.close_now("server closing")
            pending = [task for task in (self._serve_task, *self._tasks) if not task.done()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self._publisher = self._player = None  # they point back here: no cycle outlives the connection
            log.info("rtmp %s: closed (%s)", self.remote, self.close_reason)

    def close_now(self, reason: str) -> None:
        """Close the socket and end publish/play; safe to call from any task, many times."""
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        transport = self._writer.transport
        unsent = 0 if transport.is_closing() else transport.get_write_buffer_size()  # a closed TLS one raises
        self._writer.close()
        if unsent:
            # close() sends what is unsent first: a peer that stopped reading would hold the
            # socket and those bytes for ever, so it gets the notice grace time, no more
            asyncio.get_running_loop().call_later(NOTICE_GRACE_S, self._writer.transport.abort)
        if self._publisher is not None:
            self._publisher.end(reason)
        if self._player is not None:
            self._player.finish()
        if self._serve_task is not None and self._serve_task is not asyncio.current_task():
            self._serve_task.cancel()

    async def close(self, reason: str, notice: msg.RtmpMessage | None = None) -> None:
        """Close; with ``notice`` (an onStatus saying why), send it and leave the peer
        ``NOTICE_GRACE_S`` to read it and close first: closing at once would reset the
        connection under a client still sending, and it would never see the reason."""
        if notice is not None and not self.closed.is_set():
            self._send(notice)
            self._close_soon(NOTICE_GRACE_S, reason)
            return
        self.close_now(reason)
        try:
            await self._writer.wait_closed()
        except (OSError, RuntimeError):
            pass  # the peer already reset the socket; it is closed either way

    # -- reading -------------------------------------------------------------------------

    async def _serve(self) -> None:
        try:
            await server_handshake(self._reader, self._writer, timeout=self._stall_timeout)
            while not self.closed.is_set():
                timeout = None if self._player is not None else self._stall_timeout
                setup_left = None if self._setup_deadline is None else self._setup_deadline - time.monotonic()
                if setup_left is not None and (timeout is None or setup_left < timeout):
                    timeout = max(setup_left, 0.0)
                try:
                    async with asyncio.timeout(timeout):
                        data = await self._reader.read(_READ_SIZE)
                except TimeoutError:
                    if self._setup_deadline is not None and time.monotonic() >= self._setup_deadline:
                        self.close_now(f"no publish or play within {self._setup_timeout:g} s")
                    else:
                        self.close_now(f"stalled: no data for {self._stall_timeout:g} s")
                    return
                if not data:
                    self.close_now("disconnected")
                    return
                chunks_before = self._chunks_in.chunks_parsed
                messages = self._chunks_in.feed(data)
                for message in messages:
                    await self._dispatch(message)
                    if self.closed.is_set():
                        return
                self._count_received(len(data))  # after dispatch: a window set in `data` counts
                await self._work.spend(self._chunks_in.chunks_parsed - chunks_before + 8 * len(messages))
        except msg.Oversized as exc:
            await self._refuse_oversized(exc)
        except RtmpProtocolError as exc:
            self.close_now(f"protocol error: {exc}")
        except (ConnectionError, TimeoutError) as exc:
            self.close_now(f"connection lost: {exc!r}")
        except Exception:
            log.exception("rtmp %s: internal error", self.remote)
            self.close_now("internal error")

    async def _refuse_oversized(self, exc: msg.Oversized) -> None:
        """Cut a peer that sent more than the node holds, telling it why (an error-level
        onStatus). An encoder is still sending the rest of its message: closing with those
        bytes unread would make the kernel reset the connection and the peer lose the notice.
        So nothing more is parsed, the notice is followed by our FIN, and what the peer sends
        is read and dropped until it closes, for NOTICE_GRACE_S and REFUSAL_DISCARD_BYTES at
        most. Logged at INFO like every peer's mistake, in the connection's closing line."""
        reason = f"protocol error: {exc}"
        publisher = self._publisher
        code = "NetStream.Publish.Failed" if publisher is not None else "NetConnection.Call.Failed"
        stream_id = publisher.stream_id if publisher is not None else 0
        self._send(msg.command("onStatus", 0, None, _status("error", code, str(exc)), stream_id=stream_id))
        self._refusing = self._closing_soon = True  # the handler ending meanwhile closes nothing
        self._chunks_in = ChunkReader()  # the partial messages it held are freed now, not after the grace
        if publisher is not None:
            publisher.end(reason)
        if not self.closed.is_set():
            if self._writer.can_write_eof():  # not over TLS: there the close ends the grace
                self._writer.write_eof()  # sent once the notice is
            await self._discard_input(NOTICE_GRACE_S, REFUSAL_DISCARD_BYTES)
        self.close_now(reason)

    async def _discard_input(self, seconds: float, max_bytes: int) -> None:
        """Read and drop what the peer sends until it closes, ``seconds`` and ``max_bytes``
        at most: a peer cannot hold the connection with it."""
        discarded = 0
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(seconds):
                while discarded < max_bytes and (data := await self._reader.read(_READ_SIZE)):
                    discarded += len(data)

    def _count_received(self, count: int) -> None:
        self._received += count
        if self._peer_window and self._received - self._acked >= self._peer_window:
            self._acked = self._received
            self._send(msg.acknowledgement(self._received))

    async def _dispatch(self, message: msg.RtmpMessage) -> None:
        type_id = message.type_id
        if type_id == msg.MessageType.WINDOW_ACK_SIZE:
            self._peer_window = msg.parse_window_ack_size(message.payload)
        elif type_id == msg.MessageType.SET_PEER_BANDWIDTH:
            msg.parse_set_peer_bandwidth(message.payload)
        elif type_id == msg.MessageType.USER_CONTROL:
            event = msg.parse_user_control(message.payload)
            if event.event == msg.UserControlEvent.PING_REQUEST:
                self._send(msg.ping_response(event.value))
        elif type_id in (msg.MessageType.AMF0_COMMAND, msg.MessageType.AMF3_COMMAND):
            await self._on_command(msg.parse_command(type_id, message.payload), message.stream_id)
        elif type_id in KIND_OF_TYPE and self._publisher is not None:
            await self._on_media(message)

    async def _on_media(self, message: msg.RtmpMessage) -> None:
        assert self._publisher is not None
        kind = KIND_OF_TYPE[message.type_id]
        payload = message.payload
        if message.type_id == msg.MessageType.AMF3_DATA:
            payload = payload[1:]
        if kind == "data":
            msg.check_command_size(payload)  # decoded here and by the handler, on the event loop
            payload = strip_set_data_frame(payload)
        await self._publisher.deliver(MediaMessage(kind, self._unwrap(message.timestamp), payload))

    # -- commands ------------------------------------------------------------------------

    async def _on_command(self, command: msg.Command, stream_id: int) -> None:
        name, tx = command.name, command.transaction_id
        if name == "connect":
            self._on_connect(command)
            return
        if self._app is None:
            raise RtmpProtocolError(f"command {name!r} before connect")
        if name in ("releaseStream", "FCPublish"):
            self._result(tx, None, amf0.UNDEFINED)
            if name == "FCPublish":
                self._send(msg.command("onFCPublish", 0, None, _status("status", "NetStream.Publish.Start", _arg(command))))
        elif name == "createStream":
            self._result(tx, None, float(self._next_stream_id))
            self._next_stream_id += 1
        elif name == "getStreamLength":
            self._result(tx, None, 0.0)
        elif name == "publish":
            await self._on_publish(_arg(command), stream_id)
        elif name == "play":
            await self._on_play(_arg(command), stream_id)
        elif name in _END_PUBLISH:
            if self._publisher is not None:
                if self._publisher.ended_reason is None:
                    status = _status("status", "NetStream.Unpublish.Success", f"{self._publisher.name[:6]}… is now unpublished.")
                    self._send(msg.command("onStatus", 0, None, status, stream_id=stream_id))
                self._publisher.end("unpublished")
            elif self._player is not None:
                self.close_now("player left")
        elif tx and name not in ("_result", "_error", "onStatus"):
            info = _status("error", "NetConnection.Call.Failed", f"unknown command {name!r}")
            self._send(msg.command("_error", tx, None, info))

    def _on_connect(self, command: msg.Command) -> None:
        params = command.command_object if isinstance(command.command_object, dict) else {}
        self._app = str(params.get("app", "")).split("?", 1)[0].strip("/")
        self._send(
            msg.window_ack_size(self._window_ack_size),
            msg.set_peer_bandwidth(self._window_ack_size),
            msg.set_chunk_size(self._chunk_size),
        )
        info = _status("status", "NetConnection.Connect.Success", "Connection succeeded.")
        info["objectEncoding"] = 0.0
        self._result(command.transaction_id, {"fmsVer": "FMS/3,0,1,123", "capabilities": 31.0}, info)

    async def _on_publish(self, name: str, stream_id: int) -> None:
        assert self._app is not None
        if self._publisher is not None or self._player is not None:
            raise RtmpProtocolError("a second publish/play on one connection")
        try:
            if not name:
                raise PublishRejected("NetStream.Publish.BadName", "empty stream name")
            await self._handler.authorize_publish(self._app, name)
        except PublishRejected as exc:
            await self._reject(exc, stream_id, f"publish of {quoted(self._app, 40)}/{key_hint(name)} rejected")
            return
        if self._left_meanwhile():
            return
        self._publisher = ServerPublisher(self, self._app, name, self._queue_size, stream_id)
        self._started()
        self._send(msg.command("onStatus", 0, None, _status("status", "NetStream.Publish.Start", f"{name} is now published."), stream_id=stream_id))
        log.info("rtmp %s: publishing %s/%s", self.remote, quoted(self._app, 40), key_hint(name))  # never a whole stream key
        self._start_handler(self._handler.on_publish(self._publisher))

    async def _on_play(self, name: str, stream_id: int) -> None:
        assert self._app is not None
        if self._publisher is not None or self._player is not None:
            raise RtmpProtocolError("a second publish/play on one connection")
        try:
            await self._handler.authorize_play(self._app, name)
        except PublishRejected as exc:
            await self._reject(exc, stream_id, f"play of {quoted(self._app, 40)}/{key_hint(name)} rejected")
            return
        if self._left_meanwhile():
            return
        self._send(
            msg.stream_begin(stream_id),
            msg.command("onStatus", 0, None, _status("status", "NetStream.Play.Reset", f"Playing and resetting {name}."), stream_id=stream_id),
            msg.command("onStatus", 0, None, _status("status", "NetStream.Play.Start", f"Started playing {name}."), stream_id=stream_id),
            msg.data("|RtmpSampleAccess", True, True, stream_id=stream_id),
        )
        self._player = ServerPlayer(self, self._app, name, self._queue_size)
        self._started()
        log.info("rtmp %s: playing %s/%s", self.remote, quoted(self._app, 40), key_hint(name))
        self._tasks.append(asyncio.create_task(self._play_writer(self._player, stream_id)))
        self._start_handler(self._handler.on_play(self._player))

    def _started(self) -> None:
        self._setup_deadline = None
        if self._on_started is not None:
            self._on_started()

    def _left_meanwhile(self) -> bool:
        """After an authorisation (which may take a while): did the client go? Then nothing
        is started for it, and nothing is written to its socket."""
        if not self.closed.is_set() and self._writer.transport.is_closing():
            self.close_now("the client left while being authorised")
        return self.closed.is_set()

    async def _reject(self, exc: PublishRejected, stream_id: int, what: str) -> None:
        self._send(msg.command("onStatus", 0, None, _status("error", exc.code, exc.description), stream_id=stream_id))
        await self._drain()
        self.close_now(f"{what}: {exc.code} ({exc.description})")

    def _start_handler(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        task.add_done_callback(self._handler_done)
        self._tasks.append(task)

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("rtmp %s: handler failed", self.remote, exc_info=exc)
        if self._player is not None:
            self._player.finish()  # the writer sends the rest, then ends the play
        elif self._closing_soon:
            pass  # the client is reading why it was cut
        elif self._publisher is not None and self._publisher.ended_reason == "unpublished":
            # clients (GStreamer's rtmp2sink among them) close after deleteStream themselves and
            # take a close from our side first as an error: give them the time to
            self._close_soon(UNPUBLISH_GRACE_S, "unpublished; the client did not close")
        else:
            self.close_now("handler finished")

    def _close_soon(self, delay: float, reason: str) -> None:
        """Let the client close first; close from our side after ``delay`` if it does not."""
        self._closing_soon = True
        asyncio.get_running_loop().call_later(delay, self.close_now, reason)

    # -- writing -------------------------------------------------------------------------

    async def _play_writer(self, player: ServerPlayer, stream_id: int) -> None:
        try:
            while (item := await player.next()) is not None:
                timestamp = item.timestamp & _U32
                self._send(msg.RtmpMessage(TYPE_OF_KIND[item.kind], stream_id, timestamp, item.payload))
                await self._drain()
            if not self.closed.is_set():
                self._send(
                    msg.stream_eof(stream_id),
                    msg.command("onStatus", 0, None, _status("status", "NetStream.Play.Stop", "Stopped playing."), stream_id=stream_id),
                )
                await self._drain()
                self.close_now("play finished")
        except (ConnectionError, TimeoutError) as exc:
            self.close_now(f"player connection lost: {exc!r}")

    def _send(self, *messages: msg.RtmpMessage) -> None:
        if self.closed.is_set() or self._refusing:
            return
        if self._writer.transport.is_closing():  # the peer reset the socket: writing would raise
            self.close_now("connection lost")
            return
        unsent = self._writer.transport.get_write_buffer_size()
        if unsent > self.MAX_UNSENT_BYTES:
            self.close_now(f"the peer is not reading: {unsent} bytes unsent")
            self._writer.transport.abort()  # close() would wait for it to read them, for ever
            return
        try:
            self._writer.write(b"".join(self._chunks_out.write(m) for m in messages))
        except (ConnectionError, RuntimeError) as exc:
            self.close_now(f"connection lost: {exc!r}")

    def _result(self, transaction_id: float, properties: Any, info: Any) -> None:
        self._send(msg.command("_result", transaction_id, properties, info))

    async def _drain(self) -> None:
        """Wait for the socket to take our data; a peer that stops reading is a stalled one."""
        if self.closed.is_set():
            return
        async with asyncio.timeout(max(self._stall_timeout, 5.0)):
            await self._writer.drain()


def _status(level: str, code: str, description: str) -> dict[str, Any]:
    return {"level": level, "code": code, "description": description}


def _arg(command: msg.Command) -> str:
    """The first argument after the command object (the stream name), as a string."""
    first = command.args[0] if command.args else ""
    return first if isinstance(first, str) else ""
