"""The gateway's HTTP side against in-process fake nodes: small aiohttp apps on loopback that
record every request and answer like a node. Placement, failover and routing are checked
over the in-process registry, and the core of it over Redis too."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from signaling.gateway import GatewaySettings, build_gateway_app
from signaling.registry import (
    MemoryRegistry,
    NodeInfo,
    RedisRegistry,
    Registry,
    RegistryUnavailable,
    SessionRecord,
)
from swapcast.cli import main as cli_main
from swapcast.local_cluster import free_port

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
FAST = GatewaySettings(node_connect_timeout_s=1.0, node_timeout_s=5.0, fanout_timeout_s=0.3, reap_interval_s=0.05)


def run(coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
    """Run a coroutine in a fresh loop with a hard deadline (the tests use no asyncio plugin)."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


@dataclass
class Seen:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    @property
    def session_id(self) -> str | None:
        return self.headers.get("X-Swapcast-Session-Id")


@dataclass
class FakeNode:
    """A node's HTTP API as the gateway uses it. Sessions it is given are kept so GET/PATCH/
    DELETE and its session list answer like a node's; ``face_id: "missing"`` is refused."""

    id: str
    capacity: int = 4
    list_delay_s: float = 0.0  # a node slow to list its sessions
    seen: list[Seen] = field(default_factory=list)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    port: int = 0
    _runner: web.AppRunner | None = None

    async def start(self) -> FakeNode:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        """Like a killed process: the port refuses connections from now on."""
        assert self._runner is not None
        await self._runner.cleanup()

    @property
    def info(self) -> NodeInfo:
        return NodeInfo(id=self.id, address=f"127.0.0.1:{self.port}", capacity=self.capacity)

    def requests(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path == path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen = Seen(request.method, request.path, request.query_string, dict(request.headers), body)
        self.seen.append(seen)
        method, parts = request.method, request.path.strip("/").split("/")
        if (method, request.path) in (("POST", "/api/v1/sessions"), ("POST", "/whip")):
            if request.path == "/api/v1/sessions" and json.loads(body).get("face_id") == "missing":
                return web.json_response({"error": "no face with id 'missing'"}, status=404)
            session_id = seen.session_id or "node-made"
            self.sessions[session_id] = {"id": session_id, "node_id": self.id, "stats": {"fps": 30}}
            if request.path == "/whip":
                return web.Response(status=201, text="v=0 answer", content_type="application/sdp",
                                    headers={"Location": f"/whip/{session_id}"})
            return web.json_response({"session_id": session_id, "node_id": self.id}, status=201,
                                     headers={"Location": f"/api/v1/sessions/{session_id}"})
        if method == "GET" and request.path == "/api/v1/sessions":
            await asyncio.sleep(self.list_delay_s)
            return web.json_response(list(self.sessions.values()))
        if parts[:3] == ["api", "v1", "sessions"] and len(parts) >= 4:
            session = self.sessions.get(parts[3])
            if session is None and not parts[4:]:
                return web.json_response({"error": f"no session {parts[3]!r}"}, status=404)
            if parts[4:] == ["offer"]:
                self.sessions[parts[3]] = {"id": parts[3], "node_id": self.id, "stats": {}}
                return web.json_response({"session_id": parts[3], "sdp": "answer", "type": "answer"}, status=201)
            if method == "DELETE":
                del self.sessions[parts[3]]
                return web.Response(status=204)
            if method == "PATCH":
                session.update(json.loads(body))
            return web.json_response(session)
        if parts[0] == "whep" and method == "POST":
            return web.Response(status=201, text="v=0 answer", content_type="application/sdp",
                                headers={"Location": f"/whep/{parts[1]}/viewer-1"})
        if method == "DELETE":
            return web.Response(status=204)
        if request.path == "/api/v1/broken":  # dies half-way through its answer
            response = web.StreamResponse(headers={"Content-Length": "1000"})
            await response.prepare(request)
            await response.write(b"partial")
            request.transport.close()
            return response
        return web.json_response({"node": self.id, "path": request.path, "bytes": len(body)},
                                 headers={"Connection": "X-Node-Private", "X-Node-Private": "1"})


@contextlib.asynccontextmanager
async def cluster(registry: Registry, *nodes: FakeNode, settings: GatewaySettings = FAST) -> AsyncIterator[TestClient]:
    """Started fake nodes, registered, and a client of a gateway in front of them."""
    for node in nodes:
        await node.start()
        await registry.register_node(node.info)
    client = TestClient(TestServer(build_gateway_app(registry, settings), host="127.0.0.1"))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()
        for node in nodes:
            with contextlib.suppress(AssertionError, RuntimeError):
                await node.stop()
        await registry.close()


@pytest.fixture(params=["memory", "redis"])
def make_registry(request: pytest.FixtureRequest) -> Callable[[], Registry]:
    """Nodes here never beat, so their TTL outlives every test."""
    if request.param == "memory":
        return lambda: MemoryRegistry(ttl_s=60)
    url = request.getfixturevalue("redis_url")
    return lambda: RedisRegistry(url, ttl_s=60)


async def create(client: TestClient, face_id: str = "f1") -> tuple[int, dict[str, Any]]:
    response = await client.post("/api/v1/sessions", json={"face_id": face_id, "options": {"blend": 0.5}})
    return response.status, await response.json()


# -- placement and failover ----------------------------------------------------------------------------


def test_creates_spread_across_nodes_with_the_placed_id(make_registry):
    async def scenario() -> None:
        nodes = [FakeNode("node-a"), FakeNode("node-b"), FakeNode("node-c")]
        registry = make_registry()
        async with cluster(registry, *nodes) as client:
            created = [await create(client) for _ in range(6)]
            assert [status for status, _ in created] == [201] * 6
            assert [len(node.requests("POST", "/api/v1/sessions")) for node in nodes] == [2, 2, 2]
            for node in nodes:
                for seen in node.requests("POST", "/api/v1/sessions"):
                    assert json.loads(seen.body) == {"face_id": "f1", "options": {"blend": 0.5}}  # unchanged
                    record = await registry.get_session(seen.session_id)
                    assert record is not None and record.node_id == node.id and record.protocol == "webrtc"
            assert {body["session_id"] for _, body in created} == {r.id for r in await registry.sessions()}

    run(scenario())


def test_a_node_refusing_a_create_leaves_no_record():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with cluster(registry, FakeNode("node-a")) as client:
            status, body = await create(client, face_id="missing")
            assert (status, body) == (404, {"error": "no face with id 'missing'"})  # the node's answer, as is
            assert await registry.sessions() == []
            assert (await registry.nodes())[0].load == 0

    run(scenario())


def test_a_dead_node_is_removed_and_the_create_goes_elsewhere(make_registry):
    async def scenario() -> None:
        dead, live = FakeNode("node-a"), FakeNode("node-b")
        registry = make_registry()
        async with cluster(registry, dead, live) as client:
            await dead.stop()  # still registered: its TTL has not run out
            status, body = await create(client)
            assert status == 201, body
            assert [s.session_id for s in live.requests("POST", "/api/v1/sessions")] == [body["session_id"]]
            assert await registry.node("node-a") is None
            assert (await registry.get_session(body["session_id"])).node_id == "node-b"

    run(scenario())


def test_every_node_dead_is_a_502_naming_the_node_and_no_record():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        nodes = [FakeNode("node-a"), FakeNode("node-b"), FakeNode("node-c"), FakeNode("node-d")]
        async with cluster(registry, *nodes) as client:
            for node in nodes:
                await node.stop()
            status, body = await create(client)
            assert status == 502
            assert "node-c" in body["error"] and "unreachable" in body["error"]  # 1 try + 2 retries
            assert await registry.sessions() == []
            assert [n.id for n in await registry.nodes()] == ["node-d"]  # never tried

    run(scenario())


@pytest.mark.parametrize("death", ["unreachable", "expired"])
def test_a_reoffer_after_the_node_died_resumes_the_session_on_a_live_node(make_registry, death):
    async def scenario() -> None:
        first, second = FakeNode("node-a"), FakeNode("node-b")
        registry = make_registry()
        async with cluster(registry, first, second) as client:
            _, body = await create(client)
            session_id = body["session_id"]
            assert (await registry.get_session(session_id)).node_id == "node-a"
            await first.stop()
            if death == "expired":  # the reaper already moved it (or the registry forgot the node)
                await registry.remove_node("node-a")
            response = await client.post(f"/api/v1/sessions/{session_id}/offer", json={"sdp": "v=0", "type": "offer"})
            assert response.status == 201, await response.text()
            assert response.headers["X-Swapcast-Node"] == "node-b"
            assert [s.session_id for s in second.requests("POST", f"/api/v1/sessions/{session_id}/offer")] == [session_id]
            assert (await registry.get_session(session_id)).node_id == "node-b"

    run(scenario())


def test_an_offer_stays_on_a_draining_owner_and_unknown_sessions_are_404():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        owner, other = FakeNode("node-a"), FakeNode("node-b")
        async with cluster(registry, owner, other) as client:
            _, body = await create(client)
            await registry.set_node_state("node-a", "draining")
            response = await client.post(f"/api/v1/sessions/{body['session_id']}/offer", json={"type": "offer"})
            assert response.status == 201 and response.headers["X-Swapcast-Node"] == "node-a"
            response = await client.post("/api/v1/sessions/nope/offer", json={"type": "offer"})
            assert response.status == 404 and "nope" in (await response.json())["error"]

    run(scenario())


# -- routing -----------------------------------------------------------------------------------------


def test_session_get_patch_delete_go_to_the_owner():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        a, b = FakeNode("node-a"), FakeNode("node-b")
        async with cluster(registry, a, b) as client:
            ids = [(await create(client))[1]["session_id"] for _ in range(2)]  # one per node
            (on_b,) = [r.id for r in await registry.sessions("node-b")]
            assert on_b in ids
            response = await client.get(f"/api/v1/sessions/{on_b}")
            assert response.status == 200 and (await response.json())["node_id"] == "node-b"
            response = await client.patch(f"/api/v1/sessions/{on_b}", json={"enabled": False})
            assert response.status == 200 and (await response.json())["enabled"] is False
            assert [s.session_id for s in b.requests("PATCH", f"/api/v1/sessions/{on_b}")] == [on_b]
            response = await client.delete(f"/api/v1/sessions/{on_b}")
            assert response.status == 204
            assert b.requests("DELETE", f"/api/v1/sessions/{on_b}") and not a.requests("DELETE", f"/api/v1/sessions/{on_b}")
            assert await registry.get_session(on_b) is None
            response = await client.get("/api/v1/sessions/unknown")
            assert response.status == 404 and "unknown" in (await response.json())["error"]

    run(scenario())


def test_without_a_live_owner_the_registry_record_answers():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        node = FakeNode("node-a")
        async with cluster(registry, node) as client:
            _, body = await create(client)
            session_id = body["session_id"]
            await registry.update_session(session_id, options={"blend": 0.5})  # as the node records it
            await node.stop()
            response = await client.get(f"/api/v1/sessions/{session_id}")  # discovers the node is dead
            record = await response.json()
            assert response.status == 200 and record["id"] == session_id and record["state"] == "orphaned"
            assert await registry.node("node-a") is None
            response = await client.patch(f"/api/v1/sessions/{session_id}", json={"options": {"mouth_mask": True}})
            assert response.status == 200
            assert (await registry.get_session(session_id)).options == {"blend": 0.5, "mouth_mask": True}
            response = await client.patch(f"/api/v1/sessions/{session_id}", json={"colour": "red"})
            assert response.status == 400 and "colour" in (await response.json())["error"]
            response = await client.post(f"/whep/{session_id}", data="v=0", headers={"Content-Type": "application/sdp"})
            assert response.status == 503 and "not live" in (await response.json())["error"]
            assert (await client.delete(f"/api/v1/sessions/{session_id}")).status == 204
            assert await registry.get_session(session_id) is None

    run(scenario())


def test_without_a_live_owner_bad_option_values_are_refused_by_the_schema():
    """Not stored to fail later: the session's re-offer on another node would be refused."""
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        node = FakeNode("node-a")
        async with cluster(registry, node) as client:
            session_id = (await create(client))[1]["session_id"]
            await registry.update_session(session_id, options={"blend": 0.5})
            await node.stop()
            assert (await client.get(f"/api/v1/sessions/{session_id}")).status == 200  # now orphaned
            for options, needle in (({"blend": 5}, "blend: Input should be less than or equal to 1"),
                                    ({"occlusion": "maybe"}, "occlusion: Input should be 'auto', 'objects' or 'off'"),
                                    ({"face_selection": "reference"}, "needs a reference photo")):
                response = await client.patch(f"/api/v1/sessions/{session_id}", json={"options": options})
                body = await response.json()
                assert response.status == 400 and "invalid options" in body["error"] and needle in body["error"], body
            assert (await registry.get_session(session_id)).options == {"blend": 0.5}
            response = await client.patch(f"/api/v1/sessions/{session_id}", json={"options": {"occlusion": "auto"}})
            assert response.status == 200
            assert (await registry.get_session(session_id)).options == {"blend": 0.5, "occlusion": "auto"}

    run(scenario())


def test_session_list_merges_each_nodes_live_details_and_skips_a_slow_node():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        fast, slow = FakeNode("node-a"), FakeNode("node-b", list_delay_s=1.0)
        async with cluster(registry, fast, slow) as client:
            ids = [(await create(client))[1]["session_id"] for _ in range(2)]
            await registry.place_session(SessionRecord(id="placed-only", protocol="webrtc"), exclude=["node-b"])
            started = time.monotonic()
            response = await client.get("/api/v1/sessions")
            assert time.monotonic() - started < 0.9
            listing = {item["id"]: item for item in await response.json()}
            assert set(listing) == {*ids, "placed-only"}
            owner = {i: (await registry.get_session(i)).node_id for i in ids}
            for session_id in ids:
                item = listing[session_id]
                assert item["node_id"] == owner[session_id] and item["protocol"] == "webrtc"
                on_fast_node = owner[session_id] == "node-a"
                assert item["stats"] == ({"fps": 30} if on_fast_node else None)  # the node's live view, when it answered
            assert listing["placed-only"]["stats"] is None and listing["placed-only"]["state"] == "placed"

    run(scenario())


def test_whip_and_whep_go_to_the_sessions_node_with_locations_unchanged():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        a, b = FakeNode("node-a"), FakeNode("node-b")
        async with cluster(registry, a, b) as client:
            await create(client)  # node-a now has one: the WHIP session goes to node-b
            sdp = {"Content-Type": "application/sdp", "Authorization": "Bearer sk_secret"}
            response = await client.post("/whip", data="v=0 offer", headers=sdp)
            assert response.status == 201 and await response.text() == "v=0 answer"
            (seen,) = b.requests("POST", "/whip")
            session_id = seen.session_id
            assert response.headers["Location"] == f"/whip/{session_id}"
            assert seen.headers["Authorization"] == "Bearer sk_secret" and seen.body == b"v=0 offer"
            assert (await registry.get_session(session_id)).protocol == "whip"
            response = await client.post(f"/whep/{session_id}", data="v=0 view", headers=sdp)
            assert response.status == 201 and response.headers["Location"] == f"/whep/{session_id}/viewer-1"
            assert (await client.delete(f"/whep/{session_id}/viewer-1")).status == 204
            assert (await client.patch(f"/whip/{session_id}", data="x")).status == 200
            assert (await client.delete(f"/whip/{session_id}")).status == 204
            assert [(s.method, s.path) for s in b.seen[1:]] == [
                ("POST", f"/whep/{session_id}"), ("DELETE", f"/whep/{session_id}/viewer-1"),
                ("PATCH", f"/whip/{session_id}"), ("DELETE", f"/whip/{session_id}"),
            ]
            assert await registry.get_session(session_id) is None
            assert (await client.delete("/whep/nope/viewer-1")).status == 404

    run(scenario())


def test_faces_and_unknown_api_paths_go_to_the_least_loaded_ready_node():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        a, b = FakeNode("node-a"), FakeNode("node-b")
        async with cluster(registry, a, b) as client:
            await create(client)  # node-a is busier now
            response = await client.post("/api/v1/faces?name=me", data=b"\xff\xd8jpeg", headers={"Content-Type": "image/jpeg"})
            assert response.status == 200 and (await response.json())["node"] == "node-b"
            (seen,) = b.requests("POST", "/api/v1/faces")
            assert (seen.query, seen.body, seen.headers["Content-Type"]) == ("name=me", b"\xff\xd8jpeg", "image/jpeg")
            assert (await client.get("/api/v1/faces/f1/thumbnail.jpg")).headers["X-Swapcast-Node"] == "node-b"
            upload = os.urandom(3 * 1024 * 1024)  # streamed through, past the held-body limit
            response = await client.post("/api/v1/jobs?priority=1", data=io.BytesIO(upload), headers={
                "Connection": "X-Hop", "X-Hop": "1", "X-Swapcast-Session-Id": "forged", "X-Kept": "yes",
            })
            answer = await response.json()
            assert response.status == 200 and answer == {"node": "node-b", "path": "/api/v1/jobs", "bytes": len(upload)}
            assert "X-Node-Private" not in response.headers  # the node's hop-by-hop header stays there
            (seen,) = b.requests("POST", "/api/v1/jobs")
            assert seen.body == upload and seen.query == "priority=1" and seen.headers["X-Kept"] == "yes"
            assert "X-Hop" not in seen.headers and "X-Swapcast-Session-Id" not in seen.headers
            await registry.set_node_state("node-b", "draining")
            assert (await (await client.get("/api/v1/jobs/7")).json())["node"] == "node-a"

    run(scenario())


def test_a_node_breaking_off_its_answer_cuts_the_client_connection():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with cluster(registry, FakeNode("node-a")) as client:
            response = await client.get("/api/v1/broken")
            assert response.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()
            assert (await client.get("/healthz")).status == 200

    run(scenario())


def test_held_bodies_are_limited():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        settings = GatewaySettings(max_body_bytes=1024)
        async with cluster(registry, FakeNode("node-a"), settings=settings) as client:
            response = await client.post("/api/v1/sessions", data=bytes(4096), headers={"Content-Type": "application/json"})
            assert response.status == 413 and "error" in await response.json()
            # a face's photos are streamed to a node (which bounds each photo and their number)
            response = await client.post("/api/v1/faces", data=bytes(4096), headers={"Content-Type": "image/jpeg"})
            assert response.status == 200 and (await response.json())["bytes"] == 4096

    run(scenario())


# -- nodes, health, errors ---------------------------------------------------------------------------------


def test_nodes_list_drain_and_ready():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with cluster(registry, FakeNode("node-a"), FakeNode("node-b")) as client:
            listing = await (await client.get("/api/v1/nodes")).json()
            assert [(n["id"], n["state"], n["load"]) for n in listing] == [("node-a", "ready", 0), ("node-b", "ready", 0)]
            messages = registry.control_messages("node-a")
            first = asyncio.ensure_future(anext(messages))
            await asyncio.sleep(0)  # subscribed before the drain is sent
            response = await client.post("/api/v1/nodes/node-a/drain")
            assert response.status == 200 and (await response.json())["state"] == "draining"
            assert await asyncio.wait_for(first, 2) == {"kind": "drain"}
            await messages.aclose()
            for _ in range(3):
                assert (await create(client))[0] == 201
            assert (await registry.node("node-a")).load == 0
            response = await client.post("/api/v1/nodes/node-a/ready")
            assert response.status == 200 and (await response.json())["state"] == "ready"
            response = await client.post("/api/v1/nodes/ghost/drain")
            assert response.status == 404 and "ghost" in (await response.json())["error"]

    run(scenario())


def test_health_ready_and_the_page():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with cluster(registry) as client:
            assert await (await client.get("/healthz")).json() == {"status": "ok"}
            response = await client.get("/readyz")
            assert response.status == 503 and await response.json() == {"error": "no ready node"}
            status, body = await create(client)
            assert status == 503 and "no live node" in body["error"]
            response = await client.get("/api/v1/faces")
            assert response.status == 503 and await response.json() == {"error": "no ready node"}
            await registry.register_node(NodeInfo(id="node-a", address=f"127.0.0.1:{free_port()}"))
            response = await client.get("/readyz")
            assert response.status == 200 and (await response.json())["nodes"] == ["node-a"]
            response = await client.get("/")
            assert response.status == 200 and "<html" in (await response.text()).lower()
            assert (await client.get("/web/swapcast-client.js")).status == 200
            response = await client.get("/nowhere")
            assert response.status == 404 and "error" in await response.json()

    run(scenario())


def test_a_registry_outage_is_a_503_with_its_reason_and_the_reaper_survives(caplog):
    down = RegistryUnavailable("redis://10.0.0.9:6379: connection refused")

    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with cluster(registry, FakeNode("node-a")) as client:
            _, body = await create(client)
            failing = mock.AsyncMock(side_effect=down)
            names = ["place_session", "get_session", "sessions", "nodes", "node", "ping", "reap_dead_nodes"]
            with mock.patch.multiple(registry, **{name: failing for name in names}):
                status, answer = await create(client)
                assert status == 503 and answer["error"] == f"session registry unavailable: {down}"
                for path in ("/api/v1/sessions", f"/api/v1/sessions/{body['session_id']}", "/api/v1/nodes", "/readyz"):
                    response = await client.get(path)
                    assert response.status == 503 and "unavailable" in (await response.json())["error"], path
                assert (await client.get("/healthz")).status == 200
                await asyncio.sleep(0.3)  # several reaper rounds
            await asyncio.sleep(0.2)
            assert (await create(client))[0] == 201

    with caplog.at_level(logging.INFO, logger="signaling.gateway.app"):
        run(scenario())
    reaper = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reaper:")]
    assert reaper == [f"reaper: session registry unavailable ({down}); retrying", "reaper: session registry answers again"]


def test_an_unreachable_redis_is_a_503_naming_the_registry():
    async def scenario() -> None:
        registry = RedisRegistry(f"redis://127.0.0.1:{free_port()}/0", ttl_s=2)
        async with cluster(registry) as client:
            for response in (await client.post("/api/v1/sessions", json={}), await client.get("/readyz")):
                assert response.status == 503 and "registry unavailable" in (await response.json())["error"]

    run(scenario(), timeout=20)


def test_the_reaper_moves_the_sessions_of_a_silent_node(caplog):
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=0.5)
        a, b = FakeNode("node-a"), FakeNode("node-b")
        async with cluster(registry, a, b) as client:
            _, body = await create(client)  # on node-a
            for _ in range(20):  # node-b keeps beating, node-a went silent
                await registry.heartbeat("node-b")
                await asyncio.sleep(0.05)
            assert (await registry.get_session(body["session_id"])).node_id == "node-b"

    with caplog.at_level(logging.INFO, logger="signaling.gateway.app"):
        run(scenario())
    assert any("moved to node node-b" in r.getMessage() for r in caplog.records)


# -- the command ---------------------------------------------------------------------------------------


def test_gateway_without_redis_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.delenv("SWAPCAST_CLUSTER__REDIS_URL", raising=False)
    monkeypatch.delenv("SWAPCAST_CONFIG", raising=False)
    assert cli_main(["gateway", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("swapcast gateway: error:") and "--redis" in err and "\n" not in err


def test_gateway_without_auth_refuses_to_start(capsys):
    assert cli_main(["gateway", "--redis", f"redis://127.0.0.1:{free_port()}/0", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip()
    assert "a cluster needs auth" in err and "SWAPCAST_AUTH__JWT_SECRET" in err and "\n" not in err


def test_gateway_command_serves_and_stops_on_sigterm(tmp_path):
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"server:\n  port: {port}\n  data_dir: {tmp_path}\nrtmp:\n  port: 0\n"
                      f"auth:\n  jwt_secret: {'s' * 40}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}
    with subprocess.Popen(
        [sys.executable, "-m", "swapcast.cli", "gateway", "--redis", f"redis://127.0.0.1:{free_port()}/0",
         "--config", str(config)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as process:
        try:
            banner = process.stdout.readline()
            assert f"http://127.0.0.1:{port}/" in banner and "rtmp://127.0.0.1:" in banner, banner
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                assert b" 200 " in sock.recv(1024).split(b"\r\n")[0]
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=10)
            assert process.returncode == 0 and "Traceback" not in err, err
        finally:
            if process.poll() is None:
                process.kill()
