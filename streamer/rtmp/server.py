"""The RTMP listener: accepts TCP connections and runs one `RtmpConnection` per client.

Each connection is its own task, so a peer that stalls or sends garbage only ever takes
itself down; `close()` cancels and awaits every connection so no task outlives the server.
A connection must publish or play within `setup_timeout` seconds, and one address holds at
most `max_pending_per_ip` connections that have not yet: idle sockets cannot pile up (each
is a file descriptor of the node), while publishers and players do not count.
With a TLS context it also listens for RTMPS on `tls_port`: the same connections after a
TLS handshake, which asyncio runs per connection (a failed one ends only that client)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import Counter

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
        self._tls_server: asyncio.Server | None = None
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
            self._tls_server = await asyncio.start_server(
                self._accept, self._host, self._requested_tls_port, ssl=self._tls,
                ssl_handshake_timeout=self._stall_timeout,
            )
            log.info("rtmps: listening on %s:%d", self._host, self.tls_port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if self._pending_by_ip[address] >= self._max_pending_per_ip:
            log.info("rtmp %s: refused: %d connections of this address have not published or played yet",
                     address, self._pending_by_ip[address])
            writer.transport.abort()
            return
        self._pending_by_ip[address] += 1
        counted = True

        def started() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._pending_by_ip[address] -= 1
                if not self._pending_by_ip[address]:
                    del self._pending_by_ip[address]

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
