"""signaling/turn_credentials.py against a real coturn ``turnserver`` on 127.0.0.1 (REST-API
shared secret): what the API mints allocates a relay; the same credential once expired, or
one made with another secret, is refused. A TURN client (aioice's) does the allocating."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
import yaml
from aioice.stun import TransactionFailed
from aioice.turn import create_turn_endpoint
from tls_testkit import turn_server

from signaling.turn_credentials import TurnCredentials, browser_ice_servers
from swapcast.config import IceServer, WebRtcConfig, load_config

pytestmark = pytest.mark.timeout(60)
SECRET = "turn-test-secret-" + "t" * 24
REPO = Path(__file__).resolve().parent.parent
SECRET_REFERENCE = re.compile(r"\$\{SWAPCAST_TURN_SECRET[^}]*\}|\$\(TURN_SECRET\)")  # compose's, k8s'


@pytest.fixture(scope="module")
def turn(tmp_path_factory):
    with turn_server(tmp_path_factory.mktemp("turn"), SECRET) as server:
        yield server


async def _allocate(port: int, server: dict) -> tuple[str, int]:
    transport, _ = await asyncio.wait_for(create_turn_endpoint(
        asyncio.DatagramProtocol, ("127.0.0.1", port), server["username"], server["credential"]), 5)
    try:
        return transport.get_extra_info("sockname")  # the relayed address
    finally:
        transport.close()


def test_minted_credentials_allocate_and_expire(turn):
    now = time.time()
    minted = TurnCredentials((turn.url,), SECRET, ttl_s=120, clock=lambda: now)
    server = minted.ice_server("alice")
    expiry, user = server["username"].split(":")
    assert user == "alice" and int(expiry) == int(now) + 120 and server["urls"] == [turn.url]
    assert SECRET not in str(server)

    relayed = asyncio.run(_allocate(turn.port, server))
    assert relayed[0] == "127.0.0.1" and relayed[1] > 0

    expired = TurnCredentials((turn.url,), SECRET, ttl_s=120, clock=lambda: now - 3600).ice_server("alice")
    with pytest.raises(TransactionFailed, match="401"):
        asyncio.run(_allocate(turn.port, expired))
    forged = TurnCredentials((turn.url,), "another secret", ttl_s=120).ice_server("alice")
    with pytest.raises(TransactionFailed, match="401"):
        asyncio.run(_allocate(turn.port, forged))


def test_an_allocation_outlives_its_credentials(turn):
    """Expiry stops new allocations only: a relay made in time goes on being refreshed, so a
    live session does not drop when its credentials expire."""
    from aioice import stun

    async def scenario():
        server = TurnCredentials((turn.url,), SECRET, ttl_s=1).ice_server("dave")
        transport, _ = await create_turn_endpoint(asyncio.DatagramProtocol, ("127.0.0.1", turn.port),
                                                  server["username"], server["credential"])
        try:
            await asyncio.sleep(2.2)  # past the expiry in the username
            with pytest.raises(TransactionFailed, match="401"):
                await _allocate(turn.port, server)
            refresh = stun.Message(message_method=stun.Method.REFRESH, message_class=stun.Class.REQUEST)
            refresh.attributes["LIFETIME"] = 600
            # aioice refreshes on its own only every ~8 minutes: send that Refresh now, through
            # its client protocol (which signs it with the credentials it allocated with)
            response, _ = await transport._TurnTransport__inner_protocol.request_with_retry(refresh)
            assert response.attributes["LIFETIME"] > 0
        finally:
            transport.close()

    asyncio.run(scenario())


def test_browsers_get_stun_and_minted_turn_never_the_nodes_own_credentials():
    turn = TurnCredentials.from_config(WebRtcConfig(turn_urls=["turn:turn.example.org:3478"], turn_shared_secret=SECRET,
                                                    turn_ttl_s=600))
    configured = [IceServer(urls=["stun:stun.example.org:3478"]),
                  IceServer(urls=["turn:private.example.org"], username="node", credential="long-lived")]
    servers = browser_ice_servers(configured, turn, "bob:smith")
    assert servers[0] == {"urls": ["stun:stun.example.org:3478"]}
    assert servers[1]["urls"] == ["turn:turn.example.org:3478"] and servers[1]["username"].endswith(":bob_smith")
    assert "long-lived" not in str(servers) and SECRET not in str(servers)
    assert browser_ice_servers(configured, None, "bob") == [{"urls": ["stun:stun.example.org:3478"]}]
    assert TurnCredentials.from_config(WebRtcConfig()) is None


def _deployments() -> list[tuple[str, list[str], dict[str, str]]]:
    """(where, coturn's command line, the nodes' TURN environment) of docker-compose.yml and
    configs/k8s, the secret filled in as compose / Kubernetes would."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    node_env = compose["services"]["node1"]["environment"]
    compose_env = {name: re.sub(r"\$\{TURN_HOST:-([^}]*)\}", r"\1", str(node_env[name]))
                   for name in ("SWAPCAST_WEBRTC__TURN_URLS", "SWAPCAST_WEBRTC__TURN_SHARED_SECRET")}
    (coturn,) = [d for d in yaml.safe_load_all((REPO / "configs/k8s/coturn.yaml").read_text()) if d["kind"] == "Deployment"]
    (node,) = [d for d in yaml.safe_load_all((REPO / "configs/k8s/node.yaml").read_text()) if d["kind"] == "Deployment"]
    k8s_env = {item["name"]: item.get("value", "$(TURN_SECRET)")
               for item in node["spec"]["template"]["spec"]["containers"][0]["env"]
               if item["name"].startswith("SWAPCAST_WEBRTC__TURN")}
    return [("compose", compose["services"]["coturn"]["command"], compose_env),
            ("k8s", coturn["spec"]["template"]["spec"]["containers"][0]["args"], k8s_env)]


@pytest.mark.parametrize("where", ["compose", "k8s"])
def test_the_deployments_coturn_accepts_what_their_nodes_mint(where, tmp_path):
    """The coturn command line of the deployment, run by the real turnserver (on loopback),
    allocates for credentials a node configured as that deployment configures it mints."""
    (command, env), = [(c, e) for w, c, e in _deployments() if w == where]
    fill = lambda text: SECRET_REFERENCE.sub(SECRET, str(text))  # noqa: E731
    config = load_config(environ={name: fill(value) for name, value in env.items()})
    assert config.webrtc.turn_shared_secret == SECRET and config.webrtc.turn_urls
    server = TurnCredentials.from_config(config.webrtc).ice_server("carol")
    with turn_server(tmp_path, "not-this-one", options=tuple(fill(option) for option in command)) as turn:
        assert asyncio.run(_allocate(turn.port, server))[1] > 0
        expired = TurnCredentials(tuple(config.webrtc.turn_urls), SECRET, 60, clock=lambda: time.time() - 120)
        with pytest.raises(TransactionFailed, match="401"):
            asyncio.run(_allocate(turn.port, expired.ice_server("carol")))
