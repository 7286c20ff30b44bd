"""``RedisRegistry``: the session registry shared by several nodes and a gateway.

Key layout (every key carries the hash tag ``{namespace}``, so all of them live in one Redis
Cluster slot and each Lua script touches one slot; ``P`` = ``swapcast:{namespace}:``):

- ``P nodes``                  set of registered node ids (dead ones stay until reaped)
- ``P node:<id>``              hash of the node's ``NodeInfo`` fields (JSON values), PEXPIRE ttl:
                               the key existing *is* the node being alive
- ``P node_sessions:<id>``     set of the session ids placed on it; its SCARD is the load
                               (not ``node:<id>:sessions``: a node named ``x:sessions`` would clash)
- ``P session:<id>``           hash of the ``SessionRecord`` fields (JSON values)
- ``P sessions``, ``P orphans`` sets of all session ids / the orphaned ones
- ``P face:<id>``, ``P faces``  hash of a face (raw bytes for the JPEG and source, its kept photos
                               as ``photo:0``, ``photo:1``, ...), set of ids
- ``P owner_faces:<owner>``    set of one owner's face ids (its SCARD is checked against the limit)
- ``P control:<node id>``      pub/sub channel of a node's control messages

The same code runs on one Redis server and on a Redis Cluster (``_client`` picks the client
by URL). In a cluster every key, and so every script and transaction, goes to the one
slot's master; a control message is a plain PUBLISH, which the cluster copies to every
node, so a listener subscribed to any node (the slot's master, as redis-py picks it) gets
it, and one whose node failed over just subscribes again once the client knows the new
topology. EVALSHA that meets a promoted replica without the script answers NOSCRIPT, and
redis-py's ``Script`` then loads it on every master and runs it again.

Everything that reads and then writes placement state (place, re-place, save, update, end,
heartbeat, drain) is one Lua script, so concurrent gateways and reapers never place a
session twice or lose one. Records are stored field by field so a script can change
``node_id``/``state`` without decoding (and re-encoding) the rest of the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar

from redis.commands.core import AsyncScript

from signaling.redis_client import UNREACHABLE, RedisClient, is_cluster_url, open_redis
from signaling.registry.base import (
    FaceLimitError,
    FaceRecord,
    NodeInfo,
    NodeState,
    Registry,
    RegistryError,
    RegistryUnavailable,
    SessionRecord,
    UnknownSessionError,
    cancel_requested,
    now,
)
from signaling.registry.memory import (
    checked_changes,
    checked_state,
    no_room,
    oldest_first,
)

_MAX_CONNECTIONS = 16  # operations at once, per registry
_OP_TIMEOUT_S = 2.0  # a hung Redis is noticed within two seconds, so callers can answer 503 quickly
_MAX_BACKOFF_S = 1.0  # control_messages re-subscribes at least this often during an outage

R = TypeVar("R", bound="RedisRegistry")
P = ParamSpec("P")
T = TypeVar("T")


def _reachable(
    method: Callable[Concatenate[R, P], Awaitable[T]],
) -> Callable[Concatenate[R, P], Coroutine[Any, Any, T]]:
    """Turn connection failures into ``RegistryUnavailable`` (callers answer 503). The
    method runs in one of the registry's turns, so it must not call another such method."""

    @functools.wraps(method)
    async def guarded(self: R, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            async with self._turn():
                return await method(self, *args, **kwargs)
        except UNREACHABLE as exc:
            raise RegistryUnavailable(f"session registry unavailable: {exc or type(exc).__name__}") from exc

    return guarded


# Shared by the scripts: KEYS[1] is the node set (it names the slot for Cluster routing),
# ARGV[1] the key prefix; the other keys are built from it and share its hash tag.
_LUA_LIB = """
local P = ARGV[1]
local function node_key(id) return P .. 'node:' .. id end
local function members_key(id) return P .. 'node_sessions:' .. id end
local function session_key(id) return P .. 'session:' .. id end

-- The least-loaded live ready node with room for sid (lowest load/capacity, compared by
-- cross-multiplying; ties keep the lowest id), sid's own slot not counted. nil and the
-- counts {live, full, draining, excluded} when none has room.
local function pick(sid, excluded)
  local ids = redis.call('SMEMBERS', KEYS[1])
  table.sort(ids)
  local best, best_load, best_cap = nil, 0, 1
  local live, full, draining, skipped = 0, 0, 0, 0
  for _, id in ipairs(ids) do
    local fields = redis.call('HMGET', node_key(id), 'state', 'capacity')
    if fields[1] then
      live = live + 1
      local cap = tonumber(fields[2])
      local members = members_key(id)
      local load = redis.call('SCARD', members) - redis.call('SISMEMBER', members, sid)
      if excluded[id] then
        skipped = skipped + 1
      elseif fields[1] ~= '"ready"' then
        draining = draining + 1
      elseif load >= cap then
        full = full + 1
      elseif best == nil or load * best_cap < best_load * cap then
        best, best_load, best_cap = id, load, cap
      end
    end
  end
  return best, {live, full, draining, skipped}
end

-- Keep the sets in step with a session's new node_id / state (nil = unchanged); call it
-- before writing the record, since it reads the old node_id.
local function relink(sid, node, state)
  if node then
    local old = redis.call('HGET', session_key(sid), 'node_id')
    if old then
      old = cjson.decode(old)
      if old ~= '' then redis.call('SREM', members_key(old), sid) end
    end
    if node ~= '' then redis.call('SADD', members_key(node), sid) end
  end
  if state == 'orphaned' then
    redis.call('SADD', P .. 'orphans', sid)
  elseif state then
    redis.call('SREM', P .. 'orphans', sid)
  end
  redis.call('SADD', P .. 'sessions', sid)
end

local function assign(sid, node, state, updated)
  relink(sid, node, state)
  redis.call('HSET', session_key(sid), 'node_id', cjson.encode(node), 'state', cjson.encode(state),
             'updated', updated)
end
"""

# ARGV: prefix, session id, JSON list of excluded node ids, then field/value pairs.
# Returns the node id, or the counts (a list) when no node has room.
_PLACE = _LUA_LIB + """
local sid = ARGV[2]
local excluded = {}
for _, id in ipairs(cjson.decode(ARGV[3])) do excluded[id] = true end
local best, counts = pick(sid, excluded)
if not best then return counts end
relink(sid, best, 'placed')
redis.call('HSET', session_key(sid), unpack(ARGV, 4))
redis.call('HSET', session_key(sid), 'node_id', cjson.encode(best), 'state', '"placed"')
return best
"""

# ARGV: prefix, 'save' (upsert) or 'update' (only if it exists), session id, field/value pairs.
_WRITE = _LUA_LIB + """
local sid = ARGV[3]
if ARGV[2] == 'update' and redis.call('EXISTS', session_key(sid)) == 0 then return 0 end
local node, state = nil, nil
for i = 4, #ARGV, 2 do
  if ARGV[i] == 'node_id' then node = cjson.decode(ARGV[i + 1]) end
  if ARGV[i] == 'state' then state = cjson.decode(ARGV[i + 1]) end
end
relink(sid, node, state)
redis.call('HSET', session_key(sid), unpack(ARGV, 4))
return 1
"""

# ARGV: prefix, session id, '1' to require the owner in ARGV[4] (else '0').
_END = _LUA_LIB + """
local sid = ARGV[2]
local current = redis.call('HGET', session_key(sid), 'node_id')
if not current then return 0 end
current = cjson.decode(current)
if ARGV[3] == '1' and current ~= ARGV[4] then return 0 end
if current ~= '' then redis.call('SREM', members_key(current), sid) end
redis.call('SREM', P .. 'sessions', sid)
redis.call('SREM', P .. 'orphans', sid)
redis.call('DEL', session_key(sid))
return 1
"""

# ARGV: prefix, updated (JSON number), node id to remove ('' = reap: retry the orphans,
# then evict every node whose key expired). Returns the ids of the sessions that moved.
# One script, so concurrent reapers serialise: the second finds nothing left to do.
_REAP = _LUA_LIB + """
local updated = ARGV[2]
local moved = {}
local function by_age(ids)
  local created = {}
  for _, sid in ipairs(ids) do
    created[sid] = tonumber(redis.call('HGET', session_key(sid), 'created') or '0')
  end
  table.sort(ids, function(a, b)
    if created[a] ~= created[b] then return created[a] < created[b] end
    return a < b
  end)
  return ids
end
local function evict(node)
  redis.call('SREM', KEYS[1], node)
  redis.call('DEL', node_key(node))
  for _, sid in ipairs(by_age(redis.call('SMEMBERS', members_key(node)))) do
    if redis.call('EXISTS', session_key(sid)) == 1 then
      local best = pick(sid, {})
      if best then assign(sid, best, 'placed', updated) else assign(sid, '', 'orphaned', updated) end
      moved[#moved + 1] = sid
    end
  end
  redis.call('DEL', members_key(node))
end
if ARGV[3] ~= '' then
  evict(ARGV[3])
  return moved
end
for _, sid in ipairs(by_age(redis.call('SMEMBERS', P .. 'orphans'))) do
  if redis.call('EXISTS', session_key(sid)) == 0 then
    redis.call('SREM', P .. 'orphans', sid)
  else
    local best = pick(sid, {})
    if best then
      assign(sid, best, 'placed', updated)
      moved[#moved + 1] = sid
    end
  end
end
local ids = redis.call('SMEMBERS', KEYS[1])
table.sort(ids)
for _, node in ipairs(ids) do
  if redis.call('EXISTS', node_key(node)) == 0 then evict(node) end
end
return moved
"""

# ARGV: prefix, node id, ttl ms, field/value pairs. Refreshes only a node that still exists
# (a plain HSET would resurrect an expired node without its other fields).
_HEARTBEAT = _LUA_LIB + """
local key = node_key(ARGV[2])
if redis.call('EXISTS', key) == 0 then return 0 end
redis.call('HSET', key, unpack(ARGV, 4))
redis.call('PEXPIRE', key, ARGV[3])
return 1
"""

# ARGV: prefix, node id, state (JSON).
_SET_STATE = _LUA_LIB + """
local key = node_key(ARGV[2])
if redis.call('EXISTS', key) == 0 then return 0 end
redis.call('HSET', key, 'state', ARGV[3])
return 1
"""

# ARGV: prefix, face id, owner, owner limit ('' = none), field/value pairs. 0 = the owner is
# at the limit (nothing stored); 1 = stored. Replacing a face never counts against the limit.
_PUT_FACE = """
local P = ARGV[1]
local key = P .. 'face:' .. ARGV[2]
local mine = P .. 'owner_faces:' .. ARGV[3]
local limit = tonumber(ARGV[4])
local old = redis.call('HGET', key, 'owner')
if limit and not old and redis.call('SCARD', mine) >= limit then return 0 end
if old and old ~= ARGV[3] then redis.call('SREM', P .. 'owner_faces:' .. old, ARGV[2]) end
redis.call('DEL', key)
redis.call('HSET', key, unpack(ARGV, 5))
redis.call('SADD', P .. 'faces', ARGV[2])
redis.call('SADD', mine, ARGV[2])
return 1
"""

# ARGV: prefix, face id. 1 when a face was removed.
_DELETE_FACE = """
local P = ARGV[1]
local key = P .. 'face:' .. ARGV[2]
local owner = redis.call('HGET', key, 'owner')
redis.call('SREM', P .. 'faces', ARGV[2])
if not owner then return redis.call('DEL', key) end
redis.call('SREM', P .. 'owner_faces:' .. owner, ARGV[2])
return redis.call('DEL', key)
"""


def _encode(fields: dict[str, Any]) -> dict[str, str]:
    """Each field's value as JSON (the scripts read node_id and state with cjson)."""
    return {name: json.dumps(value) for name, value in fields.items()}


def _flat(fields: dict[str, Any]) -> list[str]:
    """Field/value pairs in one list, as a script's ARGV takes them."""
    return [item for name, value in _encode(fields).items() for item in (name, value)]


def _decode(raw: dict[bytes, bytes]) -> dict[str, Any]:
    return {name.decode(): json.loads(value) for name, value in raw.items()}


def _client(url: str) -> RedisClient:
    # node pools of a cluster do not wait for a connection (they raise): _turn bounds the
    # operations, and twice as many leaves room for control_messages, which holds one listening
    cluster = is_cluster_url(url)
    return open_redis(url, max_connections=2 * _MAX_CONNECTIONS if cluster else _MAX_CONNECTIONS,
                      socket_timeout=_OP_TIMEOUT_S)


class RedisRegistry(Registry):
    """The registry in Redis (one server, or a cluster: see ``_client``). One client without
    ``decode_responses`` (face bytes must stay bytes); text is decoded here. redis-py
    reconnects on its own after an outage, so the same object works again once Redis is
    back."""

    def __init__(self, url: str, *, ttl_s: float = 2.0, namespace: str = "swapcast") -> None:
        self.ttl_s = ttl_s
        self._prefix = f"swapcast:{{{namespace}}}:"
        self._nodes_key = self._prefix + "nodes"
        self._redis = _client(url)
        # a burst of calls waits briefly for a turn instead of opening hundreds of
        # connections (connection setup, not Redis, dominated a 200-placement burst)
        self._turns = asyncio.Semaphore(_MAX_CONNECTIONS)
        self._place = self._redis.register_script(_PLACE)
        self._write = self._redis.register_script(_WRITE)
        self._end = self._redis.register_script(_END)
        self._reap = self._redis.register_script(_REAP)
        self._heartbeat = self._redis.register_script(_HEARTBEAT)
        self._set_state = self._redis.register_script(_SET_STATE)
        self._put_face = self._redis.register_script(_PUT_FACE)
        self._delete_face = self._redis.register_script(_DELETE_FACE)
        self._closed = False

    # -- helpers ----------------------------------------------------------------------------

    def _key(self, *parts: str) -> str:
        return self._prefix + ":".join(parts)

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """One of ``_MAX_CONNECTIONS`` operations at once, waiting for a turn as long as
        for a reply (then ``TimeoutError``, so unavailable): each uses one connection at a
        time, so neither client's pool runs out."""
        async with asyncio.timeout(_OP_TIMEOUT_S):
            await self._turns.acquire()
        try:
            yield
        finally:
            self._turns.release()

    async def _script(self, script: AsyncScript, *args: str | int | bytes) -> Any:
        return await script(keys=[self._nodes_key], args=[self._prefix, *args])

    async def _records(self, session_ids: Iterable[bytes | str]) -> list[SessionRecord]:
        ids = [sid.decode() if isinstance(sid, bytes) else sid for sid in session_ids]
        async with self._redis.pipeline(transaction=False) as pipe:
            for sid in ids:
                pipe.hgetall(self._key("session", sid))
            found = await pipe.execute()
        return [SessionRecord.from_dict(_decode(raw)) for raw in found if raw]

    async def _node_views(self, node_ids: Iterable[str]) -> list[NodeInfo]:
        ids = list(node_ids)
        async with self._redis.pipeline(transaction=False) as pipe:
            for node_id in ids:
                pipe.hgetall(self._key("node", node_id))
                pipe.scard(self._key("node_sessions", node_id))
            found = await pipe.execute()
        views = []
        for raw, load in zip(found[::2], found[1::2], strict=True):
            if raw:  # an expired node is still in the set until reaped
                views.append(NodeInfo.from_dict({**_decode(raw), "load": load}))
        return views

    # -- nodes ------------------------------------------------------------------------------

    @_reachable
    async def register_node(self, info: NodeInfo) -> None:
        fields = {**info.to_dict(), "state": checked_state(info.state), "last_seen": now()}
        del fields["load"]  # the registry counts it
        key = self._key("node", info.id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.hset(key, mapping=_encode(fields))
            pipe.pexpire(key, round(self.ttl_s * 1000))
            pipe.sadd(self._nodes_key, info.id)
            await pipe.execute()

    @_reachable
    async def heartbeat(self, node_id: str, *, queue_delay_ms: float = 0.0,
                        stats: dict[str, Any] | None = None) -> bool:
        fields: dict[str, Any] = {"queue_delay_ms": queue_delay_ms, "last_seen": now()}
        if stats is not None:
            fields["stats"] = stats
        return bool(await self._script(self._heartbeat, node_id, round(self.ttl_s * 1000), *_flat(fields)))

    @_reachable
    async def set_node_state(self, node_id: str, state: NodeState) -> NodeInfo:
        changed = await self._script(self._set_state, node_id, json.dumps(checked_state(state)))
        views = await self._node_views([node_id]) if changed else []
        if not views:
            raise RegistryError(f"unknown node {node_id!r}")
        return views[0]

    @_reachable
    async def remove_node(self, node_id: str) -> list[SessionRecord]:
        return await self._records(await self._script(self._reap, json.dumps(now()), node_id))

    @_reachable
    async def nodes(self) -> list[NodeInfo]:
        return await self._node_views(sorted(m.decode() for m in await self._redis.smembers(self._nodes_key)))

    @_reachable
    async def node(self, node_id: str) -> NodeInfo | None:
        views = await self._node_views([node_id])
        return views[0] if views else None

    @_reachable
    async def reap_dead_nodes(self) -> list[SessionRecord]:
        return await self._records(await self._script(self._reap, json.dumps(now()), ""))

    # -- sessions ---------------------------------------------------------------------------

    @_reachable
    async def place_session(self, record: SessionRecord, *, exclude: Iterable[str] = ()) -> SessionRecord:
        fields = record.with_changes(state="placed").to_dict()
        chosen = await self._script(self._place, record.id, json.dumps(list(exclude)), *_flat(fields))
        if isinstance(chosen, list):
            raise no_room(*chosen)
        return SessionRecord.from_dict({**fields, "node_id": chosen.decode()})

    @_reachable
    async def save_session(self, record: SessionRecord) -> None:
        await self._script(self._write, "save", record.id, *_flat(record.to_dict()))

    @_reachable
    async def get_session(self, session_id: str) -> SessionRecord | None:
        found = await self._records([session_id])
        return found[0] if found else None

    @_reachable
    async def update_session(self, session_id: str, **changes: Any) -> SessionRecord:
        fields = {**checked_changes(changes), "updated": now()}
        if not await self._script(self._write, "update", session_id, *_flat(fields)):
            raise UnknownSessionError(f"no session {session_id!r}")
        found = await self._records([session_id])
        if not found:  # ended between the two calls
            raise UnknownSessionError(f"no session {session_id!r}")
        return found[0]

    @_reachable
    async def end_session(self, session_id: str, *, node_id: str | None = None) -> bool:
        check = ("0", "") if node_id is None else ("1", node_id)
        return bool(await self._script(self._end, session_id, *check))

    @_reachable
    async def sessions(self, node_id: str | None = None) -> list[SessionRecord]:
        key = self._key("sessions") if node_id is None else self._key("node_sessions", node_id)
        return oldest_first(await self._records(await self._redis.smembers(key)))

    # -- faces ------------------------------------------------------------------------------

    @_reachable
    async def put_face(self, face: FaceRecord, *, owner_limit: int | None = None) -> None:
        fields: dict[str, str | bytes] = {
            "name": face.name, "owner": face.owner, "created": repr(face.created),
            "thumbnail_jpeg": face.thumbnail_jpeg, "source": face.source, "photo_count": str(face.photo_count),
            **{f"photo:{n}": photo for n, photo in enumerate(face.photos)},
        }
        pairs = [item for name, value in fields.items() for item in (name, value)]
        limit = "" if owner_limit is None else str(owner_limit)
        if not await self._script(self._put_face, face.id, face.owner, limit, *pairs):
            raise FaceLimitError(f"{face.owner!r} already stores {owner_limit} faces")

    @_reachable
    async def get_face(self, face_id: str, *, photos: bool = False) -> FaceRecord | None:
        key = self._key("face", face_id)
        if photos:
            raw = await self._redis.hgetall(key)
        else:
            names = (b"name", b"owner", b"created", b"thumbnail_jpeg", b"source", b"photo_count")
            raw = {name: value for name, value in zip(names, await self._redis.hmget(key, *names), strict=True)
                   if value is not None}
        if not raw:
            return None
        count = int(raw.get(b"photo_count") or 1)  # absent from faces stored before photos were kept
        kept = tuple(raw[f"photo:{n}".encode()] for n in range(count) if f"photo:{n}".encode() in raw)
        return FaceRecord(id=face_id, name=raw[b"name"].decode(), owner=raw[b"owner"].decode(),
                          created=float(raw[b"created"]), thumbnail_jpeg=raw[b"thumbnail_jpeg"], source=raw[b"source"],
                          photos=kept, photo_count=count)

    @_reachable
    async def faces(self, owner: str | None = None) -> list[FaceRecord]:
        ids = [m.decode() for m in await self._redis.smembers(self._key("faces"))]
        async with self._redis.pipeline(transaction=False) as pipe:
            for face_id in ids:
                pipe.hmget(self._key("face", face_id), "name", "owner", "created", "photo_count")
            rows = await pipe.execute()
        found = [FaceRecord(id=face_id, name=name.decode(), owner=who.decode(), created=float(created),
                            thumbnail_jpeg=b"", source=b"", photo_count=int(count or 1))
                 for face_id, (name, who, created, count) in zip(ids, rows, strict=True) if name is not None]
        chosen = (f for f in found if owner is None or f.owner == owner)
        return sorted(chosen, key=lambda f: (f.created, f.id))

    @_reachable
    async def delete_face(self, face_id: str) -> bool:
        return bool(await self._script(self._delete_face, face_id))

    # -- control messages ---------------------------------------------------------------------

    @_reachable
    async def send_control(self, node_id: str, message: dict[str, Any]) -> None:
        await self._redis.publish(self._key("control", node_id), json.dumps(message))

    async def control_messages(self, node_id: str) -> AsyncIterator[dict[str, Any]]:
        """Pub/sub is fire-and-forget: messages sent during an outage are lost (the contract
        says best effort); the loop re-subscribes with a backoff of at most a second."""
        backoff = 0.05
        while not self._closed and not cancel_requested():
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                # a keyed command first: on a cluster it (re)learns the slot's master, after a
                # failover too, where SUBSCRIBE just goes where the client's slot map says
                await self._redis.exists(self._nodes_key)
                await pubsub.subscribe(self._key("control", node_id))
                backoff = 0.05
                while not self._closed and not cancel_requested():
                    message = await pubsub.get_message(timeout=_MAX_BACKOFF_S)
                    if message is not None:
                        yield json.loads(message["data"])
            except UNREACHABLE:
                if self._closed:
                    return
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
            finally:
                await pubsub.aclose()

    # -- lifecycle --------------------------------------------------------------------------

    async def ping(self) -> bool:
        try:
            async with self._turn():
                return bool(await self._redis.ping())
        except UNREACHABLE:
            return False

    async def close(self) -> None:
        self._closed = True
        await self._redis.aclose()
