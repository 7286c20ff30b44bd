"""A TLS listener that counts a connection from its TCP accept, not from its finished
handshake, for the per-client bounds of the HTTPS and RTMPS listeners.

``create_server(ssl=...)`` tells the protocol of a connection only once its handshake is
done, so a client opening TLS connections that never finish the handshake held sockets no
bound counted; and ``start_tls`` called from the protocol loses the ClientHello under
uvloop, which starts reading before the protocol can pause it. Here the listener accepts
TCP itself, asks ``admit`` (with the peer's address) for the connection's protocol, already
counted, or None to reset it at once, and runs the handshake with
``connect_accepted_socket``; a handshake that fails, stalls past its timeout or is cut by
``close()`` calls the protocol's ``abandon()``, which frees its place."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from abc import abstractmethod
from collections.abc import Callable
from ssl import SSLContext

log = logging.getLogger(__name__)


class CountedConnection(asyncio.BaseProtocol):
    """A connection's protocol that a bound already counts."""

    @abstractmethod
    def abandon(self) -> None:
        """Its handshake failed: it never started, and frees its place. Idempotent; once
        started, its own ``connection_lost`` frees the place."""


Admit = Callable[[str], CountedConnection | None]


async def bind_sockets(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on every address ``host`` resolves to (all of them for None), as
    ``create_server`` makes them."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class CountedTlsListener(asyncio.AbstractServer):
    """Serves TLS on ``sockets``; see the module's docstring."""

    def __init__(self, sockets: list[socket.socket], tls: SSLContext, handshake_timeout_s: float, admit: Admit,
                 name: str) -> None:
        self._sockets = sockets
        self._tls, self._handshake_timeout_s, self._admit, self._name = tls, handshake_timeout_s, admit, name
        self._loop = asyncio.get_running_loop()
        self._accepting = [self._loop.create_task(self._accept(sock)) for sock in sockets]
        self._handshakes: set[asyncio.Task[None]] = set()

    @classmethod
    async def bind(cls, host: str | None, port: int, backlog: int, tls: SSLContext, handshake_timeout_s: float,
                   admit: Admit, name: str) -> CountedTlsListener:
        return cls(await bind_sockets(host, port, backlog), tls, handshake_timeout_s, admit, name)

    async def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, peer = await self._loop.sock_accept(listener)
            except OSError as exc:  # out of file descriptors: let some close, as asyncio's servers do
                log.warning("%s: accept failed (%s); pausing accepts for 1 s", self._name, exc)
                await asyncio.sleep(1.0)
                continue
            protocol = self._admit(str(peer[0]) if isinstance(peer, tuple) and peer else "")
            if protocol is None:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, as abort() sends
                conn.close()
                continue
            task = self._loop.create_task(self._handshake(conn, protocol))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, conn: socket.socket, protocol: CountedConnection) -> None:
        try:
            await self._loop.connect_accepted_socket(lambda: protocol, conn, ssl=self._tls,
                                                     ssl_handshake_timeout=self._handshake_timeout_s)
        except (OSError, asyncio.CancelledError):  # SSLError, a reset, the handshake timeout; closing
            conn.close()
            protocol.abandon()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def close(self) -> None:
        for task in (*self._accepting, *self._handshakes):
            task.cancel()
        for sock in self._sockets:
            sock.close()
        self._sockets = []

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._accepting, *self._handshakes, return_exceptions=True)

    def is_serving(self) -> bool:
        return bool(self._sockets)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop
