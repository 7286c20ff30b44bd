"""The gateway's RTMP relay against fake nodes: each node is the real RTMP server with a tiny
handler that records what it receives (or refuses, or plays a list back), registered in an
in-process registry. Publishers and players are the real RTMP clients."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar
from unittest import mock

import pytest
from aiohttp.test_utils import TestServer

from signaling.gateway import RTMP_SERVER_KEY, GatewaySettings, build_gateway_app
from signaling.registry import (
    MemoryRegistry,
    NodeInfo,
    RegistryUnavailable,
    SessionRecord,
)
from signaling.stream_keys import play_handle, rtmp_session_id
from streamer.rtmp import amf0
from streamer.rtmp.client import RtmpClientError, RtmpPlayClient, RtmpPublishClient
from streamer.rtmp.handler import MediaMessage, Player, Publisher, PublishRejected
from streamer.rtmp.server import RtmpServer

T = TypeVar("T")
KEY = "sk_live_key"


def run(coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
    """Run a coroutine in a fresh loop with a hard deadline (the tests use no asyncio plugin)."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


class NodeHandler:
    """A node's RTMP side: accepts ``keys`` (others get the node's BadName refusal), records
    each publish, optionally cuts a publisher after ``cut_after`` messages, plays ``playlist``."""

    def __init__(self, keys: set[str], *, cut_after: int | None = None, playlist: list[MediaMessage] | None = None):
        self.keys = keys
        self.cut_after = cut_after
        self.playlist = playlist or []
        self.received: list[MediaMessage] = []
        self.play_asks: list[str] = []
        self.ended = asyncio.Event()

    async def authorize_publish(self, app: str, name: str) -> None:
        if name not in self.keys:
            raise PublishRejected("NetStream.Publish.BadName", "unknown or revoked stream key")

    async def on_publish(self, publisher: Publisher) -> None:
        async for message in publisher.media():
            self.received.append(message)
            if len(self.received) == self.cut_after:
                await publisher.close("node going down")
        self.ended.set()

    async def authorize_play(self, app: str, name: str) -> None:
        self.play_asks.append(name)
        if name not in self.keys:
            raise PublishRejected("NetStream.Play.StreamNotFound", f"no live stream {name!r}")

    async def on_play(self, player: Player) -> None:
        for message in self.playlist:
            player.send(message)


class Nodes:
    """Started fake RTMP nodes, registered under ``node-a``, ``node-b``, ..."""

    def __init__(self, registry: MemoryRegistry) -> None:
        self.registry = registry
        self.servers: dict[str, RtmpServer] = {}

    async def add(self, node_id: str, handler: NodeHandler) -> RtmpServer:
        server = RtmpServer(handler, port=0)
        await server.start()
        self.servers[node_id] = server
        # the HTTP address is never used by the relay
        await self.registry.register_node(NodeInfo(id=node_id, address="127.0.0.1:9", rtmp_address=f"127.0.0.1:{server.port}"))
        return server

    async def close(self) -> None:
        for server in self.servers.values():
            await server.close()


@contextlib.asynccontextmanager
async def gateway(registry: MemoryRegistry) -> AsyncIterator[tuple[str, Nodes]]:
    """The gateway app with its RTMP relay on a free port: (its rtmp://host:port, the nodes)."""
    nodes = Nodes(registry)
    settings = GatewaySettings(rtmp_port=0, rtmp_connect_timeout_s=2.0, reap_interval_s=0.05)
    server = TestServer(build_gateway_app(registry, settings), host="127.0.0.1")
    await server.start_server()
    try:
        yield f"rtmp://127.0.0.1:{server.app[RTMP_SERVER_KEY].port}", nodes
    finally:
        await server.close()
        await nodes.close()
        await registry.close()


def stream(count: int) -> list[MediaMessage]:
    """Metadata, then interleaved H.264/AAC-shaped messages (keyframe every 10)."""
    messages = [MediaMessage("data", 0, amf0.encode("onMetaData", {"width": 320.0, "height": 240.0}))]
    for i in range(count):
        keyframe = 0x17 if i % 10 == 0 else 0x27
        messages.append(MediaMessage("video", 40 * i, bytes([keyframe, 1, 0, 0, 0]) + bytes([i % 256]) * 60))
        messages.append(MediaMessage("audio", 40 * i + 20, b"\xaf\x01" + bytes([i % 256]) * 20))
    return messages


async def wait_until(predicate, timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


def test_a_publish_is_relayed_in_order_to_the_least_loaded_node():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with gateway(registry) as (url, nodes):
            busy, idle = NodeHandler({KEY}), NodeHandler({KEY})
            await nodes.add("node-a", busy)
            await nodes.add("node-b", idle)
            await registry.place_session(SessionRecord(id="other", protocol="webrtc"))  # node-a is busier
            sent = stream(40)
            async with RtmpPublishClient(f"{url}/live/{KEY}", timeout=3) as publisher:
                for message in sent:
                    await publisher.send(message)
                record = await registry.get_session(rtmp_session_id(KEY))
                assert record is not None and record.node_id == "node-b" and record.protocol == "rtmp"
            await asyncio.wait_for(idle.ended.wait(), 3)
            assert idle.received == sent and busy.received == []

    run(scenario())


def test_a_publisher_goes_back_to_the_live_node_that_owns_its_stream():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with gateway(registry) as (url, nodes):
            first, owner = NodeHandler({KEY}), NodeHandler({KEY})
            await nodes.add("node-a", first)
            await nodes.add("node-b", owner)
            await registry.save_session(SessionRecord(id=rtmp_session_id(KEY), protocol="rtmp", node_id="node-b", state="live"))
            async with RtmpPublishClient(f"{url}/live/{KEY}", timeout=3) as publisher:
                await publisher.send(stream(1)[1])
            await asyncio.wait_for(owner.ended.wait(), 3)
            assert len(owner.received) == 1 and first.received == []

    run(scenario())


def test_a_node_refusal_reaches_the_publisher_and_leaves_no_record():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with gateway(registry) as (url, nodes):
            await nodes.add("node-a", NodeHandler({"another-key"}))
            with pytest.raises(RtmpClientError, match="NetStream.Publish.BadName: unknown or revoked stream key"):
                await RtmpPublishClient(f"{url}/live/{KEY}", timeout=3).connect()
            assert await registry.sessions() == []

    run(scenario())


def test_a_dead_node_is_removed_and_the_publish_lands_on_a_live_one():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with gateway(registry) as (url, nodes):
            dead, live = NodeHandler({KEY}), NodeHandler({KEY})
            await (await nodes.add("node-a", dead)).close()  # still registered, port closed
            await nodes.add("node-b", live)
            async with RtmpPublishClient(f"{url}/live/{KEY}", timeout=3) as publisher:
                await publisher.send(stream(1)[1])
            await asyncio.wait_for(live.ended.wait(), 3)
            assert await registry.node("node-a") is None
            assert (await registry.get_session(rtmp_session_id(KEY))).node_id == "node-b"

    run(scenario())


def test_a_node_dropping_the_stream_cuts_the_publisher():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with gateway(registry) as (url, nodes):
            await nodes.add("node-a", NodeHandler({KEY}, cut_after=5))
            publisher = RtmpPublishClient(f"{url}/live/{KEY}", timeout=3)
            await publisher.connect()
            try:
                with pytest.raises(RtmpClientError):
                    for message in stream(500):
                        await publisher.send(message)
                        await asyncio.sleep(0.002)
            finally:
                await publisher.close()

    run(scenario())


def test_a_registry_outage_refuses_the_publish_with_a_clear_reason():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with gateway(registry) as (url, nodes):
            await nodes.add("node-a", NodeHandler({KEY}))
            down = mock.AsyncMock(side_effect=RegistryUnavailable("redis://10.0.0.9:6379: connection refused"))
            with mock.patch.object(registry, "get_session", down), \
                    pytest.raises(RtmpClientError, match="BadConnection: session registry unavailable"):
                await RtmpPublishClient(f"{url}/live/{KEY}", timeout=3).connect()

    run(scenario())


def test_no_node_with_room_refuses_the_publish():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with gateway(registry) as (url, _):
            with pytest.raises(RtmpClientError, match="BadConnection: no node has room"):
                await RtmpPublishClient(f"{url}/live/{KEY}", timeout=3).connect()

    run(scenario())


def test_a_play_is_relayed_from_the_node_that_has_the_stream():
    async def scenario() -> None:
        registry = MemoryRegistry(ttl_s=60)
        async with gateway(registry) as (url, nodes):
            playlist = stream(15)[1:]
            other, owner = NodeHandler({"pt_stale"}), NodeHandler({"pt_live"}, playlist=playlist)
            await nodes.add("node-a", other)
            await nodes.add("node-b", owner)
            await registry.save_session(SessionRecord(id="rtmp-aaaa", protocol="rtmp", node_id="node-a", state="live",
                                                      play_handle=play_handle("pt_gone")))
            await registry.save_session(SessionRecord(id="rtmp-0123", protocol="rtmp", node_id="node-b", state="live",
                                                      play_handle=play_handle("pt_live")))
            async with RtmpPlayClient(f"{url}/live/pt_live", timeout=3) as player:  # by play token: its node only
                assert [message async for message in player.media()] == playlist
            assert (other.play_asks, owner.play_asks) == ([], ["pt_live"])
            # a name no live session carries costs no node a connection
            for name in ("unknown", "rtmp-0123", "pt_stale"):
                with pytest.raises(RtmpClientError, match="NetStream.Play.StreamNotFound"):
                    await RtmpPlayClient(f"{url}/live/{name}", timeout=3).connect()
            assert (other.play_asks, owner.play_asks) == ([], ["pt_live"])
            # the node's own refusal reaches the player as the node said it
            with pytest.raises(RtmpClientError, match="no live stream 'pt_gone'") as refused:
                await RtmpPlayClient(f"{url}/live/pt_gone", timeout=3).connect()
            assert other.play_asks == ["pt_gone"] and refused.value.code == "NetStream.Play.StreamNotFound"

    run(scenario())
