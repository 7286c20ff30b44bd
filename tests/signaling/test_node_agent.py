"""The node agent's shutdown is bounded whatever the registry does: a call that loses the
cancellation (redis-py's sends under Python 3.11's ``asyncio.wait_for``) or a listener that
ignores it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from signaling.node_agent import AgentSettings, NodeAgent
from signaling.registry import MemoryRegistry, NodeInfo, SessionRecord


class DeafListenerRegistry(MemoryRegistry):
    """A registry whose control listener loses every cancellation (as a Redis read that
    swallows one would): like ``RedisRegistry``'s, it ends only once the registry closes."""

    def __init__(self) -> None:
        super().__init__()
        self.cancellations_ignored = 0

    async def control_messages(self, node_id: str) -> AsyncIterator[dict[str, Any]]:
        while not self._closed:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                self.cancellations_ignored += 1
        yield {}  # pragma: no cover - makes this an async generator


class SwallowingHeartbeatRegistry(MemoryRegistry):
    """A heartbeat that returns normally when cancelled, once, as a redis-py command does
    when the cancellation lands just as ``asyncio.wait_for`` sees its send complete."""

    def __init__(self) -> None:
        super().__init__()
        self.beating = asyncio.Event()
        self.swallowed = 0

    async def heartbeat(self, node_id: str, **numbers: Any) -> bool:
        if self.swallowed:
            return await super().heartbeat(node_id, **numbers)
        self.beating.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.swallowed += 1
        return await super().heartbeat(node_id, **numbers)


class IdleNode:
    def records(self) -> list[SessionRecord]:
        return []

    async def kill_session(self, session_id: str) -> None: ...

    async def update_session(self, session_id: str, changes: dict[str, Any]) -> None: ...

    async def disown_session(self, session_id: str) -> None: ...

    def numbers(self) -> tuple[float, dict[str, Any]]:
        return 0.0, {}


def test_close_leaves_the_registry_even_when_the_listener_ignores_cancellation():
    registry = DeafListenerRegistry()
    info = NodeInfo(id="n1", address="127.0.0.1:1", rtmp_address="127.0.0.1:2", gpu="cpu", capacity=2)
    agent = NodeAgent(registry, info, IdleNode(), AgentSettings(heartbeat_s=0.05, close_timeout_s=0.3))

    async def scenario() -> tuple[bool, list[NodeInfo]]:
        await agent.start()
        assert [node.id for node in await registry.nodes()] == ["n1"]
        await asyncio.sleep(0)  # the listener is waiting
        closing = asyncio.ensure_future(agent.close())
        done, _ = await asyncio.wait({closing}, timeout=30)  # the old close waited on the listener for ever
        left = await registry.nodes()
        await registry.close()  # the listener ends now, so the old close returns too
        await closing
        return bool(done), left

    closed, nodes_left = asyncio.run(scenario())
    assert closed, "NodeAgent.close waited on a listener that ignores cancellation"
    assert nodes_left == []
    assert registry.cancellations_ignored >= 1


def test_close_ends_a_loop_whose_registry_call_lost_the_cancellation():
    registry = SwallowingHeartbeatRegistry()
    info = NodeInfo(id="n1", address="127.0.0.1:1", capacity=2)
    agent = NodeAgent(registry, info, IdleNode(), AgentSettings(heartbeat_s=0.01, close_timeout_s=3600))

    async def scenario() -> tuple[bool, list[NodeInfo]]:
        await agent.start()
        await registry.beating.wait()  # a heartbeat is in flight
        closing = asyncio.ensure_future(agent.close())
        done, _ = await asyncio.wait({closing}, timeout=20)  # the old close waited for ever
        return bool(done), await registry.nodes()

    closed, nodes_left = asyncio.run(scenario())
    assert registry.swallowed == 1
    assert closed, "NodeAgent.close waited on a heartbeat loop that lost its cancellation"
    assert nodes_left == []


def test_an_rtmp_record_with_no_stream_here_is_ended_and_a_live_one_is_kept():
    """A publisher that leaves while being authorised (the record is saved by then) never
    starts a stream: its 'live' record stayed for ever, counted in the node's load and the
    user's session limit, one per stream key made over the API."""
    registry = MemoryRegistry()
    info = NodeInfo(id="n1", address="127.0.0.1:1", capacity=2)
    live = SessionRecord(id="rtmp-live", protocol="rtmp", node_id="n1", owner="alice", state="live")

    class OneStream(IdleNode):
        def records(self) -> list[SessionRecord]:
            return [live]

    agent = NodeAgent(registry, info, OneStream(), AgentSettings(heartbeat_s=0.02, offer_timeout_s=0.1))

    async def scenario() -> list[str]:
        await registry.save_session(live)
        await registry.save_session(SessionRecord(id="rtmp-gone", protocol="rtmp", node_id="n1", owner="bob",
                                                  state="live"))
        await asyncio.sleep(0.2)  # older than offer_timeout_s
        await agent._reconcile()  # what every heartbeat does once a second
        return sorted(record.id for record in await registry.sessions("n1"))

    assert asyncio.run(scenario()) == ["rtmp-live"]
