"""RTMP benchmark: publishers -> swapcast -> players on loopback, against a real
``swapcast serve`` process.

Timestamps survive the swap, so ingest->egress added latency is measured exactly: the
time a player receives the swapped frame of RTMP timestamp t minus the time the
publisher sent the frame of timestamp t. The server's CPU and RSS come from /proc."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from signaling.stream_keys import StreamKeyStore
from streamer.live.h264 import H264Encoder
from streamer.media.images import write_image
from streamer.rtmp.client import RtmpPlayClient, RtmpPublishClient
from streamer.rtmp.flv import VideoPacketType, build_video_tag
from streamer.rtmp.handler import MediaMessage
from streamer.samples import astronaut, grace_hopper, moving_face_frames
from swapcast.benchmarks import proc
from swapcast.local_cluster import free_port

FPS = 30
FRAME_MS = 1000 / FPS
TARGET_FPS = 25.0
TARGET_LATENCY_P50_MS = 100.0


@dataclass
class StreamResult:
    sent: dict[int, float] = field(default_factory=dict)  # timestamp -> monotonic send time
    received: dict[int, float] = field(default_factory=dict)  # timestamp -> monotonic receive time

    def summary(self, seconds: float) -> dict[str, float]:
        latencies = [self.received[t] - self.sent[t] for t in self.received if t in self.sent]
        ms = np.array(latencies) * 1000 if latencies else np.array([np.nan])
        return {
            "frames_sent": len(self.sent),
            "frames_out": len(self.received),
            "fps_out": len(self.received) / seconds,
            "latency_p50_ms": float(np.nanpercentile(ms, 50)),
            "latency_p99_ms": float(np.nanpercentile(ms, 99)),
        }


def _camera_loop() -> tuple[MediaMessage, list[tuple[bytes, bool]]]:
    """3 s of a moving face at 640x480@30, encoded once (OBS-like, keyframe every 2 s);
    the loop restarts on its first keyframe so it can be replayed forever."""
    encoder = H264Encoder(640, 480, bitrate_kbps=2500, keyframe_interval_s=2.0, fps_hint=FPS)
    packets = [p for i, f in enumerate(moving_face_frames(grace_hopper(), 90, (640, 480))) for p in encoder.encode(f, round(i * FRAME_MS))]
    header = build_video_tag(encoder.sequence_header, keyframe=True, packet_type=VideoPacketType.SEQUENCE_HEADER)
    return MediaMessage("video", 0, header), [(build_video_tag(p.data, keyframe=p.keyframe), p.keyframe) for p in packets]


class ServerProcess:
    """``swapcast serve`` on free ports with its own data directory; CPU and RSS from /proc."""

    def __init__(self, data_dir: Path) -> None:
        self.http_port, self.rtmp_port = free_port(), free_port()
        env = {**os.environ, "SWAPCAST_SERVER__DATA_DIR": str(data_dir), "SWAPCAST_WEBRTC__MAX_SESSIONS": "64"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "swapcast.cli", "serve", "--port", str(self.http_port), "--rtmp-port", str(self.rtmp_port)],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthz", timeout=1).read()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("swapcast serve did not start") from None
                time.sleep(0.2)

    def cpu_seconds(self) -> float:
        return proc.cpu_seconds(self.process.pid)

    def rss_mb(self) -> float:
        return proc.rss_mb(self.process.pid)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()


async def _run_streams(server: ServerProcess, keys: list[tuple[str, str]], seconds: float) -> list[StreamResult]:
    header, loop = _camera_loop()
    results = [StreamResult() for _ in keys]

    async def publisher(key: str, result: StreamResult) -> None:
        async with RtmpPublishClient(f"rtmp://127.0.0.1:{server.rtmp_port}/live/{key}") as client:
            await client.send(header)
            started = time.monotonic()
            frame = 0
            while (now := time.monotonic()) - started < seconds:
                timestamp = round(frame * FRAME_MS)
                body, _ = loop[frame % len(loop)]
                result.sent[timestamp] = now
                await client.send(MediaMessage("video", timestamp, body))
                frame += 1
                await asyncio.sleep(max(0.0, started + frame / FPS - time.monotonic()))

    async def player(play_token: str, result: StreamResult) -> None:
        url = f"rtmp://127.0.0.1:{server.rtmp_port}/live/{play_token}"
        for _ in range(100):  # the stream exists once its publisher is on
            try:
                client = RtmpPlayClient(url)
                await client.connect()
                break
            except Exception:
                await asyncio.sleep(0.1)
        else:
            return
        try:
            async for message in client.media():
                if message.kind == "video" and message.payload[1:2] == b"\x01":
                    result.received.setdefault(message.timestamp, time.monotonic())
        finally:
            await client.close()

    players = [asyncio.create_task(player(play_token, r)) for (_, play_token), r in zip(keys, results)]
    progress = asyncio.create_task(_progress(results, seconds))
    await asyncio.gather(*(publisher(key, r) for (key, _), r in zip(keys, results)))
    await asyncio.sleep(1.0)  # let the last frames through
    for task in [*players, progress]:
        task.cancel()
    await asyncio.gather(*players, progress, return_exceptions=True)
    return results


async def _progress(results: list[StreamResult], seconds: float) -> None:
    started = time.monotonic()
    while True:
        await asyncio.sleep(2.0)
        elapsed = time.monotonic() - started
        fps = sum(len(r.received) for r in results) / max(elapsed, 1e-6) / len(results)
        print(f"  {len(results)} stream(s), {elapsed:.0f}/{seconds:.0f} s, {fps:.1f} fps out per stream", file=sys.stderr, flush=True)


def _measure(server: ServerProcess, keys: list[tuple[str, str]], seconds: float) -> dict[str, Any]:
    cpu_before, wall_before = server.cpu_seconds(), time.monotonic()
    results = asyncio.run(_run_streams(server, keys, seconds))
    cpu = (server.cpu_seconds() - cpu_before) / (time.monotonic() - wall_before)
    streams = [r.summary(seconds) for r in results]
    return {
        "streams": streams,
        "fps_out_mean": float(np.mean([s["fps_out"] for s in streams])),
        "latency_p50_ms": float(np.median([s["latency_p50_ms"] for s in streams])),
        "latency_p99_ms": float(np.max([s["latency_p99_ms"] for s in streams])),
        "server_cpu_per_stream": cpu / len(keys),  # cores
        "server_rss_mb": server.rss_mb(),
    }


def _add_key(store: StreamKeyStore, face: Path, name: str) -> tuple[str, str]:
    key, record = store.add(name, face)
    return key, record.play_token


def run_rtmp_benchmark(publishers: int, seconds: float, as_json: bool, on_air: str = "swapcast",
                       on_air_seconds: float = 10.0, destination_delay_ms: float = 300.0) -> int:
    from swapcast.benchmarks import rtmp_on_air

    if on_air != "none" and not rtmp_on_air.publisher_available(on_air):
        from swapcast.config import ConfigError

        raise ConfigError(f"--on-air {on_air}: the {on_air} program is not installed here")
    with tempfile.TemporaryDirectory(prefix="swapcast-bench-") as folder:
        face = Path(folder) / "astronaut.png"
        write_image(face, astronaut())
        store = StreamKeyStore(Path(folder) / "data")
        counts = sorted({1, max(publishers, 1)})
        # fresh keys per run: a key published again within the resume window would continue
        # its earlier stream's timeline
        runs_keys = {count: [_add_key(store, face, f"bench-{count}-{n}") for n in range(count)] for count in counts}
        server = ServerProcess(Path(folder) / "data")
        try:
            print(f"rtmp bench: swapcast serve pid {server.process.pid}, 640x480@{FPS} publishers, {seconds:.0f} s per run")
            report: dict[str, Any] = {"seconds": seconds, "runs": {}}
            if on_air != "none":  # first, on the fresh node: a streamer going on air on an idle server
                def add_key(push_url: str) -> str:
                    return store.add("on-air", face, push=(push_url,), push_unrestricted=True)[0]

                report["on_air"] = asyncio.run(rtmp_on_air.measure_on_air(server.rtmp_port, add_key, on_air, on_air_seconds,
                                                                           Path(folder), destination_delay_ms / 1000.0))
            for count in counts:
                run = _measure(server, runs_keys[count], seconds)
                report["runs"][str(count)] = run
                print(f"{count} publisher(s): {run['fps_out_mean']:.1f} fps out per stream, ingest->egress latency "
                      f"p50 {run['latency_p50_ms']:.0f} ms / p99 {run['latency_p99_ms']:.0f} ms, "
                      f"server CPU {100 * run['server_cpu_per_stream']:.0f}% of a core per stream, RSS {run['server_rss_mb']:.0f} MB")
        finally:
            server.close()
    single = report["runs"]["1"]
    print(f"target: one publisher re-published at >= {TARGET_FPS:.0f} fps: {single['fps_out_mean']:.1f} -> "
          f"{'PASS' if single['fps_out_mean'] >= TARGET_FPS else 'FAIL'}")
    print(f"target: ingest->egress added latency p50 <= {TARGET_LATENCY_P50_MS:.0f} ms: {single['latency_p50_ms']:.0f} ms -> "
          f"{'PASS' if single['latency_p50_ms'] <= TARGET_LATENCY_P50_MS else 'FAIL'}")
    if "on_air" in report:
        for line in rtmp_on_air.describe(report["on_air"]):
            print(line)
    if as_json:
        print(json.dumps(report))
    return 0
