"""A node's membership in the registry: register, beat, obey control messages, tidy up.

The agent knows nothing of media: the node hands it ``NodeHooks`` (its live session records,
how to kill, change or disown a session, its current numbers). It keeps the node alive in
the registry and re-registers it, with its live sessions, when the registry forgot it (Redis
restarted empty, or the gateway declared the node dead while it was only slow). While the
registry is unreachable the node goes on serving what it has; the agent logs the outage once
and retries every beat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from signaling.registry import NodeInfo, Registry, RegistryError, RegistryUnavailable, SessionRecord
from signaling.registry.base import cancel_requested

log = logging.getLogger(__name__)

RECONCILE_EVERY_S = 1.0


class NodeHooks(Protocol):
    def records(self) -> list[SessionRecord]:
        """Records of the sessions that have media on this node now."""
        ...

    async def kill_session(self, session_id: str) -> None:
        """End a session for good (an operator's kill)."""
        ...

    async def update_session(self, session_id: str, changes: dict[str, Any]) -> None:
        """Apply ``{enabled, face_id, options}`` to a live session."""
        ...

    async def disown_session(self, session_id: str) -> None:
        """Stop serving a session that the registry now places elsewhere."""
        ...

    def numbers(self) -> tuple[float, dict[str, Any]]:
        """(batch queue delay in ms, free-form live stats) for the heartbeat."""
        ...


@dataclass(frozen=True)
class AgentSettings:
    heartbeat_s: float = 0.5
    offer_timeout_s: float = 60.0  # a session placed here that never got media is dropped
    close_timeout_s: float = 5.0  # close gives up on a loop that ignores its cancellation after this


class NodeAgent:
    def __init__(self, registry: Registry, info: NodeInfo, hooks: NodeHooks,
                 settings: AgentSettings | None = None) -> None:
        self.registry = registry
        self.info = info
        self.hooks = hooks
        self.settings = settings or AgentSettings()
        self.registered = False
        self._tasks: list[asyncio.Task] = []
        self._outage_logged = False
        self._last_reconcile = 0.0

    @property
    def node_id(self) -> str:
        return self.info.id

    async def start(self) -> None:
        """Register (or keep trying in the background when the registry is down)."""
        await self._beat()
        self._tasks = [asyncio.ensure_future(self._beat_forever()), asyncio.ensure_future(self._obey())]

    async def close(self) -> None:
        """Leave the registry: the node's remaining sessions are re-placed on other nodes,
        so their browsers resume there (a rolling update moves sessions, it does not end them)."""
        await self._stop_loops()
        with contextlib.suppress(RegistryError):
            moved = await self.registry.remove_node(self.node_id)
            if moved:
                log.info("left the registry; %d session(s) moved to other nodes", len(moved))

    async def _stop_loops(self) -> None:
        """Cancel the loops, again until they end, for at most ``close_timeout_s``: a loop
        whose Redis call lost its cancellation (see ``cancel_requested``) must not hold the
        node's shutdown for ever."""
        pending = {task for task in self._tasks if not task.done()}
        deadline = time.monotonic() + self.settings.close_timeout_s
        while pending and time.monotonic() < deadline:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=min(0.1, max(0.0, deadline - time.monotonic())))
        if pending:
            log.warning("%d node loop(s) ignored cancellation for %.0f s; leaving them",
                        len(pending), self.settings.close_timeout_s)
        self._tasks = []

    async def set_state(self, state: str) -> NodeInfo:
        """Drain (no new sessions, the current ones go on) or make ready again."""
        self.info = replace(self.info, state=state)
        return await self.registry.set_node_state(self.node_id, state)  # type: ignore[arg-type]

    # -- the loops ---------------------------------------------------------------------------

    async def _beat_forever(self) -> None:
        while not cancel_requested():
            await asyncio.sleep(self.settings.heartbeat_s)
            await self._beat()

    async def _beat(self) -> None:
        try:
            delay_ms, stats = self.hooks.numbers()
            known = self.registered and await self.registry.heartbeat(
                self.node_id, queue_delay_ms=delay_ms, stats=stats)
            if not known:
                await self._register()
            if time.monotonic() - self._last_reconcile >= RECONCILE_EVERY_S:
                self._last_reconcile = time.monotonic()
                await self._reconcile()
            if self._outage_logged:
                log.info("session registry reachable again")
                self._outage_logged = False
        except RegistryUnavailable as exc:
            if not self._outage_logged:
                log.warning("%s; serving current sessions, new ones are refused until it returns", exc)
                self._outage_logged = True
            self.registered = False
        except Exception:  # the heartbeat must never die
            log.exception("node heartbeat failed")

    async def _register(self) -> None:
        """Join (again) with this node's live sessions; a session the registry moved to
        another node meanwhile is not taken back but closed here."""
        await self.registry.register_node(self.info)
        for record in self.hooks.records():
            current = await self.registry.get_session(record.id)
            if current is None:
                await self.registry.save_session(replace(record, node_id=self.node_id, state="live"))
            elif current.node_id != self.node_id:
                await self.hooks.disown_session(record.id)
        if not self.registered:
            log.info("registered as node %s (%s)", self.node_id, self.info.address)
        self.registered = True

    async def _reconcile(self) -> None:
        """Drop sessions placed here that never got media, and RTMP records with no stream
        here (a publisher that left while being authorised never starts one); close local
        copies of sessions that now belong to another node (or were ended elsewhere)."""
        live = {record.id for record in self.hooks.records()}
        cutoff = time.time() - self.settings.offer_timeout_s
        for record in await self.registry.sessions(self.node_id):
            stale = record.state == "placed" or (record.protocol == "rtmp" and record.state == "live")
            if record.id not in live and stale and record.updated < cutoff:
                log.info("session %s got no media within %.0f s; dropped", record.id, self.settings.offer_timeout_s)
                await self.registry.end_session(record.id, node_id=self.node_id)
        for session_id in live:
            current = await self.registry.get_session(session_id)
            if current is None or current.node_id != self.node_id:
                await self.hooks.disown_session(session_id)

    async def _obey(self) -> None:
        handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "kill_session": lambda m: self.hooks.kill_session(str(m["session_id"])),
            "update_session": lambda m: self.hooks.update_session(str(m["session_id"]), dict(m.get("changes") or {})),
            "drain": lambda m: self._drained(),
        }
        async for message in self.registry.control_messages(self.node_id):
            if cancel_requested():
                return
            handler = handlers.get(str(message.get("kind")))
            if handler is None:
                log.warning("ignoring unknown control message %r", message)
                continue
            try:
                await handler(message)
            except Exception as exc:  # one bad message must not stop the node listening
                log.warning("control message %r failed: %s", message, getattr(exc, "reason", None) or exc)

    async def _drained(self) -> None:
        self.info = replace(self.info, state="draining")
        log.info("draining: no new sessions; current ones go on")
