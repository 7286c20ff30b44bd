"""Ending a WHIP session needs its publisher's stream key or its owner's (or an admin's)
token, on a node and on a gateway whose node is gone; the resource URL alone is not enough."""

from __future__ import annotations

import types

import aiohttp
from aiohttp.test_utils import TestClient, TestServer
from webrtc_harness import TEST_SECRET, bearer, camera_offer, client_peer, node, run, swap_threads

from signaling.auth import mint_token
from signaling.auth.wiring import api_auth
from signaling.gateway import GatewaySettings, build_gateway_app
from signaling.registry import MemoryRegistry, NodeInfo, SessionRecord
from swapcast.app import is_public
from swapcast.local_cluster import free_port

SDP = {"Content-Type": "application/sdp"}


async def publish(client: TestClient, key: str) -> tuple[str, object]:
    """A WHIP publish with ``key``; the session's resource path and the publisher's peer."""
    pc = client_peer()
    offer = await camera_offer(pc, direction="sendonly")
    async with aiohttp.ClientSession() as publisher_http:  # a publisher sends its key, no API token
        async with publisher_http.post(client.make_url("/whip"), data=offer,
                                       headers={**SDP, "Authorization": f"Bearer {key}"}) as response:
            assert response.status == 201, await response.text()
            return response.headers["Location"], pc


async def delete_as(client: TestClient, location: str, authorization: str | None) -> tuple[int, str]:
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with aiohttp.ClientSession() as http:  # only the credential under test, never the client's token
        async with http.delete(client.make_url(location), headers=headers) as response:
            body = await response.json() if response.content_type == "application/json" else {}
            return response.status, body.get("error", "")


async def new_key(client: TestClient, user: str) -> str:
    response = await client.post("/api/v1/keys", json={"name": f"{user} cam", "face_id": "astronaut"},
                                 headers=bearer(user))
    assert response.status == 201, await response.text()
    return (await response.json())["key"]


def test_only_the_publishing_key_or_the_owners_token_ends_a_whip_session(engine, tmp_path):
    async def scenario():
        async with node(engine, tmp_path / "data", subject="alice") as client:
            alice_key, bob_key = await new_key(client, "alice"), await new_key(client, "bob")
            first, first_pc = await publish(client, alice_key)
            refused = {
                "no credential": await delete_as(client, first, None),
                "basic": await delete_as(client, first, f"Basic {alice_key}"),
                "non-ascii": await delete_as(client, first, "Bearer sk_\u00e9t\u00e9"),
                "other key": await delete_as(client, first, f"Bearer {bob_key}"),
                "other user": await delete_as(client, first, bearer("bob")["Authorization"]),
                "forged token": await delete_as(client, first, f"Bearer {mint_token('x' * 40, 'alice')}"),
                "garbage": await delete_as(client, first, "Bearer not.a.token"),
            }
            unknown = await delete_as(client, "/whip/nope", bearer("bob")["Authorization"])
            watch = {}  # WHEP reads a session: its owner's (or an admin's) token only
            for name, headers in {"anonymous": {}, "other user": bearer("bob")}.items():
                async with aiohttp.ClientSession() as http:
                    async with http.post(client.make_url(f"/whep/{first.rsplit('/', 1)[1]}"), data="v=0\r\n",
                                         headers={**SDP, **headers}) as response:
                        watch[name] = response.status
            still_live = [s["id"] for s in await (await client.get("/api/v1/sessions")).json()]
            by_key = await delete_as(client, first, f"Bearer {alice_key}")

            second, second_pc = await publish(client, alice_key)
            by_owner = await delete_as(client, second, bearer("alice")["Authorization"])
            third, third_pc = await publish(client, alice_key)
            by_admin = await delete_as(client, third, bearer("ops", role="admin")["Authorization"])
            left = [s["id"] for s in await (await client.get("/api/v1/sessions")).json()]
            for pc in (first_pc, second_pc, third_pc):
                await pc.close()
            return locals()

    r = run(scenario(), timeout=60)
    refused, first = r["refused"], r["first"]
    assert refused["no credential"][0] == 401 and refused["basic"][0] == 401
    assert refused["non-ascii"][0] == 401 and "ASCII" in refused["non-ascii"][1]
    for name in ("other key", "other user", "forged token", "garbage"):
        assert refused[name][0] == 404, (name, refused[name])
        assert refused[name][1] == f"no WHIP session with id {first.rsplit('/', 1)[1]!r}", name
    assert r["unknown"] == (404, "no WHIP session with id 'nope'")
    assert r["watch"] == {"anonymous": 401, "other user": 404}
    assert r["still_live"] == [first.rsplit("/", 1)[1]]
    assert r["by_key"][0] == 204 and r["by_owner"][0] == 204 and r["by_admin"][0] == 204
    assert r["left"] == []
    assert swap_threads() == []


def test_a_gateway_whose_node_is_gone_ends_a_whip_record_only_for_its_owner(tmp_path):
    auth_section = types.SimpleNamespace(
        jwt_secret=TEST_SECRET, jwks_file=None, issuer=None, audience=None, requests_per_minute_per_token=10_000,
        requests_per_minute_per_ip=10_000, max_sessions_per_user=10, audit_log=None, trusted_proxies=[])

    async def scenario():
        registry = MemoryRegistry(ttl_s=60)
        await registry.register_node(NodeInfo(id="gone", address=f"127.0.0.1:{free_port()}", capacity=4))
        record = await registry.place_session(SessionRecord(id="whip-1", protocol="whip", owner="alice"))
        auth = api_auth(auth_section, host="127.0.0.1", cluster=True, data_dir=tmp_path, is_public=is_public)
        settings = GatewaySettings(node_connect_timeout_s=1.0, node_timeout_s=5.0, reap_interval_s=60)
        client = TestClient(TestServer(build_gateway_app(registry, settings, auth=auth), host="127.0.0.1"))
        await client.start_server()
        try:
            got = {
                "no credential": await delete_as(client, f"/whip/{record.id}", None),
                "stream key": await delete_as(client, f"/whip/{record.id}", "Bearer sk_someone"),
                "other user": await delete_as(client, f"/whip/{record.id}", bearer("bob")["Authorization"]),
            }
            kept = await registry.get_session(record.id) is not None
            got["owner"] = await delete_as(client, f"/whip/{record.id}", bearer("alice")["Authorization"])
            gone = await registry.get_session(record.id) is None
        finally:
            await client.close()
            await registry.close()
        return got, kept, gone

    got, kept, gone = run(scenario(), timeout=30)
    assert [got[name][0] for name in ("no credential", "stream key", "other user")] == [404, 404, 404]
    assert kept
    assert got["owner"][0] == 204 and gone
