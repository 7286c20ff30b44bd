"""``GET /api/v1/events``: the WebSocket of session events and live stats, on a real node."""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
from aiohttp import WSCloseCode, WSMsgType
from aiohttp.test_utils import TestServer

sys.path.insert(0, str(Path(__file__).resolve().parent / "webrtc"))  # the node test helpers

from webrtc_harness import TEST_SECRET, bearer, node_config, run

from signaling.auth import mint_token
from swapcast.app import build_app


async def next_message(ws: aiohttp.ClientWebSocketResponse, kind: str, timeout: float = 5.0) -> dict:
    """The next message of type ``kind`` (snapshots in between are skipped)."""
    while True:
        message = await ws.receive_json(timeout=timeout)
        if message["type"] == kind:
            return message


def test_events_snapshots_changes_visibility_and_shutdown(engine, tmp_path):
    admin = bearer("ops", role="admin")

    async def scenario() -> None:
        server = TestServer(build_app(node_config(tmp_path), engine=engine), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as http:
                await exercise(server, http)
        finally:
            await server.close()

    async def exercise(server: TestServer, http: aiohttp.ClientSession) -> None:
        url = server.make_url("/api/v1/events")
        plain = await http.get(url, headers=admin)  # not an upgrade
        assert plain.status == 426 and plain.headers["Upgrade"] == "websocket"
        assert "WebSocket" in (await plain.json())["error"]
        assert (await http.get(url)).status == 401  # no token

        ops = await http.ws_connect(url, headers=admin)
        first = await ops.receive_json(timeout=5.0)
        assert first["type"] == "snapshot" and first["sessions"] == []
        assert [node["state"] for node in first["nodes"]] == ["ready"]  # admins see the nodes
        # a user, with the token in the query as browsers send it: no nodes, only her sessions
        alice = await http.ws_connect(url.with_query(token=mint_token(TEST_SECRET, "alice")))
        assert await alice.receive_json(timeout=5.0) == {"type": "snapshot", "sessions": []}

        created = await http.post(server.make_url("/api/v1/sessions"), json={"face_id": "astronaut"}, headers=admin)
        session_id = (await created.json())["session_id"]
        started = (await next_message(ops, "session_started"))["session"]
        assert started["id"] == session_id and started["state"] == "placed" and started["owner"] == "ops"
        assert [s["id"] for s in (await next_message(ops, "snapshot"))["sessions"]] == [session_id]
        assert (await next_message(alice, "snapshot"))["sessions"] == []
        await http.delete(server.make_url(f"/api/v1/sessions/{session_id}"), headers=admin)
        assert (await next_message(ops, "session_ended"))["session"]["id"] == session_id

        await server.close()  # shutdown closes every socket with 1001
        while (closing := await ops.receive(timeout=5.0)).type == WSMsgType.TEXT:
            pass  # snapshots sent before the close
        assert closing.type == WSMsgType.CLOSE and closing.data == WSCloseCode.GOING_AWAY
        await alice.close()

    run(scenario())
