"""The events WebSocket lists the caller's sessions every second (on a gateway, by asking
every node): one user holding hundreds of them multiplied that work without bound, since
the rate limit counts only the upgrade request. One user holds a bounded number at once."""

from __future__ import annotations

import asyncio

from aiohttp import WSCloseCode, WSMsgType, WSServerHandshakeError, web
from aiohttp.test_utils import TestClient, TestServer

from signaling.auth import Principal, TokenVerifier, mint_token
from signaling.auth.middleware import PRINCIPAL_KEY
from signaling.events import EVENTS_PATH, MAX_SOCKETS_PER_USER, add_event_routes

SECRET = "events-test-" + "s" * 32


def test_one_user_holds_a_bounded_number_of_event_sockets_and_others_are_not_affected():
    listings = 0

    async def list_sessions(request: web.Request) -> list[dict]:
        nonlocal listings
        listings += 1
        return []

    @web.middleware
    async def caller_from_header(request: web.Request, handler):
        request[PRINCIPAL_KEY] = Principal(request.headers["X-Test-User"], "user")
        return await handler(request)

    async def scenario() -> tuple[int, str, bool, bool]:
        app = web.Application(middlewares=[caller_from_header])
        add_event_routes(app, list_sessions, None, interval_s=30)
        async with TestClient(TestServer(app)) as client:
            alice = {"X-Test-User": "alice"}
            held = [await client.ws_connect(EVENTS_PATH, headers=alice) for _ in range(MAX_SOCKETS_PER_USER)]
            try:
                await client.ws_connect(EVENTS_PATH, headers=alice)
                refused_status, reason = 0, ""
            except WSServerHandshakeError as exc:
                refused_status, reason = exc.status, exc.message
            bob = await client.ws_connect(EVENTS_PATH, headers={"X-Test-User": "bob"})
            bob_ok = (await bob.receive_json(timeout=5))["type"] == "snapshot"
            await held[0].close()
            await asyncio.sleep(0.1)
            again = await client.ws_connect(EVENTS_PATH, headers=alice)
            alice_again = (await again.receive_json(timeout=5))["type"] == "snapshot"
            for ws in [*held[1:], bob, again]:
                await ws.close()
            return refused_status, reason, bob_ok, alice_again

    status, _, bob_ok, alice_again = asyncio.run(scenario())
    assert status == 429
    assert bob_ok and alice_again


def test_an_events_socket_closes_when_its_token_expires():
    """Round 3: the socket kept streaming sessions after its token expired, while a REST
    call with the same token answered 401. The socket now lives as long as its token."""
    verifier = TokenVerifier(secret=SECRET, leeway_s=0)

    @web.middleware
    async def verified(request: web.Request, handler):
        request[PRINCIPAL_KEY] = verifier.verify(request.query["token"])
        return await handler(request)

    async def list_sessions(request: web.Request) -> list[dict]:
        return [{"id": "s1", "owner": "alice"}]

    async def scenario():
        app = web.Application(middlewares=[verified])
        add_event_routes(app, list_sessions, None, interval_s=0.2)
        async with TestClient(TestServer(app)) as client:
            token = mint_token(SECRET, "alice", ttl_s=2)
            ws = await client.ws_connect(EVENTS_PATH, params={"token": token})
            snapshots = 0
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    snapshots += 1
                if snapshots > 100:  # never closed: the old behaviour
                    break
            return snapshots, ws.close_code, ws.closed and ws.exception()

    snapshots, code, _ = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert 1 <= snapshots <= 100 and code == WSCloseCode.POLICY_VIOLATION
