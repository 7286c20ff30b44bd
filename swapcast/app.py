"""The composition root: the one place that wires a node together from the config."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from swapcast.config import Config

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"


def build_app(config: Config) -> web.Application:
    """The node's HTTP application. Live sessions (WebRTC, WHIP/WHEP, RTMP) are added by
    the streaming issues; today it serves the pages and health endpoints."""
    app = web.Application()
    app["config"] = config

    async def index(_: web.Request) -> web.FileResponse:
        return web.FileResponse(WEB_ROOT / "index.html")

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app.router.add_get("/", index)
    app.router.add_get("/healthz", healthz)
    app.router.add_static("/web/", WEB_ROOT)
    return app
