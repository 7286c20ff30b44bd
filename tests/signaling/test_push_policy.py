"""Push destinations are server-side requests users point: a user's stream key may not make
the node connect into the operator's network. Non-public addresses (in every spelling) are
refused when the key is made (400 with the reason) and again at connect time, against what
the name resolves to then (DNS rebinding); the operator allows ranges or hosts in the
config (``push.allowed_networks`` / ``push.allowed_hosts``); admins' and command-line keys
are not restricted."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from signaling.auth import mint_token
from signaling.push_policy import IPV4_IN_IPV6, DestinationRefused, PushPolicy, ipv4_in_ipv6, is_public
from signaling.stream_keys import StreamKeyStore
from streamer.rtmp.client import RtmpClientError, RtmpPublishClient
from swapcast.app import build_app
from swapcast.config import ConfigError, load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import TEST_SECRET, node_config, run  # noqa: E402

ALICE = {"Authorization": f"Bearer {mint_token(TEST_SECRET, 'alice')}"}
OPS = {"Authorization": f"Bearer {mint_token(TEST_SECRET, 'ops', role='admin')}"}
INTERNAL = ["127.0.0.1", "10.1.2.3", "172.16.0.9", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
            "224.0.0.251", "255.255.255.255", "::1", "::", "fe80::1", "fc00::5", "fd12:3456::1", "ff02::1",
            "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:7f00:1::1", "2002:a00:1::1"]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2001:4860:4860::8888", "2606:4700:4700::1111"]
# Every IPv6 range that embeds or translates IPv4 (push_policy.IPV4_IN_IPV6), each in several
# spellings of loopback and of a public address: a translator or relay forwards them to the
# IPv4 host, so none is a user's destination unless the operator allows it (round 3 found
# the IPv4-compatible, SIIT and local-use NAT64 forms of 127.0.0.1 accepted).
TRANSLATED = {
    "::/96": ["::127.0.0.1", "0:0:0:0:0:0:127.0.0.1", "::7f00:1", "::8.8.8.8", "0::0808:0808"],
    "::ffff:0:0/96": ["::ffff:127.0.0.1", "::FFFF:7F00:1", "0:0:0:0:0:ffff:127.0.0.1", "::ffff:8.8.8.8"],
    "::ffff:0:0:0/96": ["::ffff:0:127.0.0.1", "0::ffff:0:7f00:1", "::FFFF:0:8.8.8.8"],
    "64:ff9b::/96": ["64:ff9b::127.0.0.1", "64:ff9b::7f00:1", "64:FF9B:0:0:0:0:7F00:1", "64:ff9b::808:808"],
    "64:ff9b:1::/48": ["64:ff9b:1::7f00:1", "64:ff9b:1::127.0.0.1", "64:ff9b:1:7f00:1::", "64:ff9b:1:ab::808:808"],
    "2002::/16": ["2002:7f00:1::1", "2002:7F00:0001::", "2002:808:808::1"],
    "2001::/32": ["2001:0:4136:e378:8000:63bf:80ff:fffe", "2001::1", "2001:0:808:808::1"],
}


def test_every_spelling_of_an_internal_address_is_not_public():
    assert [a for a in INTERNAL if is_public(ipaddress.ip_address(a))] == []
    assert [a for a in PUBLIC if not is_public(ipaddress.ip_address(a))] == []


def test_the_table_of_ipv4_carrying_ranges_is_the_rule():
    assert sorted(str(entry.network) for entry in IPV4_IN_IPV6) == sorted(TRANSLATED)
    for network, spellings in TRANSLATED.items():
        for spelling in spellings:
            address = ipaddress.ip_address(spelling)
            assert not is_public(address), spelling
            assert str(ipv4_in_ipv6(address).network) == network, spelling


def test_every_spelling_of_every_ipv4_carrying_range_is_refused_at_creation_and_at_connect(monkeypatch):
    """As a literal host at creation (check_new), and as what a name resolves to at connect
    (resolve): both paths, every spelling, unless the operator lists the range."""
    answer = {}
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *args, **kwargs: [
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (answer["address"], port, 0, 0))])

    async def checks():
        refused, allowed = {}, {}
        for network, spellings in TRANSLATED.items():
            operator = PushPolicy.from_lists([], [network])
            for spelling in spellings:
                outcomes = []
                try:
                    await PushPolicy().check_new(f"rtmp://[{spelling}]:1935/live/x")
                    outcomes.append("created")
                except DestinationRefused as exc:
                    outcomes.append(str(exc))
                answer["address"] = spelling
                try:
                    await PushPolicy().resolve("cdn.example", 1935)
                    outcomes.append("connected")
                except DestinationRefused as exc:
                    outcomes.append(str(exc))
                refused[spelling] = outcomes
                allowed[spelling] = await operator.resolve("cdn.example", 1935)
        return refused, allowed

    refused, allowed = asyncio.run(checks())
    for spelling, (at_creation, at_connect) in refused.items():
        assert "carries an IPv4 one" in at_creation and "push.allowed_networks" in at_creation, spelling
        assert "carries an IPv4 one" in at_connect, spelling
    assert all(ipaddress.ip_address(allowed[s]) == ipaddress.ip_address(s) for s in allowed)


def test_new_destinations_are_checked_by_address_and_host():
    async def checks():
        default, allowed = PushPolicy(), PushPolicy.from_lists([], ["127.0.0.1/32", "10.0.0.0/8"])
        hosts = PushPolicy.from_lists(["live.example.com", ".cdn.example.net"], [])
        outcomes = {}
        for name, policy, url in [
            ("loopback", default, "rtmp://127.0.0.1:6379/live/x"),
            ("localhost by name", default, "rtmp://localhost/live/x"),
            ("mapped", default, "rtmp://[::ffff:127.0.0.1]/live/x"),
            ("metadata", default, "rtmp://169.254.169.254/live/x"),
            ("public", default, "rtmp://8.8.8.8/live/x"),
            ("allowed network", allowed, "rtmp://127.0.0.1:1935/live/x"),
            ("mapped into allowed network", allowed, "rtmp://[::ffff:10.1.1.1]/live/x"),
            ("outside the allowed networks", allowed, "rtmp://192.168.0.2/live/x"),
            ("listed host", hosts, "rtmp://live.example.com/app/key"),
            ("listed subdomain", hosts, "rtmp://eu.cdn.example.net/app/key"),
            ("unlisted host", hosts, "rtmp://8.8.8.8/app/key"),
        ]:
            try:
                await policy.check_new(url)
                outcomes[name] = "ok"
            except DestinationRefused as exc:
                outcomes[name] = str(exc)
        return outcomes

    outcomes = asyncio.run(checks())
    for name in ("loopback", "localhost by name", "mapped", "metadata", "outside the allowed networks"):
        assert "is not a public address" in outcomes[name] and "push.allowed_networks" in outcomes[name], name
    assert "not in push.allowed_hosts" in outcomes["unlisted host"]
    for name in ("public", "allowed network", "mapped into allowed network", "listed host", "listed subdomain"):
        assert outcomes[name] == "ok", (name, outcomes[name])


def test_the_connect_time_check_sees_what_the_name_resolves_to_then(monkeypatch):
    """A name that was public when the key was made and points at loopback by the time the
    node connects (DNS rebinding) is refused at connect, before any socket is opened."""
    answers = iter(["8.8.8.8", "127.0.0.1"])

    def rebinding(host, port, *args, **kwargs):
        address = next(answers)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)

    async def scenario():
        policy = PushPolicy()
        await policy.check_new("rtmp://rebind.example/live/x")  # 8.8.8.8 now
        with pytest.raises(DestinationRefused, match=r"rebind.example \(127.0.0.1\) is not a public address"):
            await policy.resolve("rebind.example", 1935)

    asyncio.run(scenario())


class Listener:
    """A TCP port that counts the connections it is offered (stands in for Redis)."""

    def __init__(self) -> None:
        self.accepted = 0

    async def __aenter__(self) -> Listener:
        async def accept(reader, writer):
            self.accepted += 1
            writer.close()

        self.server = await asyncio.start_server(accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.server.close()
        await self.server.wait_closed()


def test_a_users_key_cannot_make_the_node_connect_to_loopback_but_the_operators_can(tmp_path, caplog):
    async def scenario():
        store = StreamKeyStore(tmp_path)
        async with Listener() as redis:
            url = f"rtmp://127.0.0.1:{redis.port}/live/x"
            store.add("user cam", face_id="astronaut", push=(url,), owner="alice")  # e.g. made before the policy
            client = RtmpPublishClient(url, timeout=2, resolve=PushPolicy().resolver(store, url))
            with pytest.raises(RtmpClientError) as refused:
                await client.connect()
            after_refusal = redis.accepted
            operator_url = f"rtmp://127.0.0.1:{redis.port}/live/y"
            store.add("studio", face_id="astronaut", push=(operator_url,))  # the command line: no owner
            operator = RtmpPublishClient(operator_url, timeout=2, resolve=PushPolicy().resolver(store, operator_url))
            with pytest.raises(RtmpClientError):  # it connects; the listener is no RTMP server
                await operator.connect()
            return str(refused.value), after_refusal, redis.accepted

    reason, after_refusal, accepted = run(scenario(), timeout=30)
    assert "cannot connect" in reason and "not a public address" in reason
    assert after_refusal == 0 and accepted == 1
    logged = [r.getMessage() for r in caplog.records if "refused by the push policy" in r.getMessage()]
    assert len(logged) == 1 and "/live/***" in logged[0] and "/live/x" not in logged[0]  # the log says why, not the key


def test_the_keys_api_refuses_a_users_internal_destination_with_a_reason(engine, tmp_path):
    def config(networks: list[str]):
        base = node_config(tmp_path)
        return base.model_copy(update={"push": base.push.model_copy(update={"allowed_networks": networks})})

    async def scenario():
        answers = {}
        for networks in ([], ["127.0.0.1/32"]):
            client = TestClient(TestServer(build_app(config(networks), engine=engine), host="127.0.0.1"))
            await client.start_server()
            try:
                for who, headers in (("alice", ALICE), ("ops", OPS)):
                    for url in ("rtmp://127.0.0.1:6379/live/x", "rtmp://[::ffff:192.168.0.1]/live/x"):
                        response = await client.post("/api/v1/keys", headers=headers,
                                                     json={"name": "cam", "face_id": "astronaut", "push": [url]})
                        answers[tuple(networks), who, url] = response.status, (await response.json()).get("error")
            finally:
                await client.close()
        return answers

    answers = run(scenario(), timeout=60)
    redis, private = "rtmp://127.0.0.1:6379/live/x", "rtmp://[::ffff:192.168.0.1]/live/x"
    status, reason = answers[(), "alice", redis]
    assert status == 400 and reason == ("push destination 127.0.0.1 is not a public address; "
                                        "the operator can allow it in push.allowed_networks")
    assert answers[(), "alice", private][0] == 400
    assert answers[("127.0.0.1/32",), "alice", redis] == (201, None)  # the operator allowed it
    assert answers[("127.0.0.1/32",), "alice", private][0] == 400
    assert {answers[n, "ops", u][0] for n in ((), ("127.0.0.1/32",)) for u in (redis, private)} == {201}


def test_the_config_refuses_a_network_that_is_not_one(tmp_path):
    with pytest.raises(ConfigError, match="allowed_networks"):
        load_config(environ={}, overrides={"push": {"allowed_networks": ["not-a-network"]}})
