"""signaling/turn_credentials.py against a real coturn ``turnserver`` on 127.0.0.1 (REST-API
shared secret): what the API mints allocates a relay; the same credential once expired, or
one made with another secret, is refused. A TURN client (aioice's) does the allocating."""

from __future__ import annotations

import asyncio
import time

import pytest
from aioice.stun import TransactionFailed
from aioice.turn import create_turn_endpoint
from tls_testkit import turn_server

from signaling.turn_credentials import TurnCredentials, browser_ice_servers
from swapcast.config import IceServer, WebRtcConfig

pytestmark = pytest.mark.timeout(60)
SECRET = "turn-test-secret-" + "t" * 24


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
