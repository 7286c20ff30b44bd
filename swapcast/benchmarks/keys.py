"""``swapcast bench keys``: what a publish attempt with a bogus stream key costs a node, as
its key store grows from 10 to 100,000 keys.

Round 3 measured a bogus WHIP at 57 ms on an 11.7 MB store (4 ms on an empty one): every
attempt, anonymous ones too, re-read and parsed the whole store on the event loop. Here a
real node (``build_app``, the composition root) gets a store of N keys (bulk-imported), then,
one at a time, ``--requests`` WHIP POSTs and RTMP publishes with keys no store holds; the
time of each is measured at the client, from the request to the refusal (403 for WHIP,
``NetStream.Publish.BadName`` for RTMP). Then four clients flood bogus WHIPs for
``--flood-s`` seconds while a fifth polls ``/healthz``: answers per second, and the health
check's latency (the per-address rate limit is lifted for the run: this measures the key
lookup, not the limiter; the node's INFO lines are off). A flat row-to-row result is the
point: the lookup is one indexed read, whatever the store holds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gpu.engine import FaceEngine
from signaling.stream_keys import StreamConfig, StreamKey, StreamKeyStore
from streamer.rtmp.client import RtmpClientError, RtmpPublishClient
from swapcast.app import NODE_KEY, build_app
from swapcast.config import Config

DEFAULT_COUNTS = (10, 1_000, 10_000, 100_000)
OFFER = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\n"
SECRET = "bench-keys-" + "s" * 32


def synthetic_keys(count: int) -> list[StreamKey]:
    """``count`` records as users make them over the API (one push destination each), with
    hashes of keys nobody holds."""
    return [StreamKey(key_id=f"{number:08x}", key_hash=hashlib.sha256(f"bench-{number}".encode()).hexdigest(),
                      stream=StreamConfig(name=f"cam {number}", face_id="astronaut", swap={"blend": 0.9},
                                          push=(f"rtmp://cdn.example/live/{number}",)),
                      created=float(number), owner=f"user-{number % 1600}")
            for number in range(count)]


def _config(data_dir: Path, base: Config) -> Config:
    return base.model_copy(update={
        "server": base.server.model_copy(update={"data_dir": data_dir, "host": "127.0.0.1", "port": 0,
                                                  "max_connections_per_ip": 10_000}),
        "rtmp": base.rtmp.model_copy(update={"port": 0, "max_pending_per_ip": 10_000}),
        "auth": base.auth.model_copy(update={"jwt_secret": SECRET, "requests_per_minute_per_ip": 10_000_000}),
        "cluster": base.cluster.model_copy(update={"redis_url": None}),
    })


def _summary(milliseconds: list[float]) -> dict[str, float]:
    ordered = sorted(milliseconds)
    return {"p50_ms": round(statistics.median(ordered), 3),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3)}


async def _bogus_whip(http: aiohttp.ClientSession, url: str) -> float:
    started = time.perf_counter()
    async with http.post(url, data=OFFER, headers={"Content-Type": "application/sdp",
                                                   "Authorization": f"Bearer sk_{secrets.token_urlsafe(24)}"}) as reply:
        await reply.read()
        if reply.status != 403:
            raise RuntimeError(f"a bogus WHIP key got {reply.status}, not 403")
    return (time.perf_counter() - started) * 1000


async def _bogus_rtmp(port: int) -> float:
    started = time.perf_counter()
    client = RtmpPublishClient(f"rtmp://127.0.0.1:{port}/live/sk_{secrets.token_urlsafe(24)}", timeout=10)
    try:
        await client.connect()
    except RtmpClientError as exc:
        if exc.code != "NetStream.Publish.BadName":
            raise
    else:
        raise RuntimeError("a bogus RTMP key was let publish")
    finally:
        await client.close()
    return (time.perf_counter() - started) * 1000


async def _flood(http: aiohttp.ClientSession, whip: str, health: str, seconds: float) -> dict[str, float]:
    deadline = time.perf_counter() + seconds
    answered = 0
    health_ms: list[float] = []

    async def flooder() -> None:
        nonlocal answered
        while time.perf_counter() < deadline:
            await _bogus_whip(http, whip)
            answered += 1

    async def prober() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            async with http.get(health) as reply:
                await reply.read()
            health_ms.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.05)

    await asyncio.gather(*(flooder() for _ in range(4)), prober())
    return {"whip_per_s": round(answered / seconds, 1), "healthz_p50_ms": round(statistics.median(health_ms), 2)}


async def _measure(count: int, engine: FaceEngine, base: Config, requests: int, flood_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="swapcast-bench-keys-") as folder:
        data_dir = Path(folder)
        store = StreamKeyStore(data_dir)
        started = time.perf_counter()
        store.import_records(synthetic_keys(count))
        store.close()
        filled_s = time.perf_counter() - started
        app = build_app(_config(data_dir, base), engine=engine)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 (aiohttp keeps the bound port there)
        rtmp_port = app[NODE_KEY].rtmp_server.port
        try:
            async with aiohttp.ClientSession() as http:
                whip = f"http://127.0.0.1:{port}/whip"
                for _ in range(5):  # warm-up: connections, the store's threads
                    await _bogus_whip(http, whip)
                    await _bogus_rtmp(rtmp_port)
                whip_ms = [await _bogus_whip(http, whip) for _ in range(requests)]
                rtmp_ms = [await _bogus_rtmp(rtmp_port) for _ in range(requests)]
                flood = await _flood(http, whip, f"http://127.0.0.1:{port}/healthz", flood_s)
        finally:
            await runner.cleanup()
        size_mb = sum(p.stat().st_size for p in data_dir.glob("stream-keys.db*")) / 1e6
        return {"keys": count, "store_mb": round(size_mb, 1), "filled_s": round(filled_s, 2),
                "whip": _summary(whip_ms), "rtmp": _summary(rtmp_ms), "flood": flood}


def run_keys_benchmark(config: Config, *, counts: list[int] | None = None, requests: int = 200,
                       flood_s: float = 3.0, as_json: bool = False) -> int:
    counts = counts or list(DEFAULT_COUNTS)
    logging.getLogger().setLevel(logging.WARNING)  # a line per refused RTMP publish would flood the table
    print("loading the face engine (the node needs one; no bogus publish reaches it)", flush=True)
    engine = FaceEngine(config.engine.settings())
    rows = []
    print(f"{'keys':>8} {'store MB':>9} {'WHIP p50/p95 ms':>16} {'RTMP p50/p95 ms':>16} "
          f"{'flood WHIP/s':>13} {'healthz p50 ms':>15}", flush=True)
    for count in counts:
        row = asyncio.run(_measure(count, engine, config, requests, flood_s))
        rows.append(row)
        print(f"{row['keys']:>8} {row['store_mb']:>9} {row['whip']['p50_ms']:>7.2f}/{row['whip']['p95_ms']:<8.2f} "
              f"{row['rtmp']['p50_ms']:>7.2f}/{row['rtmp']['p95_ms']:<8.2f} {row['flood']['whip_per_s']:>13} "
              f"{row['flood']['healthz_p50_ms']:>15}", flush=True)
    if as_json:
        print(json.dumps({"benchmark": "keys", "requests": requests, "flood_s": flood_s, "rows": rows}))
    return 0
