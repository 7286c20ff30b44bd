"""RTMP through the gateway: publishers (OBS, ffmpeg) and players connect to the gateway,
which relays each stream to and from the node that owns it, message by message.

A publish is connected to its node while the gateway is still authorizing it, so a node's
refusal (unknown or revoked key) reaches the publisher as that same refusal, and the
publisher never sees ``Publish.Start`` for a stream that goes nowhere. The relay keeps no
stream state of its own: when a node connection drops, the publisher is cut, and its
reconnect (OBS retries by itself) is placed again like a new publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict, deque
from typing import TypeVar

from signaling.gateway.proxy import NodeUnreachable, on_session_node
from signaling.log_safety import key_hint, quoted
from signaling.registry.base import (
    NoCapacityError,
    NodeInfo,
    Registry,
    RegistryUnavailable,
    SessionRecord,
)
from signaling.stream_keys import play_handle, rtmp_session_id
from streamer.rtmp.client import RtmpClientError, RtmpPlayClient, RtmpPublishClient
from streamer.rtmp.handler import Player, Publisher, PublishRejected

log = logging.getLogger(__name__)

BAD_CONNECTION = "NetStream.Publish.BadConnection"
PLAY_NOT_FOUND = "NetStream.Play.StreamNotFound"
PLAY_FAILED = "NetStream.Play.Failed"

_StreamKey = tuple[str, str]  # (app, stream name) as the server hands them to the handler
C = TypeVar("C", RtmpPublishClient, RtmpPlayClient)
T = TypeVar("T")


class RtmpRelay:
    """The gateway's ``RtmpHandler``. ``retries``: other nodes tried when one is unreachable."""

    def __init__(self, registry: Registry, *, connect_timeout_s: float = 5.0, retries: int = 2) -> None:
        self._registry = registry
        self._timeout = connect_timeout_s
        self._retries = retries
        # Node connections opened by authorize_*, waiting for their on_* call. The server
        # calls on_publish/on_play right after a successful authorize, with no await in
        # between, so first-in first-out per stream name pairs them up correctly.
        self._publishes: defaultdict[_StreamKey, deque[tuple[RtmpPublishClient, NodeInfo]]] = defaultdict(deque)
        self._plays: defaultdict[_StreamKey, deque[RtmpPlayClient]] = defaultdict(deque)

    # -- publish ----------------------------------------------------------------------------------

    async def authorize_publish(self, app: str, name: str) -> None:
        try:
            upstream = await self._connect_publish(app, name)
        except RegistryUnavailable as exc:
            raise PublishRejected(BAD_CONNECTION, f"session registry unavailable ({exc}); try again shortly") from None
        self._publishes[(app, name)].append(upstream)

    async def _connect_publish(self, app: str, name: str) -> tuple[RtmpPublishClient, NodeInfo]:
        """The stream's session stays on its node while that node lives; otherwise it is
        placed (again). A record the gateway created is ended when the publish fails."""
        session_id = rtmp_session_id(name)
        existing = await self._registry.get_session(session_id)
        record = existing or SessionRecord(id=session_id, protocol="rtmp")
        owner = await self._registry.node(record.node_id) if record.node_id else None

        async def connect(placed: SessionRecord, node: NodeInfo) -> tuple[RtmpPublishClient, NodeInfo]:
            try:
                return await self._open(RtmpPublishClient, node, app, name), node
            except PublishRejected:
                if existing is None:
                    await self._registry.end_session(placed.id, node_id=node.id)
                raise

        try:
            return await on_session_node(self._registry, record, owner, connect, retries=self._retries)
        except (NodeUnreachable, NoCapacityError) as exc:
            if existing is None:
                await self._registry.end_session(session_id)
            raise PublishRejected(BAD_CONNECTION, f"{exc}; try again shortly") from None

    async def on_publish(self, publisher: Publisher) -> None:
        client, node = _take(self._publishes, (publisher.app, publisher.name))
        log.info("rtmp relay: %s/%s from %s -> node %s", quoted(publisher.app, 40), key_hint(publisher.name),
                 publisher.remote, node.id)
        try:
            async for message in publisher.media():
                try:
                    await client.send(message)
                except RtmpClientError as exc:
                    log.warning("rtmp relay: node %s dropped %s/%s (%s)", node.id, quoted(publisher.app, 40),
                                key_hint(publisher.name), exc)
                    await publisher.close(f"node {node.id} dropped the stream; reconnect to continue")
                    return
        finally:
            await client.close()
        log.info("rtmp relay: %s/%s ended (%s)", quoted(publisher.app, 40), key_hint(publisher.name), publisher.ended_reason)

    # -- play -------------------------------------------------------------------------------------

    async def authorize_play(self, app: str, name: str) -> None:
        """Plays go to the node that has the stream. Nodes play a stream only by its play
        token, and a live RTMP session's record holds a one-way handle of that token, so
        the gateway asks exactly the node(s) whose session carries it -- a made-up name
        costs no node a connection. A node's own refusal reaches the player unchanged."""
        try:
            nodes = await self._play_candidates(name)
        except RegistryUnavailable as exc:
            raise PublishRejected(PLAY_FAILED, f"session registry unavailable ({exc}); try again shortly") from None
        refusal = PublishRejected(PLAY_NOT_FOUND, f"no live stream {name!r}")
        for node in nodes:
            try:
                client = await self._open(RtmpPlayClient, node, app, name)
            except PublishRejected as exc:
                log.info("rtmp relay: play %s/%s refused by node %s (%s)", quoted(app, 40), key_hint(name), node.id, exc)
                refusal = exc
                continue
            except NodeUnreachable as exc:
                log.info("rtmp relay: play %s/%s: node %s unreachable (%s)", quoted(app, 40), key_hint(name), node.id, exc)
                refusal = PublishRejected(PLAY_FAILED, f"the stream's node {node.id} is unreachable; try again shortly")
                continue
            self._plays[(app, name)].append(client)
            return
        raise refusal

    async def _play_candidates(self, name: str) -> list[NodeInfo]:
        handle = play_handle(name)
        sessions = [s for s in await self._registry.sessions() if s.protocol == "rtmp" and s.play_handle == handle]
        node_ids = dict.fromkeys(s.node_id for s in sessions if s.node_id)
        nodes = [await self._registry.node(node_id) for node_id in node_ids]
        return [node for node in nodes if node is not None]

    async def on_play(self, player: Player) -> None:
        client = _take(self._plays, (player.app, player.name))

        async def pump() -> None:
            async for message in client.media():
                player.send(message)

        tasks = [asyncio.create_task(pump()), asyncio.create_task(player.wait_closed())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for result in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(result, RtmpClientError):
                    log.info("rtmp relay: play %s/%s: node stream ended (%s)", quoted(player.app, 40),
                             key_hint(player.name), result)
            await client.close()

    # -- shared -------------------------------------------------------------------------------------

    async def _open(self, kind: type[C], node: NodeInfo, app: str, name: str) -> C:
        """A connected client for ``app/name`` on the node's RTMP server. A refusal by the
        node becomes the same ``PublishRejected``; an unreachable node ``NodeUnreachable``."""
        if not node.rtmp_address:
            raise PublishRejected(BAD_CONNECTION, f"node {node.id} has no RTMP server")
        client = kind(f"rtmp://{node.rtmp_address}/{app}/{name}", timeout=self._timeout)
        try:
            await client.connect()
        except RtmpClientError as exc:
            if exc.code:  # the node said no: the publisher hears the same
                raise PublishRejected(exc.code, exc.description or "refused by the node") from None
            if exc.unreachable:
                raise NodeUnreachable(node, str(exc)) from None
            raise PublishRejected(BAD_CONNECTION, f"node {node.id}: {exc}") from None
        return client

    async def close(self) -> None:
        """Close node connections whose publish or play never started (server shutdown)."""
        clients = [client for waiting in self._publishes.values() for client, _ in waiting]
        clients += [client for waiting in self._plays.values() for client in waiting]
        self._publishes.clear()
        self._plays.clear()
        for client in clients:
            with contextlib.suppress(RtmpClientError, OSError):
                await client.close()


def _take(waiting: defaultdict[_StreamKey, deque[T]], key: _StreamKey) -> T:
    queue = waiting[key]
    item = queue.popleft()
    if not queue:
        del waiting[key]
    return item
