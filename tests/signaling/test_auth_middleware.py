"""The auth middleware on a tiny aiohttp app: who gets through, what the refusals look like
on the wire (status, JSON reason, WWW-Authenticate, Retry-After), and which client address
the per-IP limit counts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from signaling.auth import RateLimiter, TokenVerifier, auth_middleware, check_owner, mint_token, require_admin
from signaling.auth.middleware import principal

SECRET = "middleware-secret-" + "z" * 32
ALICE = mint_token(SECRET, "alice")
BOB = mint_token(SECRET, "bob")
ADMIN = mint_token(SECRET, "root", role="admin")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_app(per_token: RateLimiter, per_ip: RateLimiter, trusted_proxies: Iterable[str]) -> web.Application:
    async def me(request: web.Request) -> web.Response:
        caller = principal(request)
        return web.json_response({"subject": caller.subject, "role": caller.role})

    async def admin(request: web.Request) -> web.Response:
        return web.json_response({"admin": require_admin(request).subject})

    async def thing(request: web.Request) -> web.Response:
        return web.json_response({"by": check_owner(request, request.match_info["owner"], "thing").subject})

    async def public(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def ws(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_str(principal(request).subject)
        await socket.close()
        return socket

    app = web.Application(middlewares=[auth_middleware(
        TokenVerifier(secret=SECRET), per_token=per_token, per_ip=per_ip,
        is_public=lambda r: r.path.startswith("/public"), trusted_proxies=trusted_proxies,
    )])
    app.router.add_get("/me", me)
    app.router.add_get("/admin", admin)
    app.router.add_get("/things/{owner}", thing)
    app.router.add_get("/public", public)
    app.router.add_get("/public/me", me)
    app.router.add_get("/ws", ws)
    return app


def serve(
    test: Callable[[TestClient], Awaitable[None]],
    per_token: RateLimiter | None = None,
    per_ip: RateLimiter | None = None,
    trusted_proxies: Iterable[str] = (),
) -> None:
    async def main() -> None:
        app = make_app(per_token or RateLimiter(10_000), per_ip or RateLimiter(10_000), trusted_proxies)
        async with TestClient(TestServer(app)) as client:
            await test(client)

    asyncio.run(main())


def frozen_clock() -> Callable[[], float]:
    return lambda: 1000.0


async def expect(response: aiohttp.ClientResponse, status: int, error: str | None = None) -> dict:
    body = await response.json()
    assert response.status == status, body
    if error is not None:
        assert body == {"error": error}
    return body


def test_public_route_needs_no_token() -> None:
    async def test(client: TestClient) -> None:
        await expect(await client.get("/public"), 200)
        # ... but a public route has no principal to act for.
        await expect(await client.get("/public/me"), 401, "missing bearer token")

    serve(test)


def test_unauthorized_variants() -> None:
    async def test(client: TestClient) -> None:
        response = await client.get("/me")
        await expect(response, 401, "missing bearer token")
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="swapcast"'

        response = await client.get("/me", headers=bearer(mint_token(SECRET, "alice", ttl_s=-60)))
        await expect(response, 401, "token expired")
        assert response.headers["WWW-Authenticate"] == (
            'Bearer realm="swapcast", error="invalid_token", error_description="token expired"'
        )

        forged = mint_token("other-secret-" + "q" * 32, "alice", role="admin")
        await expect(await client.get("/me", headers=bearer(forged)), 401, "token signature is invalid")
        await expect(await client.get("/me", headers=bearer("nonsense")), 401, "malformed token")
        await expect(
            await client.get("/me", headers={"Authorization": "Basic YWxpY2U6cHc="}),
            401, "Authorization must be 'Bearer <token>'",
        )
        await expect(await client.get("/me", headers={"Authorization": "Bearer "}), 401)

    serve(test)


def test_reason_cannot_inject_headers() -> None:
    """Reasons may echo token contents (a role); the challenge header stays one clean line."""
    evil = mint_token(SECRET, "alice", role='x"\r\nSet-Cookie: a=b')

    async def test(client: TestClient) -> None:
        response = await client.get("/me", headers=bearer(evil))
        await expect(response, 401)
        challenge = response.headers["WWW-Authenticate"]
        assert "Set-Cookie" not in response.headers
        assert challenge.count('"') == 6 and "\r" not in challenge and "\\" not in challenge

    serve(test)


def test_principal_reaches_the_handler() -> None:
    async def test(client: TestClient) -> None:
        assert await expect(await client.get("/me", headers=bearer(ALICE)), 200) == {"subject": "alice", "role": "user"}
        assert await expect(await client.get("/me", headers={"Authorization": f"bearer  {ADMIN}"}), 200) == {
            "subject": "root", "role": "admin",
        }

    serve(test)


def test_admin_routes_and_ownership() -> None:
    async def test(client: TestClient) -> None:
        await expect(await client.get("/admin", headers=bearer(ALICE)), 403, "admin role required")
        await expect(await client.get("/admin", headers=bearer(ADMIN)), 200)
        await expect(await client.get("/things/alice", headers=bearer(ALICE)), 200)
        # Another user's resource looks exactly like a missing one.
        await expect(await client.get("/things/bob", headers=bearer(ALICE)), 404, "no such thing")
        assert await expect(await client.get("/things/bob", headers=bearer(ADMIN)), 200) == {"by": "root"}

    serve(test)


def test_rate_limit_per_token_subject() -> None:
    async def test(client: TestClient) -> None:
        for _ in range(3):
            await expect(await client.get("/me", headers=bearer(ALICE)), 200)
        response = await client.get("/me", headers=bearer(ALICE))
        await expect(response, 429, "too many requests for this token")
        assert response.headers["Retry-After"] == "1"
        # Another token for the same subject shares the bucket; another subject does not.
        await expect(await client.get("/me", headers=bearer(mint_token(SECRET, "alice", ttl_s=60))), 429)
        await expect(await client.get("/me", headers=bearer(BOB)), 200)

    serve(test, per_token=RateLimiter(60, burst=3, clock=frozen_clock()))


def test_rate_limit_per_ip_covers_public_and_failed_requests() -> None:
    async def test(client: TestClient) -> None:
        await expect(await client.get("/public"), 200)
        await expect(await client.get("/me"), 401)  # refused requests still count
        response = await client.get("/me", headers=bearer(ALICE))
        await expect(response, 429, "too many requests from this address")
        assert response.headers["Retry-After"] == "10"  # 6 a minute: one every 10 s

    serve(test, per_ip=RateLimiter(6, burst=2, clock=frozen_clock()))


@pytest.mark.parametrize(
    ("trusted", "first", "second", "second_status"),
    [
        ((), "1.1.1.1", "2.2.2.2", 429),  # untrusted peer: X-Forwarded-For ignored
        (("127.0.0.1",), "1.1.1.1", "2.2.2.2", 200),  # trusted gateway: clients counted apart
        (("127.0.0.1",), "1.1.1.1", "1.1.1.1", 429),
        # The client may send its own X-Forwarded-For: only the entry our proxies appended counts.
        (("127.0.0.0/8", "10.0.0.0/8"), "6.6.6.6, 5.5.5.5, 10.1.2.3", "7.7.7.7, 5.5.5.5", 429),
        (("127.0.0.0/8", "10.0.0.0/8"), "5.5.5.5, 10.1.2.3", "5.5.5.6, 10.1.2.3", 200),
        # A dual-stack proxy writes IPv4 clients and hops mapped: one client, one IPv4 CIDR.
        (("127.0.0.1",), "1.1.1.1", "::ffff:1.1.1.1", 429),
        (("127.0.0.0/8", "10.0.0.0/8"), "5.5.5.5, ::ffff:10.1.2.3", "5.5.5.5", 429),
        (("127.0.0.0/8", "10.0.0.0/8"), "5.5.5.5, ::ffff:10.1.2.3", "5.5.5.6, ::ffff:10.1.2.3", 200),
        # An IPv6 client owns its whole /64.
        (("127.0.0.1",), "2001:db8:1:2::1", "2001:db8:1:2:ffff::2", 429),
        (("127.0.0.1",), "2001:db8:1:2::1", "2001:db8:1:3::1", 200),
    ],
    ids=["untrusted", "trusted-distinct", "trusted-same", "spoofed-left-entries", "multi-hop",
         "mapped-client", "mapped-proxy-same", "mapped-proxy-distinct", "ipv6-same-64", "ipv6-other-64"],
)
def test_forwarded_for_only_from_trusted_proxies(
    trusted: tuple[str, ...], first: str, second: str, second_status: int
) -> None:
    async def test(client: TestClient) -> None:
        await expect(await client.get("/public", headers={"X-Forwarded-For": first}), 200)
        await expect(await client.get("/public", headers={"X-Forwarded-For": second}), second_status)

    serve(test, per_ip=RateLimiter(60, burst=1, clock=frozen_clock()), trusted_proxies=trusted)


def test_query_token_only_on_websocket_upgrade() -> None:
    async def test(client: TestClient) -> None:
        async with client.ws_connect(f"/ws?token={ALICE}") as socket:
            assert await socket.receive_str() == "alice"
        await expect(
            await client.get(f"/me?token={ALICE}"), 401,
            "?token= is accepted only on WebSocket upgrades; use Authorization: Bearer",
        )
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect("/ws")
        assert refused.value.status == 401
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(f"/ws?token={mint_token(SECRET, 'alice', ttl_s=-60)}")
        assert refused.value.status == 401

    serve(test)
