"""What only the Redis registry has to get right: atomic placement and reaping under
concurrent clients, one hash slot for Redis Cluster, and outages of the store."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot
from redis_server import RedisServer
from test_registry_contract import TTL_S, run

from signaling.registry import (
    FaceRecord,
    NoCapacityError,
    NodeInfo,
    RedisRegistry,
    RegistryUnavailable,
    SessionRecord,
)


def node(node_id: str, capacity: int) -> NodeInfo:
    return NodeInfo(id=node_id, address=f"{node_id}.internal:8080", capacity=capacity)


async def place_all(clients: list[RedisRegistry], count: int) -> list[SessionRecord | NoCapacityError]:
    """``count`` placements at once, alternating between the clients."""

    async def one(i: int) -> SessionRecord | NoCapacityError:
        try:
            return await clients[i % len(clients)].place_session(SessionRecord(id=f"s{i:03}", protocol="whip"))
        except NoCapacityError as exc:
            return exc

    return await asyncio.gather(*(one(i) for i in range(count)))


def two_clients(url: str, scenario: Any, ttls: tuple[float, float] = (5.0, 5.0)) -> None:
    """Run ``scenario`` with two clients of one Redis (as two gateways would be); the nodes
    each registers live ``ttls`` (long by default: a slow burst must not outlive a node)."""

    async def body() -> None:
        clients = [RedisRegistry(url, ttl_s=ttl_s) for ttl_s in ttls]
        try:
            await scenario(*clients)
        finally:
            for client in clients:
                await client.close()

    run(body(), timeout=15)


def test_concurrent_placements_spread_evenly(redis_url: str) -> None:
    async def scenario(first: RedisRegistry, second: RedisRegistry) -> None:
        for node_id in ("a", "b", "c"):
            await first.register_node(node(node_id, capacity=70))
        placed = await place_all([first, second], 200)
        assert all(isinstance(r, SessionRecord) for r in placed)
        load = {info.id: info.load for info in await second.nodes()}
        assert sorted(load.values()) == [66, 67, 67]
        assert Counter(r.node_id for r in placed if isinstance(r, SessionRecord)) == load
        assert len(await first.sessions()) == 200

    two_clients(redis_url, scenario)


def test_concurrent_placements_never_exceed_capacity(redis_url: str) -> None:
    async def scenario(first: RedisRegistry, second: RedisRegistry) -> None:
        for node_id in ("a", "b", "c"):
            await first.register_node(node(node_id, capacity=60))
        results = await place_all([first, second], 200)
        refused = [r for r in results if isinstance(r, NoCapacityError)]
        assert len(refused) == 20
        assert "(3 live nodes: 3 full)" in str(refused[0])
        assert {info.id: info.load for info in await first.nodes()} == {"a": 60, "b": 60, "c": 60}
        assert len(await first.sessions()) == 180  # a refused placement leaves no record

    two_clients(redis_url, scenario)


def test_concurrent_reaps_move_each_session_once(redis_url: str) -> None:
    async def scenario(short: RedisRegistry, long: RedisRegistry) -> None:
        await short.register_node(node("a", capacity=20))  # dies soon after the placements: nobody beats for it then
        for node_id in ("b", "c"):
            await long.register_node(node(node_id, capacity=20))

        async def beat_a() -> None:  # alive while 30 placements take their time (over its 1 s TTL on a loaded host)
            while True:
                await short.heartbeat("a")
                await asyncio.sleep(0.2)

        beating = asyncio.create_task(beat_a())
        try:
            await place_all([short, long], 30)
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
        victims = {s.id for s in await short.sessions("a")}
        assert len(victims) == 10

        while await short.node("a") is not None:
            await asyncio.sleep(0.05)
        reaps = await asyncio.gather(*(client.reap_dead_nodes() for client in (short, long, short, long)))
        moved = [s.id for reap in reaps for s in reap]
        assert sorted(moved) == sorted(victims)  # each exactly once, by whichever reaper got there
        assert {info.id: info.load for info in await short.nodes()} == {"b": 15, "c": 15}
        owned = [await long.sessions(node_id) for node_id in ("a", "b", "c")]
        owners = Counter(s.id for records in owned for s in records)
        assert len(owners) == 30 and set(owners.values()) == {1}

    two_clients(redis_url, scenario, ttls=(1.0, 5.0))


def test_every_key_shares_one_hash_slot(redis_url: str) -> None:
    async def scenario(first: RedisRegistry, other: RedisRegistry) -> None:
        await first.register_node(node("a", capacity=1))
        await first.place_session(SessionRecord(id="s1", protocol="rtmp"))
        await first.save_session(SessionRecord(id="s2", protocol="rtmp", state="orphaned"))
        await first.put_face(FaceRecord(id="f1", name="x", thumbnail_jpeg=b"\xff", source=b"\x00"))
        assert await other.nodes() == []  # another namespace sees nothing

        raw = aioredis.Redis.from_url(redis_url)
        keys = [key.decode() for key in await raw.keys("*")]
        await raw.aclose()
        assert {"nodes", "node:a", "node_sessions:a", "session:s1", "session:s2", "sessions", "orphans", "face:f1", "faces",
            "owner_faces:"} == {
            key.removeprefix("swapcast:{swapcast}:") for key in keys}
        assert {key_slot(key.encode()) for key in keys} == {key_slot(b"{swapcast}")}

    async def body() -> None:
        first = RedisRegistry(redis_url, ttl_s=TTL_S)
        other = RedisRegistry(redis_url, ttl_s=TTL_S, namespace="elsewhere")
        try:
            await scenario(first, other)
        finally:
            await first.close()
            await other.close()

    run(body())


@pytest.fixture
def own_server() -> Any:
    """A redis-server this test may stop and restart (the shared one must stay up)."""
    server = RedisServer().start()
    yield server
    server.close()


async def quickly_unavailable(call: Any) -> None:
    started = time.monotonic()
    with pytest.raises(RegistryUnavailable, match="session registry unavailable: "):
        await call
    assert time.monotonic() - started < 3


def test_outage_raises_unavailable_and_recovers(own_server: RedisServer) -> None:
    async def scenario(registry: RedisRegistry) -> None:
        got: list[dict[str, Any]] = []

        async def receive() -> None:
            async for message in registry.control_messages("a"):
                got.append(message)

        async def send_until_received(count: int) -> None:
            while len(got) < count:
                await registry.send_control("a", {"kind": "drain"})
                await asyncio.sleep(0.02)

        await registry.register_node(node("a", capacity=2))
        listener = asyncio.create_task(receive())
        await send_until_received(1)

        await asyncio.to_thread(own_server.stop)
        assert not await registry.ping()
        await quickly_unavailable(registry.heartbeat("a"))
        await quickly_unavailable(registry.nodes())
        await quickly_unavailable(registry.place_session(SessionRecord(id="s1", protocol="webrtc")))
        await quickly_unavailable(registry.send_control("a", {"kind": "drain"}))
        await asyncio.sleep(0.5)  # the listener retries meanwhile
        assert not listener.done()

        await asyncio.to_thread(own_server.start)  # back, and empty
        assert await registry.ping()
        assert not await registry.heartbeat("a")
        await registry.register_node(node("a", capacity=2))
        assert await registry.heartbeat("a")
        assert (await registry.place_session(SessionRecord(id="s1", protocol="webrtc"))).node_id == "a"
        count = len(got)
        await send_until_received(count + 1)  # the listener subscribed again

        await registry.close()
        await asyncio.wait_for(listener, 3)

    async def body() -> None:
        registry = RedisRegistry(own_server.url, ttl_s=2.0)
        try:
            await scenario(registry)
        finally:
            await registry.close()

    run(body(), timeout=20)
