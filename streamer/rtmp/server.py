"""The RTMP listener: accepts TCP connections and runs one `RtmpConnection` per client.

Each connection is its own task, so a peer that stalls or sends garbage only ever takes
itself down; `close()` cancels and awaits every connection so no task outlives the server.
A connection must publish or play within `setup_timeout` seconds, and one client (an IPv4
address, ``::ffff:``-mapped or not, or an IPv6 /64: `signaling.client_address`) holds at
most `max_pending_per_ip` connections that have not yet: idle sockets cannot pile up (each
is a file descriptor of the node), while publishers and players do not count.
With a TLS context it also listens for RTMPS on `tls_port`: the same connections after a
TLS handshake (a failed one ends only that client), counted from the TCP accept, so
handshakes that never finish hold places too (`signaling.counted_tls`)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

from signaling.client_address import client_key
from signaling.counted_tls import CountedConnection, CountedTlsListener
from streamer.rtmp.connection import RtmpConnection
from streamer.rtmp.handler import MediaMessage, Player, Publisher, PublishRejected, RtmpHandler

__all__ = ["MediaMessage", "Player", "PublishRejected", "Publisher", "RtmpHandler", "RtmpServer"]

log = logging.getLogger(__name__)


class RtmpServer:
    """Serves publishers and players for `handler` on host:port (port 0 picks a free one)."""

    def __init__(
        self,
        handler: RtmpHandler,
        *,
        host: str = "127.0.0.1",
        port: int = 1935,
        stall_timeout: float = 5.0,
        chunk_size: int = 4096,
        queue_size: int = 512,
        tls: ssl.SSLContext | None = None,
        tls_port: int = 0,
        setup_timeout: float = 10.0,
        max_pending_per_ip: int = 32,
    ) -> None:
        self._handler = handler
        self._setup_timeout = setup_timeout
        self._max_pending_per_ip = max_pending_per_ip
        self._pending_by_ip: Counter[str] = Counter()
        self._tls = tls
        self._requested_tls_port = tls_port
        self._tls_server: CountedTlsListener | None = None
        self._host = host
        self._requested_port = port
        self._stall_timeout = stall_timeout
        self._chunk_size = chunk_size
        self._queue_size = queue_size
        self._server: asyncio.Server | None = None
        self._closing = False
        self._connections: dict[asyncio.Task[None], RtmpConnection] = {}

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("RtmpServer is not started")
        return self._server.sockets[0].getsockname()[1]

    @property
    def tls(self) -> bool:
        """Whether it serves RTMPS too."""
        return self._tls is not None

    @property
    def tls_port(self) -> int | None:
        """The bound RTMPS port; None without a TLS context."""
        if self._tls_server is None or not self._tls_server.sockets:
            return None
        return self._tls_server.sockets[0].getsockname()[1]

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self._host, self._requested_port)
        log.info("rtmp: listening on %s:%d", self._host, self.port)
        if self._tls is not None:
            self._tls_server = await CountedTlsListener.bind(
                self._host, self._requested_tls_port, 100, self._tls, self._stall_timeout, self._admit_tls, "rtmps")
            log.info("rtmps: listening on %s:%d", self._host, self.tls_port)

    def _count_pending(self, address: str) -> str | None:
        """The key a new connection of ``address`` is counted under, None past the bound."""
        key = client_key(address)
        if self._pending_by_ip[key] >= self._max_pending_per_ip:
            log.info("rtmp %s: refused: %d connections of this client have not published or played yet",
                     key, self._pending_by_ip[key])
            return None
        self._pending_by_ip[key] += 1
        return key

    def _uncount_pending(self, key: str) -> None:
        self._pending_by_ip[key] -= 1
        if not self._pending_by_ip[key]:
            del self._pending_by_ip[key]

    def _admit_tls(self, address: str) -> _CountedStream | None:
        key = self._count_pending(address)
        if key is None:
            return None
        return _CountedStream(lambda reader, writer: self._accept(reader, writer, counted_as=key),
                              lambda: self._uncount_pending(key))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      counted_as: str | None = None) -> None:
        """One connection; ``counted_as``: the key RTMPS counted it under at its accept."""
        if counted_as is None:
            peer = writer.get_extra_info("peername")
            counted_as = self._count_pending(str(peer[0]) if isinstance(peer, tuple) else str(peer))
            if counted_as is None:
                writer.transport.abort()
                return
        key, counted = counted_as, True

        def started() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._uncount_pending(key)

        connection = RtmpConnection(
            reader,
            writer,
            self._handler,
            stall_timeout=self._stall_timeout,
            chunk_size=self._chunk_size,
            queue_size=self._queue_size,
            setup_timeout=self._setup_timeout,
            on_started=started,
        )
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = connection
        try:
            await connection.run()
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # Cancelled by close(): end normally, since Python 3.11's stream protocol callback
            # calls task.exception() and would log a spurious CancelledError traceback.
        finally:
            started()
            self._connections.pop(task, None)

    async def close(self, grace: float = 2.0) -> None:
        """Stop listening and close every connection; handlers get `grace` seconds to return
        (their media ends, `wait_closed` fires) before their tasks are cancelled."""
        self._closing = True
        for server in (self._server, self._tls_server):
            if server is not None:
                server.close()
        for connection in self._connections.values():
            connection.close_now("server closing")
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for server in (self._server, self._tls_server):
            if server is not None:
                await server.wait_closed()
        self._server = self._tls_server = None

    async def __aenter__(self) -> RtmpServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class _CountedStream(asyncio.StreamReaderProtocol, CountedConnection):
    """An RTMPS connection's stream protocol, counted as pending from its TCP accept;
    ``uncount`` frees its place if its handshake fails (once it starts, ``_accept`` does)."""

    def __init__(self, serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]],
                 uncount: Callable[[], None]) -> None:
        super().__init__(asyncio.StreamReader(), serve)
        self._uncount: Callable[[], None] | None = uncount

    def abandon(self) -> None:
        if self._uncount is not None:
            self._uncount()
            self._uncount = None
