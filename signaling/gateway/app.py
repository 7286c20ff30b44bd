"""The gateway's HTTP application: the one address clients know, in front of every node.

It places new sessions through the registry, forwards each request to the node that owns
its session (moving the session when that node is dead), merges the nodes' session lists,
and answers node management and health itself. The nodes do all media work; the gateway
never looks inside an SDP or a frame, so node features reach clients through it unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

import web as web_pages  # the static pages: a package, so an installed swapcast carries them
from signaling.auth import (
    PRINCIPAL_KEY,
    AuditLog,
    AuthError,
    TokenVerifier,
    check_owner,
    require_admin,
    require_visible,
)
from signaling.auth.wiring import ApiAuth
from signaling.cors import CorsPolicy
from signaling.events import add_event_routes
from signaling.gateway.proxy import (
    Body,
    NodeClient,
    NodeFailed,
    NodeUnreachable,
    on_session_node,
)
from signaling.gateway.rtmp_relay import RtmpRelay
from signaling.http_input import BadInput, bad_input_middleware, read_json
from signaling.log_safety import quoted
from signaling.openapi import add_openapi_route
from signaling.registry.base import (
    NoCapacityError,
    NodeInfo,
    NodeState,
    Registry,
    RegistryError,
    RegistryUnavailable,
    SessionProtocol,
    SessionRecord,
    cancel_requested,
)
from streamer.metrics import GatewayMetrics, add_metrics_routes
from streamer.rtmp.server import RtmpServer
from swapcast.config import SwapConfig

log = logging.getLogger(__name__)

WEB_ROOT = Path(web_pages.__file__).resolve().parent
PATCH_KEYS = ("enabled", "face_id", "options")


@dataclass(frozen=True)
class GatewaySettings:
    node_connect_timeout_s: float = 2.0  # past it a node is unreachable (removed, request retried)
    node_timeout_s: float = 30.0  # longest wait for a node's next bytes (session creation gathers ICE)
    fanout_timeout_s: float = 1.0  # a node slower than this adds nothing to the session list
    node_retries: int = 2  # other nodes tried after an unreachable one
    reap_interval_s: float = 0.25  # how often dead nodes' sessions are moved
    # bodies the gateway holds to retry them: sessions, WHIP offers, face uploads (node limit
    # 10 MiB of image, plus multipart framing); anything else is streamed through
    max_body_bytes: int = 16 * 1024 * 1024
    web_root: Path = WEB_ROOT
    rtmp_host: str = "127.0.0.1"
    rtmp_port: int | None = None  # None: no RTMP relay; 0: any free port
    rtmp_connect_timeout_s: float = 5.0
    rtmp_stall_timeout_s: float = 5.0
    rtmp_setup_timeout_s: float = 10.0  # config rtmp.setup_timeout_s
    rtmp_max_pending_per_ip: int = 32  # config rtmp.max_pending_per_ip
    rtmp_tls: ssl.SSLContext | None = None  # RTMPS beside the relay's RTMP (config tls)
    rtmp_tls_port: int = 0
    cors_origins: tuple[str, ...] = ()  # config server.cors_origins: pages elsewhere that may call it
    event_sockets_per_user: int = 8  # config quotas.event_sockets_per_user


@dataclass
class _Gateway:
    registry: Registry
    settings: GatewaySettings
    on_placed: Callable[[SessionProtocol, float], None] | None = None  # metrics: seconds to place a session
    audit: AuditLog | None = None  # admin actions, when the gateway runs with auth
    verifier: TokenVerifier | None = None  # tokens on public routes (DELETE /whip/{id}), with auth
    client: NodeClient = field(init=False)

    # -- sessions ---------------------------------------------------------------------------

    async def create_session(self, request: web.Request) -> web.StreamResponse:
        return await self._create(request, "webrtc")

    async def whip_publish(self, request: web.Request) -> web.StreamResponse:
        return await self._create(request, "whip")

    async def _create(self, request: web.Request, protocol: SessionProtocol) -> web.StreamResponse:
        """Place a new session and hand the request to its node, which must adopt the id in
        ``X-Swapcast-Session-Id``. A node that refuses leaves no record behind."""
        body = await request.read()
        caller = request.get(PRINCIPAL_KEY)  # None for WHIP: its stream key names the owner, on the node
        # the node adopts the id only from a placement for the same caller (see its _check_placed)
        record = SessionRecord(id=secrets.token_urlsafe(12), protocol=protocol, owner=caller.subject if caller else "")
        started = time.perf_counter()

        async def attempt(placed: SessionRecord, node: NodeInfo) -> web.StreamResponse:
            if self.on_placed is not None:
                self.on_placed(protocol, time.perf_counter() - started)
            async def settle(status: int) -> None:
                if status >= 400:
                    await self.registry.end_session(placed.id, node_id=placed.node_id)

            return await self._forward(request, node, body, placed.id, on_answer=settle)

        try:
            return await on_session_node(self.registry, record, None, attempt, retries=self.settings.node_retries)
        except (NodeUnreachable, NodeFailed, NoCapacityError):
            with contextlib.suppress(RegistryUnavailable):
                await self.registry.end_session(record.id)
            raise

    async def offer(self, request: web.Request) -> web.StreamResponse:
        """An offer for an existing session: its node if alive (draining included), else a
        new node, which resumes it from the registry under the same id."""
        record = await self._record(request.match_info["session_id"], request)
        body = await request.read()
        node = await self._live_owner(record)

        async def attempt(placed: SessionRecord, owner: NodeInfo) -> web.StreamResponse:
            return await self._forward(request, owner, body, placed.id)

        return await on_session_node(self.registry, record, node, attempt, retries=self.settings.node_retries)

    async def list_sessions(self, request: web.Request) -> web.Response:
        return web.json_response(await self.sessions_for(request))

    async def sessions_for(self, request: web.Request) -> list[dict[str, Any]]:
        """The caller's registry sessions (an admin's: all), each with its node's live view
        (connection, viewers, stats; ``stats`` is None when the node has not got it yet, is
        gone, or did not answer within the fan-out timeout). Nodes are asked on the caller's
        behalf (their token), so they filter the same way."""
        caller = request.get(PRINCIPAL_KEY)
        records = [r for r in await self.registry.sessions() if caller is None or caller.may_access(r.owner)]
        nodes = await self.registry.nodes()
        headers = {"Authorization": request.headers["Authorization"]} if "Authorization" in request.headers else {}
        if not headers and "token" in request.query:  # the events socket: its token rides in the query
            headers = {"Authorization": f"Bearer {request.query['token']}"}
        answers = await asyncio.gather(*(self._node_sessions(node, headers) for node in nodes))
        live = {node.id: items for node, items in zip(nodes, answers, strict=True)}
        # one shape everywhere: the registry's record, with the owning node's live view
        # (connection, viewers, stats) on top; where and in which state stay the registry's
        return [
            {**record.to_dict(), **(live.get(record.node_id, {}).get(record.id) or {"stats": None}),
             "node_id": record.node_id, "state": record.state}
            for record in records
        ]

    async def node_dicts(self) -> list[dict[str, Any]]:
        return [node.to_dict() for node in await self.registry.nodes()]

    async def _node_sessions(self, node: NodeInfo, headers: dict[str, str]) -> dict[str, dict[str, Any]]:
        try:
            items = await self.client.get_json(node, "/api/v1/sessions", timeout_s=self.settings.fanout_timeout_s,
                                               headers=headers)
        except NodeFailed as exc:
            log.info("session list: %s", exc)
            return {}
        if not isinstance(items, list):
            return {}
        return {str(item["id"]): item for item in items if isinstance(item, dict) and "id" in item}

    async def session_item(self, request: web.Request) -> web.StreamResponse:
        """GET/PATCH/DELETE of one session (``DELETE /whip/{id}`` too): its node answers; when
        the node is gone the registry record is read, changed or ended instead."""
        session_id = request.match_info["session_id"]
        record = await self._record(session_id, request)
        owner = await self._live_owner(record)
        if owner is not None:
            body = await request.read()

            async def settle(status: int) -> None:
                if request.method == "DELETE" and status < 500:  # 404: it never reached the node
                    await self.registry.end_session(session_id, node_id=owner.id)

            try:
                return await self._forward(request, owner, body, session_id, on_answer=settle)
            except NodeUnreachable as exc:
                await self._remove_dead(exc)
                record = await self._record(session_id)
        return await self._without_owner(request, record)

    async def _without_owner(self, request: web.Request, record: SessionRecord) -> web.Response:
        if request.method == "GET":
            return web.json_response(record.to_dict())
        if request.method == "DELETE":
            self._check_publisher_gone(request, record)
            await self.registry.end_session(record.id)
            return web.Response(status=204)
        changes = _patch_changes(await _json_object(request), record)
        if "face_id" in changes:
            await self._check_face(request, changes["face_id"])
        return web.json_response((await self.registry.update_session(record.id, **changes)).to_dict())

    async def _check_face(self, request: web.Request, face_id: str) -> None:
        """A stored face the caller may not see is answered like a missing one; ids the
        registry does not hold (the samples) are checked by the node that resumes the session."""
        face = await self.registry.get_face(face_id)
        if face is not None:
            require_visible(request.get(PRINCIPAL_KEY), face.owner, f"no face with id {face_id!r}",
                            shared_when_unowned=True)

    def _check_publisher_gone(self, request: web.Request, record: SessionRecord) -> None:
        """``DELETE /whip/{id}`` (public: its node checks the stream key) when the node is gone:
        only the owner's or an admin's token can end it here, since stream keys live on the
        nodes; anyone else gets the unknown-id answer."""
        if PRINCIPAL_KEY in request or self.verifier is None:
            return
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        try:
            caller = self.verifier.verify(token.strip()) if scheme.lower() == "bearer" else None  # verify refuses non-ASCII
        except AuthError:
            caller = None
        if caller is None or not caller.may_access(record.owner):
            raise web.HTTPNotFound(reason=f"no session {record.id!r}")

    async def to_owner(self, request: web.Request) -> web.StreamResponse:
        """WHEP and trickle ICE: only the session's live node can answer them."""
        record = await self._record(request.match_info["session_id"], request)
        owner = await self._live_owner(record)
        if owner is None:
            where = f"its node {record.node_id} is gone" if record.node_id else "no node has room for it"
            return error(503, f"session {record.id} is not live: {where}; it resumes when its publisher reconnects")
        try:
            return await self._forward(request, owner, await request.read(), record.id)
        except NodeUnreachable as exc:
            await self._remove_dead(exc)
            raise

    # -- anything a ready node can answer ------------------------------------------------------

    async def any_node(self, request: web.Request) -> web.StreamResponse:
        """Faces (uploads: the node that takes one stores it in the registry for all) and
        every /api/v1 path the gateway does not know (jobs, ...): streamed, so large uploads
        (a face's several photos, a job's video) pass through without being held here."""
        return await self._to_any_node(request, request.content)

    async def _to_any_node(self, request: web.Request, body: Body) -> web.StreamResponse:
        # Retrying after an unreachable node is safe even for a streamed body: connecting
        # failed, so none of it was read.
        tried: set[str] = set()
        while True:
            ready = sorted((n for n in await self.registry.nodes() if n.state == "ready" and n.id not in tried),
                           key=lambda n: (n.load / max(n.capacity, 1), n.id))
            if not ready:
                return error(503, "no ready node" + (f" (unreachable: {', '.join(sorted(tried))})" if tried else ""))
            try:
                return await self._forward(request, ready[0], body)
            except NodeUnreachable as exc:
                await self._remove_dead(exc)
                tried.add(exc.node.id)
                if len(tried) > self.settings.node_retries:
                    raise

    # -- nodes and health -----------------------------------------------------------------------

    async def list_nodes(self, request: web.Request) -> web.Response:
        self._admin(request)
        return web.json_response(await self.node_dicts())

    async def drain_node(self, request: web.Request) -> web.Response:
        """No new sessions on the node; its sessions go on, and it is told to wind down."""
        node_id = request.match_info["node_id"]
        self._admin(request)
        node = await self._set_state(node_id, "draining")
        await self.registry.send_control(node_id, {"kind": "drain"})
        await self._audit(request, "node.drain", node_id)
        return web.json_response(node.to_dict())

    async def ready_node(self, request: web.Request) -> web.Response:
        self._admin(request)
        node = await self._set_state(request.match_info["node_id"], "ready")
        await self._audit(request, "node.ready", node.id)
        return web.json_response(node.to_dict())

    @staticmethod
    def _admin(request: web.Request) -> None:
        if PRINCIPAL_KEY in request:  # a gateway without auth (tests of routing alone) lets all through
            require_admin(request)

    async def _audit(self, request: web.Request, action: str, target: str) -> None:
        caller = request.get(PRINCIPAL_KEY)
        if self.audit is not None and caller is not None:
            await self.audit.append(caller.subject, action, target)

    async def _set_state(self, node_id: str, state: NodeState) -> NodeInfo:
        try:
            return await self.registry.set_node_state(node_id, state)
        except RegistryUnavailable:
            raise
        except RegistryError:
            raise web.HTTPNotFound(reason=f"no live node {node_id!r}") from None

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        if not await self.registry.ping():
            return error(503, "session registry unavailable")
        ready = [node.id for node in await self.registry.nodes() if node.state == "ready"]
        if not ready:
            return error(503, "no ready node")
        return web.json_response({"status": "ready", "nodes": ready})

    async def index(self, _: web.Request) -> web.FileResponse:
        return web.FileResponse(self.settings.web_root / "index.html")

    # -- helpers ----------------------------------------------------------------------------------

    async def _forward(self, request: web.Request, node: NodeInfo, body: Body, session_id: str | None = None,
                       on_answer: Callable[[int], Awaitable[None]] | None = None) -> web.StreamResponse:
        return await self.client.forward(request, node, body=body, session_id=session_id, on_answer=on_answer)

    async def _record(self, session_id: str, request: web.Request | None = None) -> SessionRecord:
        """The session's record; 404 when there is none, or (with auth) when it is another
        user's: the same answer, so ids of others' sessions reveal nothing."""
        record = await self.registry.get_session(session_id)
        if record is None:
            raise web.HTTPNotFound(reason=f"no session {session_id!r}")
        if request is not None and PRINCIPAL_KEY in request:
            check_owner(request, record.owner, "session")
        return record

    async def _live_owner(self, record: SessionRecord) -> NodeInfo | None:
        return await self.registry.node(record.node_id) if record.node_id else None

    async def _remove_dead(self, exc: NodeUnreachable) -> None:
        moved = await self.registry.remove_node(exc.node.id)
        log.warning("%s; removed it, %d session(s) moved", exc, len(moved))

    async def reap_forever(self) -> None:
        """Move the sessions of nodes that stopped beating. A failure is logged once per
        streak (a Redis outage would otherwise log four lines a second) and never stops it."""
        failing = False
        while not cancel_requested():  # a Redis call may swallow the cancellation
            try:
                moved = await self.registry.reap_dead_nodes()
            except Exception as exc:
                if not failing:
                    if isinstance(exc, RegistryUnavailable):
                        log.warning("reaper: session registry unavailable (%s); retrying", exc)
                    else:
                        log.exception("reaper: reap_dead_nodes failed; retrying")
                failing = True
            else:
                if failing:
                    log.info("reaper: session registry answers again")
                failing = False
                for record in moved:
                    where = f"to node {record.node_id}" if record.node_id else "nowhere (orphaned: no node has room)"
                    log.info("reaper: session %s (%s) moved %s", record.id, record.protocol, where)
            await asyncio.sleep(self.settings.reap_interval_s)


RTMP_SERVER_KEY = web.AppKey("gateway_rtmp_server", RtmpServer)


def build_gateway_app(registry: Registry, settings: GatewaySettings | None = None,
                      auth: ApiAuth | None = None) -> web.Application:
    """The gateway over ``registry`` (which the caller opens and closes). With
    ``settings.rtmp_port`` set it also relays RTMP; the started server is ``app[RTMP_SERVER_KEY]``.
    With ``auth`` (always, from the command line) every API route needs a token, as on the
    nodes, which check it again: the gateway forwards it."""
    settings = settings or GatewaySettings()
    metrics = GatewayMetrics(registry)
    gateway = _Gateway(registry, settings, on_placed=metrics.placed, audit=auth.audit if auth else None,
                       verifier=auth.verifier if auth else None)
    # bad_input_middleware innermost: unreadable input a handler missed is a 400, before json_errors' 500
    middlewares = [auth.middleware, json_errors] if auth is not None else [json_errors]
    middlewares.append(bad_input_middleware)
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=middlewares)
    CorsPolicy(settings.cors_origins).install(app)  # outermost: pre-flights are answered here, never forwarded
    r = app.router
    r.add_get("/healthz", gateway.healthz)
    r.add_get("/readyz", gateway.readyz)
    r.add_get("/", gateway.index)

    async def admin_page(_: web.Request) -> web.FileResponse:  # the operator dashboard (web/admin/)
        return web.FileResponse(settings.web_root / "admin" / "index.html")

    r.add_get("/admin/", admin_page)
    r.add_static("/web/", settings.web_root)
    r.add_get("/api/v1/nodes", gateway.list_nodes)
    r.add_post("/api/v1/nodes/{node_id}/drain", gateway.drain_node)
    r.add_post("/api/v1/nodes/{node_id}/ready", gateway.ready_node)
    r.add_get("/api/v1/sessions", gateway.list_sessions)
    r.add_post("/api/v1/sessions", gateway.create_session)
    r.add_post("/api/v1/sessions/{session_id}/offer", gateway.offer)
    r.add_post("/api/v1/sessions/{session_id}/candidates", gateway.to_owner)
    r.add_get("/api/v1/sessions/{session_id}/preview.jpg", gateway.to_owner)
    r.add_get("/api/v1/sessions/{session_id}/people/{person_id}/thumbnail.jpg", gateway.to_owner)
    for method in ("GET", "PATCH", "DELETE"):
        r.add_route(method, "/api/v1/sessions/{session_id}", gateway.session_item)
    r.add_post("/whip", gateway.whip_publish)
    r.add_delete("/whip/{session_id}", gateway.session_item)
    r.add_patch("/whip/{session_id}", gateway.to_owner)
    r.add_post("/whep/{session_id}", gateway.to_owner)
    r.add_delete("/whep/{session_id}/{viewer_id}", gateway.to_owner)
    r.add_patch("/whep/{session_id}/{viewer_id}", gateway.to_owner)
    if auth is not None:  # the events socket shows the caller's sessions: it needs to know who calls
        add_event_routes(app, gateway.sessions_for, gateway.node_dicts,
                         max_sockets_per_user=settings.event_sockets_per_user)
    add_openapi_route(app, gateway=True)  # before the catch-all below
    add_metrics_routes(app, metrics)
    r.add_route("*", "/api/v1/{tail:.*}", gateway.any_node)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        gateway.client = NodeClient(connect_timeout_s=settings.node_connect_timeout_s,
                                    read_timeout_s=settings.node_timeout_s)
        reaper = asyncio.create_task(gateway.reap_forever())
        relay: RtmpRelay | None = None
        if settings.rtmp_port is not None:
            relay = RtmpRelay(registry, connect_timeout_s=settings.rtmp_connect_timeout_s,
                              retries=settings.node_retries)
            app[RTMP_SERVER_KEY] = RtmpServer(relay, host=settings.rtmp_host, port=settings.rtmp_port,
                                              stall_timeout=settings.rtmp_stall_timeout_s, tls=settings.rtmp_tls,
                                              tls_port=settings.rtmp_tls_port,
                                              setup_timeout=settings.rtmp_setup_timeout_s,
                                              max_pending_per_ip=settings.rtmp_max_pending_per_ip)
            await app[RTMP_SERVER_KEY].start()
        try:
            yield
        finally:
            if relay is not None:
                await app[RTMP_SERVER_KEY].close()
                await relay.close()
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await asyncio.gather(reaper, return_exceptions=True)
            await gateway.client.close()

    app.cleanup_ctx.append(lifecycle)
    return app


def error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


@web.middleware
async def json_errors(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Every error the gateway itself answers is JSON ``{"error": reason}``; the registry's
    and the nodes' failures get the statuses of the forwarding contract."""
    try:
        return await handler(request)
    except RegistryUnavailable as exc:
        return error(503, f"session registry unavailable: {exc}")
    except NoCapacityError as exc:
        return error(503, str(exc))
    except (NodeUnreachable, NodeFailed) as exc:
        return error(502, str(exc))
    except AuthError:
        raise  # the auth middleware renders these (WWW-Authenticate, Retry-After)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = error(exc.status, exc.reason or "error")
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Exception:
        log.exception("%s %s failed", request.method, quoted(request.path))
        return error(500, "internal error (see the gateway log)")


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await read_json(request)
    except BadInput as exc:
        raise web.HTTPBadRequest(reason=exc.reason) from None
    if not isinstance(body, dict) or not body:
        raise web.HTTPBadRequest(reason=f"expected a JSON object with any of {', '.join(PATCH_KEYS)}")
    return body


def _patch_changes(body: dict[str, Any], record: SessionRecord) -> dict[str, Any]:
    """A PATCH for a session whose node is gone, checked like a node would, option values
    by the same schema: a bad one is refused now, not when the session resumes."""
    unknown = sorted(set(body) - set(PATCH_KEYS))
    if unknown:
        raise web.HTTPBadRequest(reason=f"unknown field(s) {', '.join(unknown)}; expected {', '.join(PATCH_KEYS)}")
    if "enabled" in body and not isinstance(body["enabled"], bool):
        raise web.HTTPBadRequest(reason="enabled must be true or false")
    if "face_id" in body and (not isinstance(body["face_id"], str) or not body["face_id"]):
        raise web.HTTPBadRequest(reason="face_id must be a face id (see GET /api/v1/faces)")
    if "options" in body and not isinstance(body["options"], dict):
        raise web.HTTPBadRequest(reason="options must be a JSON object of swap settings")
    changes = dict(body)
    if "options" in changes:
        try:  # stored as the schema reads them, as a node stores them
            changes["options"] = SwapConfig().normalised_changes({**record.options, **changes["options"]})
        except ValueError as exc:
            raise web.HTTPBadRequest(reason=str(exc)) from None
    return changes
