"""Bounds on what one client address can hold on the HTTP listener (node or gateway).

aiohttp alone keeps a connection that never finishes its request headers until its 75 s
keep-alive timeout, and accepts as many as the file-descriptor limit allows, so one address
trickling headers (slowloris) or opening idle sockets could lock every other client out.
Two bounds, enforced on the transport, before any request exists:

- at most ``max_per_ip`` open connections per client (an IPv4 address, ``::ffff:``-mapped
  or not, or an IPv6 /64: ``signaling.client_address``), TLS handshakes in progress
  included; one more is aborted at once, before any handshake (logged at most once per
  client per minute). Trusted proxies (the gateway in front of its nodes, a
  TLS-terminating proxy) carry every client's connections and are exempt.
- a request's headers must arrive within ``header_timeout_s`` of the connection opening or,
  on a kept-alive connection, of the request's first byte; else ``408`` and close. Only the
  header phase is timed: a WebSocket, a long WHEP answer or a 2 GB upload that is being
  handled is not. On HTTPS the TLS handshake gets the same bound, and is counted from the
  TCP accept (``signaling.counted_tls``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from ssl import SSLContext
from typing import cast

from aiohttp import web
from aiohttp.typedefs import Handler

from signaling.client_address import client_key, in_networks, parse_ip, parse_networks
from signaling.counted_tls import CountedConnection, CountedTlsListener

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
REFUSAL_LOG_INTERVAL_S = 60.0


@dataclass(frozen=True)
class ConnectionLimits:
    max_per_ip: int = 64
    header_timeout_s: float = 10.0
    exempt: tuple[str, ...] = ()  # addresses or CIDRs (trusted proxies) with no per-address cap


class ConnectionGuard:
    """Counts open connections per address and times each request's header phase. Wire it
    twice: ``middleware`` on the app (it says when a request's headers are in) and
    :class:`GuardedSite` as the listener (it wraps each connection)."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self._exempt = parse_networks(limits.exempt)
        self._open: Counter[str] = Counter()
        self._by_transport: dict[asyncio.BaseTransport, GuardedConnection] = {}
        self._last_refusal_log: dict[str, float] = {}

    def open_connections(self, address: str) -> int:
        """Connections (handshaking ones included) held by the client ``address`` is part of."""
        return self._open[client_key(address)]

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: GuardedConnection(self, factory)

    def wrap_admitted(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[str], GuardedConnection | None]:
        """For a :class:`CountedTlsListener`: a peer address's connection, counted, or None at the cap."""

        def admit(address: str) -> GuardedConnection | None:
            key = self._admit(address)
            return GuardedConnection(self, factory, key) if key is not None else None

        return admit

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = self._by_transport.get(request.transport) if request.transport else None
        if connection is None:  # a listener without the guard (tests' own servers)
            return await handler(request)
        connection.request_started()
        try:
            return await handler(request)
        finally:
            connection.request_ended()

    def _admit(self, address: str) -> str | None:
        """The key ``address`` is counted under, or None when its client is at the cap."""
        key = client_key(address)
        if not self._is_exempt(address) and self._open[key] >= self.limits.max_per_ip:
            self._log_refusal(key)
            return None
        self._open[key] += 1
        return key

    def _release(self, key: str) -> None:
        self._open[key] -= 1
        if self._open[key] <= 0:
            del self._open[key]

    def _is_exempt(self, address: str) -> bool:
        if parse_ip(address) is None:  # no IP peer (a Unix socket): nothing to count by
            return True
        return in_networks(address, self._exempt)

    def _log_refusal(self, address: str) -> None:
        now = time.monotonic()
        if now - self._last_refusal_log.get(address, -REFUSAL_LOG_INTERVAL_S) >= REFUSAL_LOG_INTERVAL_S:
            self._last_refusal_log[address] = now
            log.warning("%s holds %d HTTP connections (server.max_connections_per_ip): closing more at once "
                        "(logged once a minute per address)", address, self.limits.max_per_ip)
        if len(self._last_refusal_log) > 10_000:  # forget old addresses: the log is a courtesy, not state
            self._last_refusal_log = {a: t for a, t in self._last_refusal_log.items()
                                      if now - t < REFUSAL_LOG_INTERVAL_S}


class GuardedConnection(asyncio.Protocol, CountedConnection):
    """aiohttp's protocol for one connection, behind the guard's two bounds. Everything is
    passed through to it; a refused connection never reaches it. ``admitted_as``: the key
    the guard already counted it under, at its TCP accept (HTTPS)."""

    def __init__(self, guard: ConnectionGuard, factory: Callable[[], asyncio.Protocol],
                 admitted_as: str | None = None) -> None:
        self._guard = guard
        self._inner = factory()
        self._transport: asyncio.Transport | None = None
        self._key = admitted_as  # what the guard counts this connection under, while it does
        self._in_request = False
        self._answered = False  # a request has been handled here: a 408 could land mid-response
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        if self._key is None:
            peer = transport.get_extra_info("peername")
            self._key = self._guard._admit(str(peer[0]) if isinstance(peer, tuple) and peer else "")
            if self._key is None:
                transport.abort()
                return
        self._transport = transport
        self._guard._by_transport[transport] = self
        self._inner.connection_made(transport)
        self._arm_header_timer()

    def abandon(self) -> None:
        """Its TLS handshake failed: it never reached aiohttp, and frees its place."""
        if self._key is not None:
            self._guard._release(self._key)
            self._key = None

    def connection_lost(self, exc: BaseException | None) -> None:
        self.abandon()
        if self._transport is None:  # refused
            return
        self._cancel_header_timer()
        self._guard._by_transport.pop(self._transport, None)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._in_request and self._header_timer is None:
            self._arm_header_timer()  # a kept-alive connection's next request begins
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def request_started(self) -> None:
        self._in_request = True
        self._cancel_header_timer()

    def request_ended(self) -> None:
        self._in_request = False
        self._answered = True

    def _arm_header_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._header_timer = loop.call_later(self._guard.limits.header_timeout_s, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._in_request or self._transport is None or self._transport.is_closing():
            return
        if not self._answered:
            with suppress(Exception):
                self._transport.write(REQUEST_TIMEOUT)
        self._transport.close()  # close, not abort: the 408 is flushed first


class GuardedSite(web.TCPSite):
    """``web.TCPSite`` whose connections pass through a :class:`ConnectionGuard`."""

    def __init__(self, runner: web.BaseRunner, host: str | None, port: int, *, guard: ConnectionGuard,
                 ssl_context: SSLContext | None = None) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        if self._ssl_context is None:
            self._server = await asyncio.get_running_loop().create_server(
                self._guard.wrap(server), self._host, self._port, backlog=self._backlog)
        else:
            self._server = await CountedTlsListener.bind(
                self._host, self._port, self._backlog, self._ssl_context, self._guard.limits.header_timeout_s,
                self._guard.wrap_admitted(server), "https")
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port


def guard_app(app: web.Application, limits: ConnectionLimits) -> ConnectionGuard:
    """A guard for ``app``: its middleware goes first, before auth and rate limits."""
    guard = ConnectionGuard(limits)
    app.middlewares.insert(0, guard.middleware)
    return guard


def run_guarded(app: web.Application, guard: ConnectionGuard, *, host: str, port: int,
                ssl_context: SSLContext | None, announce: Callable[[], None] | None = None,
                **runner_kwargs: object) -> None:
    """``web.run_app`` on a :class:`GuardedSite`: SIGINT/SIGTERM exit gracefully (the app's
    shutdown and cleanup hooks run), ``announce`` is called once the listener is up."""

    async def serve() -> None:
        runner = web.AppRunner(app, handle_signals=True, **runner_kwargs)
        await runner.setup()
        try:
            await GuardedSite(runner, host, port, guard=guard, ssl_context=ssl_context).start()
            if announce is not None:
                announce()
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    loop = asyncio.new_event_loop()
    main = loop.create_task(serve())
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        try:
            if not main.done():
                main.cancel()
                with suppress(asyncio.CancelledError):
                    loop.run_until_complete(main)
        finally:
            leftover = asyncio.all_tasks(loop)
            for task in leftover:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
