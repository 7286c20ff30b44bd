"""The composition root: the one place that wires a node together from the config.

``build_node(config)`` creates the node's parts (face engine, registry, face library, live
sessions, RTMP) without starting anything; ``build_app(config)`` puts them behind the HTTP
application and hooks their startup and teardown into its lifecycle (aiohttp
``on_startup`` / ``on_shutdown`` / ``on_cleanup``), so ``swapcast serve``, Ctrl+C / SIGTERM
and the tests all go through the same path.

Without ``cluster.redis_url`` the node is the embedded single node: an in-process registry
it registers itself in. With it, the node joins the cluster (``signaling.node_agent``) and
serves what the gateway forwards to it.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

import web as web_pages  # the static pages: a package, so an installed swapcast carries them
from gpu.engine import FaceEngine
from signaling.auth import Principal, require_admin, require_visible
from signaling.auth.middleware import principal
from signaling.auth.wiring import ApiAuth, api_auth
from signaling.connection_limits import ConnectionLimits
from signaling.events import add_event_routes
from signaling.cors import CorsPolicy
from signaling.http_input import bad_input_middleware
from signaling.jobs import JobService, JobSettings, add_job_routes, face_checker
from signaling.key_revocation import RevocationWatch
from signaling.keys_api import KeyApi, KeyQuotas, add_key_routes
from signaling.node_agent import AgentSettings, NodeAgent
from signaling.openapi import add_openapi_route
from signaling.push_policy import PushPolicy
from signaling.registry import NodeInfo, Registry, RegistryError, open_registry
from signaling.stream_keys import StreamKeyStore
from signaling.tls import CertificateReloader, client_context, serve_https_redirect, server_context
from signaling.turn_credentials import TurnCredentials, browser_ice_servers
from streamer.faces import FaceLibrary
from streamer.live.rtmp_ingest import IngestSettings, RtmpIngest
from streamer.live.swap_worker import EncoderSettings
from streamer.media.hwcodecs import SOFTWARE_DECODE, SOFTWARE_ENCODE, CodecChoice, choose_video_decoder, choose_video_encoder
from streamer.metrics import NodeMetrics, add_metrics_routes
from streamer.provenance.routes import add_provenance_routes
from streamer.rtmp.client import RtmpPublishClient
from streamer.rtmp.server import RtmpServer
from streamer.samples import SAMPLE_FACES
from streamer.webrtc import routes as webrtc_routes
from streamer.webrtc.manager import SessionManager
from swapcast.config import Config, ConfigError

WEB_ROOT = Path(web_pages.__file__).resolve().parent
NODE_KEY = web.AppKey("node", object)
AUTH_KEY = web.AppKey("auth", ApiAuth)


@dataclass
class Node:
    """Everything one node runs, built from the config."""

    config: Config
    engine: FaceEngine
    registry: Registry
    faces: FaceLibrary
    sessions: SessionManager  # WebRTC, WHIP and WHEP
    rtmp_ingest: RtmpIngest  # OBS/ffmpeg publishers, re-publish, recording, play
    rtmp_server: RtmpServer
    keys: StreamKeyStore
    revocations: RevocationWatch  # ends live publishes of keys revoked anywhere
    video_encoder: CodecChoice = SOFTWARE_ENCODE  # live.video_encoder, as chosen at start
    video_decoder: CodecChoice = SOFTWARE_DECODE  # live.video_decoder, as chosen at start
    agent: NodeAgent | None = None
    tls: ssl.SSLContext | None = None  # HTTPS and RTMPS (config tls), shared by both listeners
    owns_registry: bool = True  # False when the caller shares one registry between nodes
    metrics: NodeMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = NodeMetrics(self.live_sessions, self.engine.batch_metrics, self.engine.processors.refusals,
                                   self.engine.runner_statistics, self.engine.tracking_metrics)
        self.sessions.observe_stats = self.rtmp_ingest.observe_stats = self.metrics.stream_observer

    @property
    def node_id(self) -> str:
        return self.sessions.node_id

    async def startup(self, _: web.Application | None = None) -> None:
        await self.keys.call(self.keys.prepare)  # creates the store, or moves a JSON store of earlier versions in
        self.revocations.start()
        self.sessions.start()
        await self.rtmp_server.start()
        self.agent = NodeAgent(self.registry, self._node_info(), NodeHooksAdapter(self), AgentSettings(
            heartbeat_s=self.config.cluster.heartbeat_s, offer_timeout_s=self.config.cluster.offer_timeout_s))
        await self.agent.start()

    def _node_info(self) -> NodeInfo:
        cluster, server = self.config.cluster, self.config.server
        address = cluster.advertise or f"{server.host}:{server.port}"
        host = address.rsplit(":", 1)[0]
        return NodeInfo(
            id=self.node_id, address=address, rtmp_address=f"{host}:{self.rtmp_server.port}",
            gpu=self.engine.device.name if self.engine.device.is_cuda else "cpu",
            capacity=cluster.capacity or self.config.webrtc.max_sessions,
            processors=self.engine.processors.describe(),
        )

    async def shutdown(self, _: web.Application | None = None) -> None:
        """Before the HTTP server stops: end every live connection, then leave the
        registry, which moves the sessions' records to other nodes."""
        await self.revocations.close()
        await self.sessions.close_all()
        await self.rtmp_ingest.close()
        await self.rtmp_server.close()
        if self.agent is not None:
            await self.agent.close()

    async def live_sessions(self) -> list[dict]:
        """Every session of the node, whatever its protocol."""
        return [*await self.sessions.snapshot(), *self.rtmp_ingest.sessions()]

    async def cleanup(self, _: web.Application | None = None) -> None:
        self.faces.close()
        self.keys.close()
        if self.owns_registry:
            await self.registry.close()


class NodeHooksAdapter:
    """What the node agent may do to the node's sessions (``signaling.node_agent.NodeHooks``)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._last_busy = (0.0, 0.0)  # (batcher wall s, busy s) at the previous beat

    def records(self):
        return [*self.node.sessions.records(), *self.node.rtmp_ingest.records()]

    async def kill_session(self, session_id: str) -> None:
        await self.node.sessions.close(session_id)  # RTMP streams too (its kill_stream)

    async def update_session(self, session_id: str, changes: dict[str, Any]) -> None:
        await self.node.sessions.update(session_id, changes)

    async def disown_session(self, session_id: str) -> None:
        await self.node.sessions.disown(session_id)

    def numbers(self) -> tuple[float, dict[str, Any]]:
        metrics = self.node.engine.batch_metrics() or {}
        sessions = self.node.sessions.list()
        return float(metrics.get("queue_delay_p50_ms") or 0.0), {
            "sessions_live": len(sessions) + len(self.node.rtmp_ingest.streams),
            "fps_out": round(sum(s.video.stats.snapshot().get("fps_out", 0.0) or 0.0 for s in sessions), 1),
            "device_busy_pct": round(self._recent_busy_pct(metrics), 1),
            **self._model_server(),
        }

    def _model_server(self) -> dict[str, Any]:
        """Runner triton: the server's numbers for the dashboard's node row, as last read;
        a fresh read (an HTTP call) is started in a thread for the next beat."""
        engine = self.node.engine
        if not hasattr(engine.swapper.runner, "statistics"):
            return {}
        asyncio.get_running_loop().run_in_executor(None, engine.runner_statistics)
        numbers = engine.runner_statistics(cached=True)
        if numbers is None:
            return {}
        return {"model_server": {
            "model": numbers["model"], "queue_ms": round(numbers["queue_ms_mean"], 2),
            "compute_ms": round(numbers["compute_ms_mean"], 2),
            "mean_batch": round(numbers["inferences"] / max(numbers["executions"], 1), 2),
        }}

    def _recent_busy_pct(self, metrics: dict[str, Any]) -> float:
        """Device busy % since the previous beat (the batcher's own figure averages over its
        whole life, so an idle node would go on showing its past load)."""
        wall = float(metrics.get("wall_s") or 0.0)
        busy = wall * float(metrics.get("device_busy_pct") or 0.0) / 100.0
        last_wall, last_busy = self._last_busy
        self._last_busy = (wall, busy)
        if wall <= last_wall:  # a new batcher (or none yet): its own figure is the recent one
            return float(metrics.get("device_busy_pct") or 0.0)
        return 100.0 * max(0.0, busy - last_busy) / (wall - last_wall)


def build_node(config: Config, *, engine: FaceEngine | None = None, registry: Registry | None = None) -> Node:
    """The node's parts; ``engine`` and ``registry`` let tests share one loaded engine and
    run several in-process nodes on one registry."""
    live = config.live
    tls = node_tls_context(config)  # before the models load: a bad certificate is a quick one-line error
    push_tls = client_context(config.push.ca_file)
    # probes NVENC / NVDEC unless set to software; an unmeetable nvenc / nvdec stops the node
    # here, before the models load, as an unmeetable engine.device does
    video_encoder, video_decoder = choose_video_encoder(live.video_encoder), choose_video_decoder(live.video_decoder)
    engine = engine or FaceEngine(config.engine.settings())
    cluster = config.cluster
    node_id = cluster.node_id or f"{socket.gethostname()}-{secrets.token_hex(3)}"
    shared = registry
    registry = shared or open_registry(cluster.redis_url, ttl_s=cluster.node_ttl_s)
    faces = FaceLibrary(engine, registry, max_faces_per_owner=config.quotas.faces_per_user,
                        max_photos_per_face=config.quotas.photos_per_face)
    keys = StreamKeyStore(config.server.data_dir)
    push_policy = node_push_policy(config)
    provenance = config.provenance.settings()  # the watermark on every swapped frame, live or recorded
    sessions = SessionManager(
        engine, faces, webrtc=config.webrtc, swap_defaults=config.swap, live=config.live, stream_keys=keys,
        registry=registry, node_id=node_id, capacity=cluster.capacity or None,
    )
    ingest = RtmpIngest(
        keys,
        engine,
        lambda overrides: type(config.swap).model_validate({**config.swap.model_dump(), **overrides}).options(),
        IngestSettings(
            EncoderSettings(preset=live.preset, bitrate_kbps=live.bitrate_kbps, keyframe_interval_s=live.keyframe_interval_s,
                            video_encoder=video_encoder, video_decoder=video_decoder),
            push_retry_initial_s=live.push_retry_initial_s,
            push_retry_max_s=live.push_retry_max_s,
            provenance=provenance,
            catch_up_s=live.rtmp_catch_up_ms / 1000.0,
        ),
        lambda url: RtmpPublishClient(url, resolve=push_policy.resolver(keys, url), tls=push_tls),  # checked at every connect
        faces,
        registry=registry,
        node_id=node_id,
    )
    sessions.kill_stream = ingest.kill
    sessions.provenance = provenance
    sessions.preview_stream = ingest.preview_jpeg
    sessions.stream_person = ingest.person_thumbnail
    rtmp_server = RtmpServer(
        ingest, host=config.server.host, port=config.rtmp.port, stall_timeout=config.rtmp.stall_timeout_s,
        chunk_size=config.rtmp.chunk_size, tls=tls if config.rtmp.tls_port is not None else None,
        tls_port=config.rtmp.tls_port or 0, setup_timeout=config.rtmp.setup_timeout_s,
        max_pending_per_ip=config.rtmp.max_pending_per_ip,
    )
    return Node(config=config, engine=engine, registry=registry, faces=faces, sessions=sessions,
                rtmp_ingest=ingest, rtmp_server=rtmp_server, keys=keys,
                revocations=RevocationWatch(keys, (ingest, sessions)), video_encoder=video_encoder,
                video_decoder=video_decoder, tls=tls, owns_registry=shared is None)


def node_tls_context(config: Config) -> ssl.SSLContext | None:
    """The certificate of config ``tls`` (``TlsError`` naming the file when unusable)."""
    if config.rtmp.tls_port is not None and not config.tls.enabled:
        raise ConfigError("rtmp.tls_port (--rtmps-port) needs a certificate: set tls.cert_file and tls.key_file "
                          "(--tls-cert, --tls-key)")
    if not config.tls.enabled:
        return None
    return server_context(config.tls.cert_file, config.tls.key_file)


def connection_limits(config: Config) -> ConnectionLimits:
    """The HTTP listener's bounds per client address; the trusted proxies (a gateway in front
    of this node, a TLS proxy) carry many clients' connections and are not capped."""
    return ConnectionLimits(max_per_ip=config.server.max_connections_per_ip,
                            header_timeout_s=config.server.request_header_timeout_s,
                            exempt=tuple(config.auth.trusted_proxies))


def serve_tls(app: web.Application, tls: ssl.SSLContext | None, config: Config) -> None:
    """HTTPS extras of a node or gateway: SIGHUP reloads the certificate; the optional
    plain-HTTP port redirects to HTTPS."""
    if tls is None:
        return
    CertificateReloader(tls, config.tls.cert_file, config.tls.key_file).reload_on_sighup(app)
    if config.tls.http_redirect_port is not None:
        serve_https_redirect(app, config.server.host, config.tls.http_redirect_port, config.server.port,
                             connection_limits(config))


def node_push_policy(config: Config) -> PushPolicy:
    return PushPolicy.from_lists(config.push.allowed_hosts, config.push.allowed_networks)


PUBLIC_PATHS = frozenset({"/", "/admin/", "/healthz", "/readyz", "/metrics", "/api/v1/openapi.json", "/whip"})


def is_public(request: web.Request) -> bool:
    """What needs no token: pages, health, metrics, the API document, WHIP (its
    publishers present a stream key instead, and its handlers check it or the owner's token)
    and signed thumbnail links (their handler checks the signature)."""
    path = request.path
    return path in PUBLIC_PATHS or path.startswith(("/web/", "/whip/")) or webrtc_routes.is_signed_thumbnail(request)


def build_app(config: Config, *, engine: FaceEngine | None = None, node: Node | None = None,
              registry: Registry | None = None) -> web.Application:
    """The node's HTTP application: pages, health, faces, live sessions (WebRTC/WHIP/WHEP),
    stream keys, offline jobs and the cluster view (nodes, drain), behind auth."""
    auth = api_auth(config.auth, host=config.server.host, cluster=bool(config.cluster.redis_url),
                    data_dir=config.server.data_dir, is_public=is_public)
    node = node or build_node(config, engine=engine, registry=registry)
    node.sessions.max_sessions_per_owner = auth.max_sessions_per_user
    app = web.Application(middlewares=[auth.middleware], client_max_size=config.quotas.request_body_kb * 1024)
    app[NODE_KEY] = node
    app[AUTH_KEY] = auth
    turn = TurnCredentials.from_config(config.webrtc)
    app[webrtc_routes.ICE_SERVERS_KEY] = lambda user: browser_ice_servers(config.webrtc.ice_servers, turn, user)
    serve_tls(app, node.tls, config)

    async def index(_: web.Request) -> web.FileResponse:
        return web.FileResponse(WEB_ROOT / "index.html")

    async def admin_page(_: web.Request) -> web.FileResponse:  # the operator dashboard (web/admin/)
        return web.FileResponse(WEB_ROOT / "admin" / "index.html")

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        """Ready when the models are loaded (they are, once the app exists) and the node
        is registered with a registry that answers."""
        if node.agent is None or not node.agent.registered or not await node.registry.ping():
            return web.json_response({"status": "not ready", "error": "not registered with the session registry"},
                                     status=503)
        runner_ready, why = await asyncio.to_thread(node.engine.runner_health)  # runner triton: the server's answer
        if not runner_ready:
            return web.json_response({"status": "not ready", "error": why}, status=503)
        return web.json_response({"status": "ready", "node_id": node.node_id, "state": node.agent.info.state})

    async def list_nodes(request: web.Request) -> web.Response:
        require_admin(request)
        return web.json_response([info.to_dict() for info in await node.registry.nodes()])

    async def set_state(request: web.Request) -> web.Response:
        caller = require_admin(request)
        node_id, action = request.match_info["node_id"], request.match_info["action"]
        wanted = "draining" if action == "drain" else "ready"
        try:
            if node_id in ("self", node.node_id) and node.agent is not None:
                info = await node.agent.set_state(wanted)
            else:
                info = await node.registry.set_node_state(node_id, wanted)
                if wanted == "draining":
                    await node.registry.send_control(node_id, {"kind": "drain"})
        except RegistryError as exc:  # the base class: no such node
            return webrtc_routes.error(404 if type(exc) is RegistryError else webrtc_routes.status_of(exc), str(exc))
        await auth.audit.append(caller.subject, f"node.{action}", info.id)
        return web.json_response(info.to_dict())

    async def check_face(face_id: str, caller: Principal) -> None:
        entry = await node.faces.get(face_id)
        require_visible(caller, entry.owner, f"no face with id {face_id!r}", shared_when_unowned=True)

    def normalise_options(options: object) -> dict[str, Any]:
        return node.sessions.normalised_options(config.swap, options)

    app.router.add_get("/", index)
    app.router.add_get("/admin/", admin_page)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/api/v1/nodes", list_nodes)
    app.router.add_post("/api/v1/nodes/{node_id}/{action:drain|ready}", set_state)
    app.router.add_static("/web/", WEB_ROOT)
    webrtc_routes.add_routes(app, node.sessions, node.faces, auth.audit, all_sessions=node.live_sessions,
                            verifier=auth.verifier, signer=auth.url_signer)
    quotas = config.quotas
    add_key_routes(app, KeyApi(node.keys, check_face, normalise_options, auth.audit, node_push_policy(config),
                               KeyQuotas(quotas.keys_per_user, quotas.push_per_key), node.revocations.check_now))
    jobs = None  # offline jobs need Redis; without it their routes answer 503 saying so
    if config.cluster.redis_url:
        jobs = JobService.connect(config.cluster.redis_url, JobSettings.from_config(config.jobs, config.server.data_dir),
                                  face_checker(SAMPLE_FACES, node.registry), node_push_policy(config))
    add_job_routes(app, jobs)
    add_metrics_routes(app, node.metrics)
    add_provenance_routes(app, config.provenance.settings())
    add_openapi_route(app, gateway=False)

    async def visible_sessions(request: web.Request) -> list[dict]:
        caller = principal(request)
        return [webrtc_routes.sign_people(app, s) for s in await node.live_sessions() if caller.may_access(s.get("owner", ""))]

    async def node_list() -> list[dict]:
        return [info.to_dict() for info in await node.registry.nodes()]

    add_event_routes(app, visible_sessions, node_list, max_sockets_per_user=quotas.event_sockets_per_user)
    app.middlewares.append(bad_input_middleware)  # innermost: what escapes a handler, before any 500
    CorsPolicy(config.server.cors_origins).install(app)  # outermost: pre-flights carry no token

    app.on_startup.append(node.startup)
    app.on_shutdown.append(node.shutdown)
    app.on_cleanup.append(node.cleanup)
    return app
