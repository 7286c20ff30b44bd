"""``GET /api/v1/events``: a WebSocket of session events and live stats, so pages and
dashboards stop polling the REST API.

Messages (JSON text frames), server to client only:

    {"type": "snapshot", "sessions": [...], "nodes": [...]}   at once, then every interval;
                                                               "nodes" for admins only
    {"type": "session_started", "session": {...}}             a session appeared since the
    {"type": "session_ended", "session": {...}}               last snapshot / disappeared (its
                                                               last known state)
    {"type": "people", "session_id": "...", "people": [...]}    the people a session sees changed
                                                               (someone new, on or off screen, what
                                                               they wear; see map faces)

Sessions are whatever ``list_sessions(request)`` returns for the caller (the app decides
whose sessions a caller sees); events are the difference between two successive listings,
so they are as fresh as the interval. Messages from the client are read (to notice its
close) and ignored. On server shutdown every socket is closed with 1001 (going away).

Authentication is the auth middleware's (``?token=`` on the upgrade, since browsers cannot
set headers there); a request that is not a WebSocket upgrade gets 426, and one user gets
``max_sockets_per_user`` sockets at once (429 past that). A socket lives no longer than its
token: when the token's ``exp`` passes, it is closed with 1008 (policy violation) and the
reason "token expired", as a REST call with that token would get 401; the page reconnects
with a fresh token.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from signaling.auth.middleware import principal

log = logging.getLogger(__name__)

EVENTS_PATH = "/api/v1/events"
# every socket lists its user's sessions each interval (a gateway asks every node for it),
# while the rate limit sees only the upgrade: one user's sockets at once are bounded
MAX_SOCKETS_PER_USER = 8  # the default of quotas.event_sockets_per_user
TOKEN_EXPIRED = "token expired"
ListSessions = Callable[[web.Request], Awaitable[list[dict[str, Any]]]]
ListNodes = Callable[[], Awaitable[list[dict[str, Any]]]]
_CLOSING = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


def add_event_routes(app: web.Application, list_sessions: ListSessions, list_nodes: ListNodes | None,
                     interval_s: float = 1.0, max_sockets_per_user: int = MAX_SOCKETS_PER_USER) -> None:
    """Mount the events WebSocket. ``list_nodes`` None: snapshots carry no nodes."""
    sockets: set[web.WebSocketResponse] = set()
    per_user: collections.Counter[str] = collections.Counter()

    async def events(request: web.Request) -> web.StreamResponse:
        caller = principal(request)
        nodes = list_nodes if caller.is_admin else None
        ws = web.WebSocketResponse(heartbeat=30.0)
        if not ws.can_prepare(request).ok:
            return web.json_response({"error": "a WebSocket endpoint: connect with Upgrade: websocket"}, status=426,
                                     headers={"Upgrade": "websocket", "Connection": "Upgrade"})
        if per_user[caller.subject] >= max_sockets_per_user:
            return web.json_response({"error": f"{max_sockets_per_user} event sockets of this user are open already, "
                                               "the most one user may hold; close one first"},
                                     status=429, headers={"Retry-After": "5"})
        per_user[caller.subject] += 1
        try:
            return await _serve(request, ws, nodes)
        finally:
            per_user[caller.subject] -= 1
            if not per_user[caller.subject]:
                del per_user[caller.subject]

    async def _serve(request: web.Request, ws: web.WebSocketResponse, nodes: ListNodes | None) -> web.StreamResponse:
        await ws.prepare(request)
        sockets.add(ws)
        try:
            await _stream(request, ws, list_sessions, nodes, interval_s)
        except ConnectionError:  # the client vanished mid-send
            pass
        except Exception:
            log.exception("events socket failed")
            await ws.close(code=WSCloseCode.INTERNAL_ERROR, message=b"internal error (see the server log)")
        finally:
            sockets.discard(ws)
        return ws

    async def close_all(_: web.Application) -> None:
        await asyncio.gather(*(ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutting down")
                               for ws in list(sockets)), return_exceptions=True)

    app.router.add_get(EVENTS_PATH, events)
    app.on_shutdown.append(close_all)


async def _stream(request: web.Request, ws: web.WebSocketResponse, list_sessions: ListSessions,
                  list_nodes: ListNodes | None, interval_s: float) -> None:
    caller = principal(request)
    previous: dict[str, dict[str, Any]] | None = None
    while not ws.closed:
        if caller.expired(time.time()):
            await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=TOKEN_EXPIRED.encode())
            return
        sessions = await list_sessions(request)
        current = {str(s.get("id")): s for s in sessions}
        if previous is not None:
            for session_id in previous.keys() - current.keys():
                await ws.send_json({"type": "session_ended", "session": previous[session_id]})
            for session_id in current.keys() - previous.keys():
                await ws.send_json({"type": "session_started", "session": current[session_id]})
            for session_id in current.keys() & previous.keys():
                if _people_state(current[session_id]) != _people_state(previous[session_id]):
                    await ws.send_json({"type": "people", "session_id": session_id,
                                        "people": current[session_id].get("people") or []})
        snapshot: dict[str, Any] = {"type": "snapshot", "sessions": sessions}
        if list_nodes is not None:
            snapshot["nodes"] = await list_nodes()
        await ws.send_json(snapshot)
        previous = current
        wait = interval_s if caller.expires is None else max(0.0, min(interval_s, caller.expires - time.time()))
        if not await _idle(ws, wait):
            return


def _people_state(session: dict[str, Any]) -> list[tuple]:
    """What a ``people`` event reports a change of: who, on screen or not, wearing what."""
    people = session.get("people") or []
    return [(p.get("id"), p.get("on_screen"), p.get("wears")) for p in people if isinstance(p, dict)]


async def _idle(ws: web.WebSocketResponse, seconds: float) -> bool:
    """Read (and ignore) client messages for ``seconds``; False once the socket closes."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await ws.receive(timeout=left)
        except TimeoutError:
            return not ws.closed
        if message.type in _CLOSING:
            return False
    return not ws.closed
