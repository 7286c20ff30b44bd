"""What a Redis Cluster adds for the Redis registry (a real one: ``redis_cluster`` in
conftest): every key in the hash tag's slot, control messages published on any node, a
failover of that slot's master, cluster URLs; and the concurrency scenarios of
test_registry_redis again, on the cluster. The contract itself runs on it in
test_registry_contract."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
import test_registry_redis as single_server
from redis_server import RedisClusterServer, free_port
from test_registry_contract import TTL_S, check, receive, run, send_until_received
from test_registry_redis import node, quickly_unavailable

from signaling.registry import (
    FaceRecord,
    RedisRegistry,
    Registry,
    RegistryUnavailable,
    SessionRecord,
    open_registry,
)


@pytest.fixture
def redis_url(redis_cluster_url: str) -> str:
    """In this module "the Redis" is the shared cluster, for the scenarios taken below."""
    return redis_cluster_url


test_concurrent_placements_spread_evenly = single_server.test_concurrent_placements_spread_evenly
test_concurrent_placements_never_exceed_capacity = single_server.test_concurrent_placements_never_exceed_capacity
test_concurrent_reaps_move_each_session_once = single_server.test_concurrent_reaps_move_each_session_once


def on(url: str, ttl_s: float = TTL_S) -> Callable[[float], RedisRegistry]:
    """What ``check`` makes: a registry of the Redis at ``url``."""
    return lambda _: RedisRegistry(url, ttl_s=ttl_s)


def test_every_key_is_in_the_hash_tags_slot_on_one_master(redis_cluster: RedisClusterServer, redis_url: str) -> None:
    async def scenario(registry: Registry) -> None:
        await registry.register_node(node("a", capacity=1))
        await registry.place_session(SessionRecord(id="s1", protocol="rtmp"))
        await registry.save_session(SessionRecord(id="s2", protocol="rtmp", state="orphaned"))
        await registry.put_face(FaceRecord(id="f1", name="x", thumbnail_jpeg=b"\xff", source=b"\x00"))

    check(on(redis_url), scenario)
    keys: dict[int, list[bytes]] = {}
    for port in redis_cluster.ports:
        with redis_cluster.client(port) as client:
            keys[port] = client.keys("*")
    holders = [port for port, found in keys.items() if found]
    assert len(holders) == 1
    with redis_cluster.client(holders[0]) as client:
        slot = client.cluster("keyslot", "{swapcast}")
        assert {client.cluster("keyslot", key) for key in keys[holders[0]]} == {slot}
        assert client.cluster("countkeysinslot", slot) == len(keys[holders[0]]) == 10  # with the per-owner face set


def test_control_messages_published_on_any_node_reach_the_listener(redis_cluster: RedisClusterServer,
                                                                   redis_url: str) -> None:
    """A plain PUBLISH reaches subscribers on every node of a cluster, so a node hears its
    messages whichever node a gateway's client publishes them on."""

    async def scenario(registry: Registry) -> None:
        got: list[dict[str, Any]] = []
        listener = asyncio.create_task(receive(registry, "a", got))
        await send_until_received(registry, "a", got)
        for port in redis_cluster.ports:
            raw = aioredis.Redis(port=port)
            try:
                while got[-1].get("via") != port:
                    await raw.publish("swapcast:{swapcast}:control:a", json.dumps({"kind": "drain", "via": port}))
                    await asyncio.sleep(0.02)
            finally:
                await raw.aclose()
        await registry.close()
        await asyncio.wait_for(listener, 3)

    check(on(redis_url), scenario)


def test_open_registry_takes_a_cluster_url_naming_any_of_its_nodes(redis_cluster: RedisClusterServer,
                                                                    redis_url: str) -> None:
    dead = free_port()

    async def scenario() -> None:
        registry = open_registry(f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{redis_cluster.ports[-1]}/0", ttl_s=1.5)
        try:
            assert isinstance(registry, RedisRegistry) and registry.ttl_s == 1.5
            assert await registry.ping()
            await registry.register_node(node("a", capacity=1))
            assert [info.id for info in await registry.nodes()] == ["a"]
        finally:
            await registry.close()

    run(scenario())
    with pytest.raises(ValueError, match="a Redis Cluster URL names its nodes"):
        open_registry("redis+cluster:///0", ttl_s=1.5)


def test_unreachable_cluster_is_unavailable_quickly() -> None:
    async def scenario(registry: Registry) -> None:
        assert not await registry.ping()
        await quickly_unavailable(registry.nodes())
        await quickly_unavailable(registry.place_session(SessionRecord(id="s1", protocol="webrtc")))

    check(on(f"redis+cluster://127.0.0.1:{free_port()}"), scenario)


@pytest.fixture
def failover_cluster() -> Any:
    """A cluster with a replica per master, for a test that kills one (the shared one stays)."""
    cluster = RedisClusterServer(replicas=1)
    try:
        yield cluster.start()
    finally:
        cluster.close()


def test_registry_works_on_after_a_failover_of_the_slots_master(failover_cluster: RedisClusterServer) -> None:
    """Unavailable until a replica takes over; then the scripts run again (the new master
    answers NOSCRIPT at first: Redis does not replicate its script cache) and the control
    listener subscribes again."""

    async def scenario(registry: Registry) -> None:
        got: list[dict[str, Any]] = []
        listener = asyncio.create_task(receive(registry, "a", got))
        await registry.register_node(node("a", capacity=4))
        await registry.place_session(SessionRecord(id="s1", protocol="webrtc"))
        await send_until_received(registry, "a", got)

        await asyncio.to_thread(failover_cluster.kill_master_of, "{swapcast}")
        await quickly_unavailable(registry.place_session(SessionRecord(id="s2", protocol="webrtc")))
        while True:
            try:
                placed = await registry.place_session(SessionRecord(id="s2", protocol="webrtc"))
                break
            except RegistryUnavailable:
                await asyncio.sleep(0.1)
        assert placed.node_id == "a"
        assert [s.id for s in await registry.sessions("a")] == ["s1", "s2"]
        assert await registry.heartbeat("a")
        got.clear()
        await send_until_received(registry, "a", got)

        await registry.close()
        await asyncio.wait_for(listener, 3)

    check(on(failover_cluster.url, ttl_s=30.0), scenario, timeout=20.0)
