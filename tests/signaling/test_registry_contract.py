"""The session registry contract, run against both implementations: the in-process one and
Redis (a real redis-server, and a real Redis Cluster). Each test runs its own event loop
with a hard deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from signaling.registry import (
    FaceLimitError,
    FaceRecord,
    MemoryRegistry,
    NoCapacityError,
    NodeInfo,
    RedisRegistry,
    Registry,
    RegistryError,
    SessionRecord,
    UnknownSessionError,
    open_registry,
)

TTL_S = 0.5  # short, yet a loaded CI machine never misses a beat (see outlive)
T = TypeVar("T")
MakeRegistry = Callable[[float], Registry]


def run(coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
    """Run a coroutine in a fresh loop with a hard deadline (the tests use no asyncio plugin)."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
def make(request: pytest.FixtureRequest) -> MakeRegistry:
    if request.param == "memory":
        return lambda ttl_s: MemoryRegistry(ttl_s=ttl_s)
    url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
    return lambda ttl_s: RedisRegistry(url, ttl_s=ttl_s)


def check(make: MakeRegistry, scenario: Callable[[Registry], Awaitable[None]], timeout: float = 10.0) -> None:
    """Run ``scenario`` against a fresh registry (created in the test's loop), then close it."""

    async def body() -> None:
        registry = make(TTL_S)
        try:
            await scenario(registry)
        finally:
            await registry.close()

    run(body(), timeout)


def node(node_id: str, capacity: int = 2, **fields: Any) -> NodeInfo:
    return NodeInfo(id=node_id, address=f"{node_id}.internal:8080", capacity=capacity, **fields)


def session(session_id: str, **fields: Any) -> SessionRecord:
    return SessionRecord(**{"id": session_id, "protocol": "webrtc", **fields})


async def place(registry: Registry, *session_ids: str) -> list[str]:
    """Place the sessions one after the other; their node ids."""
    return [(await registry.place_session(session(sid))).node_id for sid in session_ids]


async def loads(registry: Registry) -> dict[str, int]:
    return {info.id: info.load for info in await registry.nodes()}


async def outlive(registry: Registry, keep: list[str], seconds: float) -> None:
    """Let ``seconds`` pass while only the ``keep`` nodes beat."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        for node_id in keep:
            assert await registry.heartbeat(node_id)
        await asyncio.sleep(TTL_S / 5)


def test_nodes_register_beat_and_expire(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        await registry.register_node(node("b", gpu="NVIDIA H200", rtmp_address="b.internal:1935", load=99))
        await registry.register_node(node("a"))
        listed = await registry.nodes()
        assert [info.id for info in listed] == ["a", "b"]
        b = listed[1]
        assert (b.address, b.rtmp_address, b.gpu, b.capacity, b.state, b.load) == (
            "b.internal:8080", "b.internal:1935", "NVIDIA H200", 2, "ready", 0)  # load is counted, not reported

        assert await registry.heartbeat("a", queue_delay_ms=12.5, stats={"fps": 30})
        a = await registry.node("a")
        assert a is not None and (a.queue_delay_ms, a.stats) == (12.5, {"fps": 30})
        assert not await registry.heartbeat("nobody")
        assert await registry.node("nobody") is None

        await outlive(registry, ["a"], TTL_S * 1.7)
        assert [info.id for info in await registry.nodes()] == ["a"]
        assert await registry.node("b") is None
        assert not await registry.heartbeat("b")  # it must register again
        await registry.register_node(node("b"))
        assert [info.id for info in await registry.nodes()] == ["a", "b"]

    check(make, scenario)


def test_draining_node_keeps_its_sessions_but_takes_no_new_ones(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        await registry.register_node(node("a", capacity=4))
        await registry.register_node(node("b", capacity=4))
        assert await place(registry, "s1", "s2") == ["a", "b"]

        drained = await registry.set_node_state("a", "draining")
        assert (drained.id, drained.state, drained.load) == ("a", "draining", 1)
        assert await place(registry, "s3", "s4") == ["b", "b"]
        assert [s.id for s in await registry.sessions("a")] == ["s1"]
        assert await loads(registry) == {"a": 1, "b": 3}

        await registry.set_node_state("a", "ready")
        assert await place(registry, "s5") == ["a"]
        with pytest.raises(RegistryError, match="unknown node"):
            await registry.set_node_state("nobody", "draining")

    check(make, scenario)


def test_placement_picks_least_loaded_with_room(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        with pytest.raises(NoCapacityError, match=r"no node has room .*\(no live node\)"):
            await place(registry, "s0")
        await registry.register_node(node("b"))
        await registry.register_node(node("a"))
        assert await place(registry, "s1", "s2", "s3", "s4") == ["a", "b", "a", "b"]  # ties: lowest id
        with pytest.raises(NoCapacityError, match=r"\(2 live nodes: 2 full\)"):
            await place(registry, "s5")
        assert await registry.get_session("s5") is None

        assert await registry.end_session("s1")
        with pytest.raises(NoCapacityError, match=r"\(2 live nodes: 1 full, 1 excluded\)"):
            await registry.place_session(session("s5"), exclude=["a"])
        await registry.set_node_state("a", "draining")
        with pytest.raises(NoCapacityError, match=r"\(2 live nodes: 1 full, 1 draining\)"):
            await place(registry, "s5")

    check(make, scenario)


def test_placement_compares_load_relative_to_capacity(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        await registry.register_node(node("cpu", capacity=2))
        await registry.register_node(node("gpu", capacity=8))
        # cpu 0/2 ties gpu 0/8 (lowest id), then gpu takes sessions until it is as busy
        assert await place(registry, *(f"s{i}" for i in range(6))) == ["cpu", "gpu", "gpu", "gpu", "gpu", "cpu"]
        assert await loads(registry) == {"cpu": 2, "gpu": 4}

    check(make, scenario)


def test_placing_again_moves_the_session_and_its_load(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        await registry.register_node(node("a", capacity=1))
        await registry.register_node(node("b", capacity=1))
        first = await registry.place_session(session("s1", owner="ann", label="cam"))
        assert (first.node_id, first.state) == ("a", "placed")
        await registry.update_session("s1", state="live")

        # its own slot does not count against a full node: placing it again keeps it there
        assert (await registry.place_session(session("s1", owner="ann"))).node_id == "a"
        moved = await registry.place_session(session("s1", owner="ann"), exclude=["a"])
        assert (moved.node_id, moved.state) == ("b", "placed")
        assert await registry.get_session("s1") == moved
        assert await loads(registry) == {"a": 0, "b": 1}
        assert await registry.sessions("a") == []

    check(make, scenario)


def test_session_records_round_trip_and_end_conditionally(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        await registry.register_node(node("a"))
        await registry.register_node(node("b"))
        record = session("s1", node_id="a", owner="ann", face_id="f1", options={"blend": 0.5, "mask": [1, 2]},
                         label="café", state="live", created=1000.0)
        await registry.save_session(record)
        await registry.save_session(session("s0", node_id="b", protocol="rtmp", created=999.0))
        assert await registry.get_session("s1") == record
        assert await registry.get_session("missing") is None
        assert await loads(registry) == {"a": 1, "b": 1}
        assert [s.id for s in await registry.sessions()] == ["s0", "s1"]  # oldest first
        assert [s.id for s in await registry.sessions("b")] == ["s0"]

        updated = await registry.update_session("s1", enabled=False, options={}, face_id=None)
        assert (updated.enabled, updated.options, updated.face_id, updated.label) == (False, {}, None, "café")
        assert updated.updated > record.updated
        assert await registry.get_session("s1") == updated
        with pytest.raises(UnknownSessionError):
            await registry.update_session("missing", enabled=False)
        with pytest.raises(ValueError, match="cannot change created, typo"):
            await registry.update_session("s1", typo=1, created=0.0)

        await registry.save_session(updated.with_changes(node_id="b"))  # moved by its node
        assert await loads(registry) == {"a": 0, "b": 2}

        assert not await registry.end_session("s1", node_id="a")  # a no longer owns it
        assert await registry.get_session("s1") is not None
        assert await registry.end_session("s1", node_id="b")
        assert not await registry.end_session("s1")
        assert await registry.end_session("s0")
        assert await registry.sessions() == [] and await loads(registry) == {"a": 0, "b": 0}

    check(make, scenario)


def test_reaping_moves_sessions_of_dead_nodes_and_retries_orphans(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        await registry.register_node(node("a"))
        await registry.register_node(node("b"))
        assert await place(registry, "s1", "s2", "s3") == ["a", "b", "a"]
        await registry.update_session("s1", state="live")

        await outlive(registry, ["b"], TTL_S * 1.7)
        moved = await registry.reap_dead_nodes()
        # oldest first: s1 takes b's last slot, s3 has nowhere to go
        assert [(s.id, s.node_id, s.state) for s in moved] == [("s1", "b", "placed"), ("s3", "", "orphaned")]
        assert await registry.get_session("s3") == moved[1]
        assert await registry.sessions("a") == []
        assert await registry.reap_dead_nodes() == []  # still no room, nothing new to report
        assert await loads(registry) == {"b": 2}

        await registry.register_node(node("c"))
        retried = await registry.reap_dead_nodes()
        assert [(s.id, s.node_id, s.state) for s in retried] == [("s3", "c", "placed")]
        assert await loads(registry) == {"b": 2, "c": 1}

    check(make, scenario)


def test_removing_a_node_moves_its_sessions_at_once(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        await registry.register_node(node("a"))
        await registry.register_node(node("b"))
        assert await place(registry, "s1", "s2") == ["a", "b"]
        moved = await registry.remove_node("a")
        assert [(s.id, s.node_id, s.state) for s in moved] == [("s1", "b", "placed")]
        assert await registry.node("a") is None
        assert await loads(registry) == {"b": 2}
        assert await registry.remove_node("a") == []

    check(make, scenario)


def test_faces_keep_their_bytes(make: MakeRegistry) -> None:
    every_byte = bytes(range(256))
    faces = [
        FaceRecord(id="f2", name="Grace", thumbnail_jpeg=b"\xff\xd8" + every_byte, source=every_byte * 40,
                   owner="ann", created=2000.0),
        FaceRecord(id="f1", name="Astronaut", thumbnail_jpeg=b"\xff\xd8\x00", source=b"\x00" * 7, owner="ann",
                   created=1000.0),
        FaceRecord(id="f3", name="Bob's", thumbnail_jpeg=b"", source=b"\xc3\x28", created=3000.0),
    ]

    async def scenario(registry: Registry) -> None:
        for face in faces:
            await registry.put_face(face)
        assert await registry.get_face("f2") == faces[0]
        assert await registry.get_face("missing") is None
        assert [f.id for f in await registry.faces()] == ["f1", "f2", "f3"]
        listed = await registry.faces(owner="ann")
        assert [(f.id, f.name, f.owner, f.created) for f in listed] == [("f1", "Astronaut", "ann", 1000.0),
                                                                         ("f2", "Grace", "ann", 2000.0)]
        assert all(f.thumbnail_jpeg == b"" and f.source == b"" for f in listed)  # metadata only
        assert [f.id for f in await registry.faces(owner="")] == ["f3"]
        assert await registry.delete_face("f2")
        assert not await registry.delete_face("f2")
        assert await registry.get_face("f2") is None

    check(make, scenario)


def test_a_face_keeps_its_photos_read_only_when_asked_for(make: MakeRegistry) -> None:
    photos = (b"\xff\xd8" + bytes(range(256)) * 50, b"\xff\xd8\x00\x01")
    several = FaceRecord(id="f1", name="Grace", thumbnail_jpeg=b"\xff\xd8", source=b"\x01" * 9, owner="ann",
                         created=1000.0, photos=photos, photo_count=2)
    older = FaceRecord(id="f0", name="Old", thumbnail_jpeg=b"\xff\xd8", source=b"\x02", owner="ann", created=900.0)

    async def scenario(registry: Registry) -> None:
        await registry.put_face(several)
        await registry.put_face(older)  # as stored before photos were kept: one photo, none kept
        assert await registry.get_face("f1", photos=True) == several
        assert await registry.get_face("f1") == replace(several, photos=())  # sessions need no photos
        assert await registry.get_face("f0", photos=True) == older
        assert [(f.id, f.photo_count, f.photos) for f in await registry.faces()] == [("f0", 1, ()), ("f1", 2, ())]
        one_photo = replace(several, photos=photos[:1], photo_count=1)
        await registry.put_face(one_photo)  # replaced: the photos it no longer has are gone
        assert await registry.get_face("f1", photos=True) == one_photo

    check(make, scenario)


async def receive(registry: Registry, node_id: str, into: list[dict[str, Any]]) -> None:
    async for message in registry.control_messages(node_id):
        into.append(message)


async def send_until_received(registry: Registry, node_id: str, got: list[dict[str, Any]]) -> None:
    """Pub/sub drops what is sent before the listener subscribed, so repeat until it lands."""
    while not got:
        await registry.send_control(node_id, {"kind": "drain", "to": node_id})
        await asyncio.sleep(0.02)


def test_an_owner_at_the_face_limit_stores_no_more_and_evicts_nobody(make: MakeRegistry) -> None:
    def face(face_id: str, owner: str, name: str = "x") -> FaceRecord:
        return FaceRecord(id=face_id, name=name, thumbnail_jpeg=b"\xff\xd8", source=b"\x00", owner=owner)

    async def scenario(registry: Registry) -> None:
        await registry.put_face(face("b1", "bob"), owner_limit=2)
        for face_id in ("a1", "a2"):
            await registry.put_face(face(face_id, "ann"), owner_limit=2)
        with pytest.raises(FaceLimitError):
            await registry.put_face(face("a3", "ann"), owner_limit=2)
        await registry.put_face(face("a1", "ann", name="renamed"), owner_limit=2)  # a replacement is no new face
        await registry.put_face(face("b2", "bob"), owner_limit=2)
        assert sorted(f.id for f in await registry.faces()) == ["a1", "a2", "b1", "b2"]
        assert (await registry.get_face("a1")).name == "renamed"  # type: ignore[union-attr]
        assert await registry.delete_face("a2")
        await registry.put_face(face("a3", "ann"), owner_limit=2)  # room again after a delete
        assert sorted(f.id for f in await registry.faces(owner="ann")) == ["a1", "a3"]

    check(make, scenario)


def test_control_messages_reach_only_their_node(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        got: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
        listeners = [asyncio.create_task(receive(registry, node_id, got[node_id])) for node_id in got]
        await send_until_received(registry, "a", got["a"])
        await send_until_received(registry, "b", got["b"])
        await registry.send_control("b", {"kind": "kill_session", "session_id": "s1"})
        while got["b"][-1]["kind"] != "kill_session":
            await asyncio.sleep(0.01)
        assert {m["to"] for m in got["a"]} == {"a"}
        assert {m.get("to", "b") for m in got["b"]} == {"b"}

        await registry.close()  # ends every control_messages iterator
        await asyncio.wait_for(asyncio.gather(*listeners), 3)

    check(make, scenario)


def test_ping(make: MakeRegistry) -> None:
    async def scenario(registry: Registry) -> None:
        assert await registry.ping()

    check(make, scenario)


def test_open_registry_picks_by_url(redis_url: str) -> None:
    async def scenario() -> None:
        embedded = open_registry(None, ttl_s=1.5)
        shared = open_registry(redis_url, ttl_s=1.5)
        assert isinstance(embedded, MemoryRegistry) and isinstance(shared, RedisRegistry)
        assert embedded.ttl_s == shared.ttl_s == 1.5
        assert await shared.ping()
        await embedded.close()
        await shared.close()

    run(scenario())
