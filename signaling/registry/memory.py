"""``MemoryRegistry``: the session registry of the embedded single node, in-process.

It keeps the whole contract (TTL expiry, draining, placement, re-placement, orphans, control
messages) so one node behaves exactly like a cluster member, and so the contract suite can
run against it. Every method body is free of ``await`` points between reading and writing
state, which makes each operation atomic on the event loop without locks.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
import json
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, get_args

from signaling.registry.base import (
    FaceLimitError,
    FaceRecord,
    NoCapacityError,
    NodeInfo,
    NodeState,
    Registry,
    RegistryError,
    SessionRecord,
    UnknownSessionError,
    now,
)

# Fields ``update_session`` may not change: identity and timestamps are the registry's.
_FIXED_FIELDS = frozenset({"id", "created", "updated"})


def no_room(live: int, full: int, draining: int, excluded: int) -> NoCapacityError:
    """The placement failure, with the reason an operator needs (no node at all, or why
    each live node was passed over). Shared with ``RedisRegistry`` so both say the same."""
    if not live:
        reason = "no live node"
    else:
        counts = ((full, "full"), (draining, "draining"), (excluded, "excluded"))
        why = ", ".join(f"{count} {what}" for count, what in counts if count)
        reason = f"{live} live node{'' if live == 1 else 's'}: {why}"
    return NoCapacityError(f"no node has room for another session ({reason})")


def checked_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """``update_session``'s changes, refused early when they name an unknown or fixed field
    (a typo must not silently vanish in Redis or blow up deep inside ``dataclasses``)."""
    names = set(changes)
    bad = sorted((names - set(SessionRecord.__dataclass_fields__)) | (names & _FIXED_FIELDS))
    if bad:
        raise ValueError(f"update_session cannot change {', '.join(bad)}")
    return changes


def checked_state(state: str) -> NodeState:
    if state not in get_args(NodeState):
        raise ValueError(f"node state must be one of {', '.join(get_args(NodeState))}, not {state!r}")
    return state  # type: ignore[return-value]


def oldest_first(records: Iterable[SessionRecord]) -> list[SessionRecord]:
    return sorted(records, key=lambda s: (s.created, s.id))


def less_loaded(load: int, capacity: int, best_load: int, best_capacity: int) -> bool:
    """Placement order: the lower load/capacity ratio wins (a 16-session GPU node at 4 is
    less busy than a 2-session CPU node at 1), compared by cross-multiplying so no float
    rounding decides; equal ratios keep the earlier (lower) id."""
    return load * best_capacity < best_load * capacity


class MemoryRegistry(Registry):
    """In-process registry. Liveness uses ``time.monotonic`` so wall-clock jumps never kill
    a node; control messages go through one ``asyncio.Queue`` per listener."""

    def __init__(self, ttl_s: float = 2.0) -> None:
        self.ttl_s = ttl_s
        self._nodes: dict[str, NodeInfo] = {}
        self._deadlines: dict[str, float] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._faces: dict[str, FaceRecord] = {}
        self._listeners: dict[str, set[asyncio.Queue[dict[str, Any] | None]]] = {}
        self._closed = False

    # -- helpers ----------------------------------------------------------------------------

    def _alive(self, node_id: str) -> bool:
        return self._deadlines.get(node_id, 0.0) > time.monotonic()

    def _load(self, node_id: str, *, ignoring: str = "") -> int:
        return sum(1 for s in self._sessions.values() if s.node_id == node_id and s.id != ignoring)

    def _pick(self, session_id: str, exclude: Iterable[str]) -> str:
        """The node for ``session_id`` (its own current slot not counted against its node)."""
        excluded_ids = set(exclude)
        live = full = draining = excluded = 0
        best, best_load, best_capacity = "", 0, 1
        for node_id in sorted(self._nodes):
            if not self._alive(node_id):
                continue
            live += 1
            info = self._nodes[node_id]
            load = self._load(node_id, ignoring=session_id)
            if node_id in excluded_ids:
                excluded += 1
            elif info.state != "ready":
                draining += 1
            elif load >= info.capacity:
                full += 1
            elif not best or less_loaded(load, info.capacity, best_load, best_capacity):
                best, best_load, best_capacity = node_id, load, info.capacity
        if not best:
            raise no_room(live, full, draining, excluded)
        return best

    def _store(self, record: SessionRecord) -> SessionRecord:
        self._sessions[record.id] = record
        return copy.deepcopy(record)

    def _rehome(self, record: SessionRecord) -> SessionRecord | None:
        """Place a session whose node is gone on another one; None when none has room."""
        try:
            node_id = self._pick(record.id, ())
        except NoCapacityError:
            return None
        return self._store(record.with_changes(node_id=node_id, state="placed"))

    def _evict(self, node_id: str) -> list[SessionRecord]:
        self._nodes.pop(node_id, None)
        self._deadlines.pop(node_id, None)
        victims = oldest_first(s for s in self._sessions.values() if s.node_id == node_id)
        return [self._rehome(r) or self._store(r.with_changes(node_id="", state="orphaned")) for r in victims]

    def _view(self, node_id: str) -> NodeInfo:
        info = copy.deepcopy(self._nodes[node_id])
        info.load = self._load(node_id)
        return info

    # -- nodes ------------------------------------------------------------------------------

    async def register_node(self, info: NodeInfo) -> None:
        stored = copy.deepcopy(info)
        stored.state = checked_state(stored.state)
        stored.load = 0
        stored.last_seen = now()
        self._nodes[info.id] = stored
        self._deadlines[info.id] = time.monotonic() + self.ttl_s

    async def heartbeat(self, node_id: str, *, queue_delay_ms: float = 0.0,
                        stats: dict[str, Any] | None = None) -> bool:
        if not self._alive(node_id):
            return False
        info = self._nodes[node_id]
        info.queue_delay_ms = queue_delay_ms
        if stats is not None:
            info.stats = copy.deepcopy(stats)
        info.last_seen = now()
        self._deadlines[node_id] = time.monotonic() + self.ttl_s
        return True

    async def set_node_state(self, node_id: str, state: NodeState) -> NodeInfo:
        if not self._alive(node_id):
            raise RegistryError(f"unknown node {node_id!r}")
        self._nodes[node_id].state = checked_state(state)
        return self._view(node_id)

    async def remove_node(self, node_id: str) -> list[SessionRecord]:
        return self._evict(node_id)

    async def nodes(self) -> list[NodeInfo]:
        return [self._view(node_id) for node_id in sorted(self._nodes) if self._alive(node_id)]

    async def node(self, node_id: str) -> NodeInfo | None:
        return self._view(node_id) if self._alive(node_id) else None

    async def reap_dead_nodes(self) -> list[SessionRecord]:
        # earlier orphans first: they have waited longest for room
        orphans = oldest_first(s for s in self._sessions.values() if s.state == "orphaned")
        moved = [placed for placed in map(self._rehome, orphans) if placed]
        for node_id in sorted(self._nodes):
            if not self._alive(node_id):
                moved += self._evict(node_id)
        return moved

    # -- sessions ---------------------------------------------------------------------------

    async def place_session(self, record: SessionRecord, *, exclude: Iterable[str] = ()) -> SessionRecord:
        return self._store(record.with_changes(node_id=self._pick(record.id, exclude), state="placed"))

    async def save_session(self, record: SessionRecord) -> None:
        self._sessions[record.id] = copy.deepcopy(record)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        record = self._sessions.get(session_id)
        return copy.deepcopy(record) if record else None

    async def update_session(self, session_id: str, **changes: Any) -> SessionRecord:
        record = self._sessions.get(session_id)
        if record is None:
            raise UnknownSessionError(f"no session {session_id!r}")
        return self._store(record.with_changes(**copy.deepcopy(checked_changes(changes))))

    async def end_session(self, session_id: str, *, node_id: str | None = None) -> bool:
        record = self._sessions.get(session_id)
        if record is None or (node_id is not None and record.node_id != node_id):
            return False
        del self._sessions[session_id]
        return True

    async def sessions(self, node_id: str | None = None) -> list[SessionRecord]:
        chosen = (s for s in self._sessions.values() if node_id is None or s.node_id == node_id)
        return [copy.deepcopy(s) for s in oldest_first(chosen)]

    # -- faces ------------------------------------------------------------------------------

    async def put_face(self, face: FaceRecord, *, owner_limit: int | None = None) -> None:
        if owner_limit is not None and face.id not in self._faces:
            if sum(stored.owner == face.owner for stored in self._faces.values()) >= owner_limit:
                raise FaceLimitError(f"{face.owner!r} already stores {owner_limit} faces")
        self._faces[face.id] = copy.copy(face)

    async def get_face(self, face_id: str, *, photos: bool = False) -> FaceRecord | None:
        face = self._faces.get(face_id)
        if face is None:
            return None
        return copy.copy(face) if photos else replace(face, photos=())

    async def faces(self, owner: str | None = None) -> list[FaceRecord]:
        chosen = (f for f in self._faces.values() if owner is None or f.owner == owner)
        return [replace(f, thumbnail_jpeg=b"", source=b"", photos=()) for f in sorted(chosen, key=lambda f: (f.created, f.id))]

    async def delete_face(self, face_id: str) -> bool:
        return self._faces.pop(face_id, None) is not None

    # -- control messages ---------------------------------------------------------------------

    async def send_control(self, node_id: str, message: dict[str, Any]) -> None:
        # through JSON, like Redis: the same messages fail (not JSON-able) on both
        encoded = json.dumps(message)
        for queue in self._listeners.get(node_id, ()):
            queue.put_nowait(json.loads(encoded))

    async def control_messages(self, node_id: str) -> AsyncIterator[dict[str, Any]]:
        if self._closed:
            return
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        listeners = self._listeners.setdefault(node_id, set())
        listeners.add(queue)
        try:
            while (message := await queue.get()) is not None:
                yield message
        finally:
            listeners.discard(queue)

    # -- lifecycle --------------------------------------------------------------------------

    async def ping(self) -> bool:
        return not self._closed

    async def close(self) -> None:
        self._closed = True
        for listeners in self._listeners.values():
            for queue in listeners:
                queue.put_nowait(None)
