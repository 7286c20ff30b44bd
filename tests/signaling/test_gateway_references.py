"""The gateway answers a session's PATCH itself when the session's node is gone: a
``face_id`` in that body is held to the owner rule too (another user's stored face is
answered like a missing one and never reaches the record), and a body it cannot read is a
400, not a 500."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from signaling.auth import mint_token
from signaling.auth.wiring import api_auth
from signaling.gateway import GatewaySettings, build_gateway_app
from signaling.registry import FaceRecord, MemoryRegistry, NodeInfo, SessionRecord
from swapcast.app import is_public
from swapcast.local_cluster import free_port

SECRET = "gateway-references-secret-" + "s" * 32
AUTH = types.SimpleNamespace(
    jwt_secret=SECRET, jwks_file=None, issuer=None, audience=None, requests_per_minute_per_token=10_000,
    requests_per_minute_per_ip=10_000, max_sessions_per_user=10, audit_log=None, trusted_proxies=[])


def as_user(subject: str, role: str = "user") -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(SECRET, subject, role=role)}"}


def test_a_patch_answered_by_the_gateway_resolves_face_ids_for_the_caller(tmp_path: Path):
    async def scenario():
        registry = MemoryRegistry(ttl_s=60)
        await registry.register_node(NodeInfo(id="gone", address=f"127.0.0.1:{free_port()}", capacity=4))
        session = await registry.place_session(SessionRecord(id="s-bob", protocol="webrtc", owner="bob", face_id="astronaut"))
        await registry.put_face(FaceRecord("u-a11ce0000001", "alice", b"jpeg", b"source", owner="alice"))
        await registry.put_face(FaceRecord("u-b0b000000001", "bob", b"jpeg", b"source", owner="bob"))
        auth = api_auth(AUTH, host="127.0.0.1", cluster=True, data_dir=tmp_path, is_public=is_public)
        settings = GatewaySettings(node_connect_timeout_s=1.0, node_timeout_s=5.0, reap_interval_s=60)
        client = TestClient(TestServer(build_gateway_app(registry, settings, auth=auth), host="127.0.0.1"))
        await client.start_server()
        path = f"/api/v1/sessions/{session.id}"
        try:
            await client.get(path, headers=as_user("bob"))  # finds the node gone: the record answers from now on
            answers = {}
            for name, face_id in (("her face", "u-a11ce0000001"), ("his face", "u-b0b000000001")):
                response = await client.patch(path, json={"face_id": face_id}, headers=as_user("bob"))
                answers[name] = response.status, await response.json()
            deep = await client.patch(path, data=b"[" * 200_000 + b"]" * 200_000,
                                      headers={**as_user("bob"), "Content-Type": "application/json"})
            answers["deep"] = deep.status, await deep.json()
            record = await registry.get_session(session.id)
        finally:
            await client.close()
            await registry.close()
        return answers, record

    answers, record = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert answers["her face"] == (404, {"error": "no face with id 'u-a11ce0000001'"})
    assert answers["his face"][0] == 200 and answers["his face"][1]["face_id"] == "u-b0b000000001"
    assert answers["deep"] == (400, {"error": "the JSON body is nested too deeply"})
    assert record.face_id == "u-b0b000000001"
