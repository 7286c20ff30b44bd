"""WHIP and WHEP answers name the STUN/TURN servers as RFC 9725 ``Link: <url>;
rel="ice-server"`` headers: the TURN credentials in them are the session API's time-limited
coturn ones and allocate a relay on a real ``turnserver``; nothing is advertised without
STUN/TURN configured, and an anonymous OPTIONS gets no credentials."""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from aioice.turn import create_turn_endpoint
from tls_testkit import turn_server
from webrtc_harness import bearer, camera_offer, client_peer, node, node_config, run, swap_threads, viewer_offer

from signaling.gateway import GatewaySettings, build_gateway_app
from signaling.registry import MemoryRegistry
from signaling.turn_credentials import TurnCredentials, ice_server_links, turn_password
from swapcast.app import build_app
from swapcast.local_cluster import free_port

pytestmark = pytest.mark.timeout(60)
SECRET = "whip-turn-secret-" + "w" * 24
TTL_S = 600
SDP = {"Content-Type": "application/sdp"}
# RFC 8288 link-value with quoted-string parameters, the shape OBS's and GStreamer's whip clients parse
LINK = re.compile(r'<(?P<url>[^<>\s]+)>((?:; [a-z-]+="[^"\\]*")+)')
PARAM = re.compile(r'; ([a-z-]+)="([^"\\]*)"')


@pytest.fixture(scope="module")
def turn(tmp_path_factory):
    with turn_server(tmp_path_factory.mktemp("turn"), SECRET) as server:
        yield server


def parse_links(values: list[str]) -> list[dict[str, str]]:
    """Each ``Link`` header value as ``{"url": ..., <param>: ...}``, strictly."""
    links = []
    for value in values:
        match = LINK.fullmatch(value)
        assert match, f"not an RFC 8288 link-value: {value!r}"
        links.append({"url": match["url"], **dict(PARAM.findall(match[2]))})
    return links


async def allocate(port: int, username: str, credential: str) -> tuple[str, int]:
    transport, _ = await asyncio.wait_for(create_turn_endpoint(
        asyncio.DatagramProtocol, ("127.0.0.1", port), username, credential), 5)
    try:
        return transport.get_extra_info("sockname")  # the relayed address
    finally:
        transport.close()


def test_whip_and_whep_answers_carry_stun_and_working_turn_links(engine, tmp_path, turn):
    stun_url = f"stun:127.0.0.1:{turn.port}"

    async def scenario():
        async with node(engine, tmp_path / "data", subject="alice", turn_urls=[turn.url], turn_shared_secret=SECRET,
                        turn_ttl_s=TTL_S, ice_servers=[{"urls": [stun_url]}]) as client:
            created = await client.post("/api/v1/keys", json={"name": "cam", "face_id": "astronaut"})
            assert created.status == 201, await created.text()
            key = (await created.json())["key"]
            publisher, viewer = client_peer(), client_peer()
            async with aiohttp.ClientSession() as http:  # the publisher sends only its stream key
                async with http.post(client.make_url("/whip"), data=await camera_offer(publisher, direction="sendonly"),
                                     headers={**SDP, "Authorization": f"Bearer {key}"}) as response:
                    assert response.status == 201, await response.text()
                    whip = response.headers.getall("Link")
                    whip_by_aiohttp = [dict(link) for link in response.links.getall("ice-server")]
                    location = response.headers["Location"]
                async with http.options(client.make_url("/whip"), headers={
                        "Origin": "https://studio.example", "Access-Control-Request-Method": "POST",
                        "Access-Control-Request-Headers": "authorization, content-type, link"}) as response:
                    preflight = response.status, response.headers.getall("Link", [])
            session_id = location.rsplit("/", 1)[1]
            # a WHEP viewer (the dashboard's preview) reads the same servers before its offer
            read = (await (await client.get(f"/api/v1/sessions/{session_id}")).json())["ice_servers"]
            response = await client.post(f"/whep/{session_id}", data=await viewer_offer(viewer), headers=SDP)
            assert response.status == 201, await response.text()
            whep = response.headers.getall("Link")
            assert (await client.delete(location)).status == 204
            for pc in (publisher, viewer):
                await pc.close()
            return whip, whip_by_aiohttp, preflight, whep, read

    whip, whip_by_aiohttp, preflight, whep, read = run(scenario(), timeout=50)
    minted_at = time.time()
    for values in (whip, whep):
        stun, relay = parse_links(values)
        assert stun == {"url": stun_url, "rel": "ice-server"}
        assert relay["url"] == turn.url and relay["rel"] == "ice-server" and relay["credential-type"] == "password"
        expiry, user = relay["username"].split(":")
        assert user == "alice" and abs(int(expiry) - (minted_at + TTL_S)) < 30
        assert relay["credential"] == turn_password(SECRET, relay["username"]) and SECRET not in str(values)
        assert asyncio.run(allocate(turn.port, relay["username"], relay["credential"]))[1] > 0
    assert [s["urls"] for s in read] == [[stun_url], [turn.url]] and read[1]["username"].endswith(":alice")
    # aiohttp's own Link parser reads the same servers (as a browser's fetch() would expose them)
    assert [str(link["url"]) for link in whip_by_aiohttp] == [stun_url, turn.url]
    assert whip_by_aiohttp[1]["username"] == parse_links(whip)[1]["username"]
    # an origin not in server.cors_origins is refused; relay credentials only for a stream key or token
    assert preflight == (403, [])
    assert swap_threads() == []


def test_a_gateway_passes_every_link_on(engine, tmp_path, turn):
    """Behind the gateway (the one address a cluster's clients use) the node's answer keeps
    all its Link headers."""
    port = free_port()
    config = node_config(tmp_path / "data", turn_urls=[turn.url], turn_shared_secret=SECRET,
                         ice_servers=[{"urls": [f"stun:127.0.0.1:{turn.port}"]}])
    config = config.model_copy(update={"cluster": config.cluster.model_copy(
        update={"node_id": "n1", "advertise": f"127.0.0.1:{port}"})})

    async def scenario():
        registry = MemoryRegistry(ttl_s=60)
        node_client = TestClient(TestServer(build_app(config, engine=engine, registry=registry), host="127.0.0.1",
                                            port=port), headers=bearer("carol"))
        await node_client.start_server()
        gateway = TestClient(TestServer(build_gateway_app(registry, GatewaySettings()), host="127.0.0.1"))
        await gateway.start_server()
        publisher = client_peer()
        try:
            key = (await (await node_client.post("/api/v1/keys", json={"name": "cam", "face_id": "astronaut"})).json())["key"]
            async with aiohttp.ClientSession() as http:
                async with http.post(gateway.make_url("/whip"), data=await camera_offer(publisher, direction="sendonly"),
                                     headers={**SDP, "Authorization": f"Bearer {key}"}) as response:
                    assert response.status == 201, await response.text()
                    links, location = response.headers.getall("Link"), response.headers["Location"]
                async with http.delete(gateway.make_url(location), headers={"Authorization": f"Bearer {key}"}) as gone:
                    assert gone.status == 204
            return links
        finally:
            await publisher.close()
            await gateway.close()
            await node_client.close()
            await registry.close()

    stun, relay = parse_links(run(scenario(), timeout=50))
    assert stun["url"] == f"stun:127.0.0.1:{turn.port}" and relay["username"].endswith(":carol")
    assert asyncio.run(allocate(turn.port, relay["username"], relay["credential"]))[1] > 0
    assert swap_threads() == []


def test_no_links_without_stun_or_turn_configured(engine, tmp_path):
    async def scenario():
        async with node(engine, tmp_path / "data", subject="bob") as client:
            key = (await (await client.post("/api/v1/keys", json={"name": "cam", "face_id": "astronaut"})).json())["key"]
            publisher = client_peer()
            response = await client.post("/whip", data=await camera_offer(publisher, direction="sendonly"),
                                         headers={**SDP, "Authorization": f"Bearer {key}"})
            assert response.status == 201, await response.text()
            links, location = response.headers.getall("Link", []), response.headers["Location"]
            assert (await client.delete(location, headers=bearer("bob"))).status == 204
            await publisher.close()
            return links

    assert run(scenario(), timeout=40) == []
    assert swap_threads() == []


def test_links_list_every_url_and_quote_their_credentials():
    links = ice_server_links([{"urls": "stun:stun.example.org"},
                              {"urls": ["turn:a.example?transport=udp", "turns:a.example?transport=tcp"],
                               "username": '1700000000:x"y', "credential": "c\\d"}])
    assert links[0] == '<stun:stun.example.org>; rel="ice-server"'
    assert links[1] == ('<turn:a.example?transport=udp>; rel="ice-server"; username="1700000000:x\\"y"; '
                        'credential="c\\\\d"; credential-type="password"')
    assert links[2].startswith('<turns:a.example?transport=tcp>; rel="ice-server"; username=')
    # a minted name needs no escaping (clients that do not unescape read it right), whoever the user is
    minted = TurnCredentials(("turn:a.example",), SECRET).ice_server('Zoë "z" \\ o:k\n')
    assert minted["username"].split(":", 1)[1] == "Zo___z____o_k_"
    assert parse_links(ice_server_links([minted]))[0]["username"] == minted["username"]
