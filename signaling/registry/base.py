"""The session registry's contract: which nodes are alive, which node owns which session,
the durable state that lets another node resume a session, and control messages to nodes.

Two implementations share it: ``MemoryRegistry`` (the embedded single node, in-process) and
``RedisRegistry`` (several nodes and a gateway). The tests run the same contract suite over
both. Every method is a coroutine; a registry that cannot reach its store raises
``RegistryUnavailable`` (callers answer 503, never crash).
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from gpu.errors import SwapcastError

NodeState = Literal["ready", "draining"]
SessionProtocol = Literal["webrtc", "whip", "rtmp"]
# placed: a node was chosen, media has not arrived yet; live: media flows on node_id;
# orphaned: its node died and no live node had room yet (node_id is "")
SessionState = Literal["placed", "live", "orphaned"]


def cancel_requested() -> bool:
    """True once the current task was cancelled, even if the CancelledError got lost on the
    way: redis-py sends every command under ``asyncio.wait_for``, which on Python 3.11
    returns normally when the cancellation lands just as the send completes, so a loop that
    only waits for CancelledError runs on for ever (what made NodeAgent.close hang on Redis)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class RegistryError(SwapcastError):
    """A registry operation was refused."""


class RegistryUnavailable(RegistryError):
    """The registry's store (Redis) cannot be reached; try again later (HTTP 503)."""


class FaceLimitError(RegistryError):
    """The owner already stores as many faces as ``put_face``'s ``owner_limit`` allows."""


class NoCapacityError(RegistryError):
    """No live, ready node has room for another session (HTTP 503)."""


class UnknownSessionError(RegistryError):
    """No session with that id in the registry (HTTP 404)."""


def now() -> float:
    return time.time()


@dataclass
class NodeInfo:
    """One node as the registry sees it. ``load`` is filled in by the registry (sessions
    placed on the node, reservations included); the node reports the rest."""

    id: str
    address: str  # host:port of the node's HTTP API, as the gateway reaches it
    rtmp_address: str = ""  # host:port of its RTMP server ("" = none)
    gpu: str = "cpu"  # "NVIDIA H200", or "cpu"
    capacity: int = 4  # live sessions it takes
    state: NodeState = "ready"
    load: int = 0
    queue_delay_ms: float = 0.0  # the batcher's recent queue delay
    stats: dict[str, Any] = field(default_factory=dict)  # free-form live numbers (fps, busy %)
    processors: list[dict[str, Any]] = field(default_factory=list)  # gpu.processors.Processors.describe()
    started: float = field(default_factory=now)
    last_seen: float = field(default_factory=now)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeInfo:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class SessionRecord:
    """A session's durable state: enough for any node to resume it without a new upload
    (the face itself lives in the registry's face store under ``face_id``)."""

    id: str
    protocol: SessionProtocol
    node_id: str = ""
    owner: str = ""  # the user it belongs to ("" = anonymous / embedded)
    face_id: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # swap option overrides
    enabled: bool = True
    label: str | None = None  # e.g. the stream key's name
    play_handle: str = ""  # RTMP: signaling.stream_keys.play_handle of the stream's play token
    state: SessionState = "placed"
    created: float = field(default_factory=now)
    updated: float = field(default_factory=now)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionRecord:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def with_changes(self, **changes: Any) -> SessionRecord:
        return replace(self, **changes, updated=now())


@dataclass
class FaceRecord:
    """A source face any node can use: ``source`` is the engine's serialised source
    (``gpu.engine.FaceEngine.source_to_bytes``), so no node re-runs detection; made from
    ``photo_count`` photos of one person (merged, ``gpu.source_merge``). ``photos`` are
    those photos as kept (``streamer.face_photos.kept_photo``), so the face can be made
    again when the swapper changes or a photo is added: empty for faces stored before
    photos were kept, and in records read without them (``get_face(photos=False)``,
    listings)."""

    id: str
    name: str
    thumbnail_jpeg: bytes
    source: bytes
    owner: str = ""
    created: float = field(default_factory=now)
    photos: tuple[bytes, ...] = ()
    photo_count: int = 1


class Registry(abc.ABC):
    """See the module docstring. ``ttl_s``: a node that has not beaten for this long is dead."""

    ttl_s: float

    # -- nodes ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def register_node(self, info: NodeInfo) -> None:
        """Add or refresh a node (its reported fields; ``load`` is ignored) and start its TTL."""

    @abc.abstractmethod
    async def heartbeat(self, node_id: str, *, queue_delay_ms: float = 0.0,
                        stats: dict[str, Any] | None = None) -> bool:
        """Refresh the node's TTL and numbers. False when the registry no longer knows the
        node (it expired, or Redis restarted empty): the node must ``register_node`` again
        and re-save its live sessions."""

    @abc.abstractmethod
    async def set_node_state(self, node_id: str, state: NodeState) -> NodeInfo:
        """Drain a node (no new sessions; its sessions go on) or make it ready again.
        Raises ``RegistryError`` for an unknown node."""

    @abc.abstractmethod
    async def remove_node(self, node_id: str) -> list[SessionRecord]:
        """A node leaves or is known dead (e.g. the gateway could not connect to it): it is
        removed at once and its sessions are re-placed like ``reap_dead_nodes`` does.
        Returns the moved sessions."""

    @abc.abstractmethod
    async def nodes(self) -> list[NodeInfo]:
        """Live nodes (draining ones included), with ``load`` filled in, sorted by id."""

    @abc.abstractmethod
    async def node(self, node_id: str) -> NodeInfo | None:
        """A live node, or None when it is unknown or its TTL ran out."""

    @abc.abstractmethod
    async def reap_dead_nodes(self) -> list[SessionRecord]:
        """Remove every node whose TTL ran out and re-place its sessions on live nodes
        (state ``placed``); those no node has room for become ``orphaned``. Also retries
        earlier orphans. Safe to call from many processes at once. Returns the sessions
        that moved or were orphaned."""

    # -- sessions ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def place_session(self, record: SessionRecord, *, exclude: Iterable[str] = ()) -> SessionRecord:
        """Atomically choose the least-loaded ready node with room (load < capacity; ties
        by id) except ``exclude``, count the session against it at once (so a burst of
        placements spreads), store the record with that ``node_id`` and state ``placed``,
        and return it. An existing record with the same id is moved (its old node's load
        drops). Raises ``NoCapacityError``."""

    @abc.abstractmethod
    async def save_session(self, record: SessionRecord) -> None:
        """Store the record as given (upsert; node_id and state included), keeping each
        node's load consistent. Used by a node for sessions it started itself, to mark a
        session live, and to re-save its sessions after Redis came back."""

    @abc.abstractmethod
    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    @abc.abstractmethod
    async def update_session(self, session_id: str, **changes: Any) -> SessionRecord:
        """Change fields (face_id, options, enabled, state, label); raises
        ``UnknownSessionError``."""

    @abc.abstractmethod
    async def end_session(self, session_id: str, *, node_id: str | None = None) -> bool:
        """Forget a session. With ``node_id``, only if that node still owns it (a node
        ending a session that already moved elsewhere must not delete the new one).
        True when a record was removed."""

    @abc.abstractmethod
    async def sessions(self, node_id: str | None = None) -> list[SessionRecord]:
        """All sessions (or one node's), oldest first."""

    # -- faces ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def put_face(self, face: FaceRecord, *, owner_limit: int | None = None) -> None:
        """Store (or replace) a face. With ``owner_limit``, a new face whose owner already
        has that many raises ``FaceLimitError``; checked and stored in one step, so nodes
        uploading at once cannot overshoot it, and nobody else's face is ever evicted."""

    @abc.abstractmethod
    async def get_face(self, face_id: str, *, photos: bool = False) -> FaceRecord | None:
        """A stored face with its thumbnail and source; its kept photos too with ``photos``
        (megabytes: only what makes the face again needs them)."""

    @abc.abstractmethod
    async def faces(self, owner: str | None = None) -> list[FaceRecord]:
        """Stored faces (all, or one owner's), oldest first, as metadata only: their
        ``thumbnail_jpeg``, ``source`` and ``photos`` are empty (a listing must not move
        every blob; ``get_face`` has the bytes), ``photo_count`` is kept."""

    @abc.abstractmethod
    async def delete_face(self, face_id: str) -> bool: ...

    # -- control messages ---------------------------------------------------------------------

    @abc.abstractmethod
    async def send_control(self, node_id: str, message: dict[str, Any]) -> None:
        """Deliver a JSON-able message to one node's ``control_messages`` (best effort:
        a node that is not listening misses it). Kinds in use: ``{"kind": "kill_session",
        "session_id"}``, ``{"kind": "update_session", "session_id", "changes"}``,
        ``{"kind": "drain"}``."""

    @abc.abstractmethod
    def control_messages(self, node_id: str) -> AsyncIterator[dict[str, Any]]:
        """The node's control messages as they arrive, until the registry closes. Survives
        a store outage (re-subscribes when it is back)."""

    # -- lifecycle --------------------------------------------------------------------------

    @abc.abstractmethod
    async def ping(self) -> bool:
        """True when the store answers (readiness, the 503 decision)."""

    @abc.abstractmethod
    async def close(self) -> None: ...
