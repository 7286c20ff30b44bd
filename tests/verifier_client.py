"""``POST /api/v1/provenance/verify`` on a node app of its own: what an upload gets back."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from streamer.provenance.marker import ProvenanceSettings
from streamer.provenance.routes import add_provenance_routes


def post_to_verifier(data: bytes, name: str, content_type: str) -> tuple[int, dict]:
    """(HTTP status, JSON body) of the verifier's answer to ``data`` uploaded as ``name``."""

    async def scenario() -> tuple[int, dict]:
        app = web.Application()
        add_provenance_routes(app, ProvenanceSettings())
        async with TestClient(TestServer(app)) as client:
            response = await client.post(f"/api/v1/provenance/verify?name={name}", data=data,
                                         headers={"Content-Type": content_type})
            return response.status, await response.json()

    return asyncio.run(scenario())
