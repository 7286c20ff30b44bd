"""The OpenAPI document: valid OpenAPI 3, served as written, covering every route, and true
to the server — schemathesis sends generated requests (valid and invalid) to a live node on
127.0.0.1 and checks every answer against the document: never a 5xx, only documented
status codes and content types, bodies and headers matching their schemas.

Every operation is fuzzed, the SDP ones included: generated SDP is never a usable offer, so
they must answer 4xx (400 malformed, 404 unknown session, 415 wrong type), which is exactly
what is checked. The events WebSocket is exercised as plain HTTP (401 / 426); its messages
are tested in test_events.py. The node runs with a real Redis (the jobs API needs it) and
limits high enough that capacity never answers 503 here, so any 5xx is a failure.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, settings
from openapi_schema_validator import OAS30Validator
from openapi_schema_validator import validate as validate_instance
from openapi_spec_validator import validate
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

sys.path.insert(0, str(Path(__file__).resolve().parent / "webrtc"))  # the node test helpers

from webrtc_harness import (
    TEST_SECRET,
    answer,
    camera_offer,
    client_peer,
    collect_video,
    node,
    run,
)

from signaling.auth import mint_token
from signaling.gateway.app import build_gateway_app
from signaling.openapi import OPENAPI_PATH, openapi_document
from signaling.registry import MemoryRegistry
from swapcast.app import build_app
from swapcast.config import load_config

DOCUMENT = openapi_document(gateway=False)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]
EXAMPLES_PER_OPERATION = 20  # x 33 operations, valid and invalid data: ~20 s on the 2-core CI machine
PAGES = {"/", "/admin/"}  # HTML pages and /web/ static files: not API

schema = schemathesis.openapi.from_dict(DOCUMENT)
schemathesis.serializer.alias("application/sdp", "text/plain")  # WHIP/WHEP offers are text


class LiveNode:
    """A node (the real composition root) served on 127.0.0.1 by its own event loop in a
    thread, so the synchronous schemathesis calls can reach it."""

    def __init__(self, engine: Any, data_dir: Path, redis_url: str) -> None:
        self.engine, self.data_dir, self.redis_url = engine, data_dir, redis_url
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="openapi-node", daemon=True)
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.app: web.Application | None = None

    def start(self) -> LiveNode:
        self.thread.start()
        self._call(self._start()).result(timeout=60)
        return self

    def stop(self) -> None:
        self._call(self.runner.cleanup()).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()

    def _call(self, coroutine) -> Future:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def _start(self) -> None:
        config = load_config(environ={}, overrides={
            "server": {"data_dir": str(self.data_dir)},
            "rtmp": {"port": 0},
            "webrtc": {"host_addresses": ["127.0.0.1"], "max_sessions": 256},
            "cluster": {"redis_url": self.redis_url},
            # one client places every session and sends every request: limits it never reaches
            "auth": {"jwt_secret": TEST_SECRET, "requests_per_minute_per_token": 1_000_000,
                     "requests_per_minute_per_ip": 1_000_000, "max_sessions_per_user": 1000},
        })
        self.app = build_app(config, engine=self.engine)
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"


@pytest.fixture(scope="module")
def live_node(engine, tmp_path_factory, redis_server) -> Iterator[LiveNode]:
    redis_server.flush()
    served = LiveNode(engine, tmp_path_factory.mktemp("openapi-node"), redis_server.url).start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def credentials(live_node) -> dict[str, dict[str, str]]:
    """Authorization headers per security scheme: an admin JWT, and a real stream key (so
    WHIP requests get past the key to the SDP checks)."""
    admin = {"Authorization": f"Bearer {mint_token(TEST_SECRET, 'schemathesis', role='admin')}"}
    created = requests.post(f"{live_node.url}/api/v1/keys", json={"name": "fuzz", "face_id": "astronaut"},
                            headers=admin, timeout=30)
    assert created.status_code == 201, created.text
    return {"bearerAuth": admin, "streamKey": {"Authorization": f"Bearer {created.json()['key']}"}}


def test_documents_are_valid_openapi_3():
    for gateway in (False, True):
        validate(openapi_document(gateway=gateway))


def test_the_node_and_the_gateway_serve_their_documents(live_node):
    served = requests.get(live_node.url + OPENAPI_PATH, timeout=10)  # no token needed
    assert served.status_code == 200 and served.json() == DOCUMENT

    async def gateway_document() -> dict:
        async with TestClient(TestServer(build_gateway_app(MemoryRegistry()), host="127.0.0.1")) as client:
            response = await client.get(OPENAPI_PATH)
            assert response.status == 200
            return await response.json()

    assert run(gateway_document()) == openapi_document(gateway=True)


def test_every_route_of_the_node_is_documented(live_node):
    routes = set()
    for route in live_node.app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if route.method == "HEAD" or path in PAGES or path.startswith("/web"):
            continue
        if path == "/api/v1/nodes/{node_id}/{action}":  # {action:drain|ready}
            routes |= {(route.method, f"/api/v1/nodes/{{node_id}}/{action}") for action in ("drain", "ready")}
        else:
            routes.add((route.method, path))
    documented = {(method.upper(), path) for path, item in DOCUMENT["paths"].items() for method in item}
    assert routes == documented


def matches(instance: Any, component: str) -> None:
    """``instance`` is valid against the document's schema ``component``."""
    validate_instance(instance, {"$ref": f"#/components/schemas/{component}", "components": DOCUMENT["components"]},
                      cls=OAS30Validator)


def test_a_live_session_is_described_as_documented(engine, tmp_path):
    """What fuzzing cannot reach: a session with media flowing (stats, stages, connection)."""

    async def scenario() -> None:
        async with node(engine, tmp_path) as client:
            pc = client_peer()
            collector = collect_video(pc)
            response = await client.post("/api/v1/sessions", json={
                "sdp": await camera_offer(pc, audio=True), "type": "offer", "face_id": "astronaut"})
            reply = await response.json()
            matches(reply, "SdpAnswer")
            await answer(pc, reply["sdp"])
            await collector.wait_for(5)
            described = await (await client.get(f"/api/v1/sessions/{reply['session_id']}")).json()
            assert described["stats"]["stages_ms"] is not None
            matches(described, "Session")
            for item in await (await client.get("/api/v1/sessions")).json():
                matches(item, "Session")
            await collector.stop()
            await pc.close()

    run(scenario())


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_server_answers_as_documented(case, live_node, credentials):
    security = case.operation.definition.raw.get("security", DOCUMENT["security"])
    headers = credentials[next(iter(security[0]))] if security else None  # [] = public
    case.call_and_validate(base_url=live_node.url, headers=headers, checks=CHECKS, timeout=30)
