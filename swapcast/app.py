"""The composition root: the one place that wires a node together from the config.

``build_node(config)`` creates the node's parts (face engine, face library, live sessions)
without starting anything; ``build_app(config)`` puts them behind the HTTP application and
hooks their startup and teardown into its lifecycle (aiohttp ``on_startup`` / ``on_shutdown``
/ ``on_cleanup``), so ``swapcast serve``, Ctrl+C / SIGTERM and the tests all go through the
same path. More parts (the RTMP server, ...) are added to ``Node`` and its three hooks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from gpu.engine import FaceEngine
from signaling.stream_keys import StreamKeyStore
from streamer.faces import FaceLibrary
from streamer.live.rtmp_ingest import IngestSettings, RtmpIngest
from streamer.live.swap_worker import EncoderSettings
from streamer.rtmp.client import RtmpPublishClient
from streamer.rtmp.server import RtmpServer
from streamer.webrtc import routes as webrtc_routes
from streamer.webrtc.manager import SessionManager
from swapcast.config import Config

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"
NODE_KEY = web.AppKey("node", object)


@dataclass
class Node:
    """Everything one node runs, built from the config."""

    config: Config
    engine: FaceEngine
    faces: FaceLibrary
    sessions: SessionManager  # WebRTC, WHIP and WHEP
    rtmp_ingest: RtmpIngest  # OBS/ffmpeg publishers, re-publish, recording, play
    rtmp_server: RtmpServer

    async def startup(self, _: web.Application | None = None) -> None:
        self.sessions.start()
        await self.rtmp_server.start()

    async def shutdown(self, _: web.Application | None = None) -> None:
        """Before the HTTP server stops: end every live session and stream."""
        await self.sessions.close_all()
        await self.rtmp_ingest.close()
        await self.rtmp_server.close()

    def live_sessions(self) -> list[dict]:
        """Every live session of the node, whatever its protocol."""
        return [*self.sessions.snapshot(), *self.rtmp_ingest.sessions()]

    async def cleanup(self, _: web.Application | None = None) -> None:
        self.faces.close()


def build_node(config: Config, *, engine: FaceEngine | None = None) -> Node:
    """The node's parts; ``engine`` lets tests share one loaded engine."""
    engine = engine or FaceEngine(config.engine.settings())
    faces = FaceLibrary(engine)
    keys = StreamKeyStore(config.server.data_dir)
    sessions = SessionManager(
        engine, faces, webrtc=config.webrtc, swap_defaults=config.swap, live=config.live, stream_keys=keys,
    )
    live = config.live
    ingest = RtmpIngest(
        keys,
        engine,
        lambda overrides: type(config.swap).model_validate({**config.swap.model_dump(), **overrides}).options(),
        IngestSettings(
            EncoderSettings(preset=live.preset, bitrate_kbps=live.bitrate_kbps, keyframe_interval_s=live.keyframe_interval_s),
            push_retry_initial_s=live.push_retry_initial_s,
            push_retry_max_s=live.push_retry_max_s,
        ),
        RtmpPublishClient,
    )
    rtmp_server = RtmpServer(
        ingest, host=config.server.host, port=config.rtmp.port, stall_timeout=config.rtmp.stall_timeout_s,
        chunk_size=config.rtmp.chunk_size,
    )
    return Node(config=config, engine=engine, faces=faces, sessions=sessions, rtmp_ingest=ingest, rtmp_server=rtmp_server)


def build_app(config: Config, *, engine: FaceEngine | None = None, node: Node | None = None) -> web.Application:
    """The node's HTTP application: pages, health, faces, live sessions (WebRTC/WHIP/WHEP)."""
    node = node or build_node(config, engine=engine)
    app = web.Application()
    app[NODE_KEY] = node

    async def index(_: web.Request) -> web.FileResponse:
        return web.FileResponse(WEB_ROOT / "index.html")

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app.router.add_get("/", index)
    app.router.add_get("/healthz", healthz)
    app.router.add_static("/web/", WEB_ROOT)
    webrtc_routes.add_routes(app, node.sessions, node.faces, all_sessions=node.live_sessions)

    app.on_startup.append(node.startup)
    app.on_shutdown.append(node.shutdown)
    app.on_cleanup.append(node.cleanup)
    return app
