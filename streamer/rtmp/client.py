"""RTMP clients: `RtmpPublishClient` pushes a stream (to Twitch/YouTube/another server, or to
our own server in tests and benchmarks); `RtmpPlayClient` reads one (tests).

Every network step runs under a timeout, and every failure, refused connection, rejected
publish or protocol garbage from the server, surfaces as one `RtmpClientError`."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from streamer.rtmp import amf0
from streamer.rtmp import messages as msg
from streamer.rtmp.chunk import ChunkReader, ChunkWriter
from streamer.rtmp.connection import KIND_OF_TYPE, TYPE_OF_KIND, TimestampUnwrapper
from streamer.rtmp.errors import RtmpProtocolError
from streamer.rtmp.handler import MediaMessage
from streamer.rtmp.handshake import client_handshake

DEFAULT_PORT = 1935
DEFAULT_TLS_PORT = 443  # rtmps:// without a port (the platforms' ingest)
Resolver = Callable[[str, int], Awaitable[str]]
_FLASH_VERSION = "FMLE/3.0 (compatible; swapcast)"
_SAMPLE_ACCESS = amf0.encode("|RtmpSampleAccess")


class RtmpClientError(Exception):
    """The destination is down, refused us, timed out, or broke the protocol. A refusal
    carries the server's ``code`` and ``description``; ``unreachable`` says the server could
    not be reached at all (a relay tries another one then)."""

    def __init__(self, message: str, *, code: str | None = None, description: str = "",
                 unreachable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.description = description
        self.unreachable = unreachable


def _refusal(what: str, args: list[Any]) -> RtmpClientError:
    info = next((arg for arg in args if isinstance(arg, dict)), {})
    return RtmpClientError(f"{what} refused: {_describe(args)}", code=str(info.get("code") or "") or None,
                           description=str(info.get("description") or ""))


@dataclass(frozen=True)
class RtmpUrl:
    """rtmp[s]://host[:port]/app[/more]/name[?query]: the app is everything before the last
    path segment, the stream name is the last segment plus the query (stream keys live there).
    ``tls``: rtmps://, RTMP inside TLS."""

    host: str
    port: int
    app: str
    name: str
    tls: bool = False

    @property
    def scheme(self) -> str:
        return "rtmps" if self.tls else "rtmp"

    @property
    def tc_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/{self.app}"


def parse_rtmp_url(url: str) -> RtmpUrl:
    parts = urlsplit(url)
    if parts.scheme not in ("rtmp", "rtmps"):
        raise RtmpClientError(f"not an rtmp:// or rtmps:// URL: {url!r}")
    tls = parts.scheme == "rtmps"
    try:
        port = parts.port or (DEFAULT_TLS_PORT if tls else DEFAULT_PORT)
    except ValueError:
        raise RtmpClientError(f"bad port in {url!r}") from None
    segments = [segment for segment in parts.path.split("/") if segment]
    if not parts.hostname or len(segments) < 2:
        raise RtmpClientError(f"RTMP URL needs a host, an app and a stream name: {url!r}")
    name = segments[-1] + (f"?{parts.query}" if parts.query else "")
    return RtmpUrl(parts.hostname, port, "/".join(segments[:-1]), name, tls)


class _ClientSession:
    """Socket, chunk I/O and the connect/createStream dialogue both clients share."""

    def __init__(self, url: str, *, timeout: float, chunk_size: int, flash_version: str,
                 resolve: Resolver | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.url = parse_rtmp_url(url)
        self.timeout = timeout
        self._resolve = resolve
        # rtmps:// verifies the server's certificate and name (system CAs unless given)
        self._tls = (tls or ssl.create_default_context()) if self.url.tls else None
        self._chunk_size = chunk_size
        self._flash_version = flash_version
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._chunks_in = ChunkReader()
        self._chunks_out = ChunkWriter()
        self._pending: list[msg.RtmpMessage] = []
        self._next_tx = 1
        self._received = 0
        self._acked = 0
        self._peer_window = 0
        self.stream_id = 0

    async def open(self) -> None:
        url = self.url
        try:
            async with asyncio.timeout(self.timeout):
                # the address a destination policy approved, not a second DNS answer
                host = await self._resolve(url.host, url.port) if self._resolve is not None else url.host
                self._reader, self._writer = await asyncio.open_connection(
                    host, url.port, ssl=self._tls, server_hostname=url.host if self._tls else None)
                await client_handshake(self._reader, self._writer, timeout=self.timeout)
        except TimeoutError:
            await self.abort()
            raise RtmpClientError(f"{url.scheme}://{url.host}:{url.port}: no answer within {self.timeout:g} s",
                                  unreachable=True) from None
        except ssl.SSLCertVerificationError as exc:
            await self.abort()
            raise RtmpClientError(f"{url.scheme}://{url.host}:{url.port}: certificate not trusted: "
                                  f"{exc.verify_message or exc.reason}", unreachable=True) from None
        except (OSError, RtmpProtocolError) as exc:
            await self.abort()
            raise RtmpClientError(f"{url.scheme}://{url.host}:{url.port}: cannot connect: {exc}",
                                  unreachable=True) from None
        self.send(msg.set_chunk_size(self._chunk_size))
        params = {
            "app": url.app,
            "type": "nonprivate",
            "flashVer": self._flash_version,
            "tcUrl": url.tc_url,
        }
        await self.call("connect", params)

    async def create_stream(self) -> None:
        reply = await self.call("createStream", None)
        stream_id = reply[1] if len(reply) > 1 else None
        if isinstance(stream_id, bool) or not isinstance(stream_id, float) or not 0 < stream_id < 2**32:
            raise RtmpClientError(f"createStream answered {stream_id!r}, not a stream id")
        self.stream_id = int(stream_id)

    def notify(self, name: str, *args: Any, stream_id: int = 0) -> None:
        """A command whose answer nobody waits for (releaseStream, FCPublish, publish, play)."""
        tx = float(self._next_tx)
        self._next_tx += 1
        self.send(msg.command(name, tx, None, *args, stream_id=stream_id))

    async def call(self, name: str, command_object: Any, *args: Any) -> list[Any]:
        """Send a command and wait for its `_result`; returns [command object, *args]."""
        tx = float(self._next_tx)
        self._next_tx += 1
        self.send(msg.command(name, tx, command_object, *args))
        while True:
            message = await self.next_message()
            if message.type_id not in (msg.MessageType.AMF0_COMMAND, msg.MessageType.AMF3_COMMAND):
                self._pending.append(message)
                continue
            reply = self.parse_reply(message)
            if reply.transaction_id != tx:
                self.check_status(reply)
                continue
            if reply.name == "_error":
                raise _refusal(name, reply.args)
            if reply.name == "_result":
                return [reply.command_object, *reply.args]

    def parse_reply(self, message: msg.RtmpMessage) -> msg.Command:
        try:
            return msg.parse_command(message.type_id, message.payload)
        except RtmpProtocolError as exc:
            raise RtmpClientError(f"{self.url.tc_url}: bad command from the server: {exc}") from None

    @property
    def is_open(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    def check_status(self, reply: msg.Command) -> dict[str, Any] | None:
        """The info object of an onStatus; raises on an error-level status."""
        if reply.name != "onStatus":
            return None
        info = reply.args[0] if reply.args and isinstance(reply.args[0], dict) else {}
        if info.get("level") == "error":
            raise _refusal("server", reply.args)
        return info

    async def wait_status(self, wanted: str) -> None:
        while True:
            message = await self.next_message()
            if message.type_id not in (msg.MessageType.AMF0_COMMAND, msg.MessageType.AMF3_COMMAND):
                self._pending.append(message)
                continue
            info = self.check_status(self.parse_reply(message))
            if info is not None and info.get("code") == wanted:
                return

    async def next_message(self) -> msg.RtmpMessage:
        """The next non-control message within the timeout; the server closing is an error."""
        message = await self.read_message(self.timeout)
        if message is None:
            raise RtmpClientError(f"{self.url.tc_url}: server closed the connection")
        return message

    async def read_message(self, timeout: float | None) -> msg.RtmpMessage | None:
        """The next message that is not protocol control (those are handled here); None at EOF."""
        assert self._reader is not None
        while not self._pending:
            try:
                async with asyncio.timeout(timeout):
                    data = await self._reader.read(65536)
            except TimeoutError:
                raise RtmpClientError(f"{self.url.tc_url}: no answer within {timeout:g} s") from None
            except OSError as exc:
                raise RtmpClientError(f"{self.url.tc_url}: connection lost: {exc}") from None
            if not data:
                return None
            self._received += len(data)
            try:
                messages = self._chunks_in.feed(data)
                for message in messages:
                    self.handle_control(message)
            except RtmpProtocolError as exc:
                raise RtmpClientError(f"{self.url.tc_url}: protocol error: {exc}") from None
            self._pending.extend(m for m in messages if m.type_id > msg.MessageType.SET_PEER_BANDWIDTH)
            if self._peer_window and self._received - self._acked >= self._peer_window:
                self._acked = self._received
                self.send(msg.acknowledgement(self._received))
        return self._pending.pop(0)

    def handle_control(self, message: msg.RtmpMessage) -> None:
        if message.type_id == msg.MessageType.WINDOW_ACK_SIZE:
            self._peer_window = msg.parse_window_ack_size(message.payload)
        elif message.type_id == msg.MessageType.USER_CONTROL:
            event = msg.parse_user_control(message.payload)
            if event.event == msg.UserControlEvent.PING_REQUEST:
                self.send(msg.ping_response(event.value))

    def send(self, *messages: msg.RtmpMessage) -> None:
        if self._writer is None or self._writer.is_closing():
            raise RtmpClientError(f"{self.url.tc_url}: connection is closed")
        self._writer.write(b"".join(self._chunks_out.write(m) for m in messages))

    async def drain(self) -> None:
        assert self._writer is not None
        try:
            async with asyncio.timeout(self.timeout):
                await self._writer.drain()
        except TimeoutError:
            raise RtmpClientError(f"{self.url.tc_url}: server stopped reading for {self.timeout:g} s") from None
        except OSError as exc:
            raise RtmpClientError(f"{self.url.tc_url}: connection lost: {exc}") from None

    async def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError, RuntimeError):
                await self._writer.wait_closed()
            self._writer = None


class RtmpPublishClient:
    """Publishes one stream: `await connect()` (or `async with`), `await send(...)`, `await close()`.

    A background task keeps reading what the server sends (acks, pings, an error onStatus)
    so a long push never stalls on a full socket; a failure seen there is raised by the
    next `send`."""

    def __init__(
        self, url: str, *, timeout: float = 10.0, chunk_size: int = 4096, flash_version: str = _FLASH_VERSION,
        resolve: Resolver | None = None, tls: ssl.SSLContext | None = None,
    ) -> None:
        """``resolve(host, port)`` picks the address to connect to and may refuse the host
        with an ``OSError`` (a push destination policy); without it the host is dialled as is."""
        self._session = _ClientSession(url, timeout=timeout, chunk_size=chunk_size, flash_version=flash_version,
                                       resolve=resolve, tls=tls)
        self._listener: asyncio.Task[None] | None = None
        self._failure: RtmpClientError | None = None

    @property
    def url(self) -> RtmpUrl:
        return self._session.url

    async def connect(self) -> None:
        session = self._session
        try:
            await session.open()
            session.notify("releaseStream", session.url.name)
            session.notify("FCPublish", session.url.name)
            await session.create_stream()
            session.notify("publish", session.url.name, "live", stream_id=session.stream_id)
            await session.wait_status("NetStream.Publish.Start")
        except BaseException:
            await session.abort()
            raise
        self._listener = asyncio.create_task(self._listen())

    async def _listen(self) -> None:
        try:
            while (message := await self._session.read_message(None)) is not None:
                if message.type_id in (msg.MessageType.AMF0_COMMAND, msg.MessageType.AMF3_COMMAND):
                    self._session.check_status(self._session.parse_reply(message))  # the server cut us: why
            self._failure = RtmpClientError(f"{self.url.tc_url}: server closed the connection")
        except RtmpClientError as exc:
            self._failure = exc

    async def send(self, message: MediaMessage) -> None:
        """Send one message (data payloads get the `@setDataFrame` prefix servers expect)."""
        if self._failure is not None:
            raise self._failure
        session = self._session
        payload = message.payload
        if message.kind == "data":
            payload = amf0.encode("@setDataFrame") + payload
        type_id = TYPE_OF_KIND[message.kind]
        session.send(msg.RtmpMessage(type_id, session.stream_id, message.timestamp & 0xFFFFFFFF, payload))
        await session.drain()

    async def close(self) -> None:
        """Unpublish politely (best effort) and close the socket."""
        session = self._session
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        with contextlib.suppress(RtmpClientError, OSError):
            if session.is_open and self._failure is None:
                session.notify("FCUnpublish", session.url.name)
                session.notify("deleteStream", float(session.stream_id))
                await session.drain()
        await session.abort()

    async def __aenter__(self) -> RtmpPublishClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class RtmpPlayClient:
    """Plays one stream: `await connect()`, then iterate `media()` until the server ends it."""

    def __init__(self, url: str, *, timeout: float = 10.0, flash_version: str = "LNX 9,0,124,2",
                 tls: ssl.SSLContext | None = None) -> None:
        self._session = _ClientSession(url, timeout=timeout, chunk_size=4096, flash_version=flash_version, tls=tls)
        self._unwrap = TimestampUnwrapper()

    async def connect(self) -> None:
        session = self._session
        try:
            await session.open()
            await session.create_stream()
            session.notify("play", session.url.name, stream_id=session.stream_id)
            await session.wait_status("NetStream.Play.Start")
        except BaseException:
            await session.abort()
            raise

    async def media(self) -> AsyncIterator[MediaMessage]:
        """Media in arrival order; ends on Play.Stop or when the server closes the connection."""
        session = self._session
        while (message := await session.read_message(None)) is not None:
            kind = KIND_OF_TYPE.get(message.type_id)
            if kind == "data" and message.payload.startswith(_SAMPLE_ACCESS):
                continue  # server signalling, not stream data
            if kind is not None:
                yield MediaMessage(kind, self._unwrap(message.timestamp), message.payload)
            elif message.type_id == msg.MessageType.AMF0_COMMAND:
                info = session.check_status(session.parse_reply(message))
                if info is not None and info.get("code") == "NetStream.Play.Stop":
                    return

    async def close(self) -> None:
        await self._session.abort()

    async def __aenter__(self) -> RtmpPlayClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _describe(args: list[Any]) -> str:
    """`code: description` of the info object in an _error/onStatus."""
    info = next((arg for arg in args if isinstance(arg, dict)), {})
    return f"{info.get('code', 'unknown error')}: {info.get('description', '')}".rstrip(": ")
