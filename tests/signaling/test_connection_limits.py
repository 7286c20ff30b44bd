"""The HTTP listener's bounds per client address, on real sockets against a real aiohttp app:
the connection cap (a second loopback address, 127.0.0.2, is another client; trusted
proxies are exempt) and the header timeout (slowloris), which must spare WebSockets and
request bodies that are still arriving."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from signaling.connection_limits import ConnectionGuard, ConnectionLimits, GuardedSite, guard_app
from signaling.tls import server_context
from tls_testkit import STALLED_CLIENT_HELLO, ThrowawayCA, received_until_closed

GET = b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"


def _app() -> web.Application:
    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def upload(request: web.Request) -> web.Response:
        return web.Response(text=str(len(await request.read())))

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            await ws.send_str(message.data)
        return ws

    app = web.Application()
    app.router.add_get("/hello", hello)
    app.router.add_post("/upload", upload)
    app.router.add_get("/ws", echo)
    return app


@contextlib.asynccontextmanager
async def _serve_guarded(limits: ConnectionLimits, tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[int, ConnectionGuard]]:
    app = _app()
    guard = guard_app(app, limits)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", 0, guard=guard, ssl_context=tls)
    await site.start()
    try:
        yield site.port, guard
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def _serve(limits: ConnectionLimits, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    async with _serve_guarded(limits, tls) as (port, _):
        yield port


async def _connect(port: int, source: str = "127.0.0.1", tls: ssl.SSLContext | None = None):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0), ssl=tls)


async def _get(port: int, source: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await _connect(port, source, tls)
    writer.write(GET)
    head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    return head.split(b"\r\n")[0]


def test_one_address_past_its_cap_is_closed_while_another_is_served():
    async def scenario():
        async with _serve(ConnectionLimits(max_per_ip=3, header_timeout_s=60)) as port:
            held = [await _connect(port) for _ in range(3)]
            reader, _ = await _connect(port)
            async with asyncio.timeout(10):
                refused = await received_until_closed(reader)
            other = await _get(port, source="127.0.0.2")
            held[0][1].write(GET)  # the held ones still work
            first = (await held[0][0].readuntil(b"\r\n\r\n")).split(b"\r\n")[0]
            for _, writer in held:
                writer.close()
            return refused, other, first

    refused, other, first = asyncio.run(scenario())
    assert refused == b""
    assert other == b"HTTP/1.1 200 OK"
    assert first == b"HTTP/1.1 200 OK"


def test_a_closed_connection_frees_its_place():
    async def scenario():
        async with _serve(ConnectionLimits(max_per_ip=1, header_timeout_s=60)) as port:
            first = await _get(port)
            await asyncio.sleep(0.2)  # the server sees the close
            return first, await _get(port)

    assert asyncio.run(scenario()) == (b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK")


def test_trusted_proxies_are_not_capped():
    async def scenario():
        async with _serve(ConnectionLimits(max_per_ip=2, header_timeout_s=60, exempt=("127.0.0.0/30",))) as port:
            held = [await _connect(port) for _ in range(4)]
            answer = await _get(port)
            for _, writer in held:
                writer.close()
            return answer

    assert asyncio.run(scenario()) == b"HTTP/1.1 200 OK"


def test_trickled_headers_get_408_and_close_while_others_are_served():
    async def scenario():
        async with _serve(ConnectionLimits(max_per_ip=8, header_timeout_s=1.0)) as port:
            reader, writer = await _connect(port)

            async def trickle():
                with contextlib.suppress(ConnectionError):
                    for byte in b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                        writer.write(bytes([byte]))
                        await asyncio.sleep(0.1)

            trickling = asyncio.create_task(trickle())
            normal = await _get(port)
            async with asyncio.timeout(10):
                received = await received_until_closed(reader)
            trickling.cancel()
            return normal, received

    normal, received = asyncio.run(scenario())
    assert normal == b"HTTP/1.1 200 OK"
    assert received.startswith(b"HTTP/1.1 408 Request Timeout")


def test_a_silent_connection_is_closed_after_the_header_timeout():
    async def scenario():
        async with _serve(ConnectionLimits(max_per_ip=8, header_timeout_s=0.5)) as port:
            reader, _ = await _connect(port)
            async with asyncio.timeout(10):
                return await received_until_closed(reader)

    assert asyncio.run(scenario()).startswith(b"HTTP/1.1 408")


def test_a_websocket_and_a_slow_body_outlive_the_header_timeout():
    async def scenario():
        async with _serve(ConnectionLimits(max_per_ip=8, header_timeout_s=0.5)) as port:
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                    await asyncio.sleep(1.5)
                    await ws.send_str("still here")
                    echoed = (await ws.receive(timeout=5)).data

                async def slow_body():
                    for _ in range(6):
                        yield b"x" * 1000
                        await asyncio.sleep(0.25)

                async with session.post(f"http://127.0.0.1:{port}/upload", data=slow_body()) as response:
                    uploaded = await response.text()
            return echoed, uploaded

    assert asyncio.run(scenario()) == ("still here", "6000")


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory):
    ca = ThrowawayCA(tmp_path_factory.mktemp("pki"))
    leaf = ca.issue("node")
    client = ssl.create_default_context(cafile=str(ca.path))
    return server_context(leaf.cert, leaf.key), client


def test_https_listener_caps_and_times_a_stalled_handshake(tls_pair):
    server_tls, client_tls = tls_pair

    async def scenario():
        async with _serve(ConnectionLimits(max_per_ip=2, header_timeout_s=0.5), tls=server_tls) as port:
            served = await _get(port, tls=client_tls)
            reader, _ = await _connect(port)  # plain TCP: the handshake never starts
            async with asyncio.timeout(10):
                stalled = await received_until_closed(reader)
            held = [await _connect(port, tls=client_tls) for _ in range(2)]
            with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
                extra_reader, extra_writer = await _connect(port, tls=client_tls)
                extra_writer.write(GET)
                await extra_reader.readuntil(b"\r\n\r\n")
            other = await _get(port, source="127.0.0.2", tls=client_tls)
            for _, writer in held:
                writer.close()
            return served, stalled, other

    served, stalled, other = asyncio.run(scenario())
    assert served == b"HTTP/1.1 200 OK"
    assert stalled == b""
    assert other == b"HTTP/1.1 200 OK"


def test_tls_handshakes_in_progress_count_against_the_cap_and_time_out(tls_pair):
    """Connections that open TLS and never finish the handshake hold places: past the cap
    one more is cut at once (before any handshake), another client is served meanwhile, and
    the stalled ones are closed after the timeout, freeing their places."""
    server_tls, client_tls = tls_pair

    async def scenario():
        limits = ConnectionLimits(max_per_ip=3, header_timeout_s=1.5)
        async with _serve_guarded(limits, server_tls) as (port, guard):
            stalled = [await _connect(port) for _ in range(3)]
            for _, writer in stalled:
                writer.write(STALLED_CLIENT_HELLO)
            await asyncio.sleep(0.2)
            held_during_handshakes = guard.open_connections("127.0.0.1")
            reader, writer = await _connect(port)
            writer.write(STALLED_CLIENT_HELLO)
            async with asyncio.timeout(1.0):  # well before the handshake timeout: refused at accept
                refused = await received_until_closed(reader)
            other = await _get(port, source="127.0.0.2", tls=client_tls)
            async with asyncio.timeout(10):
                cut = [await received_until_closed(r) for r, _ in stalled]
            await asyncio.sleep(0.2)
            freed = guard.open_connections("127.0.0.1")
            again = await _get(port, tls=client_tls)
            return held_during_handshakes, refused, other, cut, freed, again

    held, refused, other, cut, freed, again = asyncio.run(scenario())
    assert held == 3
    assert refused == b""
    assert other == b"HTTP/1.1 200 OK"
    assert cut == [b"", b"", b""]
    assert freed == 0
    assert again == b"HTTP/1.1 200 OK"


def test_an_ipv4_mapped_peer_is_counted_and_exempted_as_its_ipv4_address():
    """A dual-stack listener sees 127.0.0.1 as ::ffff:127.0.0.1: it shares the cap with the
    plain form, and an IPv4 CIDR in the trusted proxies covers it."""

    async def scenario(exempt: tuple[str, ...]):
        app = _app()
        guard = guard_app(app, ConnectionLimits(max_per_ip=2, header_timeout_s=60, exempt=exempt))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::ffff:127.0.0.1", 0))
        server = await asyncio.get_running_loop().create_server(guard.wrap(runner.server), sock=sock)
        port = sock.getsockname()[1]
        try:
            held = [await _connect(port) for _ in range(2)]
            await asyncio.sleep(0.1)
            counted = guard.open_connections("127.0.0.1"), guard.open_connections("::ffff:127.0.0.1")
            reader, writer = await _connect(port)
            writer.write(GET)
            async with asyncio.timeout(10):
                try:
                    third = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0]
                except (asyncio.IncompleteReadError, ConnectionError):
                    third = b""  # closed unanswered
            writer.close()
            for _, w in held:
                w.close()
            return counted, third
        finally:
            server.close()
            await runner.cleanup()

    assert asyncio.run(scenario(())) == ((2, 2), b"")
    assert asyncio.run(scenario(("127.0.0.0/8",)))[1] == b"HTTP/1.1 200 OK"


def test_a_guard_folds_mapped_and_ipv6_addresses_into_one_client():
    guard = ConnectionGuard(ConnectionLimits(max_per_ip=2, exempt=("10.0.0.0/8",)))
    assert guard._is_exempt("::ffff:10.0.0.1") and guard._is_exempt("10.1.2.3")
    assert not guard._is_exempt("::ffff:11.0.0.1")
    assert guard._admit("::ffff:192.0.2.7") == "192.0.2.7" and guard._admit("192.0.2.7") == "192.0.2.7"
    assert guard._admit("::ffff:192.0.2.7") is None  # the third connection of one client
    assert guard._admit("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert guard._admit("2001:db8:1:2:ffff::9%eth0") == "2001:db8:1:2::/64"
    assert guard._admit("2001:db8:1:2:aaaa::1") is None  # one /64, one subscriber
    assert guard._admit("2001:db8:1:3::1") == "2001:db8:1:3::/64"
