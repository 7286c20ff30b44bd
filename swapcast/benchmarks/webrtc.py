"""The live WebRTC benchmark: N aiortc client peers against a real node on loopback.

The node runs as its own process (``python -m swapcast.cli --config … serve``) so that its
CPU time (``/proc/<pid>/stat`` utime + stime) and memory (``VmRSS``, ``VmHWM``) are the
server's alone; the client peers run here, on one asyncio loop.

Each client sends a 640x480 clip of a moving real face (Grace Hopper, looped, paced at
30 fps) and asks for the astronaut sample face. Every frame it sends carries its frame number
burned into the top-left corner as a barcode: ``BITS`` black/white ``BLOCK``-px blocks in
one row, the same bits inverted in the row below (a block that compression smeared is caught,
never misread). The swap works only inside the face region, so the corner comes back intact;
the client reads the number from every frame it receives.

Latency ("loopback round trip") of frame #k = the time the client handed frame #k to its
encoder → the time the client's decoder delivered the swapped frame #k, one clock
(``time.monotonic`` in this process). It includes the client's encode, loopback RTP, the
node's decode → swap → encode and the client's decode: everything the server adds, plus the
two codec passes a browser would add too. The node's own latency (decoded frame arrives →
swapped frame published, ``GET /api/v1/sessions/{id}``) is shown next to it.

One run measures 1 session, then N sessions, side by side, for ``seconds`` each (after a
short warm-up), so what overload does is visible: frames drop, latency stays bounded.

    from swapcast.benchmarks.webrtc import measure_webrtc
    report = measure_webrtc(sessions=3, seconds=20)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np
import yaml

from signaling.auth import mint_token
from gpu.threads import ThreadProfile
from swapcast.benchmarks.node_load import (
    GilSampler,
    LoopLagProbe,
    ReplicaServers,
    core_busy_seconds,
    thread_cpu_seconds,
)
from swapcast.config import Config, load_config
from swapcast.local_cluster import free_port

WIDTH, HEIGHT, FPS = 640, 480, 30
BITS = 16  # frame numbers modulo 2**16 (36 min at 30 fps); unwrapped against the send count
BLOCK = 16  # px: a multiple of the codec's macroblock, so blocks line up with it
CLIP_FRAMES = 90  # the moving-face clip, looped
FACE_ID = "astronaut"
BLACK, WHITE = 16, 235  # studio-range luma: survives yuv -> rgb -> yuv unchanged
MIN_CONTRAST = 60  # a bit is read only when its block and the inverted one differ this much

FPS_TARGET = 25.0
LATENCY_TARGET_MS = 40.0
GLASS_TARGET_MS = 80.0
CORES_PER_SESSION_TARGET = 0.6  # the node's CPU for one 640x480@30 session
THREE_SESSIONS_FPS_TARGET = 24.0  # each of 3 sessions on a 2-core node
BOUND_FACTOR, BOUND_SLACK_MS = 1.5, 50.0  # second-half p99 <= max(1.5 x first half, first half + 50 ms)


# -- the frame counter ------------------------------------------------------------------------


def burn_counter(luma: np.ndarray, value: int) -> None:
    """Write ``value`` (mod 2**BITS) into the top-left corner of a luma plane, in place."""
    value %= 1 << BITS
    for i in range(BITS):
        bit = (value >> (BITS - 1 - i)) & 1
        x = i * BLOCK
        luma[0:BLOCK, x:x + BLOCK] = WHITE if bit else BLACK
        luma[BLOCK:2 * BLOCK, x:x + BLOCK] = BLACK if bit else WHITE


def read_counter(luma: np.ndarray) -> int | None:
    """The value burnt in by :func:`burn_counter`, or None where any bit is unreadable.
    ``luma`` is the frame's Y plane at 640x480 (other sizes are scaled to it)."""
    height, width = luma.shape[:2]
    sx, sy = width / WIDTH, height / HEIGHT
    value = 0
    for i in range(BITS):
        x0, x1 = int((i * BLOCK + BLOCK / 4) * sx), max(int((i * BLOCK + 3 * BLOCK / 4) * sx), int((i * BLOCK + BLOCK / 4) * sx) + 1)
        top = float(luma[int(BLOCK / 4 * sy):max(int(3 * BLOCK / 4 * sy), int(BLOCK / 4 * sy) + 1), x0:x1].mean())
        y0 = int((BLOCK + BLOCK / 4) * sy)
        bottom = float(luma[y0:max(int((BLOCK + 3 * BLOCK / 4) * sy), y0 + 1), x0:x1].mean())
        if abs(top - bottom) < MIN_CONTRAST:
            return None
        value = (value << 1) | (1 if top > bottom else 0)
    return value


def unwrap(value: int, sent: int) -> int:
    """The largest frame number < ``sent`` that is ``value`` modulo 2**BITS (-1 if none)."""
    number = sent - 1 - (sent - 1 - value) % (1 << BITS)
    return number if number >= 0 else -1


def _luma(frame) -> np.ndarray:
    """The Y plane of a decoded frame, without converting the whole picture."""
    if frame.format.name in ("yuv420p", "yuvj420p", "nv12"):
        plane = frame.planes[0]
        return np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[: frame.height, : frame.width]
    return frame.to_ndarray(format="gray")


def clip_i420() -> list[np.ndarray]:
    """The moving-face clip as I420 arrays (1.5·H x W), chroma neutral under the barcode."""
    import av

    from streamer.samples import grace_hopper, moving_face_frames

    frames = []
    for rgb in moving_face_frames(grace_hopper(), CLIP_FRAMES, size=(WIDTH, HEIGHT)):
        yuv = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p").to_ndarray()
        # chroma planes follow the luma plane: U then V, each (H/2 x W/2) stored as H/4 rows of W
        chroma = yuv[HEIGHT:].reshape(2, HEIGHT // 2, WIDTH // 2)
        chroma[:, : BLOCK, : BITS * BLOCK // 2] = 128
        frames.append(yuv)
    return frames


# -- the server process -------------------------------------------------------------------------

# The node's threads by OS name (``gpu.threads`` names them after their Python threads;
# native threads inherit their creator's name) -> what they do, first match wins.
THREAD_GROUPS = (
    ("swap-", "swap (track, prepare, run, paste)"),
    ("mediapipe", "tracking graphs (mediapipe)"),
    ("video-decoder", "decode (aiortc)"),
    ("decoder_worker", "decode (aiortc)"),
    ("uvloop_", "encode (aiortc executor)"),
    ("asyncio_", "encode (aiortc executor)"),
    ("ThreadPoolExec", "encode (aiortc executor)"),
    ("event-loop", "event loop (RTP, SRTP, HTTP)"),
    ("batcher-", "batcher"),  # the engine's batcher-<swapper>-loop and -run_N threads
    ("gateway", "gateway (HTTP proxy)"),  # --processes N: the gateway process in front of the nodes
)


def thread_group(name: str) -> str:
    """The stage a node thread named ``name`` (its ``/proc`` comm) works for."""
    for prefix, group in THREAD_GROUPS:
        if name.startswith(prefix):
            return group
    return f"other ({name})" if name not in ("python", "python3") else "unnamed native threads"



def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have used (``/proc/stat``, every core)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is already in user


def write_node_config(config: Config, sessions: int, workdir: Path, port: int) -> tuple[Path, str]:
    """The bench node's config file (loopback, room for ``sessions`` peers and the glass
    page, its own JWT secret) and that secret."""
    data = config.file_data()
    data["server"].update(host="127.0.0.1", port=port, data_dir=str(workdir / "data"))
    data["rtmp"]["port"] = 0
    data["webrtc"]["host_addresses"] = ["127.0.0.1"]
    data["webrtc"]["max_sessions"] = max(data["webrtc"]["max_sessions"], sessions + 1)  # + the glass page
    secret = secrets.token_urlsafe(32)  # the bench's own node: its own secret, one user for every peer
    data["auth"].update(jwt_secret=secret, max_sessions_per_user=max(data["auth"]["max_sessions_per_user"], sessions + 1))
    path = workdir / "bench-node.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, secret


class ServerProcess:
    """``swapcast serve`` in a child process on 127.0.0.1, with its CPU and memory."""

    def __init__(self, config: Config, sessions: int, workdir: Path) -> None:
        self.port = free_port()
        self.config_path, secret = write_node_config(config, sessions, workdir, self.port)
        self.token = mint_token(secret, "bench", role="admin")
        self.log_path = workdir / "server.log"
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._peak_rss_mb = 0.0

    def start(self) -> None:
        # the config file already holds what the environment said; keep the child from
        # applying it again over the bench's own port and addresses
        env = {k: v for k, v in os.environ.items() if not (k.startswith("SWAPCAST_") and ("__" in k or k == "SWAPCAST_CONFIG"))}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "swapcast.cli", "--config", str(self.config_path), "serve"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            )

    @property
    def node_urls(self) -> list[str]:
        return [self.base_url]

    @property
    def node_pids(self) -> list[int]:
        return [self.process.pid]

    async def wait_ready(self, session, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the node exited with code {self.process.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(Exception):
                async with session.get(f"{self.base_url}/healthz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"the node did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._ticks  # utime, stime (fields 14, 15)

    def thread_cpu_seconds(self) -> dict[str, float]:
        """CPU seconds per OS thread name of the node, for the threads alive now."""
        return thread_cpu_seconds(self.process.pid)

    def memory_mb(self) -> dict[str, float]:
        values = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
        rss = values.get("VmRSS", 0.0)
        # the kernel updates VmHWM lazily: an RSS read earlier can be a little above a later
        # VmHWM, so the peak is the highest of everything seen so far
        self._peak_rss_mb = max(self._peak_rss_mb, values.get("VmHWM", 0.0), rss)
        return {"rss_mb": rss, "peak_rss_mb": self._peak_rss_mb}

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)  # graceful: the node ends its sessions
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


# -- one client peer ----------------------------------------------------------------------------


def _camera_track_class():
    import av
    from aiortc import VideoStreamTrack

    class CounterCamera(VideoStreamTrack):
        """The moving face at 30 fps, each frame numbered; remembers when each was sent."""

        def __init__(self, clip: list[np.ndarray], sent_at: list[float]) -> None:
            super().__init__()
            self._clip = clip
            self.sent_at = sent_at

        async def recv(self):
            pts, time_base = await self.next_timestamp()
            number = len(self.sent_at)
            yuv = self._clip[number % len(self._clip)].copy()
            burn_counter(yuv[:HEIGHT], number)
            frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p")
            frame.pts, frame.time_base = pts, time_base
            self.sent_at.append(time.monotonic())
            return frame

    return CounterCamera


@dataclass
class Client:
    index: int
    sent_at: list[float] = field(default_factory=list)  # frame number -> send time
    received: dict[int, float] = field(default_factory=dict)  # frame number -> receive time
    arrivals: list[float] = field(default_factory=list)  # every received frame
    unreadable: int = 0
    out_of_range: int = 0  # a number never sent (a misread)
    duplicates: int = 0
    out_of_order: int = 0
    last_number: int = -1
    session_id: str | None = None
    pc: Any = None
    reader: asyncio.Task | None = None
    first_frame: asyncio.Event = field(default_factory=asyncio.Event)

    def on_frame(self, frame) -> None:
        now = time.monotonic()
        self.arrivals.append(now)
        value = read_counter(_luma(frame))
        if value is None:
            self.unreadable += 1
            return
        number = unwrap(value, len(self.sent_at))
        if number < 0:
            self.out_of_range += 1
            return
        if number in self.received:
            self.duplicates += 1
            return
        if number < self.last_number:
            self.out_of_order += 1
        self.last_number = max(self.last_number, number)
        self.received[number] = now
        self.first_frame.set()

    async def read(self, track) -> None:
        from aiortc.mediastreams import MediaStreamError

        with contextlib.suppress(MediaStreamError):
            while True:
                self.on_frame(await track.recv())


async def _open_client(http, base_url: str, index: int, clip: list[np.ndarray]) -> Client:
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    client = Client(index)
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    client.pc = pc

    @pc.on("track")
    def on_track(track) -> None:
        if track.kind == "video" and client.reader is None:
            client.reader = asyncio.ensure_future(client.read(track))

    pc.addTransceiver(_camera_track_class()(clip, client.sent_at), direction="sendrecv")
    await pc.setLocalDescription(await pc.createOffer())
    body = {"sdp": pc.localDescription.sdp, "type": "offer", "face_id": FACE_ID}
    async with http.post(f"{base_url}/api/v1/sessions", json=body) as response:
        reply = await response.json(content_type=None)
        if response.status != 201:
            await pc.close()
            raise RuntimeError(f"the node refused session {index + 1}: HTTP {response.status} {reply}")
    client.session_id = reply["session_id"]
    await pc.setRemoteDescription(RTCSessionDescription(sdp=reply["sdp"], type="answer"))
    return client


async def _close_client(http, base_url: str, client: Client) -> None:
    if client.reader is not None:
        client.reader.cancel()
        await asyncio.gather(client.reader, return_exceptions=True)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.pc.close(), 5.0)
    if client.session_id:
        with contextlib.suppress(Exception):
            async with http.delete(f"{base_url}/api/v1/sessions/{client.session_id}"):
                pass


async def _server_stats(http, base_url: str, client: Client) -> dict[str, Any]:
    with contextlib.suppress(Exception):
        async with http.get(f"{base_url}/api/v1/sessions/{client.session_id}") as response:
            if response.status == 200:
                return (await response.json()).get("stats") or {}
    return {}


# -- numbers ----------------------------------------------------------------------------------


def _pct(values, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _window(client: Client, start: float, end: float) -> dict[str, Any]:
    """A client's numbers for frames sent in [start, end)."""
    numbers = [k for k, t in enumerate(client.sent_at) if start <= t < end]
    got = [k for k in numbers if k in client.received]
    latencies = [(client.received[k] - client.sent_at[k]) * 1000 for k in got]
    arrivals = sum(1 for t in client.arrivals if start <= t < end)
    # aiortc's jitter buffer hands a frame to the decoder only when the next frame's first
    # packet arrives: the receiving peer holds each frame for one inter-frame gap
    gaps = [(b - a) * 1000 for a, b in zip(client.arrivals, client.arrivals[1:]) if start <= b < end]
    mid = (start + end) / 2
    first = [(client.received[k] - client.sent_at[k]) * 1000 for k in got if client.sent_at[k] < mid]
    second = [(client.received[k] - client.sent_at[k]) * 1000 for k in got if client.sent_at[k] >= mid]
    return {
        "fps_out": arrivals / (end - start),
        "fps_in": len(numbers) / (end - start),
        "sent": len(numbers),
        "received": len(got),
        "dropped": len(numbers) - len(got),
        "rtt_p50_ms": _pct(latencies, 50),
        "rtt_p99_ms": _pct(latencies, 99),
        "rtt_max_ms": max(latencies) if latencies else None,
        "client_hold_p50_ms": _pct(gaps, 50),
        "rtt_p99_first_half_ms": _pct(first, 99),
        "rtt_p99_second_half_ms": _pct(second, 99),
        "_latencies": latencies, "_first": first, "_second": second,
    }


def _plural(sessions: int) -> str:
    return f"{sessions} session{'s' if sessions != 1 else ''}"


def _fmt(value, spec: str = ".0f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


# -- one phase: n sessions for `seconds` ------------------------------------------------------


def _grouped(seconds_by_name: dict[str, float]) -> dict[str, float]:
    groups: dict[str, float] = {}
    for name, value in seconds_by_name.items():
        group = thread_group(name)
        groups[group] = groups.get(group, 0.0) + value
    return groups


async def _phase(http, server: ServerProcess | ReplicaServers, clip, sessions: int, seconds: float, warmup_s: float,
                 err: TextIO, gil: bool = False) -> dict[str, Any]:
    label = _plural(sessions)
    print(f"[{label}] opening {sessions} peer(s) …", file=err, flush=True)
    clients: list[Client] = []
    try:
        for index in range(sessions):
            clients.append(await _open_client(http, server.base_url, index, clip))
        try:
            await asyncio.wait_for(asyncio.gather(*(c.first_frame.wait() for c in clients)), 30.0)
        except TimeoutError:
            missing = [c.index + 1 for c in clients if not c.first_frame.is_set()]
            raise RuntimeError(f"no swapped frame with a readable counter came back on session(s) {missing} within 30 s:\n"
                               f"{server.log_tail()}") from None
        await asyncio.sleep(warmup_s)

        start = time.monotonic()
        cpu_start, client_cpu_start, machine_start = server.cpu_seconds(), time.process_time(), machine_busy_seconds()
        threads_start, cores_start = server.thread_cpu_seconds(), core_busy_seconds()
        stats_start = await asyncio.gather(*(_server_stats(http, server.base_url, c) for c in clients))
        with LoopLagProbe(server.node_urls) as lag:
            sampler = GilSampler(server.node_pids, seconds) if gil else None
            end = start + seconds
            tick, cpu_tick = start, cpu_start
            while (now := time.monotonic()) < end:
                await asyncio.sleep(min(1.0, end - now))
                now, cpu_now = time.monotonic(), server.cpu_seconds()
                rows = [_window(c, tick - 0.3, now - 0.3) for c in clients]  # frames sent 0.3 s ago have mostly arrived
                sent_now = [len(c.sent_at) for c in clients]
                live = await asyncio.gather(*(_server_stats(http, server.base_url, c) for c in clients))
                backlog = max(n - (st.get("frames_in") or 0) for n, st in zip(sent_now, live, strict=True))
                rtts = [x for r in rows for x in r["_latencies"]]
                server_p50 = [s.get("latency_p50_ms") for s in live if s.get("latency_p50_ms") is not None]
                fps = [sum(1 for t in c.arrivals if tick <= t < now) / (now - tick) for c in clients]
                print(f"[{label}] {now - start:5.1f}/{seconds:.0f} s  fps out {' '.join(f'{f:.1f}' for f in fps)} (total {sum(fps):.1f})"
                      f"  round trip p50 {_fmt(_pct(rtts, 50))} p99 {_fmt(_pct(rtts, 99))} ms"
                      f"  server p50 {_fmt(max(server_p50) if server_p50 else None)} ms"
                      f"  not yet at the node {backlog} frames"
                      f"  server cpu {(cpu_now - cpu_tick) / (now - tick):.2f} cores", file=err, flush=True)
                tick, cpu_tick = now, cpu_now
            end = time.monotonic()
            cpu_s, client_cpu_s = server.cpu_seconds() - cpu_start, time.process_time() - client_cpu_start
            threads_end, cores_end = server.thread_cpu_seconds(), core_busy_seconds()
        gil_held = await asyncio.get_running_loop().run_in_executor(None, sampler.held) if sampler else None
        machine_s = machine_busy_seconds() - machine_start
        sent_end = [len(c.sent_at) for c in clients]
        stats_end = await asyncio.gather(*(_server_stats(http, server.base_url, c) for c in clients))
        memory = server.memory_mb()
        await asyncio.sleep(1.0)  # frames sent just before the end are still on their way
    finally:
        await asyncio.gather(*(_close_client(http, server.base_url, c) for c in clients))

    wall = end - start
    per_session = []
    for client, before, after, sent in zip(clients, stats_start, stats_end, sent_end, strict=True):
        row = _window(client, start, end)
        row.update(
            session_id=client.session_id,
            server_fps_out=after.get("fps_out"),
            server_latency_p50_ms=after.get("latency_p50_ms"),
            server_latency_p99_ms=after.get("latency_p99_ms"),
            server_frames_dropped=(after.get("frames_dropped") or 0) - (before.get("frames_dropped") or 0),
            server_frames_in=(after.get("frames_in") or 0) - (before.get("frames_in") or 0),
            server_swap_ms=after.get("swap_ms"),
            server_stages_ms=after.get("stages_ms"),  # of the last frame
            # sent but not yet decoded by the node at the end: ~1 is the node's aiortc jitter
            # buffer holding the newest frame; more is a queue in front of the node's swap
            # (its RTP/decode path), which the node's own latency does not see
            not_yet_at_node_frames=sent - (after.get("frames_in") or 0),
            faces_swapped=after.get("faces_swapped"),
            counters={"sent_total": len(client.sent_at), "decoded": len(client.received) + client.duplicates,
                      "unreadable": client.unreadable, "out_of_range": client.out_of_range,
                      "duplicates": client.duplicates, "out_of_order": client.out_of_order},
        )
        per_session.append(row)

    everything = [x for r in per_session for x in r["_latencies"]]
    first = [x for r in per_session for x in r["_first"]]
    second = [x for r in per_session for x in r["_second"]]
    server_p50 = [r["server_latency_p50_ms"] for r in per_session if r["server_latency_p50_ms"] is not None]
    holds = [r["client_hold_p50_ms"] for r in per_session if r["client_hold_p50_ms"] is not None]
    server_p99 = [r["server_latency_p99_ms"] for r in per_session if r["server_latency_p99_ms"] is not None]
    frames_out = sum(r["fps_out"] for r in per_session) * wall
    by_name = {name: (threads_end[name] - threads_start.get(name, 0.0)) / wall for name in threads_end}
    by_thread = dict(sorted(((g, c) for g, c in _grouped(by_name).items() if c >= 0.005), key=lambda item: -item[1]))
    frames_in = sum(r["server_frames_in"] for r in per_session)
    frames_out_node = sum((a.get("frames_out") or 0) - (b.get("frames_out") or 0) for b, a in zip(stats_start, stats_end, strict=True))
    stage_cpu: dict[str, float] = {}
    for before, after in zip(stats_start, stats_end, strict=True):
        for stage, total in (after.get("stage_cpu_ms_total") or {}).items():
            stage_cpu[stage] = stage_cpu.get(stage, 0.0) + total - (before.get("stage_cpu_ms_total") or {}).get(stage, 0.0)
    for row in per_session:
        for key in ("_latencies", "_first", "_second"):
            del row[key]
    return {
        "sessions": sessions,
        "seconds": wall,
        "fps_out_per_session": float(np.mean([r["fps_out"] for r in per_session])),
        "fps_out_min": min(r["fps_out"] for r in per_session),
        "fps_out_total": sum(r["fps_out"] for r in per_session),
        "rtt_p50_ms": _pct(everything, 50),
        "rtt_p99_ms": _pct(everything, 99),
        "rtt_p99_first_half_ms": _pct(first, 99),
        "rtt_p99_second_half_ms": _pct(second, 99),
        "client_hold_p50_ms": float(np.median(holds)) if holds else None,
        # the node's own numbers (its last 600 frames per session): median of sessions' p50, worst p99
        "server_latency_p50_ms": float(np.median(server_p50)) if server_p50 else None,
        "server_latency_p99_ms": max(server_p99) if server_p99 else None,
        "sent": sum(r["sent"] for r in per_session),
        "received": sum(r["received"] for r in per_session),
        "dropped": sum(r["dropped"] for r in per_session),
        "server_frames_dropped": sum(r["server_frames_dropped"] for r in per_session),
        "not_yet_at_node_frames_max": max(r["not_yet_at_node_frames"] for r in per_session),
        "server_cpu_cores": cpu_s / wall,
        "server_cpu_per_session_pct": 100 * cpu_s / wall / sessions,
        # CPU per frame the clients got back, and per thread group (cores; threads that
        # ended during the run are in the total only)
        "server_cpu_ms_per_frame_out": 1000 * cpu_s / frames_out if frames_out else None,
        "server_cpu_by_thread_cores": by_thread,
        # the same per frame the node decoded (every frame in is decoded, swapped or not)
        "server_fps_in_total": frames_in / wall,
        "server_cpu_ms_per_frame_in_by_thread": {g: 1000 * c * wall / frames_in for g, c in by_thread.items()} if frames_in else {},
        # the sessions' swap threads, stage by stage (the node's own count, per frame it sent out)
        "swap_thread_cpu_ms_per_frame_out": {k: v / frames_out_node for k, v in stage_cpu.items()} if frames_out_node else {},
        "core_busy": [(b - a) / wall for a, b in zip(cores_start, cores_end, strict=True)],  # the whole machine's
        # /healthz answer time from outside, every node: its event loop's lag (+ ~1 ms of HTTP)
        "loop_lag_ms": lag.summary(),
        "gil_held": gil_held,  # per node process, share of wall time (py-spy --gil), with --gil
        "client_cpu_cores": client_cpu_s / wall,
        # everything else on the machine meanwhile (another benchmark, a test run): when this
        # is not near 0 the node had less CPU than the machine has
        "other_cpu_cores": max(0.0, (machine_s - cpu_s - client_cpu_s) / wall),
        "server_rss_mb": memory["rss_mb"],
        "server_peak_rss_mb": memory["peak_rss_mb"],
        "per_session": per_session,
    }


async def _run_phases(config: Config, counts: list[int], seconds: float, warmup_s: float, workdir: Path, err: TextIO,
                      processes: int = 1, gil: bool = False) -> tuple[dict[str, Any], ServerProcess | ReplicaServers]:
    import aiohttp

    from streamer.webrtc import encoders, ice

    # the client peers encode like a browser would (x264 ultrafast/zerolatency, not aiortc's
    # medium preset, which would take the CPU the node needs) and offer loopback only
    encoders.install(encoders.EncoderTuning.from_config(config.webrtc, config.live))
    ice.install(["127.0.0.1"])
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:  # ICE state chatter, per peer
        for name in ("aioice", "aiortc"):
            logging.getLogger(name).setLevel(logging.WARNING)
    clip = clip_i420()
    server: ServerProcess | ReplicaServers
    if processes == 1:
        server = ServerProcess(config, max(counts), workdir)
    else:
        config_path, _ = write_node_config(config, max(counts), workdir, free_port())
        server = ReplicaServers(config_path, max(counts), workdir, processes, config.engine.runner_threads)
        print(f"starting {processes} node processes behind a gateway …", file=err, flush=True)
    report: dict[str, Any] = {}
    try:
        await asyncio.get_running_loop().run_in_executor(None, server.start)  # replicas: until all are ready
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30),
                                         headers={"Authorization": f"Bearer {server.token}"}) as http:
            if isinstance(server, ServerProcess):
                await server.wait_ready(http)
            report["server_idle"] = server.memory_mb()
            report["phases"] = [await _phase(http, server, clip, n, seconds, warmup_s, err, gil) for n in counts]
            report["metrics"] = await _scrape_metrics(http, server.node_urls)
    except BaseException:
        server.stop()
        raise
    return report, server


async def _scrape_metrics(http, node_urls: list[str]) -> dict[str, Any]:
    """What the nodes' own ``/metrics`` (Prometheus) say after the runs: mean per-stage
    time and frame counts of their WebRTC sessions, as a scraper would see them."""
    from prometheus_client.parser import text_string_to_metric_families

    stage_sum: dict[str, float] = {}
    stage_count: dict[str, float] = {}
    frames: dict[str, float] = {}
    for url in node_urls:
        async with http.get(f"{url}/metrics") as response:
            text = await response.text()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("protocol") != "webrtc":
                    continue
                if sample.name == "swapcast_stage_seconds_sum":
                    stage = sample.labels["stage"]
                    stage_sum[stage] = stage_sum.get(stage, 0.0) + sample.value
                elif sample.name == "swapcast_stage_seconds_count":
                    stage = sample.labels["stage"]
                    stage_count[stage] = stage_count.get(stage, 0.0) + sample.value
                elif sample.name.startswith("swapcast_frames_") and sample.name.endswith("_total"):
                    kind = sample.name.removeprefix("swapcast_frames_").removesuffix("_total")
                    frames[kind] = frames.get(kind, 0.0) + sample.value
    stages_ms = {stage: 1000.0 * total / stage_count[stage] for stage, total in stage_sum.items() if stage_count.get(stage)}
    return {"stage_mean_ms": stages_ms, "frames": frames}


def measure_webrtc(
    sessions: int,
    seconds: float = 20.0,
    *,
    glass: bool = False,
    warmup_s: float = 2.0,
    config: Config | None = None,
    threads: ThreadProfile | None = None,
    counts: list[int] | None = None,
    processes: int = 1,
    gil: bool = False,
    err: TextIO = sys.stderr,
) -> dict[str, Any]:
    """Run the benchmark and return its report (see the module docstring). ``threads``:
    the node's thread profile (``config.threads.profile`` when None). ``counts``: the
    session counts measured one after the other (default 1, then ``sessions``).
    ``processes``: node processes behind a gateway (:class:`ReplicaServers`) instead of one
    ``swapcast serve``. ``gil``: sample each node's GIL with py-spy."""
    counts = sorted(set(counts or [1, sessions]))
    if counts[0] < 1 or processes < 1:
        raise ValueError("sessions and processes must be at least 1")
    sessions = counts[-1]
    config = config or load_config(environ={})
    if threads is not None:
        config = config.model_copy(update={"threads": config.threads.model_copy(update={"profile": threads})})
    with tempfile.TemporaryDirectory(prefix="swapcast-bench-webrtc-") as tmp:
        report, server = asyncio.run(_run_phases(config, counts, seconds, warmup_s, Path(tmp), err, processes, gil))
        try:
            if glass:
                from swapcast.benchmarks.glass import run_glass_benchmark

                print(f"[glass] Chromium glass-to-glass for {seconds:.0f} s …", file=err, flush=True)
                report["glass"] = run_glass_benchmark(server.base_url, seconds, face_id=FACE_ID, token=server.token)
            report["server_peak_rss_mb"] = server.memory_mb()["peak_rss_mb"]
        finally:
            server.stop()

    phases = report["phases"]
    one, many = phases[0], phases[-1]
    report.update(
        sessions=sessions,
        seconds=seconds,
        resolution=f"{WIDTH}x{HEIGHT}",
        fps_sent=FPS,
        cpu_count=os.cpu_count(),
        threads=config.threads.budget(config.engine.runner_threads).describe(),
        processes=processes,
        memory_per_extra_session_mb=((many["server_rss_mb"] - one["server_rss_mb"]) / (many["sessions"] - one["sessions"])
                                     if many["sessions"] > one["sessions"] else None),
    )
    return report


# -- printing -------------------------------------------------------------------------------------


def _table(report: dict[str, Any]) -> list[str]:
    phases = report["phases"]
    heads = [_plural(p["sessions"]) for p in phases]
    rows = [
        ("output fps per session (min)", lambda p: f"{p['fps_out_per_session']:.1f} ({p['fps_out_min']:.1f})"),
        ("output fps, all sessions", lambda p: f"{p['fps_out_total']:.1f}"),
        ("loopback round trip p50/p99 ms", lambda p: f"{_fmt(p['rtt_p50_ms'])} / {_fmt(p['rtt_p99_ms'])}"),
        ("  p99 first/second half ms", lambda p: f"{_fmt(p['rtt_p99_first_half_ms'])} / {_fmt(p['rtt_p99_second_half_ms'])}"),
        ("  of which client aiortc hold p50", lambda p: f"~{_fmt(p['client_hold_p50_ms'])}"),
        ("server's own latency p50/p99 ms", lambda p: f"{_fmt(p['server_latency_p50_ms'])} / {_fmt(p['server_latency_p99_ms'])}"),
        ("frames sent/received/dropped", lambda p: f"{p['sent']}/{p['received']}/{p['dropped']}"),
        ("server frames_dropped", lambda p: f"{p['server_frames_dropped']}"),
        ("sent, not yet at node at end (max)", lambda p: f"{p['not_yet_at_node_frames_max']}"),
        ("server CPU cores (per session)", lambda p: f"{p['server_cpu_cores']:.2f} ({p['server_cpu_cores'] / p['sessions']:.2f})"),
        ("  per session at 30 fps out", lambda p: _fmt(_cores_at_30(p), ".2f")),
        ("server CPU ms per frame out", lambda p: _fmt(p['server_cpu_ms_per_frame_out'], ".1f")),
        ("server CPU ms per frame in", lambda p: _fmt(_per_frame_in(p), ".1f")),
        ("busy per core (whole machine)", lambda p: " ".join(f"{c:.2f}" for c in p["core_busy"])),
        ("event loop lag p50/p99 ms (/healthz)", lambda p: f"{_fmt(p['loop_lag_ms']['p50_ms'], '.1f')} / {_fmt(p['loop_lag_ms']['p99_ms'], '.1f')}"),
        ("GIL held, per node process", lambda p: "n/a (--gil)" if p["gil_held"] is None else
                                                 " ".join(_fmt(g and 100 * g, ".0f", "%") for g in p["gil_held"])),
        ("client peers' CPU cores", lambda p: f"{p['client_cpu_cores']:.2f}"),
        ("other processes' CPU cores", lambda p: f"{p['other_cpu_cores']:.2f}"),
        ("server RSS MB", lambda p: f"{p['server_rss_mb']:.0f}"),
        ("unreadable / misread counters", lambda p: f"{sum(r['counters']['unreadable'] for r in p['per_session'])} / "
                                                    f"{sum(r['counters']['out_of_range'] for r in p['per_session'])}"),
    ]
    width = max(len(name) for name, _ in rows) + 2
    lines = [" " * width + "".join(f"{h:>22}" for h in heads)]
    for name, cell in rows:
        lines.append(f"{name:<{width}}" + "".join(f"{cell(p):>22}" for p in phases))
    return lines


def _cores_at_30(phase: dict[str, Any]) -> float | None:
    """A session's cores were it sent 30 fps out: CPU per frame out x 30 (below 30 fps out
    the node still decodes every frame in, so this over-states it a little)."""
    per_frame = phase["server_cpu_ms_per_frame_out"]
    return per_frame * FPS / 1000 if per_frame is not None else None


def _per_frame_in(phase: dict[str, Any]) -> float | None:
    fps_in = phase["server_fps_in_total"]
    return 1000 * phase["server_cpu_cores"] / fps_in if fps_in else None


def _verdicts(report: dict[str, Any]) -> list[str]:
    one, many = report["phases"][0], report["phases"][-1]
    two = next((p for p in report["phases"] if p["sessions"] == 2), None)
    two = two or (many if many["sessions"] != 3 else one)  # 3 sessions have their own target below
    fps = one["fps_out_per_session"]
    # server-added = a decoded frame's arrival at the swap -> its swapped frame ready to encode
    # (the server's own stat). The loopback round trip also holds both sides' codecs and
    # aiortc's jitter buffers (one frame interval each way), so it is shown, not judged.
    p50 = one["server_latency_p50_ms"]
    lines = [
        f"target: one {report['resolution']} session >= {FPS_TARGET:.0f} fps out: {fps:.1f} -> {'PASS' if fps >= FPS_TARGET else 'FAIL'}",
        (f"target: server-added latency p50 <= {LATENCY_TARGET_MS:.0f} ms (1 session, decoded frame -> swapped frame; "
         f"loopback round trip p50 {_fmt(one['rtt_p50_ms'])} ms): {_fmt(p50)} ms -> "
         f"{'PASS' if p50 is not None and p50 <= LATENCY_TARGET_MS else 'FAIL'}"),
    ]
    if "glass" in report:
        g = report["glass"]["p50_ms"]
        lines.append(f"target: glass-to-glass p50 <= {GLASS_TARGET_MS:.0f} ms: {_fmt(g)} ms (p99 {_fmt(report['glass']['p99_ms'])} ms) -> "
                     f"{'PASS' if g is not None and g <= GLASS_TARGET_MS else 'FAIL'}")
    at_30 = _cores_at_30(one)
    lines.append(f"target: <= {CORES_PER_SESSION_TARGET} core per {report['resolution']}@{FPS} session "
                 f"(CPU per frame out x {FPS} fps; measured {one['server_cpu_cores']:.2f} cores at {fps:.1f} fps): "
                 f"{_fmt(at_30, '.2f')} -> {'PASS' if at_30 is not None and at_30 <= CORES_PER_SESSION_TARGET else 'FAIL'}")
    if two["sessions"] > 1:
        low = two["fps_out_min"]
        lines.append(f"target: {_plural(two['sessions'])} each >= {FPS_TARGET:.0f} fps out on {os.cpu_count()} core(s): "
                     f"slowest {low:.1f} -> {'PASS' if low >= FPS_TARGET else 'FAIL'}")
    three = next((p for p in report["phases"] if p["sessions"] == 3), None)
    if three is not None:
        low = three["fps_out_min"]
        lines.append(f"target: 3 sessions each >= {THREE_SESSIONS_FPS_TARGET:.0f} fps out on {os.cpu_count()} core(s): "
                     f"slowest {low:.1f} (node {three['server_cpu_cores']:.2f} cores, other work "
                     f"{three['other_cpu_cores']:.2f}) -> {'PASS' if low >= THREE_SESSIONS_FPS_TARGET else 'FAIL'}")
    a, b = many["rtt_p99_first_half_ms"], many["rtt_p99_second_half_ms"]
    bounded = a is not None and b is not None and b <= max(BOUND_FACTOR * a, a + BOUND_SLACK_MS)
    overloaded = many["fps_out_min"] < FPS_TARGET or many["server_frames_dropped"] > 0
    note = "" if overloaded else ", not overloaded: every session kept up"
    lines.append(f"target: latency bounded under overload ({_plural(many['sessions'])}{note}): "
                 f"p99 first half {_fmt(a)} ms, second half {_fmt(b)} ms -> {'PASS' if bounded else 'FAIL'}")
    return lines


def run_webrtc_benchmark(config: Config, sessions: int | list[int], seconds: float = 20.0, *, glass: bool = False,
                         threads: ThreadProfile | Literal["both"] | None = None, processes: list[int] | None = None,
                         gil: bool = False, as_json: bool = False, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """``swapcast bench webrtc``: measure, print side by side, verdicts, optional JSON.
    ``sessions``: N (1 session, then N) or the session counts to run one after the other.
    ``threads="both"`` runs the node with the legacy thread profile, then with the budget;
    ``processes=[1, 2]`` runs one node process, then two behind a gateway; either way the
    runs are printed side by side."""
    from swapcast.config import ConfigError

    counts = sorted(set([1, sessions] if isinstance(sessions, int) else sessions))
    processes = processes or [1]
    if counts[0] < 1 or min(processes) < 1 or not seconds > 0:
        raise ConfigError("--sessions and --processes must be at least 1 and --seconds more than 0")
    profiles: list[ThreadProfile | None] = ["legacy", "budget"] if threads == "both" else [threads]
    runs = [(profile, count) for profile in profiles for count in processes]
    print(f"webrtc: aiortc peers on 127.0.0.1, {WIDTH}x{HEIGHT} at {FPS} fps each, face {FACE_ID!r}, "
          f"{seconds:.0f} s per run with {', then '.join(_plural(n) for n in counts)}; node = `swapcast serve` child "
          f"process(es) ({' vs '.join(map(str, processes))}); {os.cpu_count()} CPU core(s)", file=out, flush=True)
    reports = []
    for profile, count in runs:
        before = machine_busy_seconds()
        time.sleep(1.0)
        busy = machine_busy_seconds() - before  # cores in use by other work, just before we start
        if busy > 0.3:
            print(f"note: the machine is already busy ({busy:.1f} of {os.cpu_count()} cores in use before the run): "
                  f"the node gets less CPU than it would alone; see \"other processes' CPU\" below", file=out, flush=True)
        report = measure_webrtc(counts[-1], seconds, glass=glass, config=config, threads=profile, counts=counts,
                                processes=count, gil=gil, err=err)
        report["busy_cores_before_start"] = busy
        _print_report(report, out)
        reports.append(report)
    if len(reports) > 1:
        for line in _compare_runs(reports):
            print(line, file=out)
    if as_json:
        print(json.dumps(reports[0] if len(reports) == 1 else {"runs": reports}), file=out)
    out.flush()
    return 0


def _print_report(report: dict[str, Any], out: TextIO) -> None:
    print(f"threads: {report['threads']}", file=out)
    for line in _table(report):
        print(line, file=out)
    for phase in report["phases"][1:]:
        for r in phase["per_session"]:
            print(f"  session {r['session_id'][:8]}: {r['fps_out']:.1f} fps out, round trip p50 {_fmt(r['rtt_p50_ms'])} "
                  f"p99 {_fmt(r['rtt_p99_ms'])} ms, server p50 {_fmt(r['server_latency_p50_ms'])} ms, "
                  f"dropped {r['dropped']} (server {r['server_frames_dropped']})", file=out)
    for phase in report["phases"]:
        groups = ", ".join(f"{group} {cores:.2f}" for group, cores in phase["server_cpu_by_thread_cores"].items())
        print(f"server CPU cores by thread group, {_plural(phase['sessions'])}: {groups}", file=out)
        per_frame = ", ".join(f"{group.split(' (')[0]} {ms:.1f}" for group, ms in phase["server_cpu_ms_per_frame_in_by_thread"].items())
        print(f"  CPU ms per frame in ({phase['server_fps_in_total']:.1f} fps in): {per_frame}", file=out)
        stages = ", ".join(f"{stage} {ms:.1f}" for stage, ms in phase["swap_thread_cpu_ms_per_frame_out"].items() if ms >= 0.05)
        print(f"  swap thread CPU ms per frame out, by stage: {stages or 'n/a'}", file=out)
    print(f"server RSS: idle {report['server_idle']['rss_mb']:.0f} MB, peak {report['server_peak_rss_mb']:.0f} MB; "
          f"memory per extra session: {_fmt(report['memory_per_extra_session_mb'], '.1f', ' MB')}", file=out)
    scraped = report.get("metrics") or {}
    if scraped.get("stage_mean_ms"):
        stages = " ".join(f"{k} {v:.1f}" for k, v in scraped["stage_mean_ms"].items())
        frames = ", ".join(f"{k} {v:.0f}" for k, v in scraped["frames"].items())
        print(f"the node's /metrics after the runs: mean ms per stage (wall, swap thread): {stages}; frames: {frames}", file=out)
    if "glass" in report:
        g = report["glass"]
        print(f"glass-to-glass (Chromium, 1 session): p50 {_fmt(g['p50_ms'])} ms, p99 {_fmt(g['p99_ms'])} ms "
              f"({g['samples']} samples, {g['frames_unreadable']} unreadable; server's own p50 "
              f"{_fmt((g.get('server') or {}).get('latency_p50_ms'))} ms)", file=out)
        for line in _glass_breakdown(g.get("breakdown") or {}):
            print(line, file=out)
    for line in _verdicts(report):
        print(line, file=out)


def _glass_breakdown(parts: dict[str, Any]) -> list[str]:
    """Where glass to glass goes, p50 of the frames (see ``glass.where_the_time_goes``)."""
    if not parts:
        return []
    f = lambda key: _fmt(parts.get(key), ".1f")  # noqa: E731
    return [
        f"  painted -> swapped frame received by the page (p50): {f('upstream_p50_ms')} ms = browser encode "
        f"{f('browser_encode_ms')} ({parts.get('encoder')}) + browser pacer {f('browser_pacer_ms')} + the node's swap "
        f"{f('server_swap_ms')} + the rest {f('upstream_rest_ms')} (canvas capture, loopback, the node's RTP, decode, encode)",
        f"  received -> shown (p50): {f('downstream_p50_ms')} ms: page jitter buffer {f('page_jitter_buffer_ms')} "
        f"(target {f('page_jitter_buffer_target_ms')}, minimum {f('page_jitter_buffer_minimum_ms')}), decode "
        f"{f('page_decode_ms')} ({parts.get('decoder')}), received -> decoded {f('page_processing_ms')}",
    ]


def _run_label(report: dict[str, Any]) -> str:
    processes = report["processes"]
    return report["threads"].split(":")[0] + ("" if processes == 1 else f" x{processes} processes")


def _compare_runs(reports: list[dict[str, Any]]) -> list[str]:
    """Run by run (thread profiles, node processes), phase by phase: fps, the node's latency
    and CPU, event-loop lag, GIL, CPU per thread group."""
    lines = ["runs side by side (" + " vs ".join(_run_label(r) for r in reports) + "):"]
    for index, phase in enumerate(reports[0]["phases"]):
        pair = [r["phases"][index] for r in reports]
        lines.append(f"  {_plural(phase['sessions'])}:")
        rows = [
            ("output fps per session (min)", lambda p: f"{p['fps_out_per_session']:.1f} ({p['fps_out_min']:.1f})"),
            ("server's own latency p50 ms", lambda p: _fmt(p["server_latency_p50_ms"])),
            ("server CPU cores per session", lambda p: f"{p['server_cpu_cores'] / p['sessions']:.2f}"),
            ("server CPU ms per frame out", lambda p: _fmt(p["server_cpu_ms_per_frame_out"], ".1f")),
            ("server CPU ms per frame in", lambda p: _fmt(_per_frame_in(p), ".1f")),
            ("event loop lag p99 ms", lambda p: _fmt(p["loop_lag_ms"]["p99_ms"], ".1f")),
            ("GIL held (max of nodes)", lambda p: "n/a" if not p["gil_held"] or None in p["gil_held"]
                                                   else f"{100 * max(p['gil_held']):.0f}%"),
            ("other processes' CPU cores", lambda p: f"{p['other_cpu_cores']:.2f}"),
        ]
        groups = list(dict.fromkeys(g for p in pair for g in p["server_cpu_by_thread_cores"]))
        rows += [(f"  {group} cores", lambda p, g=group: f"{p['server_cpu_by_thread_cores'].get(g, 0.0):.2f}") for group in groups]
        for name, cell in rows:
            lines.append(f"    {name:<44}" + "".join(f"{cell(p):>16}" for p in pair))
    return lines
