"""``swapcast bench cluster``: how fast the registry places sessions, and how fast a live
session comes back after its node is SIGKILLed.

Placement: a real redis-server, four registered nodes, 200 placements from two registry
clients (as two gateways would), each placement's latency its own call: first as they
arrive in a burst of 200 within 200 ms (1000/s, users pressing start at the same moment),
then all 200 issued in the same instant, where a call's latency is mostly its place in the
queue of one Python process. The embedded node's in-process registry runs the same for
comparison.

Failover: a gateway and two node processes (``swapcast.local_cluster``), an aiortc client
that behaves like the page's LiveSwap (it offers again for the same session when swapped
frames stop for ``STALL_S``); the time is from SIGKILL to the first swapped frame from the
other node, split into detection, re-offer and first frame."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from typing import Any, TextIO

import numpy as np

from signaling.registry import MemoryRegistry, NodeInfo, Registry, SessionRecord
from signaling.registry.redis_store import RedisRegistry
from swapcast.local_cluster import Cluster, RedisServer, token

PLACEMENTS = 200
PLACEMENT_NODES = 4
ARRIVAL_PER_S = 1000.0
STALL_S = 1.0  # the page's LiveSwap default: no new swapped frame for this long = reconnect
FACE_ID = "astronaut"
TARGET_PLACEMENT_P99_MS = 5.0
TARGET_FAILOVER_S = 3.0


# -- placement ----------------------------------------------------------------------------------


async def _burst(registries: list[Registry], count: int, rate: float | None) -> dict[str, Any]:
    """``count`` placements arriving at ``rate`` per second (None: all at once)."""
    for index in range(PLACEMENT_NODES):
        await registries[0].register_node(NodeInfo(id=f"bench-{index}", address=f"127.0.0.1:{9000 + index}",
                                                   capacity=count))
    latencies: list[float] = []
    tag = "now" if rate is None else f"r{rate:.0f}"

    async def one(index: int) -> str:
        if rate is not None:
            await asyncio.sleep(index / rate)
        started = time.perf_counter()
        registry = registries[index % len(registries)]
        record = await registry.place_session(SessionRecord(id=f"{tag}-{index}", protocol="webrtc"))
        latencies.append((time.perf_counter() - started) * 1000)
        return record.node_id

    started = time.perf_counter()
    owners = await asyncio.gather(*(one(i) for i in range(count)))
    wall = time.perf_counter() - started
    loads = {node: owners.count(node) for node in sorted(set(owners))}
    return {
        "placements": count, "arrival_per_s": rate, "wall_ms": wall * 1000,
        "p50_ms": float(np.percentile(latencies, 50)), "p99_ms": float(np.percentile(latencies, 99)),
        "max_ms": max(latencies), "loads": loads, "spread": max(loads.values()) - min(loads.values()),
    }


async def measure_placement(count: int = PLACEMENTS) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    redis = RedisServer().start()
    try:
        for name, rate in (("redis, 1000/s", ARRIVAL_PER_S), ("redis, at once", None)):
            redis.flush()
            clients: list[Registry] = [RedisRegistry(redis.url), RedisRegistry(redis.url)]
            try:
                for client in clients:  # connections open and scripts loaded before the clock starts
                    await asyncio.gather(*(client.ping() for _ in range(16)))
                    await client.register_node(NodeInfo(id="warm", address="127.0.0.1:1", capacity=1))
                    await client.end_session((await client.place_session(SessionRecord(id="warm", protocol="webrtc"))).id)
                    await client.remove_node("warm")
                results[name] = await _burst(clients, count, rate)
            finally:
                for client in clients:
                    await client.close()
    finally:
        redis.close()
    for name, rate in (("memory, 1000/s", ARRIVAL_PER_S), ("memory, at once", None)):
        results[name] = await _burst([MemoryRegistry()], count, rate)
    return results


# -- failover -----------------------------------------------------------------------------------


class ResumingClient:
    """An aiortc peer that sends the moving face and offers again when frames stop."""

    def __init__(self, gateway_url: str) -> None:
        self.gateway_url = gateway_url
        self.session_id: str | None = None
        self.pc = None
        self.frames: list[float] = []  # arrival times
        self._reader: asyncio.Task | None = None

    async def place(self, http) -> None:
        async with http.post(f"{self.gateway_url}/api/v1/sessions", json={"face_id": FACE_ID}) as response:
            body = await response.json(content_type=None)
            if response.status != 201:
                raise RuntimeError(f"the gateway refused the session: HTTP {response.status} {body}")
            self.session_id = body["session_id"]

    async def connect(self, http) -> float:
        """Offer for the session; returns the seconds the offer/answer took."""
        from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

        from swapcast.benchmarks.webrtc import _camera_track_class, clip_i420

        await self.disconnect()
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.pc = pc

        @pc.on("track")
        def on_track(track) -> None:
            if track.kind == "video":
                self._reader = asyncio.ensure_future(self._read(track))

        pc.addTransceiver(_camera_track_class()(_clip(clip_i420), []), direction="sendrecv")
        await pc.setLocalDescription(await pc.createOffer())
        started = time.monotonic()
        async with http.post(f"{self.gateway_url}/api/v1/sessions/{self.session_id}/offer",
                             json={"sdp": pc.localDescription.sdp, "type": "offer"}) as response:
            body = await response.json(content_type=None)
            if response.status != 201:
                raise RuntimeError(f"the offer was refused: HTTP {response.status} {body}")
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type="answer"))
        return time.monotonic() - started

    async def _read(self, track) -> None:
        from aiortc.mediastreams import MediaStreamError

        with contextlib.suppress(MediaStreamError):
            while True:
                await track.recv()
                self.frames.append(time.monotonic())

    async def wait_frames(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.frames) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(self.frames)} of {count} frames within {timeout} s")
            await asyncio.sleep(0.02)

    async def wait_stall(self, since: float) -> float:
        """When the client would decide frames stopped (``STALL_S`` after the last one)."""
        while True:
            last = self.frames[-1] if self.frames else since
            if time.monotonic() - max(last, since - STALL_S) >= STALL_S:
                return time.monotonic()
            await asyncio.sleep(0.02)

    async def disconnect(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        if self.pc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.pc.close(), 5.0)
            self.pc = None


_clip_cache: list[np.ndarray] = []


def _clip(make) -> list[np.ndarray]:
    if not _clip_cache:
        _clip_cache.extend(make())
    return _clip_cache


async def _owner(http, gateway_url: str, session_id: str) -> str:
    async with http.get(f"{gateway_url}/api/v1/sessions/{session_id}") as response:
        return (await response.json())["node_id"]


async def measure_failover(cluster: Cluster, rounds: int, err: TextIO) -> list[dict[str, Any]]:
    import aiohttp

    results = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token('bench')}"}) as http:
        for round_index in range(rounds):
            client = ResumingClient(cluster.gateway.url)
            await client.place(http)
            await client.connect(http)
            await client.wait_frames(30, timeout=60)
            victim = await _owner(http, cluster.gateway.url, client.session_id)
            killed_at = time.monotonic()
            cluster.nodes[victim].kill()
            detected_at = await client.wait_stall(killed_at)
            frames_before = len(client.frames)
            offer_s = await client.connect(http)
            await client.wait_frames(frames_before + 1, timeout=30)
            first_frame_at = client.frames[frames_before]
            survivor = await _owner(http, cluster.gateway.url, client.session_id)
            result = {
                "killed": victim, "resumed_on": survivor, "total_s": first_frame_at - killed_at,
                "detect_s": detected_at - killed_at, "offer_s": offer_s,
                "first_frame_s": first_frame_at - detected_at - offer_s,
            }
            results.append(result)
            print(f"  round {round_index + 1}/{rounds}: killed {victim}, first swapped frame from {survivor} "
                  f"{result['total_s']:.2f} s after SIGKILL (detect {result['detect_s']:.2f}, re-offer "
                  f"{result['offer_s']:.2f}, then first frame {result['first_frame_s']:.2f})", file=err, flush=True)
            await client.disconnect()
            async with http.delete(f"{cluster.gateway.url}/api/v1/sessions/{client.session_id}"):
                pass
            await asyncio.get_running_loop().run_in_executor(None, cluster.add_node, victim)
    return results


# -- the command ----------------------------------------------------------------------------------


def run_cluster_benchmark(rounds: int = 3, as_json: bool = False, out: TextIO = sys.stdout,
                          err: TextIO = sys.stderr) -> int:
    print(f"cluster: {PLACEMENTS} concurrent placements over {PLACEMENT_NODES} nodes (real redis-server, 2 clients), "
          f"then {rounds} failover round(s): gateway + 2 node processes, SIGKILL the live session's node", file=out,
          flush=True)
    logging.getLogger("aioice").setLevel(logging.WARNING)  # the client's ICE chatter
    placement = asyncio.run(measure_placement())
    for name, numbers in placement.items():
        print(f"placement ({name:15}): p50 {numbers['p50_ms']:.2f} ms, p99 {numbers['p99_ms']:.2f} ms, "
              f"max {numbers['max_ms']:.2f} ms; {numbers['placements']} in {numbers['wall_ms']:.0f} ms; "
              f"loads {numbers['loads']} (spread {numbers['spread']})", file=out, flush=True)
    print("starting the cluster (the nodes load their engines) ...", file=err, flush=True)
    cluster = Cluster(nodes_count=2, capacity=8).start()
    try:
        failover = asyncio.run(measure_failover(cluster, rounds, err))
    finally:
        cluster.close()
    totals = [r["total_s"] for r in failover]
    print(f"failover: SIGKILL -> first swapped frame on another node: median {np.median(totals):.2f} s, "
          f"worst {max(totals):.2f} s over {len(totals)} round(s) (client stall threshold {STALL_S:.1f} s)", file=out)
    p99 = placement["redis, 1000/s"]["p99_ms"]
    print(f"verdict: placement p99 (redis, 200 arriving at 1000/s) {p99:.2f} ms <= {TARGET_PLACEMENT_P99_MS:.0f} ms -> "
          f"{'PASS' if p99 <= TARGET_PLACEMENT_P99_MS else 'FAIL'}; failover worst {max(totals):.2f} s <= "
          f"{TARGET_FAILOVER_S:.0f} s -> {'PASS' if max(totals) <= TARGET_FAILOVER_S else 'FAIL'}", file=out)
    if as_json:
        print(json.dumps({"placement": placement, "failover": failover}), file=out)
    out.flush()
    return 0
