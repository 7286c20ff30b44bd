"""CORS on the node and the gateway: pre-flights answered (before auth) for listed origins and
refused with a reason for others, the matched origin and the readable headers on every answer
of the API, WHIP and WHEP (a real WHIP 201's Location and Link included), tokens still
required, never a Link on an OPTIONS, and the gateway's policy on what it relays."""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import TEST_SECRET, bearer, camera_offer, client_peer, run, swap_threads  # noqa: E402

from signaling.cors import EXPOSED_HEADERS, CorsPolicy  # noqa: E402
from signaling.gateway import GatewaySettings, build_gateway_app  # noqa: E402
from signaling.registry import MemoryRegistry  # noqa: E402
from swapcast.app import build_app  # noqa: E402
from swapcast.config import ConfigError, load_config  # noqa: E402
from swapcast.local_cluster import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(60)
APP = "https://app.example.com"
EVIL = "https://evil.example"
SDP = {"Content-Type": "application/sdp"}
STUN = "stun:stun.example.org:3478"


def config(data_dir: Path, origins: list[str], **cluster):
    return load_config(environ={}, overrides={
        "server": {"data_dir": str(data_dir), "cors_origins": origins},
        "rtmp": {"port": 0},
        "webrtc": {"host_addresses": ["127.0.0.1"], "ice_servers": [{"urls": [STUN]}]},
        "auth": {"jwt_secret": TEST_SECRET},
        **({"cluster": cluster} if cluster else {}),
    })


def preflight(origin: str, method: str = "POST", headers: str = "authorization, content-type") -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}


def exposed(response: aiohttp.ClientResponse) -> set[str]:
    return {h.strip() for h in response.headers.get("Access-Control-Expose-Headers", "").split(",") if h.strip()}


def varies_by_origin(response: aiohttp.ClientResponse) -> bool:
    return "origin" in {v.strip().lower() for value in response.headers.getall("Vary", []) for v in value.split(",")}


def test_origins_are_checked_as_browsers_write_them():
    assert load_config(environ={}, overrides={"server": {"cors_origins": [APP, "http://[::1]:8081"]}}) \
        .server.cors_origins == [APP, "http://[::1]:8081"]
    assert load_config(environ={}).server.cors_origins == []
    for bad, says in ((["https://App.example.com/"], "use 'https://app.example.com'"),
                      (["https://app.example.com:443"], "use 'https://app.example.com'"),
                      (["https://app.example.com/player"], "no user, path"),
                      (["null"], "expected http(s)://host[:port]"),
                      (["*", APP], '"*" (any origin) goes alone')):
        with pytest.raises(ConfigError, match="server.cors_origins") as caught:
            load_config(environ={}, overrides={"server": {"cors_origins": bad}})
        assert says in str(caught.value)
    assert CorsPolicy([APP]).allowed(EVIL) is None and CorsPolicy(["*"]).allowed(EVIL) == "*"


def test_node_answers_preflights_and_labels_answers_for_listed_origins(engine, tmp_path):
    async def scenario():
        client = TestClient(TestServer(build_app(config(tmp_path / "data", [APP]), engine=engine), host="127.0.0.1"))
        await client.start_server()
        try:
            answers = {}
            for path in ("/api/v1/sessions", "/whip", "/whip/abc", "/whep/abc", "/api/v1/jobs/x/output"):
                r = await client.options(path, headers=preflight(APP, headers="Authorization, Content-Type, If-Match"))
                answers[path] = r.status, dict(r.headers), r.headers.getall("Link", [])
            refused = await client.options("/whip", headers=preflight(EVIL))
            refused = refused.status, (await refused.json())["error"], dict(refused.headers)
            bad_method = await client.options("/api/v1/faces", headers=preflight(APP, method="PUT"))
            bad_header = await client.options("/api/v1/faces", headers=preflight(APP, headers="authorization, x-mine"))
            bad = [(r.status, (await r.json())["error"]) for r in (bad_method, bad_header)]
            page = await client.options("/", headers=preflight(APP))  # pages are not cross-origin routes
            # actual answers: the matched origin, readable headers, the token still required
            ok = await client.get("/api/v1/faces", headers={"Origin": APP, **bearer("alice")})
            no_token = await client.get("/api/v1/faces", headers={"Origin": APP})
            missing = await client.get("/api/v1/nope", headers={"Origin": APP, **bearer("alice")})
            other = await client.get("/api/v1/faces", headers={"Origin": EVIL, **bearer("alice")})
            health = await client.get("/healthz", headers={"Origin": APP})
            actual = {name: (r.status, r.headers.get("Access-Control-Allow-Origin"), exposed(r), varies_by_origin(r),
                             "Access-Control-Allow-Credentials" in r.headers)
                      for name, r in (("ok", ok), ("no_token", no_token), ("missing", missing), ("other", other),
                                      ("health", health))}
            reason = (await no_token.json())["error"]
            return answers, refused, bad, page.status, actual, reason
        finally:
            await client.close()

    answers, refused, bad, page, actual, reason = run(scenario(), timeout=40)
    for path, (status, headers, links) in answers.items():
        assert status == 204, path
        assert headers["Access-Control-Allow-Origin"] == APP and headers["Vary"] == "Origin"
        assert {"POST", "PATCH", "DELETE", "GET"} <= set(headers["Access-Control-Allow-Methods"].split(", "))
        assert {"authorization", "content-type", "if-match"} <= set(headers["Access-Control-Allow-Headers"].split(", "))
        assert int(headers["Access-Control-Max-Age"]) > 0 and "Access-Control-Allow-Credentials" not in headers
        assert links == []  # no TURN credentials without a stream key or token
    status, error, headers = refused
    assert status == 403 and EVIL in error and "server.cors_origins" in error
    assert "Access-Control-Allow-Origin" not in headers
    assert bad[0][0] == 403 and "'PUT'" in bad[0][1]
    assert bad[1][0] == 403 and "x-mine" in bad[1][1]
    assert page == 405
    everything = set(EXPOSED_HEADERS)
    assert {"Location", "Link", "ETag", "Retry-After"} <= everything
    assert actual["ok"] == (200, APP, everything, True, False)
    assert actual["no_token"] == (401, APP, everything, True, False) and "bearer token" in reason
    assert actual["missing"] == (404, APP, everything, True, False)
    assert actual["other"] == (200, None, set(), True, False)
    assert actual["health"] == (200, None, set(), False, False)


def test_default_is_same_origin_only_and_star_never_echoes(engine, tmp_path):
    async def scenario():
        seen = {}
        for name, origins in (("default", []), ("any", ["*"])):
            client = TestClient(TestServer(build_app(config(tmp_path / name, origins), engine=engine),
                                           host="127.0.0.1"))
            await client.start_server()
            try:
                pre = await client.options("/api/v1/faces", headers=preflight(EVIL, method="GET"))
                got = await client.get("/api/v1/faces", headers={"Origin": EVIL, **bearer("bob")})
                seen[name] = (pre.status, pre.headers.get("Access-Control-Allow-Origin"),
                              (await pre.json())["error"] if pre.status == 403 else "",
                              got.status, got.headers.get("Access-Control-Allow-Origin"), varies_by_origin(got),
                              "Access-Control-Allow-Credentials" in got.headers)
            finally:
                await client.close()
        return seen

    seen = run(scenario(), timeout=40)
    status, allow, error, got, got_allow, vary, credentials = seen["default"]
    assert (status, allow, got, got_allow, vary, credentials) == (403, None, 200, None, False, False)
    assert "cross-origin calls are off" in error
    assert seen["any"] == (204, "*", "", 200, "*", False, False)


def test_whip_201_exposes_location_and_links_on_the_node_and_through_the_gateway(engine, tmp_path):
    """A page on APP publishes over WHIP straight to a node and through a gateway (whose own
    policy decides: the node behind it allows any origin, the gateway only APP)."""
    port = free_port()
    node_config = config(tmp_path / "data", ["*"], node_id="n1", advertise=f"127.0.0.1:{port}")

    async def publish(http: aiohttp.ClientSession, url, key: str) -> tuple:
        publisher = client_peer()
        try:
            async with http.post(url, data=await camera_offer(publisher, direction="sendonly"),
                                 headers={**SDP, "Origin": APP, "Authorization": f"Bearer {key}"}) as response:
                assert response.status == 201, await response.text()
                seen = (response.headers.get("Access-Control-Allow-Origin"), exposed(response),
                        varies_by_origin(response), response.headers.getall("Link"), response.headers["Location"])
            async with http.delete(url.with_path(seen[-1]), headers={"Origin": APP, "Authorization": f"Bearer {key}"}) \
                    as gone:
                assert gone.status == 204
                return (*seen, gone.headers.get("Access-Control-Allow-Origin"))
        finally:
            await publisher.close()

    async def scenario():
        registry = MemoryRegistry(ttl_s=60)
        node = TestClient(TestServer(build_app(node_config, engine=engine, registry=registry), host="127.0.0.1",
                                     port=port), headers=bearer("carol"))
        await node.start_server()
        gateway = TestClient(TestServer(build_gateway_app(registry, GatewaySettings(cors_origins=(APP,))),
                                        host="127.0.0.1"))
        await gateway.start_server()
        try:
            key = (await (await node.post("/api/v1/keys", json={"name": "cam", "face_id": "astronaut"})).json())["key"]
            async with aiohttp.ClientSession() as http:
                direct = await publish(http, node.make_url("/whip"), key)
                relayed = await publish(http, gateway.make_url("/whip"), key)
                async with http.options(gateway.make_url("/whip"), headers=preflight(APP)) as pre:
                    gateway_preflight = pre.status, pre.headers.get("Access-Control-Allow-Origin"), pre.headers.get(
                        "X-Swapcast-Node"), pre.headers.getall("Link", [])
                async with http.options(gateway.make_url("/whip"), headers=preflight(EVIL)) as pre:
                    gateway_refusal = pre.status, (await pre.json())["error"]
            return direct, relayed, gateway_preflight, gateway_refusal
        finally:
            await gateway.close()
            await node.close()
            await registry.close()

    direct, relayed, gateway_preflight, gateway_refusal = run(scenario(), timeout=50)
    allow, readable, vary, links, location, delete_allow = direct
    assert allow == "*" and {"Location", "Link"} <= readable and not vary and location.startswith("/whip/")
    assert links == [f'<{STUN}>; rel="ice-server"'] and delete_allow == "*"
    allow, readable, vary, links, location, delete_allow = relayed
    assert allow == APP and {"Location", "Link"} <= readable and vary and delete_allow == APP
    assert links == [f'<{STUN}>; rel="ice-server"'] and location.startswith("/whip/")
    assert gateway_preflight == (204, APP, None, [])  # answered by the gateway itself, never forwarded
    assert gateway_refusal[0] == 403 and EVIL in gateway_refusal[1]
    assert swap_threads() == []
